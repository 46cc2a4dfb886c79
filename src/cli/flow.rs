//! The default command: `flower ["…"] [--new]` in a directory.
//!
//! A fresh directory asks what to do; a used one reports where it stands (the banner)
//! and continues the same conversation. What the user says on waking is appended to
//! 需求.md, re-derives 目标.md, and is the prompt of the resumed 干活 session.

use super::args::{EXIT_LOCKED, FlowArgs};
use super::input::{self, TerminalAsker};
use super::once::after_interrupt;
use super::render::{self, Renderer};
use super::tilde;
use flower::WakeState;
use flower::continuity::handoff;
use flower::continuity::lineage::Lineage;
use flower::continuity::lock::{self, Holder, LockError, Probe, RunLock, RunLocking};
use flower::continuity::notes;
use flower::continuity::runtime::{Runtime, RuntimeError, RuntimeOptions};
use flower::continuity::shared::RunStateStore;
use flower::continuity::shared::{SharedRun, SharedRunError};
use flower::continuity::signals;
use flower::continuity::wake::{context_in, session_context, session_generation, wake_state_of};
use flower::engine::Interrupt;
use flower::settings::{Environment, Settings};
use flower::stores::postgres::hostname;
use flower::stores::{SessionKey, SessionStore};
use flower::tools::sandbox::SandboxPolicy;
use flower::workflow::flower::{FlowerOptions, WORK, flower_workflow, worker};
use flower::workflow::{Context, WorkflowError};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub const ASK_TASK: &str = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)";
pub const ASK_WAKE: &str =
    "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)";

use super::config::EXIT_USAGE;

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

pub async fn run(args: FlowArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let config = load_config(&args, env)?;
    let workspace = config.workspace.canonicalize()?;
    let interactive = input::interactive();
    let said = Some(args.prompt.join(" ").trim().to_string()).filter(|s| !s.is_empty());
    let mut base_options = config.runtime_options()?;
    let stores = open_stores(&config)?;
    let store = stores.sessions.clone();
    base_options.store = store.clone();
    let shared = match open_shared(&stores, &workspace, &config)? {
        Ok(shared) => shared,
        Err(code) => return Ok(code),
    };
    base_options.shared_run = shared.clone();
    let shared = shared.as_ref();
    let renderer = Renderer::new(true, &config.terminal);
    renderer.set_window(config.context_window);
    let home = config.home.as_deref();

    let said = match ask_before_lock(
        &args,
        &workspace,
        store.as_deref(),
        shared,
        said,
        interactive,
    )
    .await
    {
        Ok(said) => said,
        Err(code) => return Ok(code),
    };
    // One run, one process: before anything is read for the wake or written, this
    // process holds the run directory (until it exits, however it exits).
    let Some(run_lock) = take_run_lock(&args.run_dir.path, args.wait)? else {
        return Ok(ExitCode::from(EXIT_LOCKED));
    };
    // And across hosts: the run in the database, for this process's whole life.
    let _held = match shared.map(|run| hold_shared(run, args.wait)).transpose()? {
        Some(None) => return Ok(ExitCode::from(EXIT_LOCKED)),
        held => held,
    };
    if let Err(code) = check_sessions_free(&args, &workspace, shared) {
        return Ok(code);
    }

    if args.new {
        archive(&workspace, &args.run_dir.path, shared, home)?;
    }
    let state = wake_state_of(&workspace, &args.run_dir.path, store.as_deref(), shared);
    let at = Where {
        home,
        workspace: &workspace,
        run_dir: &args.run_dir.path,
        store: store.as_deref(),
        shared,
    };
    announce(&renderer, &args, &at, &state, &config.sandbox);
    let intent = match decide_intent(&at, &state, said, interactive).await? {
        Ok(intent) => intent,
        Err(code) => return Ok(code),
    };
    let options = flower_options(&args, interactive, intent);

    let interrupt = Interrupt::new();
    let runtime_options = RuntimeOptions {
        trim: !args.no_trim,
        events: renderer.sink(),
        asker: interactive.then(|| Arc::new(TerminalAsker) as Arc<dyn flower::engine::Asker>),
        interrupt: interrupt.clone(),
        on_interrupt: interactive.then(after_interrupt),
        subagents: vec![worker()],
        run_lock: RunLocking::Held(run_lock),
        ..base_options
    };
    let runtime = match open_runtime(&workspace, &args.run_dir.path, runtime_options)? {
        Ok(runtime) => runtime,
        Err(code) => return Ok(code),
    };
    // Only once the run can be opened (its lineage checked against the store) is
    // anything written: a run that cannot start leaves the notes as they were.
    if let Some(text) = &options.utterance {
        notes::append_wake_note(&workspace, text)?;
    }
    note_warnings(&renderer, &runtime);
    install_signals(&runtime, &renderer, interrupt, interactive)?;

    let workflow = flower_workflow(&workspace, &options);
    let outcome = workflow.run(&runtime).await;
    renderer.finish();
    note_warnings(&renderer, &runtime);
    exit_status(&renderer, args.rounds, outcome)
}

/// Every setting, checked before anyone is asked anything; its warnings printed.
fn load_config(args: &FlowArgs, env: &Environment) -> anyhow::Result<Settings> {
    let config = super::config::settings(&args.flags(), env)?;
    // Without Landlock, say so once (the verbose banner says it anyway).
    if config.sandbox.enabled
        && !args.verbose
        && matches!(
            flower::tools::sandbox::support(),
            flower::tools::sandbox::Support::Missing(_)
        )
    {
        eprintln!("flower: {}", config.sandbox.describe());
    }

    for warning in &config.warnings {
        eprintln!("flower: {warning}");
    }
    Ok(config)
}

/// A fresh directory and nothing said: ask (or, with nobody to ask, say so) before
/// the run directory, its lock included, is created. Decided again under the lock.
async fn ask_before_lock(
    args: &FlowArgs,
    workspace: &Path,
    store: Option<&dyn SessionStore>,
    shared: Option<&SharedRun>,
    said: Option<String>,
    interactive: bool,
) -> OrExit<Option<String>> {
    if said.is_some()
        || args.new
        || resumable(&wake_state_of(workspace, &args.run_dir.path, store, shared))
    {
        return Ok(said);
    }
    if !interactive {
        return Err(no_task());
    }
    match ask_task().await {
        Some(request) => Ok(Some(request)),
        None => Err(ExitCode::from(EXIT_USAGE)),
    }
}

/// A session of this run that someone else appends to (`flower once --resume`): no
/// banner, no wake. The runtime claims them for real when it opens.
fn check_sessions_free(
    args: &FlowArgs,
    workspace: &Path,
    shared: Option<&SharedRun>,
) -> OrExit<()> {
    if args.new {
        return Ok(());
    }
    let steps = match shared {
        Some(shared) => shared.lineage().ok().map(|(_, steps)| steps),
        None => Lineage::read(&args.run_dir.path, workspace).map(|file| file.steps),
    };
    if let Some(steps) = steps {
        for id in steps.values() {
            if let Probe::Held(holder) = lock::probe_session(&args.run_dir.path, id) {
                eprintln!("flower: {}", session_busy(id, &holder));
                return Err(ExitCode::from(EXIT_LOCKED));
            }
        }
    }
    Ok(())
}

/// Where the run stands, before anything is asked: the wake banner, or the line for a
/// clarification cut short; nothing for a fresh run.
fn announce(
    renderer: &Renderer,
    args: &FlowArgs,
    at: &Where,
    state: &WakeState,
    sandbox: &SandboxPolicy,
) {
    let workspace = at.workspace;
    if state.waking {
        renderer.line(&banner(at, state));
        if args.verbose {
            eprintln!("{}", super::once::sandbox_line(sandbox, &worker(), at.home));
        }
    } else if !state.steps.is_empty() {
        renderer.line(&format!(
            "<- 在 {} 接上上次  需求确认到一半 · 第 {} 次唤醒",
            tilde(workspace, at.home),
            state.woke + 1
        ));
    }
}

/// What this invocation is about: from what was said on the command line, or asked.
async fn decide_intent(
    at: &Where<'_>,
    state: &WakeState,
    said: Option<String>,
    interactive: bool,
) -> anyhow::Result<OrExit<Intent>> {
    let intent = if state.waking {
        match said {
            Some(text) => Intent::Wake {
                utterance: Some(text),
            },
            None if interactive => match input::ask_line(ASK_WAKE).await {
                Some(line) if line.trim() == "/new" => {
                    archive(at.workspace, at.run_dir, at.shared, at.home)?;
                    match ask_task().await {
                        Some(request) => Intent::Fresh { request },
                        None => return Ok(Err(ExitCode::from(EXIT_USAGE))),
                    }
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
            None if interactive => match ask_task().await {
                Some(request) => Intent::Fresh { request },
                None => return Ok(Err(ExitCode::from(EXIT_USAGE))),
            },
            None => return Ok(Err(no_task())),
        }
    };
    Ok(Ok(intent))
}

/// The pipeline's options for `intent`.
fn flower_options(args: &FlowArgs, interactive: bool, intent: Intent) -> FlowerOptions {
    let mut options = FlowerOptions {
        rounds: args.rounds,
        interactive,
        ..FlowerOptions::default()
    };
    match intent {
        Intent::Fresh { request } => options.request = Some(request),
        Intent::ResumeClarify { said } => options.request = said,
        Intent::Wake { utterance } => options.utterance = utterance,
    }
    options
}

/// The runtime of the run; a session another process holds stops here with its line.
fn open_runtime(
    workspace: &Path,
    run_dir: &Path,
    options: RuntimeOptions,
) -> anyhow::Result<OrExit<Runtime>> {
    match Runtime::with_options(workspace, run_dir, options) {
        Ok(runtime) => Ok(Ok(runtime)),
        Err(RuntimeError::SessionBusy { session_id, holder }) => {
            eprintln!("flower: {}", session_busy(&session_id, &holder));
            Ok(Err(ExitCode::from(EXIT_LOCKED)))
        }
        Err(e) => Err(e.into()),
    }
}

fn note_warnings(renderer: &Renderer, runtime: &Runtime) {
    for warning in runtime.take_warnings() {
        renderer.note(&format!("flower: {warning}"));
    }
}

/// Ctrl-C and termination signals: rescue the sessions, stop the commands, end the
/// output cleanly and say how to continue.
fn install_signals(
    runtime: &Runtime,
    renderer: &Arc<Renderer>,
    interrupt: Interrupt,
    interactive: bool,
) -> anyhow::Result<()> {
    let exit_renderer = renderer.clone();
    signals::install(
        Some(runtime.rescuer()),
        runtime.processes().clone(),
        interrupt,
        interactive,
        move || {
            exit_renderer.finish();
            eprintln!("flower: 已退出。再跑一次 flower 就接着这段对话。");
        },
    )?;
    Ok(())
}

/// The verdict line and summary of the finished pipeline, and its exit status.
fn exit_status(
    renderer: &Renderer,
    rounds: u32,
    outcome: Result<Context, WorkflowError>,
) -> anyhow::Result<ExitCode> {
    match outcome {
        Ok(ctx) => {
            if ctx.passed.get(WORK).copied().unwrap_or(false) {
                renderer.note("== 判定通过 ==");
                renderer.summary("判定通过");
                Ok(ExitCode::SUCCESS)
            } else {
                renderer.note(&format!(
                    "== 这次唤醒的 {rounds} 轮用完了,判定还没通过。再跑 flower 接着做 =="
                ));
                renderer.summary("判定未通过");
                Ok(ExitCode::FAILURE)
            }
        }
        Err(WorkflowError::StepFailed { step, error, .. }) => {
            renderer.note(&format!(
                "flower: 步骤 {step} 没跑完:{error}\n再跑一次 flower 就从这里接着做。"
            ));
            renderer.summary(&format!("{step} 没跑完"));
            Ok(ExitCode::FAILURE)
        }
        Err(other) => Err(other.into()),
    }
}

/// Whether `state` is something `flower` without a prompt continues.
fn resumable(state: &WakeState) -> bool {
    state.waking || !state.steps.is_empty()
}

fn no_task() -> ExitCode {
    eprintln!("flower: 要做什么? 在命令行上给一句话,例如:flower \"写个 md 转 html 的脚本\"");
    ExitCode::from(EXIT_USAGE)
}

/// The run lock of `run_dir`; `None` (the line printed) when another process holds it
/// and `wait` is off. With `wait`, says that it waits, and waits.
fn take_run_lock(run_dir: &Path, wait: bool) -> anyhow::Result<Option<RunLock>> {
    match RunLock::acquire(run_dir) {
        Ok(lock) => Ok(Some(lock)),
        Err(LockError::Held { holder, .. }) if wait => {
            eprintln!("flower: {},等它结束……", running_here(&holder));
            Ok(Some(RunLock::wait(run_dir)?))
        }
        Err(LockError::Held { holder, .. }) => {
            let stop = holder
                .as_ref()
                .map(|h| format!(";停下它:kill {}", h.pid))
                .unwrap_or_default();
            eprintln!(
                "flower: {}。等它跑完再接着做:flower --wait{stop}",
                running_here(&holder)
            );
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// How long a run held in the database is waited for before it counts as busy: a
/// process just killed on another host takes the server a moment to notice.
const HOLD_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Holds the shared run for this process; `None` (its line printed) when another
/// process, on any host, holds it and `--wait` was not given.
fn hold_shared(run: &SharedRun, wait: bool) -> anyhow::Result<Option<Box<dyn Send>>> {
    let me = format!(
        "{} pid {},{} 起",
        hostname(),
        std::process::id(),
        chrono::Local::now().format("%H:%M")
    );
    let busy = |holder: Option<String>| {
        format!(
            "另一个 flower 正在跑运行 {}({})",
            run.run_key(),
            holder.as_deref().unwrap_or("不知道是谁")
        )
    };
    let refused = |e| {
        anyhow::anyhow!("cannot hold the run in the store: {e}\nNothing was sent to the model.")
    };
    match run
        .hold(&me, Some(HOLD_GRACE), lost(run))
        .map_err(refused)?
    {
        Ok(guard) => Ok(Some(guard)),
        Err(holder) if wait => {
            eprintln!("flower: {},等它结束……", busy(holder));
            match run.hold(&me, None, lost(run)).map_err(refused)? {
                Ok(guard) => Ok(Some(guard)),
                Err(holder) => {
                    eprintln!("flower: {}", busy(holder));
                    Ok(None)
                }
            }
        }
        Err(holder) => {
            eprintln!("flower: {}。等它跑完再接着做:flower --wait", busy(holder));
            Ok(None)
        }
    }
}

/// What a run does when its hold went with the database and another process took the
/// run meanwhile: says so and stops as on SIGTERM (the in-flight step's row is written,
/// running commands stopped), so that two processes never go on writing one run.
fn lost(run: &SharedRun) -> flower::stores::postgres::OnLeaseLost {
    let run_key = run.run_key().to_string();
    Box::new(move |holder: Option<String>| {
        eprintln!(
            "flower: 数据库断开期间,运行 {run_key} 被另一个 flower 接手了({})。这里停下,免得两边同时写它",
            holder.as_deref().unwrap_or("不知道是谁")
        );
        // To the process, not this thread: whatever waits for SIGTERM from outside
        // gets it. SAFETY: kill(2) on our own pid with a constant signal.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGTERM);
        }
    })
}

/// `另一个 flower 正在这里运行(pid N,HH:MM 起)`
pub fn running_here(holder: &Option<Holder>) -> String {
    format!("另一个 flower 正在这里运行({})", who(holder))
}

/// The line for a session another process appends to or reads.
pub fn session_busy(session_id: &str, holder: &Option<Holder>) -> String {
    let stop = holder
        .as_ref()
        .map(|h| match elsewhere(h) {
            Some(host) => format!(";停下它:在 {host} 上 kill {}", h.pid),
            None => format!(";停下它:kill {}", h.pid),
        })
        .unwrap_or_default();
    format!(
        "另一个 flower 正在用会话 {session_id}({})。等它跑完再来{stop}",
        who(holder)
    )
}

/// `pid N,HH:MM 起`, or `HOST 上,pid N,HH:MM 起` for a holder on another host.
pub fn who(holder: &Option<Holder>) -> String {
    let Some(holder) = holder else {
        return "pid 不详".into();
    };
    let at = format!("pid {},{} 起", holder.pid, holder.clock());
    match elsewhere(holder) {
        Some(host) => format!("{host} 上,{at}"),
        None => at,
    }
}

/// The holder's host, when it is not this one.
fn elsewhere(holder: &Holder) -> Option<&str> {
    holder.host.as_deref().filter(|host| *host != hostname())
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

/// `--new` / `/new`: lineage.json, 需求.md, 目标.md and the handoff documents
/// (`notes/交接/`) move together into
/// `notes/archive/<YYYYmmdd-HHMMSS>/`; steps and woke reset. sessions.db is untouched.
pub fn archive(
    workspace: &Path,
    run_dir: &Path,
    shared: Option<&SharedRun>,
    home: Option<&Path>,
) -> anyhow::Result<()> {
    let extra = [
        notes::brief_path(workspace),
        notes::goal_path(workspace),
        handoff::handoff_dir(workspace),
    ];
    let lineage_file = run_dir.join("lineage.json");
    if shared.is_none() && !lineage_file.exists() && !extra.iter().any(|p| p.exists()) {
        return Ok(());
    }
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let mut into = workspace
        .join(notes::NOTES_DIR)
        .join("archive")
        .join(&stamp);
    let mut n = 1;
    while into.exists() {
        n += 1;
        into = workspace
            .join(notes::NOTES_DIR)
            .join("archive")
            .join(format!("{stamp}-{n}"));
    }
    let mut lineage = match shared {
        Some(shared) => Lineage::load_shared(run_dir, workspace, shared.clone(), |_| Ok(true))?,
        None => Lineage::load(run_dir, workspace, |_| true),
    };
    lineage.archive(&into, &extra)?;
    eprintln!("已归档到 {}", tilde(&into, home));
    Ok(())
}

/// Where a run lives: its workspace and run directory, and with a shared database its
/// transcripts' store and its lineage and manifest there.
pub struct Where<'a> {
    /// The settings' `HOME`, for `~` in printed paths.
    pub home: Option<&'a Path>,
    pub workspace: &'a Path,
    pub run_dir: &'a Path,
    pub store: Option<&'a dyn SessionStore>,
    pub shared: Option<&'a SharedRun>,
}

impl Where<'_> {
    /// The context of a session's last turn (the banner's `干活上下文`).
    pub fn context(&self, session_id: &str) -> Option<u64> {
        match (self.store, self.shared) {
            (Some(store), Some(shared)) => {
                let key = SessionKey::main(shared.project_key(), session_id);
                context_in(store, &key)
            }
            _ => session_context(self.workspace, self.run_dir, session_id),
        }
    }

    /// A session's generation (换代), from the run's manifest.
    pub fn generation(&self, session_id: &str) -> u32 {
        session_generation(self.run_dir, self.shared, session_id)
    }
}

/// The run of this workspace in the shared database, registered if new; `Ok(None)`
/// with SQLite (or when the database's run of this project key is another path's).
/// A run key that names another workspace's run stops here, nothing written.
pub fn open_shared(
    stores: &Stores,
    workspace: &Path,
    config: &Settings,
) -> anyhow::Result<OrExit<Option<SharedRun>>> {
    let Some(runs) = &stores.runs else {
        return Ok(Ok(None));
    };
    match SharedRun::open(runs.clone(), workspace, config.run_key.as_ref()) {
        Ok(shared) => Ok(Ok(shared)),
        Err(e @ SharedRunError::Foreign { .. }) => {
            eprintln!("flower: {e}");
            Ok(Err(ExitCode::from(EXIT_USAGE)))
        }
        Err(e) => Err(anyhow::anyhow!(
            "cannot read the run from the store: {e}\nNothing was sent to the model."
        )),
    }
}

/// `<- 在 ~/proj 接上上次  需求已确认 · 目标 15 条 · 干活上下文 80.2K · 第 3 次唤醒`
pub fn banner(at: &Where, state: &WakeState) -> String {
    let workspace = at.workspace;
    let mut parts = vec!["需求已确认".to_string()];
    if state.checks > 0 {
        parts.push(format!("目标 {} 条", state.checks));
    }
    let work = state.steps.get(WORK);
    if let Some(context) = work.and_then(|id| at.context(id)) {
        parts.push(format!("干活上下文 {}", render::tokens(context)));
    }
    if let Some(generation) = work.map(|id| at.generation(id)).filter(|&g| g > 1) {
        parts.push(format!("第 {generation} 代"));
    }
    parts.push(format!("第 {} 次唤醒", state.woke + 1));
    format!(
        "<- 在 {} 接上上次  {}",
        tilde(workspace, at.home),
        parts.join(" · ")
    )
}

/// The stores a run opened: `None`s for the default SQLite files.
#[derive(Default, Clone)]
pub struct Stores {
    pub sessions: Option<Arc<dyn SessionStore>>,
    pub runs: Option<Arc<dyn RunStateStore>>,
}

/// The store of the settings, for transcripts and for the run's lineage and manifest;
/// connected and checked now, before any model request.
fn open_stores(settings: &Settings) -> anyhow::Result<Stores> {
    let Some(store) = settings.open_store().map_err(|e| {
        anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model.")
    })?
    else {
        return Ok(Stores::default());
    };
    Ok(Stores {
        sessions: Some(store.clone()),
        runs: Some(store),
    })
}
