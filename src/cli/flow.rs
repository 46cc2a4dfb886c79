//! The default command: `flower ["…"] [--new]` in a directory.
//!
//! A fresh directory asks what to do; a used one reports where it stands (the banner)
//! and continues the same conversation. What the user says on waking is appended to
//! 需求.md, re-derives 目标.md, and is the prompt of the resumed 干活 session.
//!
//! The run's lifecycle (locks, database hold, busy sessions, `/new`, the wake state) is
//! the library's ([`flower::run`]); this module asks and prints.

use super::args::FlowArgs;
use super::config::EXIT_USAGE;
use super::input::{self, TerminalAsker, after_interrupt};
use super::lines::{self, tilde};
use super::render::Renderer;
use crate::cli::out::errln;
use flower::WakeState;
use flower::continuity::notes::Said;
use flower::continuity::runtime::FrontEnd;
use flower::continuity::signals;
use flower::engine::Interrupt;
use flower::run::{Begin, Locked, Run, RunHooks};
use flower::settings::{Environment, Settings};
use flower::workflow::flower::{FlowerOptions, WORK, flower_workflow, judge_passed, worker};
use flower::workflow::{Context, WorkflowError};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub const ASK_TASK: &str = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)";
pub const ASK_WAKE: &str =
    "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)";

/// What this invocation is about.
enum Intent {
    /// A new task.
    Fresh { request: String },
    /// Continue; `utterance` is what the user said, if anything.
    Wake { utterance: Option<String> },
    /// The last run died inside 确认需求: continue the clarification.
    ResumeClarify { said: Option<String> },
}

/// Go on with `T`, or stop here with this exit code (its line already printed).
type OrExit<T> = Result<T, ExitCode>;

/// Go on with `T`, or end the command with this result.
macro_rules! or_return {
    ($step:expr) => {
        match $step {
            Ok(value) => value,
            Err(done) => return done,
        }
    };
}

// Long because the front end's part of a run reads in the order the person sees it:
// settings, the prompt, the run's phases with their questions, then the rendering.
pub async fn run(args: FlowArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let settings = load_settings(&args, env)?;
    let home = settings.home();
    let interactive = input::interactive();
    let said = match &settings.prompt_file() {
        Some(file) => file.read()?,
        None => args.prompt.join(" "),
    };
    let said = Some(said.trim().to_string()).filter(|s| !s.is_empty());
    let mut opening = or_return!(Run::prepare(&settings).map_err(lines::refused));
    // Settings files changed since the run pinned them: applied only when a person
    // says so (`--new` is a person starting afresh: it pins what is there).
    if let Some(drift) = opening.settings_drift().filter(|_| !args.new) {
        let accepted = settings.accept_settings();
        or_return!(
            super::accept::confirm(&drift, accepted, interactive)
                .await
                .map_err(Ok)
        );
        opening.accept_settings();
    }
    let renderer = Renderer::new(true, settings.terminal());
    renderer.set_window(settings.run_context().window);

    // A fresh directory and nothing said: ask (or, with nobody to ask, say so) before
    // the run directory, its lock included, is created. Decided again under the lock.
    // `--new` with nothing said asks first too: every refusal comes before the archive.
    let said = match said {
        None if args.new || !resumable(&opening.probe()) => match ask_first(interactive).await {
            Ok(request) => Some(request),
            Err(code) => return Ok(code),
        },
        said => said,
    };
    let begin = if args.new {
        Begin::New
    } else {
        Begin::Continue
    };
    let mut locked = or_return!(opening.lock(begin, hooks()).map_err(lines::refused));
    if let Some(into) = locked.archived() {
        errln!("已归档到 {}", tilde(into, home));
    }
    announce(&renderer, &args, &settings, &locked);
    let intent = match decide_intent(&mut locked, said, interactive, home).await? {
        Ok(intent) => intent,
        Err(code) => return Ok(code),
    };
    // What an earlier wake said and did not finish with (cut short before the judge).
    let pending = match intent {
        Intent::Wake { .. } => Said::read(locked.dir()),
        _ => None,
    };
    // The judge passed last time and nothing new was said: nothing to do, nothing spent.
    if matches!(intent, Intent::Wake { utterance: None })
        && pending.is_none()
        && !settings.again()
        && passed(&locked)
    {
        renderer.note(PASSED_ALREADY);
        return Ok(ExitCode::SUCCESS);
    }
    let mut options = flower_options(&args, &settings, interactive, intent);
    // Lineage's wakes start again at 0 after `--new` or `/new`: a new task, which has
    // cost nothing yet whatever the manifest's earlier rows say.
    let new_task = locked.wake().woke == 0;
    know_sessions(&renderer, &locked);

    let (subagents, left_out) = settings.subagents_for(&worker_for(&settings));
    for line in left_out {
        errln!("flower: {line}");
    }
    let interrupt = Interrupt::new();
    let run = or_return!(
        locked
            .start(
                subagents.clone(),
                FrontEnd {
                    events: renderer.sink(),
                    asker: interactive
                        .then(|| Arc::new(TerminalAsker) as Arc<dyn flower::engine::Asker>),
                    interrupt: interrupt.clone(),
                    on_interrupt: interactive.then(after_interrupt),
                },
            )
            .map_err(lines::refused)
    );
    let runtime = run.runtime();
    // Only once the run can be opened (its lineage checked against the store) is
    // anything written: a run that cannot start leaves the notes as they were.
    let said = take_up_said(&renderer, &run, &mut options, pending)?;
    note_warnings(&renderer, runtime);
    install_signals(&run, &renderer, interrupt, interactive)?;
    if !new_task {
        count_cost_before(&renderer, &settings);
    }

    let workflow = flower_workflow(run.workspace(), &options);
    let outcome = workflow.run(runtime).await;
    // Derived, worked and judged (passed or not): what was said is finished with.
    if said && outcome.is_ok() {
        Said::clear(run.dir())?;
    }
    renderer.finish();
    note_warnings(&renderer, runtime);
    finish_telemetry(&run);
    exit_status(
        &renderer,
        args.rounds,
        outcome,
        run_figures(&renderer, &settings).as_ref(),
    )
}

/// What was said on waking, recorded in the run directory before it is appended to the
/// brief, together with what an earlier wake said and did not finish with: the
/// pipeline re-derives 目标.md from it (unless that is done), works it and judges it.
/// Whether anything is pending.
fn take_up_said(
    renderer: &Renderer,
    run: &Run,
    options: &mut FlowerOptions,
    pending: Option<Said>,
) -> anyhow::Result<bool> {
    let said = match options.utterance.take() {
        Some(text) => Said::record(run.dir(), run.workspace(), &text)?,
        None => {
            let Some(said) = pending else {
                return Ok(false);
            };
            said.append_missing(run.workspace())?;
            renderer.note(&match said.prompt() {
                Some(text) => format!("flower: 上次唤醒时说的还没做完,接着做:{text}"),
                None => "flower: 上次唤醒时说的还没做完,接着做".to_string(),
            });
            said
        }
    };
    options.utterance = said.prompt();
    options.rederive = !said.derived;
    options.said_in = Some(run.dir().clone());
    Ok(true)
}

/// The status line starts a continued session where the banner said it stands: the
/// context of its last turn and its generation, per step lineage holds.
fn know_sessions(renderer: &Renderer, locked: &Locked) {
    if !renderer.is_live() {
        return;
    }
    let place = locked.place();
    for (step, id) in &locked.wake().steps {
        if let Some(context) = place.context(id) {
            renderer.know(step, context, place.generation(id));
        }
    }
}

/// On a terminal, the status line's cost starts from what the current task had cost
/// before this process (the manifest's rows, as `flower log` sums them).
fn count_cost_before(renderer: &Renderer, settings: &Settings) {
    if renderer.is_live()
        && let Ok(before) = super::inspect_run(settings)
    {
        renderer.set_cost_before(before.totals(&[]).cost_usd);
    }
}

/// On a terminal, the summary's figures: the run's, read as `flower log` reads them.
fn run_figures(renderer: &Renderer, settings: &Settings) -> Option<flower::inspect::Totals> {
    if !renderer.is_live() {
        return None;
    }
    let run = super::inspect_run(settings).ok()?;
    Some(run.totals(&run.sessions()))
}

/// The pipeline's worker with the settings files' allow rules and every MCP server's
/// tools: the one role they widen (`docs/conventions.md`); the judge and the
/// coordinator keep their own lists.
fn worker_for(settings: &Settings) -> flower::AgentSpec {
    let mut worker = worker();
    worker.allowed_tools.extend(settings.allow_rules());
    worker.allowed_tools.extend(settings.mcp_rules());
    worker
}

/// Every setting, checked before anyone is asked anything; its warnings printed.
fn load_settings(args: &FlowArgs, env: &Environment) -> anyhow::Result<Settings> {
    let settings = super::config::settings(&args.flags(), env)?;
    // Without Landlock, say so once (the verbose banner says it anyway).
    if settings.sandbox().enabled
        && !args.verbose
        && matches!(
            flower::tools::sandbox::support(),
            flower::tools::sandbox::Support::Missing(_)
        )
    {
        errln!("flower: {}", settings.sandbox().describe());
    }
    for warning in settings.warnings() {
        errln!("flower: {warning}");
    }
    Ok(settings)
}

/// How the run's waits and a lost database hold are told on this terminal. A lost
/// hold then stops the process as SIGTERM does (the library's reaction), through the
/// handlers of [`install_signals`].
fn hooks() -> RunHooks {
    RunHooks {
        on_wait: Some(Box::new(|what| errln!("{}", lines::waiting(what)))),
        on_hold_lost: Some(Arc::new(|lost| errln!("{}", lines::hold_lost(lost)))),
    }
}

/// Nothing said in a fresh directory: ask for the task, or (nobody to ask) say how to
/// give one.
async fn ask_first(interactive: bool) -> OrExit<String> {
    if !interactive {
        return Err(no_task());
    }
    ask_task().await.ok_or(ExitCode::from(EXIT_USAGE))
}

/// Where the run stands, before anything is asked: the wake banner, or the line for a
/// clarification cut short; nothing for a fresh run.
fn announce(renderer: &Renderer, args: &FlowArgs, settings: &Settings, locked: &Locked) {
    let state = locked.wake();
    let home = settings.home();
    if state.waking {
        renderer.line(&lines::banner(&locked.place(), state, home));
        if args.verbose {
            errln!(
                "{}",
                lines::sandbox_line(settings.sandbox(), &worker_for(settings), home)
            );
        }
    } else if !state.steps.is_empty() {
        renderer.line(&format!(
            "<- 在 {} 接上上次  需求确认到一半 · 第 {} 次唤醒",
            tilde(locked.workspace(), home),
            state.woke + 1
        ));
    }
    if args.verbose {
        for line in lines::afresh(&locked.place().afresh(), home) {
            errln!("flower: {line}");
        }
        for line in super::conventions::lines(settings) {
            errln!("{line}");
        }
    }
}

/// What this invocation is about: from what was said on the command line, or asked.
async fn decide_intent(
    locked: &mut Locked,
    said: Option<String>,
    interactive: bool,
    home: Option<&Path>,
) -> anyhow::Result<OrExit<Intent>> {
    let state = locked.wake();
    let intent = if state.waking {
        match said {
            Some(text) => Intent::Wake {
                utterance: Some(text),
            },
            None if interactive => match input::ask_line(ASK_WAKE).await {
                Some(line) if line.trim() == "/new" => {
                    // Asked before anything moves: leaving here archives nothing.
                    let Some(request) = ask_task().await else {
                        return Ok(Err(ExitCode::from(EXIT_USAGE)));
                    };
                    if let Some(into) = locked.archive()? {
                        errln!("已归档到 {}", tilde(&into, home));
                    }
                    Intent::Fresh { request }
                }
                Some(line) if !line.trim().is_empty() => Intent::Wake {
                    utterance: Some(line.trim().to_string()),
                },
                _ => Intent::Wake { utterance: None },
            },
            None => Intent::Wake { utterance: None },
        }
    } else if !state.steps.is_empty() {
        Intent::ResumeClarify { said }
    } else {
        match said {
            Some(request) => Intent::Fresh { request },
            None => match ask_first(interactive).await {
                Ok(request) => Intent::Fresh { request },
                Err(code) => return Ok(Err(code)),
            },
        }
    };
    Ok(Ok(intent))
}

/// The pipeline's options for `intent`.
fn flower_options(
    args: &FlowArgs,
    settings: &Settings,
    interactive: bool,
    intent: Intent,
) -> FlowerOptions {
    let mut options = FlowerOptions {
        rounds: args.rounds,
        interactive,
        judge_effort: settings.model().judge_effort,
        ..FlowerOptions::default()
    };
    match intent {
        Intent::Fresh { request } => options.request = Some(request),
        Intent::ResumeClarify { said } => options.request = said,
        Intent::Wake { utterance } => options.utterance = utterance,
    }
    options
}

fn note_warnings(renderer: &Renderer, runtime: &flower::Runtime) {
    for warning in runtime.take_warnings() {
        renderer.note(&format!("flower: {warning}"));
    }
}

/// Ctrl-C and termination signals: rescue the sessions, stop the commands, end the
/// output cleanly and say how to continue.
fn install_signals(
    run: &Run,
    renderer: &Arc<Renderer>,
    interrupt: Interrupt,
    interactive: bool,
) -> anyhow::Result<()> {
    let runtime = run.runtime();
    let exit_renderer = renderer.clone();
    let telemetry = run.telemetry().cloned();
    signals::install(
        Some(runtime.rescuer()),
        runtime.processes().clone(),
        interrupt,
        interactive,
        move || {
            exit_renderer.finish();
            if let Some(telemetry) = &telemetry {
                say_dropped(telemetry.shutdown());
            }
            errln!("flower: 已退出。再跑一次 flower 就接着这段对话。");
        },
    )?;
    Ok(())
}

/// The OpenTelemetry export's last flush (bounded), and what it could not deliver.
fn finish_telemetry(run: &Run) {
    if let Some(telemetry) = run.telemetry() {
        say_dropped(telemetry.shutdown());
    }
}

pub(super) fn say_dropped(figures: Option<flower::telemetry::Figures>) {
    if let Some(f) = figures.filter(|f| f.dropped() > 0) {
        errln!(
            "flower: 遥测:收集器没收到,丢了 {} 条(span {},事件 {},指标 {});见 flower log --json 的 telemetry",
            f.dropped(),
            f.spans_dropped,
            f.logs_dropped,
            f.metrics_dropped
        );
    }
}

/// The verdict line and summary of the finished pipeline, and its exit status.
fn exit_status(
    renderer: &Renderer,
    rounds: u32,
    outcome: Result<Context, WorkflowError>,
    figures: Option<&flower::inspect::Totals>,
) -> anyhow::Result<ExitCode> {
    match outcome {
        Ok(ctx) => {
            if ctx.passed.get(WORK).copied().unwrap_or(false) {
                renderer.verdict("== 判定通过 ==", "判定通过", None, figures);
                Ok(ExitCode::SUCCESS)
            } else {
                renderer.verdict(
                    &format!("== 这次唤醒的 {rounds} 轮用完了,判定还没通过。再跑 flower 接着做 =="),
                    "判定未通过",
                    Some(&format!(
                        "这次唤醒的 {rounds} 轮用完了。再跑 flower 接着做。"
                    )),
                    figures,
                );
                Ok(ExitCode::FAILURE)
            }
        }
        Err(WorkflowError::StepFailed { step, error, .. }) => {
            let said = format!(
                "flower: 步骤 {step} 没跑完{}\n再跑一次 flower 就从这里接着做。",
                super::said::reason(&error)
            );
            renderer.verdict(&said, &format!("{step} 没跑完"), Some(&said), figures);
            Ok(ExitCode::FAILURE)
        }
        Err(other) => Err(other.into()),
    }
}

/// Said (and nothing spent) when a wake has nothing to do: the judge already passed.
pub const PASSED_ALREADY: &str = "== 上次判定已经通过,没有要做的了 ==\n要接着改点什么,说一句就行:flower \"再加上……\";再验一遍:flower --again;重开一件事:flower --new \"……\"";

/// Whether the run's judge passed 干活 last time (read from the manifest), and no rewind
/// a kill interrupted waits to be finished (the runtime finishes it, and its row ends
/// that verdict).
fn passed(locked: &Locked) -> bool {
    let place = locked.place();
    !flower::continuity::rewind::pending(place.run_dir)
        && flower::continuity::manifest::rows_of(place.run_dir, place.shared)
            .is_ok_and(|rows| judge_passed(&rows))
}

/// Whether `state` is something `flower` without a prompt continues.
fn resumable(state: &WakeState) -> bool {
    state.waking || !state.steps.is_empty()
}

fn no_task() -> ExitCode {
    errln!("flower: 要做什么? 在命令行上给一句话,例如:flower \"写个 md 转 html 的脚本\"");
    ExitCode::from(EXIT_USAGE)
}

async fn ask_task() -> Option<String> {
    loop {
        let line = input::ask_line(ASK_TASK).await?;
        let line = line.trim();
        if !line.is_empty() {
            return Some(line.to_string());
        }
    }
}
