//! `flower state`: the read-only wake probe, for people and scripts.

use super::args::StateArgs;
use super::config;
use super::flow::who;
use flower::continuity::lock::{self, Probe};
use flower::continuity::wake::{session_context, session_generation};
use flower::wake_state_in;
use flower::workflow::flower::WORK;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

pub fn run(args: StateArgs) -> anyhow::Result<ExitCode> {
    let store = match config::store_from_env(args.store.as_deref())? {
        Some(url) => Some(config::open_postgres(&url)?),
        None => None,
    };
    let state = wake_state_in(".", &args.run_dir, store.as_deref());
    // Asked without taking the lock (nothing created, nothing written, no waiting).
    let running = lock::probe_run(&args.run_dir);
    let workspace = std::path::Path::new(".")
        .canonicalize()
        .unwrap_or_else(|_| ".".into());
    let mut out = String::new();
    if args.json {
        let mut value = serde_json::to_value(&state)?;
        // Only while a run holds the directory: the spec's fields stay exactly as they are.
        if let (Probe::Held(holder), Some(object)) = (&running, value.as_object_mut()) {
            object.insert(
                "running".into(),
                serde_json::json!({
                    "pid": holder.as_ref().map(|h| h.pid),
                    "since": holder.as_ref().map(|h| h.since.to_rfc3339()),
                }),
            );
        }
        out.push_str(&serde_json::to_string_pretty(&value)?);
        out.push('\n');
    } else {
        let brief = match (&state.brief, state.waking) {
            (Some(_), true) => "已确认(四段齐全)",
            (Some(_), false) => "不完整",
            (None, _) => "没有",
        };
        writeln!(out, "接得上:{}", if state.waking { "是" } else { "否" })?;
        writeln!(out, "需求.md:{brief}")?;
        writeln!(out, "目标:{} 条", state.checks)?;
        writeln!(out, "已唤醒:{} 次", state.woke)?;
        for (step, session) in &state.steps {
            writeln!(out, "步骤 {step}:{session}")?;
        }
        match &running {
            Probe::Held(holder) => writeln!(out, "正在运行:是({})", who(holder))?,
            Probe::Free => writeln!(out, "正在运行:否")?,
        }
        // The current generation's figure: after a handoff, the successor's.
        if let Some(work) = state.steps.get(WORK) {
            let context = session_context(&workspace, &args.run_dir, work);
            let generation = session_generation(&args.run_dir, work);
            let context = context.map_or("未知".to_string(), super::render::tokens);
            writeln!(out, "{WORK}上下文:{context} · 第 {generation} 代")?;
        }
    }
    // `println!` would panic when the reader is gone (`flower state | head -0`); a
    // reader that stopped listening is not an error of the probe.
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}
