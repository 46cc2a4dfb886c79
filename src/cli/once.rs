//! `flower once`: one agent, one session, outside any workflow. No lineage, no
//! manifest rows; continuing it takes an explicit `--resume <session_id>`.

use super::args::OnceArgs;
use super::input;
use super::render::{self, Renderer};
use flower::continuity::runtime::{Runtime, RuntimeOptions};
use flower::continuity::signals;
use flower::engine::{AgentSpec, Interrupt, SessionStart};
use flower::tools::sandbox::{self, SandboxPolicy, Support};
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

const INSTRUCTIONS: &str = "You are flower, a coding agent working in the user's workspace \
(the current directory). Use the tools to read, search, change and run things there; check \
your work before you say it is done. Be concise: say what you did and what you found.";

/// Exit status for usage errors.
const EXIT_USAGE: u8 = 2;

pub async fn run(args: OnceArgs) -> anyhow::Result<ExitCode> {
    let sandbox = match args.sandbox.policy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("flower: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    if let Some(why) = sandbox_refused(&sandbox) {
        eprintln!("flower: {why}");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let spec = AgentSpec {
        name: "once".into(),
        instructions: INSTRUCTIONS.into(),
        allowed_tools: args.allowed_tools.clone(),
        disallowed_tools: args.disallowed_tools.clone(),
        max_turns: args.max_turns,
        model: args.model.clone(),
    };
    // A malformed rule is a usage error, before any request.
    if let Err(e) = spec.permissions() {
        eprintln!("flower: {e}");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let renderer = Renderer::new(false);
    let interrupt = Interrupt::new();
    let interactive = input::interactive();
    let options = RuntimeOptions {
        model: args.model.clone(),
        events: if args.json {
            flower::events::discard()
        } else {
            renderer.sink()
        },
        interrupt: interrupt.clone(),
        on_interrupt: interactive.then(after_interrupt),
        sandbox: sandbox.clone(),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::with_options(".", &args.run_dir, options)?;
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
        eprintln!("{}", sandbox_line(&sandbox, &spec));
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

/// `--require-sandbox` on a kernel without Landlock: why nothing may run.
pub fn sandbox_refused(policy: &SandboxPolicy) -> Option<String> {
    match sandbox::support() {
        Support::Missing(why) if policy.enabled && policy.required => Some(format!(
            "沙箱不可用({why}),--require-sandbox 不允许不受限地运行命令"
        )),
        _ => None,
    }
}

/// The sandbox line: `flower: 沙箱 landlock(工作区可写) · 网络 开`, for this agent.
pub fn sandbox_line(policy: &SandboxPolicy, spec: &AgentSpec) -> String {
    let agent = spec
        .permissions()
        .map(|p| p.sandbox(policy, Path::new(".")))
        .unwrap_or_else(|_| policy.clone());
    format!("flower: {}", agent.describe())
}

/// After a Ctrl-C: ask for a line on the terminal.
pub fn after_interrupt() -> flower::engine::InterruptPrompt {
    Arc::new(|| Box::pin(input::ask_line(input::AFTER_INTERRUPT)))
}
