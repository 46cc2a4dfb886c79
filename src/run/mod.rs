//! A run's lifecycle, from settings to a runtime, in one place for every front end (the
//! CLI, the Python package): the stores, the run in a shared database, the run lock
//! (waiting or not), the database hold and what happens when it is lost, the busy-session
//! probe, `/new` archiving and the wake state. Front ends only prompt and render; every
//! refusal is a typed [`RunError`] they print in their own words.
//!
//! One call for a library user: [`Run::open`]. Phased, for a front end that talks to the
//! person in between (the CLI asks what to do before anything is created, and prints the
//! banner under the lock, before the runtime opens):
//!
//! ```text
//! Run::prepare(&settings)   client, stores, the shared run: nothing locked, nothing on disk
//!   .probe()                the read-only wake state, before the lock (is there anything?)
//!   .lock(begin, hooks)     run lock, database hold, busy sessions, `--new` archiving
//!     .wake()               the wake state, computed once, under the lock
//!     .archive()            `/new` typed at the prompt
//!     .start(subagents, front)  the runtime: the role's sub-agents, the front end's callbacks
//! ```
//!
//! Lost hold: with a shared database the run is held for the process's life; when the
//! database went away and another process took the run meanwhile, this one must stop
//! writing it. [`RunHooks::on_hold_lost`] hears it (the CLI prints its line); then, or
//! without a hook, the process ends as on SIGTERM ([`crate::continuity::signals::terminate_self`]),
//! so that whatever the front end wired for SIGTERM (the in-flight row rescued, running
//! commands stopped) runs.

use crate::continuity::handoff;
use crate::continuity::lineage::Lineage;
use crate::continuity::lock::{self, Holder, LockError, Probe, RunLock, RunLocking};
use crate::continuity::notes;
use crate::continuity::runtime::{FrontEnd, Held, Runtime, RuntimeError, RuntimeOptions};
use crate::continuity::shared::{SharedRun, SharedRunError};
use crate::continuity::wake::{Place, WakeState};
use crate::engine::{AgentSpec, SessionStart};
use crate::run_dir::RunDir;
use crate::settings::pin::{Drift, Pinned, SettingsPin};
use crate::settings::{ConfigError, Settings};
use crate::stores::postgres::hostname;
use crate::stores::{PostgresStore, SessionStore, SqliteSessionStore, StoreError};
use crate::telemetry::Telemetry;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a run held in the database is waited for before it counts as busy: a
/// process just killed on another host takes the server a moment to notice.
pub const HOLD_GRACE: Duration = Duration::from_secs(2);

/// Why a run cannot be opened. Nothing was sent to the model; nothing was written
/// unless the variant says so.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The workspace cannot be resolved (it is gone, or not readable).
    #[error(transparent)]
    Workspace(io::Error),
    #[error("打不开存储:{0}\n什么都没发给模型。")]
    OpenStore(#[source] StoreError),
    #[error("从存储里读不出这个运行:{0}\n什么都没发给模型。")]
    ReadRun(#[source] SharedRunError),
    /// A run key from the environment names a run begun in another workspace.
    #[error(transparent)]
    Foreign(SharedRunError),
    /// The run directory's lineage says the run lives in another store than the one
    /// the settings give (a PostgreSQL run opened without `--store`, a SQLite run with
    /// one, another database): `flag` is what to add to open it. Nothing was written.
    #[error("这个运行存在 {holds} 里,不在 {given}。{flag}再来。什么都没有改动。")]
    WrongStore {
        /// Where the run is: a PostgreSQL URL (no password) or the run directory's
        /// `sessions.db`.
        holds: String,
        given: String,
        /// The flags that open it: `--store URL [--run-key NAME]`, or `--store sqlite`.
        flag: String,
    },
    /// Another process, on some host, holds the run in the shared database; `waited`:
    /// it was waited for, and the wait ended without the run.
    #[error(
        "另一个 flower 正在跑运行 {run_key}({})",
        holder.as_deref().unwrap_or("不知道是谁")
    )]
    RunBusy {
        run_key: String,
        holder: Option<String>,
        waited: bool,
    },
    #[error("没能在存储里占住这个运行:{0}\n什么都没发给模型。")]
    Hold(#[source] StoreError),
    /// Another process holds the run directory (and the settings say not to wait) or
    /// a session this run would continue; or the lock failed. The runtime's own
    /// refusal of the same kind comes out as this too (not as [`RunError::Runtime`]).
    #[error(transparent)]
    Held(Held),
    /// `/new` could not move the run's files into the archive.
    #[error(transparent)]
    Archive(io::Error),
    /// The runtime could not be opened (its error is the source).
    #[error(transparent)]
    Runtime(RuntimeError),
    /// The workspace's settings files changed (or appeared, or went) since the run
    /// pinned them, and nobody said to apply them (`--accept-settings`). Nothing was
    /// sent or written.
    #[error("{}", settings_changed(.0))]
    SettingsChanged(Drift),
    /// The settings the run started with could not be pinned in the run directory.
    #[error("记不下这次运行用的设置文件({0})")]
    Pin(#[source] io::Error),
}

/// What [`RunError::SettingsChanged`] says: the changes, and how to apply them.
fn settings_changed(drift: &Drift) -> String {
    format!(
        "设置文件和这个运行上次用的不一样:\n{}\n没人确认,不采用。看过这些改动、要用它们,就加 --accept-settings 再跑一次。什么都没发给模型,什么都没有改动。",
        drift.lines().join("\n")
    )
}

impl From<RuntimeError> for RunError {
    fn from(error: RuntimeError) -> RunError {
        match error {
            RuntimeError::Held(held) => RunError::Held(held),
            other => RunError::Runtime(other),
        }
    }
}

/// What the run waits for, said before it blocks (with [`Settings::wait`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// Another process holds the run directory's lock.
    RunDir { holder: Option<Holder> },
    /// Another process, on some host, holds the run in the shared database.
    SharedRun {
        run_key: String,
        holder: Option<String>,
    },
}

/// The shared database's hold was lost and another process took the run meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldLost {
    pub run_key: String,
    /// Who took it, as it said about itself.
    pub holder: Option<String>,
}

/// Called before the run blocks waiting for another holder.
pub type OnWait = Box<dyn Fn(&Waiting) + Send + Sync>;
/// Called (on the hold's own thread) when the hold was lost to another process.
pub type OnHoldLost = Arc<dyn Fn(&HoldLost) + Send + Sync>;

/// What a front end wires into the lifecycle.
#[derive(Default)]
pub struct RunHooks {
    /// Hears what the run is about to wait for (the CLI prints `…,等它结束……`).
    pub on_wait: Option<OnWait>,
    /// Hears a lost hold, before the process ends as on SIGTERM (see the module doc).
    pub on_hold_lost: Option<OnHoldLost>,
}

/// Whether the run's history is kept (`Continue`) or archived first (`New`: `--new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Begin {
    #[default]
    Continue,
    New,
}

/// An open run: the runtime, and the wake state it was opened with.
pub struct Run {
    runtime: Runtime,
    wake: WakeState,
    at: At,
    /// The database hold, for the run's life. In a mutex (never locked) only so that a
    /// `Run` is `Sync`: a front end shares it between threads (the Python package).
    _hold: std::sync::Mutex<Option<Box<dyn Send>>>,
    /// The OpenTelemetry export, when the settings turned it on.
    telemetry: Option<Telemetry>,
}

/// Where a run is: what [`Run`], [`Opening`], [`Locked`] and [`Peek`] all know.
struct At {
    /// Canonical.
    workspace: PathBuf,
    dir: RunDir,
    /// The transcripts' store; `None`: the run directory's SQLite file.
    store: Option<Arc<dyn SessionStore>>,
    shared: Option<SharedRun>,
}

impl At {
    fn place(&self) -> Place<'_> {
        Place {
            workspace: &self.workspace,
            run_dir: self.dir.path(),
            store: self.store.as_deref(),
            shared: self.shared.as_ref(),
        }
    }
}

/// The run of `workspace` in the shared database of `store`: registered if new
/// (`register`), else only found.
fn shared_run(
    store: Option<&Arc<PostgresStore>>,
    workspace: &Path,
    settings: &Settings,
    register: bool,
) -> Result<Option<SharedRun>, RunError> {
    let Some(store) = store else { return Ok(None) };
    let name = settings.run_key();
    let found = match register {
        true => SharedRun::open(store.clone(), workspace, name),
        false => SharedRun::find(store.clone(), workspace, name),
    };
    found.map_err(|e| match e {
        e @ SharedRunError::Foreign { .. } => RunError::Foreign(e),
        e => RunError::ReadRun(e),
    })
}

impl Run {
    /// Opens the run the settings describe, continuing its history, with the library's
    /// runtime defaults and no hooks: [`Run::prepare`], [`Opening::lock`],
    /// [`Locked::start`] in one.
    pub fn open(settings: &Settings) -> Result<Run, RunError> {
        Run::prepare(settings)?
            .lock(Begin::Continue, RunHooks::default())?
            .start(Vec::new(), FrontEnd::default())
    }

    /// The first phase: the model client (a missing credential is refused here), the
    /// store (connected and checked), the run in a shared database (registered if
    /// new; a run key naming another workspace's run is refused). Nothing is locked and
    /// nothing is created in the run directory.
    pub fn prepare(settings: &Settings) -> Result<Opening, RunError> {
        let workspace = settings
            .workspace()
            .canonicalize()
            .map_err(RunError::Workspace)?;
        let mut options = settings.runtime_options()?;
        let opened = settings.open_store().map_err(RunError::OpenStore)?;
        check_store(opened.as_ref(), &workspace, settings)?;
        let shared = shared_run(opened.as_ref(), &workspace, settings, true)?;
        let store = opened.map(|store| store as Arc<dyn SessionStore>);
        options.store = store.clone();
        options.shared_run = shared.clone();
        options.checkpoints = settings
            .checkpoints()
            .then_some(settings.checkpoint_max_file_bytes());
        let telemetry = telemetry_of(settings, shared.as_ref(), &workspace);
        Ok(Opening {
            at: At {
                workspace,
                dir: RunDir::new(settings.run_dir()),
                store,
                shared,
            },
            wait: settings.wait(),
            options,
            pin: pinning(settings),
            accepted: settings.accept_settings(),
            telemetry,
        })
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The OpenTelemetry export, when on: a front end calls [`Telemetry::shutdown`]
    /// when the run ends (and on a signal, before the process dies).
    pub fn telemetry(&self) -> Option<&Telemetry> {
        self.telemetry.as_ref()
    }

    /// The wake state the run was opened with (computed once, under the lock).
    pub fn wake(&self) -> &WakeState {
        &self.wake
    }

    /// The workspace (canonical).
    pub fn workspace(&self) -> &Path {
        &self.at.workspace
    }

    pub fn dir(&self) -> &RunDir {
        &self.at.dir
    }

    /// The run in the shared database, if it lives in one.
    pub fn shared(&self) -> Option<&SharedRun> {
        self.at.shared.as_ref()
    }

    /// Where the run lives, for the figures a person is shown.
    pub fn place(&self) -> Place<'_> {
        self.at.place()
    }

    /// Ends the run: the runtime closes, the locks and the hold are released.
    pub fn close(self) {}
}

/// A run prepared and not locked yet (see [`Run::prepare`]).
pub struct Opening {
    at: At,
    wait: bool,
    options: RuntimeOptions,
    /// What the settings loaded from the workspace's files; `None`: no files were read
    /// (a library user's settings), nothing to pin or compare.
    pin: Option<SettingsPin>,
    /// The person said to apply changed settings files.
    accepted: bool,
    /// The OpenTelemetry export to start with the runtime, and who exports.
    telemetry: Option<(crate::telemetry::Config, crate::telemetry::Identity)>,
}

/// The OpenTelemetry export to start, when the settings turn it on, and who exports:
/// the run's key in a shared store, else the run directory.
fn telemetry_of(
    settings: &Settings,
    shared: Option<&SharedRun>,
    workspace: &Path,
) -> Option<(crate::telemetry::Config, crate::telemetry::Identity)> {
    settings.telemetry().map(|config| {
        let run_key = match shared {
            Some(run) => run.run_key().to_string(),
            None => std::path::absolute(settings.run_dir())
                .unwrap_or_else(|_| settings.run_dir().to_path_buf())
                .to_string_lossy()
                .into_owned(),
        };
        let identity = crate::telemetry::Identity {
            run_key,
            host: hostname(),
            workspace: workspace.to_path_buf(),
        };
        (config.clone(), identity)
    })
}

/// Starts the export and puts its sink in front of the front end's, so that it sees
/// every event the front end sees, before it does. An export that cannot be built is a
/// warning, not a failed run.
fn start_export(
    telemetry: Option<&(crate::telemetry::Config, crate::telemetry::Identity)>,
    run_dir: &Path,
    single: bool,
    front: FrontEnd,
) -> (Option<Telemetry>, FrontEnd) {
    let export = match telemetry {
        Some((config, identity)) => match Telemetry::start(config, identity, run_dir, single) {
            Ok(telemetry) => Some(telemetry),
            Err(e) => {
                (front.events)(&crate::events::Event::Warning {
                    message: format!("遥测没有打开:{}", crate::error::chain(&e)),
                });
                None
            }
        },
        None => None,
    };
    match &export {
        Some(telemetry) => {
            let front = FrontEnd {
                events: telemetry.sink(front.events.clone()),
                ..front
            };
            (export, front)
        }
        None => (export, front),
    }
}

/// The pin of what `settings` loaded, when they were loaded from files.
fn pinning(settings: &Settings) -> Option<SettingsPin> {
    let pin = &settings.files().pin;
    (pin.version != 0).then(|| pin.clone())
}

/// What changed in the workspace's settings files since `dir`'s pin. Without a pin,
/// a run with a history counts every file as new (its pin is gone, or it began before
/// pinning); a fresh one has nothing to compare.
fn drift_since(dir: &RunDir, now: &SettingsPin, history: bool) -> Option<Drift> {
    match SettingsPin::read(dir) {
        Pinned::Pin(pinned) => pinned.drift(now),
        Pinned::Missing if !history => None,
        Pinned::Missing | Pinned::Unreadable => SettingsPin::default().drift(now),
    }
}

impl Opening {
    /// The wake state as it is now, read-only, without the lock: for deciding whether
    /// there is anything to continue before the run directory (its lock included) is
    /// created. [`Locked::wake`] is the one to act on.
    pub fn probe(&self) -> WakeState {
        self.place().wake_state()
    }

    pub fn workspace(&self) -> &Path {
        &self.at.workspace
    }

    pub fn dir(&self) -> &RunDir {
        &self.at.dir
    }

    pub fn shared(&self) -> Option<&SharedRun> {
        self.at.shared.as_ref()
    }

    pub fn place(&self) -> Place<'_> {
        self.at.place()
    }

    /// What changed in the workspace's settings files (`.claude/settings*.json`,
    /// `.mcp.json`) since the run pinned them: read-only, before the lock. `None`:
    /// nothing, or a fresh run (which pins what is there).
    pub fn settings_drift(&self) -> Option<Drift> {
        let now = self.pin.as_ref()?;
        let state = self.probe();
        let history = state.waking || !state.steps.is_empty() || self.at.dir.lineage().exists();
        drift_since(&self.at.dir, now, history)
    }

    /// A person said to apply the changed settings files: [`Opening::lock`] pins them.
    pub fn accept_settings(&mut self) {
        self.accepted = true;
    }

    /// One run, one process: takes the run lock (waiting for another holder with
    /// [`Settings::wait`], after telling `hooks.on_wait`), then across hosts holds the
    /// run in the shared database for the process's life; refuses a run whose sessions
    /// another process appends to (unless they are about to be archived); with
    /// [`Begin::New`] archives the last run; computes the wake state.
    ///
    /// Settings files changed since the run pinned them are refused
    /// ([`RunError::SettingsChanged`]) before anything, unless accepted
    /// ([`Opening::accept_settings`], [`Settings::accept_settings`]) or `--new` (a person
    /// starts a new task); then, and on every run, what was loaded is pinned.
    pub fn lock(self, begin: Begin, hooks: RunHooks) -> Result<Locked, RunError> {
        if begin == Begin::Continue
            && !self.accepted
            && let Some(drift) = self.settings_drift()
        {
            return Err(RunError::SettingsChanged(drift));
        }
        let at = &self.at;
        // Only a run whose store opens is locked, archived (`--new`: a failure after the
        // archive would leave the notes moved and nothing started) or announced as woken.
        check_sqlite(at)?;
        // A run the database says another host holds leaves no trace here: without a
        // run lock file yet, the database is asked first (else a local holder is found
        // first, and named as the one running here).
        let database_first = at.shared.is_some() && !at.dir.run_lock().exists();
        let mut hold = match &at.shared {
            Some(shared) if database_first => Some(hold_shared(shared, self.wait, &hooks)?),
            _ => None,
        };
        let run_lock = take_run_lock(&at.dir, self.wait, &hooks)?;
        if let (Some(shared), None) = (&at.shared, &hold) {
            hold = Some(hold_shared(shared, self.wait, &hooks)?);
        }
        if begin == Begin::Continue {
            check_sessions_free(at)?;
        }
        let archived = match begin {
            Begin::New => archive(at)?,
            Begin::Continue => None,
        };
        if let Some(pin) = &self.pin {
            pin.write(&at.dir).map_err(RunError::Pin)?;
        }
        let wake = self.probe();
        Ok(Locked {
            opening: self,
            run_lock,
            hold,
            wake,
            archived,
        })
    }
}

/// A run locked and not started yet (see [`Opening::lock`]).
pub struct Locked {
    opening: Opening,
    run_lock: RunLock,
    hold: Option<Box<dyn Send>>,
    wake: WakeState,
    archived: Option<PathBuf>,
}

impl Locked {
    /// The wake state, computed once under the lock (reset by [`Locked::archive`]).
    pub fn wake(&self) -> &WakeState {
        &self.wake
    }

    /// Where [`Begin::New`] archived the last run; `None` when there was nothing.
    pub fn archived(&self) -> Option<&Path> {
        self.archived.as_deref()
    }

    pub fn workspace(&self) -> &Path {
        self.opening.workspace()
    }

    pub fn dir(&self) -> &RunDir {
        self.opening.dir()
    }

    pub fn place(&self) -> Place<'_> {
        self.opening.place()
    }

    /// `/new`: lineage (with a shared database: its steps and wakes), 需求.md, 目标.md
    /// and the handoff documents move together into `notes/archive/<YYYYmmdd-HHMMSS>/`;
    /// sessions.db is untouched. Returns where they went (`None`: there was nothing);
    /// the wake state is then that of a fresh directory.
    pub fn archive(&mut self) -> Result<Option<PathBuf>, RunError> {
        check_sqlite(&self.opening.at)?;
        let into = archive(&self.opening.at)?;
        self.wake = WakeState::default();
        Ok(into)
    }

    /// Opens the runtime over the locked run: the settings' options, the sub-agents
    /// `Task` may start (the front end's role's, [`Settings::subagents_for`]) and the
    /// front end's callbacks. A session of the run that another process holds is
    /// [`Held::Session`].
    pub fn start(self, subagents: Vec<AgentSpec>, front: FrontEnd) -> Result<Run, RunError> {
        let Locked {
            opening,
            run_lock,
            hold,
            wake,
            archived: _,
        } = self;
        let Opening {
            at,
            mut options,
            telemetry,
            ..
        } = opening;
        options.run_lock = RunLocking::Held(run_lock);
        options.subagents = subagents;
        let (export, front) = start_export(telemetry.as_ref(), at.dir.path(), false, front);
        let runtime = Runtime::with_front_end(&at.workspace, &at.dir, options, front)?;
        Ok(Run {
            runtime,
            wake,
            at,
            _hold: std::sync::Mutex::new(hold),
            telemetry: export,
        })
    }
}

/// The runtime of one session outside any workflow (`flower once`): no run lock, no
/// lineage, no manifest. A session to continue or fork (`start`) that another process
/// holds is refused before the store is opened, and a continued one stays claimed for
/// the runtime's life. With it the OpenTelemetry export, when on: the caller calls
/// [`Telemetry::shutdown`] at the end (and on a signal).
pub fn open_single(
    settings: &Settings,
    start: &SessionStart,
    subagents: Vec<AgentSpec>,
    front: FrontEnd,
) -> Result<(Runtime, Option<Telemetry>), RunError> {
    let mut options = settings.runtime_options()?;
    let dir = RunDir::new(settings.run_dir());
    if let Some(drift) = single_drift(settings) {
        return Err(RunError::SettingsChanged(drift));
    }
    if let SessionStart::Resume(id) | SessionStart::Fork(id) = start
        && let Probe::Held(holder) = lock::probe_session(&dir, id)
    {
        return Err(RunError::Held(Held::Session {
            session_id: id.clone(),
            holder,
        }));
    }
    options.store = settings
        .open_store()
        .map_err(RunError::OpenStore)?
        .map(|store| store as Arc<dyn SessionStore>);
    // Only its own session, locked in `run_agent`: a running pipeline in this run
    // directory neither blocks it nor is blocked by it.
    options.run_lock = RunLocking::Unlocked;
    options.subagents = subagents;
    let workspace = settings
        .workspace()
        .canonicalize()
        .unwrap_or_else(|_| settings.workspace().to_path_buf());
    let telemetry = telemetry_of(settings, None, &workspace);
    let (export, front) = start_export(telemetry.as_ref(), dir.path(), true, front);
    let runtime = Runtime::with_front_end(settings.workspace(), &dir, options, front)?;
    // Held from here to the end, so that the probe above cannot be overtaken.
    if let SessionStart::Resume(id) = start {
        runtime.claim_session(id)?;
    }
    Ok((runtime, export))
}

/// What changed in the workspace's settings files since the run directory's pin, for
/// a single session (`flower once`), unless the person accepted it: compared only
/// where a pipeline run pinned them (a session outside any run pins nothing).
pub fn single_drift(settings: &Settings) -> Option<Drift> {
    if settings.accept_settings() {
        return None;
    }
    pinned_drift(settings)
}

/// What changed in the workspace's settings files since the run directory's pin,
/// accepted or not (`None` without a pin): what `flower once` and `flower state -v`
/// show.
pub fn pinned_drift(settings: &Settings) -> Option<Drift> {
    let now = pinning(settings)?;
    drift_since(&RunDir::new(settings.run_dir()), &now, false)
}

/// A run looked at without touching it (`flower state`): its store and, with a shared
/// database, the run there if it is registered (a run key naming another workspace's
/// run is refused). Creates, writes and waits for nothing.
pub struct Peek {
    at: At,
}

impl Peek {
    pub fn open(settings: &Settings) -> Result<Peek, RunError> {
        let workspace = settings
            .workspace()
            .canonicalize()
            .unwrap_or_else(|_| settings.workspace().to_path_buf());
        let opened = settings.open_store().map_err(RunError::OpenStore)?;
        check_store(opened.as_ref(), &workspace, settings)?;
        let shared = shared_run(opened.as_ref(), &workspace, settings, false)?;
        Ok(Peek {
            at: At {
                workspace,
                dir: RunDir::new(settings.run_dir()),
                store: opened.map(|store| store as Arc<dyn SessionStore>),
                shared,
            },
        })
    }

    pub fn place(&self) -> Place<'_> {
        self.at.place()
    }

    /// The run in the shared database, when there is one.
    pub fn shared(&self) -> Option<&SharedRun> {
        self.at.shared.as_ref()
    }

    /// The transcripts' store, when it is not the run directory's SQLite file.
    pub fn store(&self) -> Option<&Arc<dyn SessionStore>> {
        self.at.store.as_ref()
    }

    /// Whether a process runs here now, and who (asked without taking the lock).
    pub fn running(&self) -> Probe {
        lock::probe_run(&self.at.dir)
    }
}

/// Refuses a run that the run directory's lineage says lives in another store than the
/// one `settings` give ([`RunError::WrongStore`]), before anything is written: without a
/// store, a lineage that names one; with one that does not know this run yet, a lineage
/// of a run kept in `sessions.db` or in another database. A run the given database
/// knows is its run (the database is the truth, the files its mirrors).
fn check_store(
    store: Option<&Arc<PostgresStore>>,
    workspace: &Path,
    settings: &Settings,
) -> Result<(), RunError> {
    let dir = RunDir::new(settings.run_dir());
    let Some(mirror) = Lineage::read(&dir, workspace) else {
        return Ok(());
    };
    let wrong = |holds: String, given: String, flag: String| {
        Err(RunError::WrongStore { holds, given, flag })
    };
    let sqlite = || format!("{}", dir.sessions_db().display());
    let flags_for = |url: &str, name: Option<&str>| match name {
        Some(name) => {
            format!("加上 --store {url} --run-key {name}(或设 FLOWER_STORE、FLOWER_RUN_KEY)")
        }
        None => format!("加上 --store {url}(或设 FLOWER_STORE)"),
    };
    let Some(store) = store else {
        return match &mirror.store {
            Some(url) => wrong(
                url.clone(),
                sqlite(),
                flags_for(url, mirror.run_key.as_deref()),
            ),
            None => Ok(()),
        };
    };
    let given = store.url().to_string();
    if shared_run(Some(store), workspace, settings, false)?.is_some() {
        return Ok(());
    }
    let has_run = mirror.woke > 0 || !mirror.steps.is_empty();
    let given_name = settings.run_key().as_ref().map(|n| n.name.as_str());
    match &mirror.store {
        None if has_run && dir.sessions_db().exists() => wrong(
            sqlite(),
            given,
            "改用 --store sqlite(或设 FLOWER_STORE=sqlite)".to_string(),
        ),
        Some(url) if *url != given || mirror.run_key.as_deref() != given_name => {
            let holds = match &mirror.run_key {
                Some(name) => format!("{url}(运行 {name})"),
                None => url.clone(),
            };
            wrong(
                holds,
                given,
                flags_for(url, mirror.run_key.as_deref()).replace("加上", "改用"),
            )
        }
        _ => Ok(()),
    }
}

/// The run lock of `dir`; with `wait`, waits (after saying so) for another holder.
fn take_run_lock(dir: &RunDir, wait: bool, hooks: &RunHooks) -> Result<RunLock, RunError> {
    match RunLock::acquire(dir) {
        Ok(lock) => Ok(lock),
        Err(LockError::Held { holder, .. }) if wait => {
            if let Some(on_wait) = &hooks.on_wait {
                on_wait(&Waiting::RunDir { holder });
            }
            RunLock::wait(dir).map_err(|e| RunError::Held(Held::Lock(e)))
        }
        Err(e) => Err(RunError::Held(Held::run_dir(e))),
    }
}

/// Holds the shared run for this process; another holder (on any host) is waited for
/// [`HOLD_GRACE`], or with `wait` for ever.
fn hold_shared(run: &SharedRun, wait: bool, hooks: &RunHooks) -> Result<Box<dyn Send>, RunError> {
    let me = format!(
        "{} pid {},{} 起",
        hostname(),
        std::process::id(),
        chrono::Local::now().format("%H:%M")
    );
    let busy = |holder, waited| RunError::RunBusy {
        run_key: run.run_key().to_string(),
        holder,
        waited,
    };
    let lost = || on_lost(run, hooks.on_hold_lost.clone());
    match run
        .hold(&me, Some(HOLD_GRACE), lost())
        .map_err(RunError::Hold)?
    {
        Ok(guard) => Ok(guard),
        Err(holder) if wait => {
            if let Some(on_wait) = &hooks.on_wait {
                on_wait(&Waiting::SharedRun {
                    run_key: run.run_key().to_string(),
                    holder,
                });
            }
            run.hold(&me, None, lost())
                .map_err(RunError::Hold)?
                .map_err(|holder| busy(holder, true))
        }
        Err(holder) => Err(busy(holder, false)),
    }
}

/// What a run does when its hold went with the database and another process took the
/// run meanwhile: tells the front end, then stops as on SIGTERM, so that two processes
/// never go on writing one run.
fn on_lost(run: &SharedRun, hook: Option<OnHoldLost>) -> crate::stores::postgres::OnLeaseLost {
    let run_key = run.run_key().to_string();
    Box::new(move |holder: Option<String>| {
        if let Some(hook) = &hook {
            hook(&HoldLost { run_key, holder });
        }
        crate::continuity::signals::terminate_self();
    })
}

/// A session of this run that someone else appends to (`flower once --resume`): refused
/// before anything is shown. The runtime claims them for real when it opens.
fn check_sessions_free(at: &At) -> Result<(), RunError> {
    let steps = match &at.shared {
        Some(shared) => shared.lineage().ok().map(|(_, steps)| steps),
        None => Lineage::read(&at.dir, &at.workspace).map(|file| file.steps),
    };
    for id in steps.into_iter().flat_map(|steps| steps.into_values()) {
        if let Probe::Held(holder) = lock::probe_session(&at.dir, &id) {
            return Err(RunError::Held(Held::Session {
                session_id: id,
                holder,
            }));
        }
    }
    Ok(())
}

/// The run directory's `sessions.db` (without another store), if there is one, opens:
/// read-only, touching nothing. What the runtime would meet later, found before anything
/// moves.
fn check_sqlite(at: &At) -> Result<(), RunError> {
    if at.store.is_some() {
        return Ok(());
    }
    match SqliteSessionStore::open_read_only(&at.dir.sessions_db()) {
        Ok(_) => Ok(()),
        Err(e) => Err(RunError::OpenStore(e)),
    }
}

/// Moves the run's lineage and notes into `notes/archive/<stamp>/` (see
/// [`Locked::archive`]); `None` when there is nothing to archive.
fn archive(at: &At) -> Result<Option<PathBuf>, RunError> {
    let (workspace, dir, shared) = (at.workspace.as_path(), &at.dir, at.shared.as_ref());
    let extra = [
        notes::brief_path(workspace),
        notes::goal_path(workspace),
        handoff::handoff_dir(workspace),
        // What a wake said and the pipeline had not finished with belongs to this task.
        dir.said(),
    ];
    if shared.is_none() && !dir.lineage().exists() && !extra.iter().any(|p| p.exists()) {
        return Ok(None);
    }
    let archive_dir = workspace.join(notes::NOTES_DIR).join("archive");
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let mut into = archive_dir.join(&stamp);
    let mut n = 1;
    while into.exists() {
        n += 1;
        into = archive_dir.join(format!("{stamp}-{n}"));
    }
    let mut lineage = match shared {
        Some(shared) => Lineage::load_shared(dir, workspace, shared.clone(), |_| Ok(true))
            .map_err(|e| RunError::Archive(io::Error::other(e)))?,
        None => Lineage::load(dir, workspace, |_| true),
    };
    lineage.archive(&into, &extra).map_err(RunError::Archive)?;
    Ok(Some(into))
}
