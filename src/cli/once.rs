//! `flower once`: one agent, one session, outside any workflow. No lineage, no
//! manifest rows; continuing it takes an explicit `--resume <session_id>`.

use super::args::OnceArgs;
use super::format;
use super::input::{self, TerminalAsker, after_interrupt};
use super::lines;
use super::render::Renderer;
use crate::cli::out::{errln, outln};
use flower::continuity::runtime::{AgentOutcome, FrontEnd};
use flower::continuity::signals;
use flower::engine::{AgentSpec, Interrupt, SessionStart};
use flower::run::open_single;
use flower::settings::Environment;
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

const INSTRUCTIONS: &str = "You are flower, a coding agent working in the user's workspace \
(the current directory). Use the tools to read, search, change and run things there; check \
your work before you say it is done. Be concise: say what you did and what you found.";

// Long because it reads in the order a person sees it: settings and their questions, the
// agent's rules, the runtime, the run, the outcome.
pub async fn run(args: OnceArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let mut settings = super::config::settings(&args.flags(), env)?;
    // Settings files changed since a run here pinned them: applied only when a person
    // says so (see `cli::accept`).
    if let Some(drift) = flower::run::pinned_drift(&settings) {
        let accepted = settings.accept_settings();
        if let Err(code) = super::accept::confirm(&drift, accepted, input::interactive()).await {
            return Ok(code);
        }
        settings.accept_settings_now();
    }
    let prompt = match &settings.prompt_file() {
        Some(file) => file.read()?,
        None => args.prompt.clone().unwrap_or_default(),
    };
    // `--allowed-tools` and the settings files' allow rules add up (as in Claude Code);
    // without `--allowed-tools` every tool is allowed anyway.
    // A workspace file's rules do not widen what the command line said (issue #40).
    let mut allowed_tools = args.allowed_tools.clone();
    if !allowed_tools.is_empty() {
        allowed_tools.extend(settings.user_allow_rules());
        for rule in settings.workspace_allow_rules() {
            errln!(
                "flower: 没有采用 {} 里的 permissions.allow {:?}:给了 --allowed-tools,项目和本地的设置文件不能放宽它。真要放行,把它加进 --allowed-tools(或写进 ~/.claude/settings.json)",
                rule.source.display(),
                rule.rule
            );
        }
    }
    // No model of its own: the client's, which the settings resolved (aliases, `[1m]`).
    let spec = AgentSpec {
        name: "once".into(),
        description: None,
        instructions: INSTRUCTIONS.into(),
        allowed_tools,
        disallowed_tools: args.disallowed_tools.clone(),
        max_turns: args.max_turns,
        model: None,
        effort: None,
        offer: Vec::new(),
    };
    // A malformed rule is a usage error, before any request.
    if let Err(e) = spec.permissions_in(env.home()) {
        errln!("flower: {e}");
        return Ok(ExitCode::from(super::config::EXIT_USAGE));
    }
    let renderer = Renderer::new(false, settings.terminal());
    let interrupt = Interrupt::new();
    let interactive = input::interactive();
    let sandbox = settings.sandbox().clone();
    for warning in settings.warnings() {
        errln!("flower: {warning}");
    }
    let start = match (&args.resume, args.fork) {
        (Some(id), true) => SessionStart::Fork(id.clone()),
        (Some(id), false) => SessionStart::Resume(id.clone()),
        (None, _) => SessionStart::New,
    };
    // A session someone else appends to (a running pipeline's, another `once --resume`)
    // is neither continued nor forked: refused before anything is opened.
    let front = FrontEnd {
        events: if args.json {
            flower::events::discard()
        } else {
            renderer.sink()
        },
        interrupt: interrupt.clone(),
        on_interrupt: interactive.then(after_interrupt),
        // Who answers an `ask` rule's question (no AskUser tool is offered here).
        asker: interactive.then(|| Arc::new(TerminalAsker) as Arc<dyn flower::engine::Asker>),
    };
    let opened = open_single(&settings, &start, custom_subagents(&settings, &spec), front);
    let (runtime, telemetry) = match opened {
        Ok(opened) => opened,
        Err(error) => return lines::refused(error),
    };
    for warning in runtime.take_warnings() {
        errln!("flower: {warning}");
    }
    signals::install(None, runtime.processes().clone(), interrupt, interactive, {
        let telemetry = telemetry.clone();
        move || {
            if let Some(telemetry) = &telemetry {
                super::flow::say_dropped(telemetry.shutdown());
            }
        }
    })?;

    if !args.json {
        errln!("{}", lines::sandbox_line(&sandbox, &spec, settings.home()));
    }
    let outcome = runtime.run_agent("once", &spec, &prompt, start).await;
    renderer.finish();
    if let Some(telemetry) = &telemetry {
        super::flow::say_dropped(telemetry.shutdown());
    }
    // A session that never came to be (`--resume` of an unknown id) gets no footer.
    let exists = outcome.result.session_id.as_deref().is_some_and(|id| {
        use flower::stores::SessionStore as _;
        runtime.store().has_session(id).unwrap_or(true)
    });
    Ok(print_outcome(&outcome, args.json, exists))
}

/// Prints how the session ended (one JSON object with `--json`, else a summary line
/// on stderr); the exit code says whether it went well.
fn print_outcome(outcome: &AgentOutcome, as_json: bool, exists: bool) -> ExitCode {
    let result = &outcome.result;
    let session_id = result.session_id.clone().unwrap_or_default();
    if as_json {
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
        outln!("{object}");
    } else {
        if let Some(error) = &result.error {
            errln!("flower: 没跑完{}", super::said::reason(error));
        }
        if exists {
            errln!(
                "-- 会话 {session_id} · {} 轮 · {} · 上下文 {}",
                result.num_turns,
                format::cost(result.cost_usd),
                format::tokens(result.context)
            );
        }
    }
    if result.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The sub-agents `Task` may start: none configured (the engine's default) unless the
/// team has its own (`.claude/agents`); then the default first and each custom agent
/// within what this command allows (`--allowed-tools`, `--disallowed-tools`).
fn custom_subagents(settings: &flower::settings::Settings, spec: &AgentSpec) -> Vec<AgentSpec> {
    if settings.files().agents.agents.is_empty() {
        return Vec::new();
    }
    let mut role = flower::engine::general_purpose().bound_by(spec);
    role.allowed_tools = spec.allowed_tools.clone();
    let (mut specs, left_out) = settings.subagents_for(&role);
    for line in left_out {
        errln!("flower: {line}");
    }
    specs[0] = flower::engine::general_purpose().bound_by(spec);
    specs
}
