//! `flower state`: the read-only wake probe, for people and scripts.

use super::args::StateArgs;
use super::config;
use super::lines;
use flower::continuity::lock::Probe;
use flower::continuity::wake::{Afresh, StoreSeen};
use flower::run::{Peek, RunError};
use flower::settings::Environment;
use flower::workflow::flower::WORK;
use std::fmt::Write as _;
use std::process::ExitCode;

pub fn run(args: StateArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let settings = config::settings(&args.flags(), env)?;
    let peek = match peek(&settings)? {
        Ok(peek) => peek,
        Err(code) => return Ok(code),
    };
    let at = peek.place();
    let state = at.wake_state();
    // Asked without taking the lock (nothing created, nothing written, no waiting).
    let running = peek.running();
    let afresh = at.afresh();
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
        // Only when the wake would drop something: the spec's fields stay as they are.
        if let (false, Some(object)) = (afresh.is_empty(), value.as_object_mut()) {
            object.insert("afresh".into(), serde_json::to_value(&afresh)?);
        }
        if let (true, Some(object)) = (args.verbose, value.as_object_mut()) {
            object.insert("conventions".into(), super::conventions::json(&settings));
        }
        out.push_str(&serde_json::to_string_pretty(&value)?);
        out.push('\n');
    } else {
        let brief = match (&state.brief, state.waking) {
            (Some(_), true) => "已确认(四段齐全)",
            (Some(_), false) => "不完整",
            (None, _) => "没有",
        };
        can_continue(&mut out, &state, &afresh, at.run_dir, settings.home())?;
        writeln!(out, "需求.md:{brief}")?;
        writeln!(out, "目标:{} 条", state.checks)?;
        writeln!(out, "已唤醒:{} 次", state.woke)?;
        for (step, session) in &state.steps {
            writeln!(out, "步骤 {step}:{session}")?;
        }
        for line in lines::afresh(&afresh, settings.home()) {
            writeln!(out, "{line}")?;
        }
        match &running {
            Probe::Held(holder) => writeln!(out, "正在运行:是({})", lines::who(holder))?,
            Probe::Free => writeln!(out, "正在运行:否")?,
        }
        // The current generation's figure: after a handoff, the successor's.
        if let Some(work) = state.steps.get(WORK) {
            let context = at.context(work);
            let generation = at.generation(work);
            let context = context.map_or("未知".to_string(), super::format::tokens);
            writeln!(out, "{WORK}上下文:{context} · 第 {generation} 代")?;
        }
        if args.verbose {
            for line in super::conventions::lines(&settings) {
                writeln!(out, "{line}")?;
            }
        }
    }
    // A reader that stopped listening (`flower state | head -0`) is not an error of the probe.
    super::print_out(&out)
}

/// `接得上:是|否`: the brief is complete, the run directory is there and its store can
/// be read (one that cannot stops the run until it is fixed); a missing run directory
/// is said.
fn can_continue(
    out: &mut String,
    state: &flower::WakeState,
    afresh: &[Afresh],
    run_dir: &std::path::Path,
    home: Option<&std::path::Path>,
) -> std::fmt::Result {
    let unreadable = afresh.iter().any(|a| {
        matches!(
            a,
            Afresh::SessionsGone {
                store: StoreSeen::Unreadable { .. },
                ..
            }
        )
    });
    let continues = state.waking && !unreadable && run_dir.is_dir();
    writeln!(out, "接得上:{}", if continues { "是" } else { "否" })?;
    if state.waking && !run_dir.is_dir() {
        writeln!(
            out,
            "运行目录 {} 不存在:这里没有可接的对话(-r 指对了吗?)",
            lines::tilde(run_dir, home)
        )?;
    }
    Ok(())
}

/// The run, looked at without touching it; a refusal is printed (its exit status).
fn peek(settings: &flower::settings::Settings) -> anyhow::Result<Result<Peek, ExitCode>> {
    // Read-only: a run not registered in the database yet is simply not there.
    match Peek::open(settings) {
        Ok(peek) => Ok(Ok(peek)),
        Err(RunError::ReadRun(e)) => Err(anyhow::anyhow!("从存储里读不出这个运行:{e}")),
        // Read-only and sending nothing: the refusal's "nothing was sent" is not its news.
        Err(RunError::OpenStore(e)) => Err(anyhow::anyhow!("打不开存储:{}", super::said::said(&e))),
        Err(error) => lines::refused(error).map(Err),
    }
}
