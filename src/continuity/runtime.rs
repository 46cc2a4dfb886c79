//! The runtime: one workspace, one run directory, one session store, one model.
//!
//! A [`Runtime`] runs agent sessions as steps: each [`Runtime::run_step`] is one step
//! attempt, retried through [`Resilience`] (waiting out an outage, resuming the same
//! session), and recorded as a row of `runs/manifest.json` (or of the run's manifest in
//! a shared database, [`RuntimeOptions::shared_run`]). The store is always a
//! [`PruningSessionStore`] (over `runs/sessions.db` unless another store is given), so a
//! resumed session is never fed the errors of a retry storm. 换代 (a step's session
//! handing off to a successor) is driven from [`super::succession`].
//!
//! A runtime takes resolved values only ([`RuntimeOptions`]); the settings resolution
//! (`crate::settings`) and the run's lifecycle ([`super::run::Run`]) build them.

use super::checkpointing::Watch;
use super::guard::lock;
use super::handoff::{self, HandoffOptions};
use super::lineage::Lineage;
use super::lock::{Holder, Lease, LockError, RunLock, RunLocking, SessionLocks};
use super::manifest::{Manifest, StepError, StepResult, new_run_id};
use super::resilience::{self, RESUME_PROMPT, Resilience};
use super::retry::{Retrier, SubagentRecovery, Verdict};
use super::shared::SharedRun;
use super::succession::handoff_needed;
use crate::checkpoint::Checkpoints;
use crate::engine::Denial;
use crate::engine::{
    AgentSpec, Asker, Conventions, Engine, EngineConfig, EngineError, Event, EventSink, Interrupt,
    InterruptPrompt, Origin, RunRequest, RunResult, SessionStart,
};
use crate::model::{ModelClient, Usage};
use crate::run_dir::RunDir;
use crate::stores::{
    CacheWindow, PruneOptions, PruningSessionStore, SessionStore, SqliteSessionStore, project_key,
};
use crate::tools::ProcessGroups;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use super::succession::CONTINUE_WITHOUT_HANDOFF;

/// A hook called with a step's session id the moment it exists.
pub type SessionHook = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("工作区 {path} 用不了({source})")]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("运行目录 {path} 用不了({source})")]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::stores::StoreError),
    /// The store could not say whether lineage's sessions still exist. Nothing was
    /// written: the conversation is still there once the database can be read again.
    #[error(
        "没能到 sessions.db 里核对 {path} 记着的会话:{source}\n什么都没有改动。让数据库能读(是不是别的程序锁着它?),再跑 flower。"
    )]
    LineageCheck {
        path: PathBuf,
        source: crate::stores::StoreError,
    },
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Handoff(#[from] handoff::HandoffError),
    /// Another runtime, in this process or another, holds the run directory or a
    /// session this runtime would continue; or the lock failed. Nothing was written.
    #[error(transparent)]
    Held(#[from] Held),
}

/// What another process holds that a run needs, or the lock that failed: one type,
/// said the same way whether the runtime ([`RuntimeError::Held`]) or the run's
/// lifecycle (`crate::run::RunError::Held`) found it.
#[derive(Debug, thiserror::Error)]
pub enum Held {
    /// Another flower, in this process or another, holds the run directory.
    #[error("另一个 flower 正在用运行目录 {path}({})", holder_text(holder))]
    RunDir {
        path: PathBuf,
        holder: Option<Holder>,
    },
    /// Another process appends to (or forks) a session this run would continue.
    #[error("另一个 flower 正在用会话 {session_id}({})", holder_text(holder))]
    Session {
        session_id: String,
        holder: Option<Holder>,
    },
    /// The lock itself failed (its file could not be made or read).
    #[error(transparent)]
    Lock(LockError),
}

impl Held {
    /// A run lock that could not be taken.
    pub fn run_dir(error: LockError) -> Held {
        match error {
            LockError::Held { path, holder } => Held::RunDir { path, holder },
            other => Held::Lock(other),
        }
    }

    /// The lock of session `session_id` that could not be taken.
    pub fn session(session_id: &str, error: LockError) -> Held {
        match error {
            LockError::Held { holder, .. } => Held::Session {
                session_id: session_id.to_string(),
                holder,
            },
            other => Held::Lock(other),
        }
    }
}

/// The holder as an error message names it (`pid unknown` when it did not say).
pub(crate) fn holder_text(holder: &Option<Holder>) -> String {
    holder
        .as_ref()
        .map_or_else(|| "pid 不详".into(), Holder::to_string)
}

/// How a runtime is set up: resolved values only (the settings resolution,
/// `crate::settings`, builds them from flags and environment; nothing here reads the
/// environment). [`RuntimeOptions::new`] gives the library's defaults around a client:
/// `trim` off, `ephemeral` on, `keep_denials` 1, the default retry numbers, no sandbox.
pub struct RuntimeOptions {
    /// Replace old large tool results by file pointers when a session is resumed.
    pub trim: bool,
    /// Mark results of one-shot snapshot commands stale once they were run again.
    pub ephemeral: bool,
    /// How many denied tool calls a resumed session still sees.
    pub keep_denials: usize,
    /// The prompt cache's lifetime: a resume within it sends the prefix the cache
    /// holds (prefix-changing pruning waits until it is cold). `None`: always prune.
    pub cache_ttl: Option<Duration>,
    /// Extended thinking budget, tokens (see `EngineConfig::thinking_budget`).
    pub thinking_budget: Option<u32>,
    /// `output_config.effort` of every agent without its own (see `EngineConfig::effort`).
    pub effort: Option<crate::model::Effort>,
    /// `max_uses` of the web tools (see `EngineConfig::web`).
    pub web: crate::model::WebLimits,
    /// The model client; its default model is the run's model.
    pub client: Arc<dyn ModelClient>,
    /// Retry policy.
    pub resilience: Resilience,
    /// Agents the `Task` tool can start.
    pub subagents: Vec<AgentSpec>,
    /// Where running shell commands are registered, for the signal handlers.
    pub processes: ProcessGroups,
    /// The sandbox of Bash commands (off by default in the library).
    pub sandbox: crate::tools::sandbox::SandboxPolicy,
    /// 换代: when a step's main session hands off to a successor (window, threshold).
    /// Checked by [`Runtime::with_options`] against the client's model: a threshold
    /// above the window is an error.
    pub handoff: HandoffOptions,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
    /// The home directory, for `~/` in permission rules; `None`: such a rule is refused.
    pub home: Option<PathBuf>,
    /// Where transcripts live; `None`: the SQLite store in `run_dir/sessions.db`.
    /// Either way the runtime wraps it in a [`PruningSessionStore`].
    pub store: Option<Arc<dyn SessionStore>>,
    /// The run's lineage and manifest in a shared database (see [`super::shared`]);
    /// `None`: `run_dir/lineage.json` and `run_dir/manifest.json` only. With it the
    /// transcripts are keyed by the run's project key, whatever path this host sees.
    pub shared_run: Option<SharedRun>,
    /// The run lock: taken when the runtime opens the run directory (the default).
    pub run_lock: RunLocking,
    /// What the project's memory and settings files add to every agent (none by
    /// default; the settings resolution fills it).
    pub conventions: Conventions,
    /// Checkpoints of the workspace before each step attempt and after each turn that
    /// may have changed files (`crate::checkpoint`), files over this many bytes left
    /// out; `None` (the library's default and `flower once`): none.
    pub checkpoints: Option<u64>,
    /// How many of a reply's calls may run at once (see `EngineConfig`).
    pub max_tool_concurrency: usize,
    /// MCP tools that may run alongside other concurrent calls.
    pub concurrent_mcp_tools: Vec<String>,
    /// The output kept of one background command, bytes.
    pub background_output_cap: u64,
}

impl RuntimeOptions {
    /// The library's defaults around `client` (the pruning ones are the store's,
    /// [`PruneOptions::new`]).
    pub fn new(client: Arc<dyn ModelClient>) -> Self {
        let prune = PruneOptions::new(PathBuf::new());
        RuntimeOptions {
            trim: prune.trim,
            ephemeral: prune.ephemeral,
            keep_denials: prune.keep_denials,
            cache_ttl: Some(CacheWindow::DEFAULT_TTL),
            thinking_budget: None,
            effort: None,
            web: crate::model::WebLimits::default(),
            client,
            resilience: Resilience::default(),
            subagents: Vec::new(),
            processes: ProcessGroups::new(),
            sandbox: Default::default(),
            handoff: HandoffOptions::default(),
            max_tokens: crate::engine::DEFAULT_MAX_TOKENS,
            home: None,
            store: None,
            shared_run: None,
            run_lock: RunLocking::Take,
            conventions: Conventions::default(),
            checkpoints: None,
            max_tool_concurrency: crate::engine::DEFAULT_MAX_TOOL_CONCURRENCY,
            concurrent_mcp_tools: Vec::new(),
            background_output_cap: crate::tools::background::DEFAULT_OUTPUT_CAP,
        }
    }
}

/// What a front end (the CLI, the Python package, a library user) hands a runtime:
/// its callbacks only. Every value a runtime is set up by is in [`RuntimeOptions`],
/// which the settings build; a front end renders and answers, it does not configure.
#[derive(Clone)]
pub struct FrontEnd {
    /// Where the run reports what happens (the default discards it).
    pub events: EventSink,
    /// Who answers AskUser and `ask` rules; `None`: nobody (such a call is refused).
    pub asker: Option<Arc<dyn Asker>>,
    /// The Ctrl-C of this front end: the running turn stops at it.
    pub interrupt: Interrupt,
    /// What to ask the person after an interrupt; `None`: the turn just ends.
    pub on_interrupt: Option<InterruptPrompt>,
}

impl Default for FrontEnd {
    fn default() -> Self {
        FrontEnd {
            events: crate::events::discard(),
            asker: None,
            interrupt: Interrupt::new(),
            on_interrupt: None,
        }
    }
}

/// What [`Runtime::run_agent`] returns.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    pub result: StepResult,
    /// Token usage summed over every attempt (sub-agents included).
    pub usage: Usage,
    pub permission_denials: Vec<Denial>,
    /// The API's `stop_reason` of the last reply of the last attempt.
    pub stop_reason: Option<String>,
}

/// One step attempt's state, carried across its engine runs, retries and handoffs.
pub(super) struct Attempt {
    pub(super) result: StepResult,
    pub(super) usage: Usage,
    pub(super) denials: Vec<Denial>,
    pub(super) stop_reason: Option<String>,
    pub(super) start: SessionStart,
    pub(super) prompt: String,
    /// The step's own prompt, quoted by a mechanical handoff document.
    pub(super) step_prompt: String,
    /// The handoff threshold; `None` when this attempt does not (or no longer) hands off.
    pub(super) limit: Option<u64>,
    pub(super) generation: u32,
    /// The session that is handing over, until its successor's first prompt is stored.
    pub(super) retiring: Option<String>,
    /// 1-based count of tries (the first run and each retry) of the main session.
    pub(super) number: u32,
    /// Retries of its sub-agents (each resumed its own session): the row's `attempts`
    /// counts them too.
    pub(super) subagent_retries: u32,
}

impl Attempt {
    fn new(result: StepResult, prompt: &str, start: SessionStart) -> Attempt {
        Attempt {
            result,
            usage: Usage::default(),
            denials: Vec::new(),
            stop_reason: None,
            start,
            prompt: prompt.to_string(),
            step_prompt: prompt.to_string(),
            limit: None,
            generation: 1,
            retiring: None,
            number: 1,
            subagent_retries: 0,
        }
    }

    fn outcome(self) -> AgentOutcome {
        AgentOutcome {
            result: self.result,
            usage: self.usage,
            permission_denials: self.denials,
            stop_reason: self.stop_reason,
        }
    }
}

/// The step attempt in flight, for [`Runtime::rescue`].
type InFlight = Option<StepResult>;

pub struct Runtime {
    pub(super) engine: Engine,
    lineage: Arc<Mutex<Lineage>>,
    pub(super) manifest: Arc<Mutex<Manifest>>,
    events: EventSink,
    on_session: Mutex<Option<SessionHook>>,
    in_flight: Arc<Mutex<InFlight>>,
    /// The retry decision, shared with the sub-agents' recovery.
    retrier: Arc<Retrier>,
    pub(super) warnings: Mutex<Vec<String>>,
    /// Sessions this runtime appends to, locked until it is dropped.
    sessions: Arc<SessionLocks>,
    /// Held for the runtime's whole life; `None` with [`RunLocking::Unlocked`].
    _run_lock: Option<RunLock>,
    pub(super) handoff: HandoffOptions,
    watch: Option<Arc<Watch>>,
}

impl Runtime {
    /// The runtime of `workspace` with `run_dir` (relative to the current directory,
    /// not to the workspace), no callbacks ([`FrontEnd::default`]). Refuses, before
    /// anything is created on disk, a handoff threshold above the model's window.
    pub fn with_options(
        workspace: impl AsRef<Path>,
        run_dir: impl AsRef<Path>,
        options: RuntimeOptions,
    ) -> Result<Self, RuntimeError> {
        Runtime::with_front_end(workspace, run_dir, options, FrontEnd::default())
    }

    /// [`Runtime::with_options`], reporting to and asking through `front`.
    // Long because the parts are built in the order the run needs (the lock before the
    // store is opened, the store before the engine), each failure its own error.
    pub fn with_front_end(
        workspace: impl AsRef<Path>,
        run_dir: impl AsRef<Path>,
        options: RuntimeOptions,
        front: FrontEnd,
    ) -> Result<Self, RuntimeError> {
        let workspace = canonical_workspace(workspace.as_ref())?;
        let client = options.client;
        let context = options.handoff.context_for(client.default_model())?;
        let run_dir = prepare_run_dir(run_dir.as_ref())?;
        // Before the store is opened or anything read: a second runtime touches nothing.
        let run_lock = options.run_lock.resolve(&run_dir).map_err(Held::run_dir)?;
        let raw_store: Arc<dyn SessionStore> = match options.store {
            Some(store) => store,
            None => Arc::new(SqliteSessionStore::open(
                &RunDir::new(&run_dir).sessions_db(),
            )?),
        };
        let mut prune = PruneOptions::new(RunDir::new(&run_dir).trimmed());
        prune.trim = options.trim;
        prune.ephemeral = options.ephemeral;
        prune.keep_denials = options.keep_denials;
        prune.cache = options.cache_ttl.map(CacheWindow::new);
        let store = Arc::new(PruningSessionStore::new(raw_store.clone(), prune));
        let mut warnings = Vec::new();
        let watch = match options.checkpoints {
            Some(max_file_bytes) => match Checkpoints::open(&workspace, &run_dir, max_file_bytes) {
                Ok(checkpoints) => Some(Watch::new(checkpoints, front.events.clone())),
                Err(e) => {
                    warnings.push(format!("检查点不可用:{}", crate::error::chain(&e)));
                    None
                }
            },
            None => None,
        };
        let max_tokens = options.max_tokens;
        let project = match &options.shared_run {
            Some(shared) => shared.project_key().to_string(),
            None => project_key(&workspace),
        };
        let pause = crate::engine::Pause::new();
        let retrier = Arc::new(Retrier {
            resilience: options.resilience,
            events: front.events.clone(),
            model: client.base_url().map(resilience::endpoint_from),
            store: raw_store
                .endpoint()
                .map(|(host, port)| resilience::Endpoint { host, port }),
            outages: Mutex::new(Vec::new()),
            interrupt: front.interrupt.clone(),
            pause: pause.clone(),
            outage_wait: tokio::sync::Mutex::new(()),
            outages_waited: std::sync::atomic::AtomicU64::new(0),
        });
        let in_flight = Arc::new(Mutex::new(None));
        let recovery = SubagentRecovery {
            retrier: retrier.clone(),
            in_flight: Arc::clone(&in_flight),
        };
        let engine = Engine::new(EngineConfig {
            model: client,
            store: store.clone(),
            project_key: project,
            workspace: workspace.clone(),
            run_dir: run_dir.clone(),
            events: live_row(
                match &watch {
                    Some(watch) => watch.sink(front.events.clone()),
                    None => front.events.clone(),
                },
                Arc::clone(&in_flight),
            ),
            max_tokens,
            thinking_budget: options.thinking_budget,
            effort: options.effort,
            web: options.web,
            subagents: options.subagents,
            asker: front.asker,
            interrupt: front.interrupt,
            on_interrupt: front.on_interrupt,
            processes: options.processes,
            sandbox: options.sandbox,
            home: options.home,
            conventions: options.conventions,
            recovery: Some(Arc::new(recovery)),
            max_tool_concurrency: options.max_tool_concurrency,
            concurrent_mcp_tools: options.concurrent_mcp_tools,
            pause,
            background_output_cap: options.background_output_cap,
        });
        // What a flower killed without unwinding left running in the background (a
        // record whose flower still runs, or may, is another process's: left alone).
        warnings.extend(engine.background().sweep_leftovers().warning());
        let mut lineage = match options.shared_run.clone() {
            Some(shared) => {
                Lineage::load_shared(&run_dir, &workspace, shared, |id| raw_store.has_session(id))
            }
            None => Lineage::try_load(&run_dir, &workspace, |id| raw_store.has_session(id)),
        }
        .map_err(|source| RuntimeError::LineageCheck {
            path: RunDir::new(&run_dir).lineage(),
            source,
        })?;
        // The run's writer keeps an unreadable lineage.json before replacing it; in
        // silence, as the spec's fresh start is (`flower state` and `-v` say why).
        if run_lock.is_some() {
            let _ = lineage.keep_unreadable();
        }
        let sessions = Arc::new(SessionLocks::with_store(&run_dir, raw_store.clone()));
        if run_lock.is_some() {
            // The run's sessions are this run's while it lives: nobody resumes or forks
            // one from outside, and none is still being appended to from outside.
            for id in lineage.steps().values() {
                sessions.claim(id).map_err(|e| Held::session(id, e))?;
            }
        }
        let manifest = match options.shared_run {
            Some(shared) => Manifest::shared(&run_dir, new_run_id(), shared),
            None => Manifest::new(&run_dir, new_run_id()),
        }
        .with_context(context);
        let writer = run_lock.is_some();
        let runtime = Runtime {
            engine,
            lineage: Arc::new(Mutex::new(lineage)),
            manifest: Arc::new(Mutex::new(manifest)),
            events: front.events,
            on_session: Mutex::new(None),
            in_flight,
            retrier,
            warnings: Mutex::new(warnings),
            sessions,
            _run_lock: run_lock,
            handoff: options.handoff,
            watch,
        };
        // A rewind a kill interrupted is finished before anything works on the run.
        if let (true, Err(e)) = (writer, runtime.finish_rewind()) {
            let message = format!("没能做完上次被打断的回退:{}", crate::error::chain(&e));
            lock(&runtime.warnings).push(message);
        }
        Ok(runtime)
    }

    /// Takes the exclusive lock on session `id` (kept until the runtime is dropped), so
    /// that nobody else appends to it or forks it meanwhile. [`Runtime::run_agent`] does
    /// this itself; a caller claims first to refuse early, before any output.
    pub fn claim_session(&self, id: &str) -> Result<(), RuntimeError> {
        self.sessions
            .claim(id)
            .map_err(|e| Held::session(id, e).into())
    }

    /// The workspace's checkpoints, when this runtime takes them
    /// ([`RuntimeOptions::checkpoints`]).
    pub fn checkpoints(&self) -> Option<&Checkpoints> {
        self.watch.as_ref().map(|watch| watch.checkpoints())
    }

    /// The lineage, as loaded (and validated) when this runtime was created.
    pub fn lineage(&self) -> MutexGuard<'_, Lineage> {
        lock(&self.lineage)
    }

    /// The session store the runtime writes through (pruning over the run's store):
    /// for a front end's look at transcripts (`has_session`).
    pub fn store(&self) -> &Arc<PruningSessionStore> {
        self.engine.store()
    }

    /// The home directory `~/` permission rules mean ([`RuntimeOptions::home`]).
    pub fn home(&self) -> Option<&Path> {
        self.engine.config().home.as_deref()
    }

    /// The running shell commands of this runtime's agents.
    pub fn processes(&self) -> &ProcessGroups {
        &self.engine.config().processes
    }

    /// Counts this process as one more wake of the run (lineage's `woke`) and returns
    /// its number (1 for the first run); every manifest row it writes from now on
    /// records it, so `flower log` numbers wakes as the banner does.
    pub fn wake(&self) -> u64 {
        let woke = lock(&self.lineage).wake();
        lock(&self.manifest).set_woke(woke);
        woke
    }

    /// A shareable handle on the lineage, for hooks that outlive a borrow.
    pub fn lineage_handle(&self) -> SharedLineage {
        SharedLineage(self.lineage.clone())
    }

    /// Warnings collected so far (bad `FLOWER_*` values, a manifest moved aside); drained.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.warnings))
    }

    /// Sets (or, with `None`, removes) the hook that gets each step's session id the
    /// moment it exists. It covers only `run_step`; remove it before any gate, so a judge
    /// using the same runtime never lands in the step's lineage.
    pub fn set_on_session(&self, hook: Option<SessionHook>) {
        *lock(&self.on_session) = hook;
    }

    /// The in-flight step's row, marked `killed-by-signal`, written to the manifest.
    /// Called from the SIGTERM/SIGHUP handler before the process dies.
    pub fn rescue(&self) {
        self.rescuer().rescue();
    }

    /// A handle that does [`Runtime::rescue`]'s work from elsewhere (a signal task)
    /// without borrowing the runtime.
    pub fn rescuer(&self) -> Rescuer {
        Rescuer {
            in_flight: self.in_flight.clone(),
            manifest: self.manifest.clone(),
        }
    }

    /// Closes the runtime: its store connection is closed. Everything it wrote is
    /// already on disk (each entry and row is durable when written), so dropping the
    /// runtime does the same; this names the moment.
    pub fn close(self) {}

    /// Runs one step attempt: the agent's session from `start`, with `prompt`, retried
    /// per [`Resilience`], recorded in the manifest under `step`. No handoff: the judge
    /// and other one-off sessions run this way (see [`Runtime::run_step_handing_off`]).
    pub async fn run_step(
        &self,
        step: &str,
        spec: &AgentSpec,
        prompt: &str,
        start: SessionStart,
    ) -> StepResult {
        let outcome = self.run_attempt(step, None, spec, prompt, start).await;
        self.record(&outcome.result);
        outcome.result
    }

    /// [`Runtime::run_step`] for a step's main session, which hands off (换代) when its
    /// context reaches the threshold of [`RuntimeOptions::handoff`]: at the next clean
    /// boundary it is asked to write `notes/交接/<handoff_step>-<generation>.md` (gated,
    /// asked at most [`handoff::MAX_ASKS`] times, else a mechanical document), and a
    /// successor session with the same spec continues the attempt from that document.
    /// When the window is hit anyway (or a wake finds the session already over the
    /// threshold) the document is mechanical and the session is not asked anything.
    ///
    /// The on-session hook sees the successor's id once its first prompt is stored; the
    /// retired ids go into the row's `retired[]`, and the row is written at that moment.
    /// `handoff_step` is the plain step name (`row_name` may carry `#retry`/`#round`).
    pub async fn run_step_handing_off(
        &self,
        row_name: &str,
        handoff_step: &str,
        spec: &AgentSpec,
        prompt: &str,
        start: SessionStart,
    ) -> StepResult {
        let step = self.handoff.enabled.then_some(handoff_step);
        let outcome = self.run_attempt(row_name, step, spec, prompt, start).await;
        self.record(&outcome.result);
        outcome.result
    }

    /// Like [`Runtime::run_step`] but records nothing in the manifest (`flower once`),
    /// and also returns the run's usage and permission denials.
    pub async fn run_agent(
        &self,
        step: &str,
        spec: &AgentSpec,
        prompt: &str,
        start: SessionStart,
    ) -> AgentOutcome {
        self.run_attempt(step, None, spec, prompt, start).await
    }

    async fn run_attempt(
        &self,
        step: &str,
        handoff_step: Option<&str>,
        spec: &AgentSpec,
        prompt: &str,
        start: SessionStart,
    ) -> AgentOutcome {
        let mut result = StepResult::started(step);
        result.cost_usd = Some(0.0);
        result.resumed = matches!(start, SessionStart::Resume(_));
        // Session locks (see `lock`): refused before anything is read or sent.
        let lease = match self.sessions.begin(&start) {
            Ok(lease) => lease,
            Err(e) => {
                result.error = Some(e.to_string());
                result.errors.push(e.to_string().into());
                result.finish();
                return Attempt::new(result, prompt, start).outcome();
            }
        };
        self.set_in_flight(Some(result.clone()));
        if let Some(watch) = &self.watch {
            watch.before_attempt(step);
        }
        let mut attempt = Attempt::new(result, prompt, start);
        attempt.limit = handoff_step.map(|_| self.handoff_limit(spec));
        if let (SessionStart::Resume(id), Some(_)) = (&attempt.start, handoff_step) {
            attempt.generation = self.generation_of(id);
        }
        if let Some(name) = handoff_step {
            self.hand_off_on_wake(name, spec, &mut attempt).await;
        }
        loop {
            let on_session = self.session_hook(lease.clone(), attempt.retiring.clone());
            let run = self
                .engine
                .run(RunRequest {
                    spec,
                    prompt: attempt.prompt.clone(),
                    start: attempt.start.clone(),
                    on_session: Some(&on_session),
                    retry: attempt.number > 1,
                    context_limit: attempt.limit,
                    // A successor's first run starts from the handoff document.
                    origin: if attempt.retiring.is_some() {
                        Origin::Successor
                    } else {
                        Origin::Step
                    },
                })
                .await;
            self.fold_run(&mut attempt, &run);
            if let Some(name) = handoff_step
                && !run.session_id.is_empty()
                && let Some(reason) = handoff_needed(&run)
            {
                self.hand_off_when_full(name, spec, &run, reason, &mut attempt)
                    .await;
                continue;
            }
            let Err(run_error) = &run.outcome else {
                attempt.result.ok = true;
                attempt.result.error = None;
                break;
            };
            if !self.retry_after(run_error, &mut attempt).await {
                break;
            }
        }
        if let Some(watch) = &self.watch {
            watch.after_attempt();
        }
        attempt.result.finish();
        self.set_in_flight(None);
        attempt.outcome()
    }

    /// The on-session hook of one engine run: it keeps the in-flight row current and,
    /// once a successor's first prompt is stored, retires `handing_over` in the manifest.
    fn session_hook(
        &self,
        lease: Arc<Lease>,
        handing_over: Option<String>,
    ) -> impl Fn(&str) + Send + Sync + use<> {
        let in_flight = self.in_flight.clone();
        let manifest = self.manifest.clone();
        let hook = lock(&self.on_session).clone();
        move |id: &str| {
            lease.started(id);
            let mut row = None;
            if let Some(result) = lock(&in_flight).as_mut() {
                if let Some(old) = &handing_over
                    && old != id
                    && !result.retired.contains(old)
                {
                    result.retired.push(old.clone());
                    result.context = 0;
                    row = Some(result.clone());
                }
                result.session_id = Some(id.to_string());
                if let Some(row) = row.as_mut() {
                    row.session_id = Some(id.to_string());
                    row.finish();
                }
            }
            // The row goes to disk before lineage names the successor: whoever finds
            // the successor in lineage can count its generation from the manifest.
            if let Some(row) = row {
                let _ = lock(&manifest).record(&row);
            }
            if let Some(hook) = &hook {
                hook(id);
            }
        }
    }

    /// Folds one engine run into the attempt and publishes it as the in-flight row.
    fn fold_run(&self, attempt: &mut Attempt, run: &RunResult) {
        // The hook changed the in-flight copy; the attempt's own result learns it here.
        if !run.session_id.is_empty()
            && let Some(old) = attempt.retiring.take_if(|old| *old != run.session_id)
            && !attempt.result.retired.contains(&old)
        {
            attempt.result.retired.push(old);
        }
        absorb(&mut attempt.result, run);
        attempt.usage.add(&run.usage);
        attempt
            .denials
            .extend(run.permission_denials.iter().cloned());
        if run.stop_reason.is_some() {
            attempt.stop_reason = run.stop_reason.clone();
        }
        for retried in &run.subagent_retries {
            attempt.subagent_retries += 1;
            let error = StepError::new(retried.text.clone(), retried.kind);
            attempt.result.errors.push(error);
        }
        attempt.result.attempts = attempt.number + attempt.subagent_retries;
        attempt.result.outages.extend(self.retrier.take_outages());
        self.set_in_flight(Some(attempt.result.clone()));
    }

    /// Records a failed run's error and decides whether to retry; when it does, waits
    /// (out an outage, then the backoff) and points the attempt at the same session.
    async fn retry_after(&self, run_error: &EngineError, attempt: &mut Attempt) -> bool {
        let error = run_error.to_string();
        attempt.result.errors.push(StepError::of_run(run_error));
        attempt.result.error = Some(error.clone());
        let verdict = self.retrier.after(run_error, attempt.number, 0).await;
        attempt.result.outages.extend(self.retrier.take_outages());
        match verdict {
            Verdict::Retry(_) => {}
            Verdict::Stop(hint) => {
                // Retrying cannot help: say what the user has to fix.
                if let Some(hint) = hint {
                    attempt.result.error = Some(format!("{error}\n{hint}"));
                }
                return false;
            }
            Verdict::GaveUp => {
                attempt.result.errors.push("等网络等到了上限,不再等".into());
                return false;
            }
        }
        attempt.number += 1;
        // Whatever was already spent is not redone: continue the same session.
        if let Some(id) = attempt.result.session_id.clone() {
            attempt.start = SessionStart::Resume(id);
            attempt.prompt = RESUME_PROMPT.to_string();
            attempt.result.resumed = true;
        }
        true
    }

    /// Records a finished step result (used by gates for judge rows).
    /// Every row of the run's manifest (other processes' too); none when it does not read.
    pub(super) fn manifest_rows(&self) -> Vec<super::manifest::ManifestRow> {
        lock(&self.manifest).all_rows().unwrap_or_default()
    }

    pub fn record(&self, result: &StepResult) {
        let recorded = lock(&self.manifest).record(result);
        self.emit(Event::AttemptDone {
            step: result.step.clone(),
            ok: result.ok,
            error: result.error.clone(),
            attempts: result.attempts,
        });
        match recorded {
            Ok(outcome) => {
                if let Some(aside) = outcome.moved_aside {
                    lock(&self.warnings).push(format!(
                        "manifest.json 无法解析,已移到 {} 并重新开始",
                        aside.display()
                    ));
                }
            }
            Err(e) => lock(&self.warnings).push(format!("写 manifest.json 失败:{e}")),
        }
    }

    pub(super) fn set_in_flight(&self, result: Option<StepResult>) {
        *lock(&self.in_flight) = result;
    }

    /// Reports an event to the runtime's sink (the CLI renders them).
    pub fn emit(&self, event: Event) {
        (self.events)(&event);
    }
}

/// The runtime's lineage, shared with the on-session hook.
#[derive(Clone)]
pub struct SharedLineage(Arc<Mutex<Lineage>>);

impl SharedLineage {
    /// Remembers a step's session id; written to disk at once (errors swallowed).
    pub fn remember(&self, step: &str, session_id: &str) {
        lock(&self.0).remember(step, session_id);
    }
}

/// Writes the in-flight step's row on a fatal signal; see [`Runtime::rescue`].
#[derive(Clone)]
pub struct Rescuer {
    in_flight: Arc<Mutex<InFlight>>,
    manifest: Arc<Mutex<Manifest>>,
}

impl Rescuer {
    /// Writes the in-flight step's row (if any) with `error = "killed-by-signal"`.
    pub fn rescue(&self) {
        self.rescue_with("killed-by-signal");
    }

    /// [`Rescuer::rescue`] with another reason (a front end's cancellation).
    pub fn rescue_with(&self, error: &str) {
        let Some(mut result) = lock(&self.in_flight).take() else {
            return;
        };
        result.error = Some(error.into());
        result.ok = false;
        result.finish();
        // Dying anyway: a failed write has nobody left to tell.
        let _ = lock(&self.manifest).record(&result);
    }
}

/// The engine's event sink: `events`, and each finished turn of a main session kept in
/// the in-flight row (cost, turns, context), so that a row rescued on a signal says what
/// the attempt had spent and reached, not what it had when its run began.
fn live_row(events: EventSink, in_flight: Arc<Mutex<InFlight>>) -> EventSink {
    // The cost the current engine run had reported so far (its events are cumulative).
    let reported = Mutex::new(0.0_f64);
    Arc::new(move |event: &Event| {
        match event {
            Event::SessionStarted { depth: 0, .. } => *lock(&reported) = 0.0,
            Event::TurnDone {
                context,
                cost_usd,
                depth: 0,
                ..
            } => {
                if let Some(row) = lock(&in_flight).as_mut() {
                    row.num_turns += 1;
                    row.context = *context;
                    let mut reported = lock(&reported);
                    if let (Some(total), Some(cost)) = (row.cost_usd.as_mut(), *cost_usd) {
                        *total += cost - *reported;
                        *reported = cost;
                    }
                }
            }
            _ => {}
        }
        events(event);
    })
}

/// Folds one engine run into the step's result.
fn absorb(result: &mut StepResult, run: &RunResult) {
    if !run.session_id.is_empty() {
        result.session_id = Some(run.session_id.clone());
    }
    result.num_turns += run.num_turns;
    result.cost_usd = match (result.cost_usd, run.cost_usd) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    if !run.text.is_empty() {
        result.text = run.text.clone();
    }
    if run.num_turns > 0 {
        result.context = run.context;
    }
}

fn canonical_workspace(path: &Path) -> Result<PathBuf, RuntimeError> {
    let canonical = path
        .canonicalize()
        .map_err(|source| RuntimeError::Workspace {
            path: path.to_path_buf(),
            source,
        })?;
    if !canonical.is_dir() {
        return Err(RuntimeError::Workspace {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    Ok(canonical)
}

/// Creates the run directory and returns its absolute (canonical) path.
fn prepare_run_dir(path: &Path) -> Result<PathBuf, RuntimeError> {
    let run_dir_error = |source| RuntimeError::RunDir {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path).map_err(run_dir_error)?;
    path.canonicalize().map_err(run_dir_error)
}
