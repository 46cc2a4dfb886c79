//! `flower once`: one agent, one session, outside any workflow. No lineage, no
//! manifest rows; continuing it takes an explicit `--resume <session_id>`.

use super::args::{EXIT_LOCKED, OnceArgs};
use super::flow::session_busy;
use super::input;
use super::render::{self, Renderer};
use flower::continuity::lock::{self, Probe, RunLocking};
use flower::continuity::runtime::{Runtime, RuntimeError, RuntimeOptions};
use flower::continuity::signals;
use flower::engine::{AgentSpec, Interrupt, SessionStart};
use flower::settings::Environment;
use flower::tools::sandbox::SandboxPolicy;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

const INSTRUCTIONS: &str = "You are flower, a coding agent working in the user's workspace \
(the current directory). Use the tools to read, search, change and run things there; check \
your work before you say it is done. Be concise: say what you did and what you found.";

pub async fn run(args: OnceArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    // No model of its own: the client's, which the settings resolved (aliases, `[1m]`).
    let spec = AgentSpec {
        name: "once".into(),
        instructions: INSTRUCTIONS.into(),
        allowed_tools: args.allowed_tools.clone(),
        disallowed_tools: args.disallowed_tools.clone(),
        max_turns: args.max_turns,
        model: None,
    };
    // A malformed rule is a usage error, before any request.
    if let Err(e) = spec.permissions_in(env.home()) {
        eprintln!("flower: {e}");
        return Ok(ExitCode::from(super::config::EXIT_USAGE));
    }
    let settings = super::config::settings(&args.flags(), env)?;
    let renderer = Renderer::new(false, &settings.terminal);
    let interrupt = Interrupt::new();
    let interactive = input::interactive();
    let sandbox = settings.sandbox.clone();
    for warning in &settings.warnings {
        eprintln!("flower: {warning}");
    }
    let mut base_options = settings.runtime_options()?;
    let run_dir = &settings.run_dir;
    // A session someone else appends to (a running pipeline's, another `once --resume`)
    // is neither continued nor forked: refused before anything is opened.
    if let Some(id) = &args.resume
        && let Probe::Held(holder) = lock::probe_session(run_dir, id)
    {
        eprintln!("flower: {}", session_busy(id, &holder));
        return Ok(ExitCode::from(EXIT_LOCKED));
    }
    base_options.store = settings
        .open_store()
        .map_err(|e| anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model."))?
        .map(|store| store as Arc<dyn flower::stores::SessionStore>);
    let options = RuntimeOptions {
        events: if args.json {
            flower::events::discard()
        } else {
            renderer.sink()
        },
        interrupt: interrupt.clone(),
        on_interrupt: interactive.then(after_interrupt),
        // No lineage, no manifest: only its own session, locked in `run_agent`. A running
        // pipeline in this run directory neither blocks it nor is blocked by it.
        run_lock: RunLocking::Unlocked,
        ..base_options
    };
    let runtime = Runtime::with_options(&settings.workspace, run_dir, options)?;
    // Held from here to the end, so that the probe above cannot be overtaken.
    if let (Some(id), false) = (&args.resume, args.fork) {
        match runtime.claim_session(id) {
            Ok(()) => {}
            Err(RuntimeError::SessionBusy { session_id, holder }) => {
                eprintln!("flower: {}", session_busy(&session_id, &holder));
                return Ok(ExitCode::from(EXIT_LOCKED));
            }
            Err(e) => return Err(e.into()),
        }
    }
    for warning in runtime.take_warnings() {
        eprintln!("flower: {warning}");
    }
    signals::install(
        None,
        runtime.processes().clone(),
        interrupt,
        interactive,
        || {},
    )?;

    if !args.json {
        eprintln!(
            "{}",
            sandbox_line(&sandbox, &spec, settings.home.as_deref())
        );
    }
    let start = match (&args.resume, args.fork) {
        (Some(id), true) => SessionStart::Fork(id.clone()),
        (Some(id), false) => SessionStart::Resume(id.clone()),
        (None, _) => SessionStart::New,
    };
    let outcome = runtime.run_agent("once", &spec, &args.prompt, start).await;
    renderer.finish();
    let result = &outcome.result;
    let session_id = result.session_id.clone().unwrap_or_default();
    if args.json {
        let object = json!({
            "session_id": session_id,
            "result": if result.ok { result.text.clone() } else { result.error.clone().unwrap_or_default() },
            "is_error": !result.ok,
            "stop_reason": outcome.stop_reason,
            "num_turns": result.num_turns,
            "total_cost_usd": result.cost_usd,
            "usage": outcome.usage,
            "permission_denials": outcome.permission_denials,
            "duration_ms": (result.duration_s() * 1000.0).round() as u64,
        });
        println!("{object}");
    } else {
        if let Some(error) = &result.error {
            eprintln!("flower: {error}");
        }
        eprintln!(
            "-- 会话 {session_id} · {} 轮 · {} · 上下文 {}",
            result.num_turns,
            render::cost(result.cost_usd),
            render::tokens(result.context)
        );
    }
    Ok(if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The sandbox line: `flower: 沙箱 landlock(工作区可写) · 网络 开`, for this agent.
pub fn sandbox_line(policy: &SandboxPolicy, spec: &AgentSpec, home: Option<&Path>) -> String {
    let agent = spec
        .permissions_in(home)
        .map(|p| p.sandbox(policy, Path::new(".")))
        .unwrap_or_else(|_| policy.clone());
    format!("flower: {}", agent.describe())
}

/// After a Ctrl-C: ask for a line on the terminal.
pub fn after_interrupt() -> flower::engine::InterruptPrompt {
    Arc::new(|| Box::pin(input::ask_line(input::AFTER_INTERRUPT)))
}
