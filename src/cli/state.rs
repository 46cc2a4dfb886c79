//! `flower state`: the read-only wake probe, for people and scripts.

use super::args::StateArgs;
use super::config;
use super::flow::{Where, who};
use flower::continuity::lock::{self, Probe};
use flower::continuity::shared::{SharedRun, SharedRunError};
use flower::continuity::wake::wake_state_of;
use flower::settings::Environment;
use flower::stores::SessionStore;
use flower::workflow::flower::WORK;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

pub fn run(args: StateArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let settings = config::settings(&args.flags(), env)?;
    let run_dir = &settings.run_dir;
    let workspace = settings
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| settings.workspace.clone());
    let opened = settings.open_store().map_err(|e| {
        anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model.")
    })?;
    let (store, shared) = match opened {
        Some(store) => {
            // Read-only: a run not registered yet is simply not there.
            let shared = match SharedRun::find(store.clone(), &workspace, settings.run_key.as_ref())
            {
                Ok(shared) => shared,
                Err(e @ SharedRunError::Foreign { .. }) => {
                    eprintln!("flower: {e}");
                    return Ok(ExitCode::from(config::EXIT_USAGE));
                }
                Err(e) => return Err(anyhow::anyhow!("cannot read the run from the store: {e}")),
            };
            (Some(store as std::sync::Arc<dyn SessionStore>), shared)
        }
        None => (None, None),
    };
    let state = wake_state_of(&workspace, run_dir, store.as_deref(), shared.as_ref());
    // Asked without taking the lock (nothing created, nothing written, no waiting).
    let running = lock::probe_run(run_dir);
    let at = Where {
        home: settings.home.as_deref(),
        workspace: &workspace,
        run_dir,
        store: store.as_deref(),
        shared: shared.as_ref(),
    };
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
            let context = at.context(work);
            let generation = at.generation(work);
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
