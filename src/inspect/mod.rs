//! The read-only model of a run, for `flower log`, `flower show` and `flower report`:
//! the attempts of `manifest.json` in time order, the lineage, the sessions in
//! `sessions.db` and, per main session, its turn series (context, usage, cost per
//! turn) with the events a person wants to see on a curve (wakes, retries, outages,
//! handoffs).
//!
//! Nothing here writes one byte: the database is opened with
//! [`SqliteSessionStore::open_read_only`], the JSON files are only read. Whatever does
//! not fit (a corrupt manifest, a lineage naming a session that is gone) is reported as
//! an [`InspectError`] or kept as a marked gap, never a panic.

mod series;
mod subagents;
pub use series::session_of;
use series::{AssistantFacts, series};
pub use subagents::SubagentSpan;

use crate::continuity::attempt::AttemptName;
use crate::continuity::lineage::LineageFile;
use crate::continuity::manifest::{self, ManifestError, ManifestRow};
use crate::model::Usage;
use crate::run_dir::RunDir;
use crate::stores::prune::{self, PruneOptions};
use crate::stores::summary::iso_to_epoch_ms;
use crate::stores::{SessionKey, SessionStore, SqliteSessionStore, StoreError, project_key};
use crate::transcript::{Block, Content, Entry};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The context window assumed for a session whose model is unknown.
pub const DEFAULT_WINDOW_TOKENS: u64 = crate::continuity::handoff::DEFAULT_WINDOW;

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{} 不存在:这里还没有跑过 flower(或用 -r 指定运行目录)", path.display())]
    NoRunDir { path: PathBuf },
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("会话 {id} 在 sessions.db 里不存在")]
    UnknownSession { id: String },
    /// `known`: the step names this run knows (lineage's, then the manifest's attempts).
    #[error(
        "步骤 {step} 在 lineage.json 里没有记录,也不是已知的会话 id。{}",
        known_steps(known)
    )]
    UnknownStep { step: String, known: Vec<String> },
    #[error("lineage.json 里 {step} 指向的会话 {id} 已不在 sessions.db 里")]
    GoneSession { step: String, id: String },
    #[error("还没有任何步骤跑过(manifest.json 和 lineage.json 都是空的)")]
    NothingRun,
}

/// `能看的步骤:确认需求、设定目标、干活 …`, or that there is none yet.
fn known_steps(known: &[String]) -> String {
    match known.is_empty() {
        true => "这个运行还没有记下任何步骤(flower log 看它跑了什么)".into(),
        false => format!("能看的步骤:{}(flower log 列出每一次尝试)", known.join("、")),
    }
}

/// How an attempt name relates to its step (the four forms of a manifest `step`), as
/// `flower log --json` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "n", rename_all = "snake_case")]
pub enum AttemptKind {
    /// `name`
    First,
    /// `name#retry<N>`
    Retry(u32),
    /// `name#round<N>`
    Round(u32),
    /// `name·判定#<N>`
    Judge(u32),
}

/// Splits an attempt name into the plain step and its kind (through
/// [`AttemptName`], the one owner of the four forms). A name that fits no form is a
/// plain step.
pub fn parse_step_name(name: &str) -> (String, AttemptKind) {
    use crate::continuity::attempt::AttemptKind as K;
    let parsed = AttemptName::parse(name);
    let kind = match parsed.kind() {
        K::First => AttemptKind::First,
        K::Retry(n) => AttemptKind::Retry(n),
        K::Round(n) => AttemptKind::Round(n),
        K::Judge(n) => AttemptKind::Judge(n),
    };
    (parsed.step().to_owned(), kind)
}

/// One manifest row, read leniently: a missing or mistyped field reads as empty.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    pub step: String,
    /// The plain step this attempt belongs to.
    pub base: String,
    pub kind: AttemptKind,
    pub session_id: Option<String>,
    pub ok: bool,
    pub error: Option<String>,
    pub errors: Vec<String>,
    pub cost_usd: Option<f64>,
    pub num_turns: u64,
    pub started_at: String,
    pub ended_at: String,
    pub duration_s: f64,
    pub attempts: u64,
    pub resumed: bool,
    pub retired: Vec<String>,
    pub context: u64,
    /// The process (run id) that wrote the row.
    pub run: String,
    /// The context window the run used, tokens (rows of an older flower: `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The handoff threshold the run used, tokens (`None`: not recorded, or the run
    /// did not hand off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_threshold: Option<u64>,
    /// The first row of a later process: the run was woken here.
    pub wake: bool,
    /// Which wake of the run wrote the row, as the banner numbers them (1 for the first
    /// run): recorded in the row, else counted from the processes before it.
    pub woke: u64,
    /// Outages the attempt waited out (the API's or the database's).
    pub outages: Vec<crate::continuity::manifest::Outage>,
    /// The model requests the step made (see [`requests_of`]): what `flower log`'s
    /// and the report's 请求 column show.
    pub requests: u64,
    /// Which task of the directory the row belongs to (1 for the first; `flower --new`
    /// or a fresh start begins the next): a row of a new process that recorded wake 1
    /// after earlier rows begins a task.
    pub task: u64,
    /// `started_at` in epoch milliseconds, when it parses.
    #[serde(skip)]
    pub started_ms: Option<i64>,
    #[serde(skip)]
    pub ended_ms: Option<i64>,
}

/// The model requests of a step's own sessions: one per reply, and the failed one that
/// ended each failed try (`attempts` counts the tries, not the requests). A sub-agent's
/// requests are its own (see [`Totals::subagent_requests`]).
fn requests_of(num_turns: u64, attempts: u64, ok: bool, errors: usize) -> u64 {
    let failed_tries = attempts.saturating_sub(u64::from(ok));
    num_turns.saturating_add(failed_tries.max(errors as u64))
}

impl Attempt {
    /// The sessions of the step in order of succession: those it handed over from
    /// (换代), then the one it ended in, which is the one lineage holds.
    pub fn chain(&self) -> Vec<&str> {
        let mut chain: Vec<&str> = self.retired.iter().map(String::as_str).collect();
        if let Some(id) = self.session_id.as_deref()
            && chain.last() != Some(&id)
        {
            chain.push(id);
        }
        chain
    }

    /// The attempt a manifest row records. A row without a step name shows as `?`; an
    /// empty session id as none.
    fn from_row(row: &ManifestRow) -> Attempt {
        let r = &row.result;
        let step = if r.step.is_empty() {
            "?".to_owned()
        } else {
            r.step.clone()
        };
        let (base, kind) = parse_step_name(&step);
        Attempt {
            base,
            kind,
            session_id: r.session_id.clone().filter(|id| !id.is_empty()),
            ok: r.ok,
            error: r.error.clone(),
            errors: r.errors.iter().map(|e| e.text.clone()).collect(),
            cost_usd: r.cost_usd,
            num_turns: u64::from(r.num_turns),
            duration_s: row.duration_s,
            attempts: u64::from(r.attempts),
            resumed: r.resumed,
            retired: r.retired.clone(),
            context: r.context,
            run: row.run.clone(),
            context_window: row.context.map(|c| c.window),
            handoff_threshold: row.context.and_then(|c| c.handoff_threshold),
            wake: false,
            woke: row.woke.unwrap_or_default(),
            requests: requests_of(
                u64::from(r.num_turns),
                u64::from(r.attempts),
                r.ok,
                r.errors.len(),
            ),
            task: 1,
            outages: r.outages.clone(),
            started_ms: iso_to_epoch_ms(&r.started_at),
            ended_ms: iso_to_epoch_ms(&r.ended_at),
            started_at: r.started_at.clone(),
            ended_at: r.ended_at.clone(),
            step,
        }
    }
}

/// Token counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
    /// Server tool requests (`usage.server_tool_use`), not tokens but priced per use;
    /// left out of JSON when there were none.
    #[serde(skip_serializing_if = "is_zero")]
    pub web_search: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub web_fetch: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Tokens {
    /// Saturating: a transcript with absurd counts must not panic a read-only command.
    pub fn add(&mut self, usage: &Usage) {
        self.input = self.input.saturating_add(usage.input_tokens);
        self.output = self.output.saturating_add(usage.output_tokens);
        self.cache_creation = self
            .cache_creation
            .saturating_add(usage.cache_creation_input_tokens);
        self.cache_read = self
            .cache_read
            .saturating_add(usage.cache_read_input_tokens);
        let server = &usage.server_tool_use;
        self.web_search = self.web_search.saturating_add(server.web_search_requests);
        self.web_fetch = self.web_fetch.saturating_add(server.web_fetch_requests);
    }

    /// Another total added, saturating as [`add`](Self::add).
    pub fn add_tokens(&mut self, other: &Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_creation = self.cache_creation.saturating_add(other.cache_creation);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.web_search = self.web_search.saturating_add(other.web_search);
        self.web_fetch = self.web_fetch.saturating_add(other.web_fetch);
    }
}

/// What a point on a context curve marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// A later process continued the session here.
    Wake,
    /// A request failed and was retried (a synthetic API-error entry).
    Retry,
    /// A failed request that looks like the network was gone.
    Outage,
    /// The session handed over to a successor (换代).
    Handoff,
}

/// An event on a session's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    pub kind: MarkKind,
    /// Epoch ms, when known.
    pub at_ms: Option<i64>,
    /// The turn index (0-based, into [`Session::turns`]) the mark sits before.
    pub turn: usize,
    /// For an outage: seconds until the session went on.
    pub waited_s: f64,
    pub text: String,
}

/// One model turn of a session.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Turn {
    pub at_ms: Option<i64>,
    pub context: u64,
    pub usage: Tokens,
    /// USD, when the model's price is known.
    pub cost_usd: Option<f64>,
}

/// A main session of the run with its turn series.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Session {
    pub session_id: String,
    /// The plain step it served.
    pub step: String,
    /// Entries stored (main chain only).
    pub entries: usize,
    pub turns: Vec<Turn>,
    pub marks: Vec<Mark>,
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
    pub peak_context: u64,
    /// Sub-agent transcripts stored under it.
    pub subagents: Vec<String>,
    /// What its sub-agents' transcripts add: tokens, replies, requests (replies and
    /// failed requests), cost.
    pub subagent_tokens: Tokens,
    pub subagent_turns: u64,
    pub subagent_requests: u64,
    pub subagent_cost_usd: Option<f64>,
    /// The session is named by the manifest but gone from the store.
    pub missing: bool,
    /// A judge's session (`name·判定#<N>`), not one of the step's own.
    pub judge: bool,
    /// The model of its newest turn.
    pub model: Option<String>,
}

impl Session {
    /// Its tokens with its sub-agents' (as its cost in the manifest counts them).
    pub fn all_tokens(&self) -> Tokens {
        let mut all = self.tokens;
        all.add_tokens(&self.subagent_tokens);
        all
    }

    /// Its cost with its sub-agents', from the transcripts (`None`: a price unknown).
    pub fn all_cost_usd(&self) -> Option<f64> {
        match (self.cost_usd, self.subagent_cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, None) if self.subagent_turns == 0 => a,
            (None, b) if self.turns.is_empty() => b,
            _ => None,
        }
    }
}

/// Totals over the current task of the run (see [`Attempt::task`]). Sub-agents are
/// counted in every figure but `turns`: cost (the manifest's rows include them),
/// tokens and requests (their transcripts, stored under their main session).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// From the first attempt's start to the last attempt's end.
    pub wall_s: f64,
    pub cost_usd: f64,
    /// Some attempt's cost is unknown (the model's price is not in the table).
    pub cost_partial: bool,
    /// The replies of the steps' own sessions (the judges' included), not their
    /// sub-agents' ([`subagent_turns`](Self::subagent_turns)).
    pub turns: u64,
    /// The sub-agents' replies.
    pub subagent_turns: u64,
    /// Model requests, sub-agents' included: each attempt's [`Attempt::requests`] plus
    /// [`subagent_requests`](Self::subagent_requests).
    pub requests: u64,
    pub subagent_requests: u64,
    /// Tokens by kind, sub-agents' included.
    pub tokens: Tokens,
    pub handoffs: usize,
    /// The number of the last wake, as its banner said it (1: never woken again).
    pub wakes: usize,
    /// Tries after the first, every step attempt's (its sub-agents' included).
    pub retries: usize,
    pub outages: usize,
    pub outage_waited_s: f64,
    pub peak_context: u64,
}

/// A run directory, read.
pub struct Run {
    pub run_dir: PathBuf,
    pub workspace: PathBuf,
    pub project_key: String,
    /// Manifest rows of the current task (see [`Attempt::task`]) in time order.
    pub attempts: Vec<Attempt>,
    /// Rows of earlier tasks (archived by `flower --new`), in time order: shown only
    /// when asked for (`flower log --all`), never counted in [`Run::totals`].
    pub earlier: Vec<Attempt>,
    /// `lineage.json`, when it is readable and for this workspace.
    pub lineage: Option<LineageFile>,
    store: Option<RunStore>,
}

/// Where a run's transcripts are read from: `runs/sessions.db`, read in place (raw rows,
/// no `Value` per entry), or any other [`SessionStore`] (PostgreSQL), read through the
/// protocol's `load`.
enum RunStore {
    Sqlite(SqliteSessionStore),
    Other(Arc<dyn SessionStore>),
}

impl RunStore {
    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError> {
        self.store().load(key)
    }

    fn for_each_raw(
        &self,
        key: &SessionKey,
        mut each: impl FnMut(&[u8]),
    ) -> Result<usize, StoreError> {
        match self {
            RunStore::Sqlite(store) => store.for_each_raw(key, each),
            RunStore::Other(store) => {
                let entries = store.load(key)?.unwrap_or_default();
                for entry in &entries {
                    each(entry.to_json().unwrap_or_default().as_bytes());
                }
                Ok(entries.len())
            }
        }
    }

    fn scan_type<T>(
        &self,
        key: &SessionKey,
        kind: &str,
        mut map: impl FnMut(&[u8]) -> T,
    ) -> Result<Option<(usize, Vec<T>)>, StoreError> {
        match self {
            RunStore::Sqlite(store) => store.scan_type(key, kind, map),
            RunStore::Other(store) => Ok(store.load(key)?.map(|entries| {
                let picked = entries
                    .iter()
                    .filter(|e| e.kind.as_deref() == Some(kind))
                    .map(|e| map(e.to_json().unwrap_or_default().as_bytes()))
                    .collect();
                (entries.len(), picked)
            })),
        }
    }

    fn store(&self) -> &dyn SessionStore {
        match self {
            RunStore::Sqlite(store) => store,
            RunStore::Other(store) => store.as_ref(),
        }
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("run_dir", &self.run_dir)
            .field("attempts", &self.attempts.len())
            .finish_non_exhaustive()
    }
}

impl Run {
    /// Reads `run_dir` (relative to the current directory) of `workspace`. Fails only
    /// when the directory is missing, the manifest does not parse or the store cannot
    /// be opened; a missing manifest or store reads as empty.
    pub fn open(workspace: &Path, run_dir: &Path) -> Result<Run, InspectError> {
        Self::open_with(workspace, run_dir, true)
    }

    /// [`Run::open`] without the transcripts: for `flower log` when `sessions.db` cannot
    /// be read, the attempts manifest.json records are still worth showing.
    pub fn open_without_store(workspace: &Path, run_dir: &Path) -> Result<Run, InspectError> {
        Self::open_with(workspace, run_dir, false)
    }

    fn open_with(workspace: &Path, run_dir: &Path, with_store: bool) -> Result<Run, InspectError> {
        if !run_dir.is_dir() {
            return Err(InspectError::NoRunDir {
                path: run_dir.to_path_buf(),
            });
        }
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let rows = manifest::read_rows(run_dir)?;
        let lineage = crate::continuity::lineage::Lineage::read(run_dir, &workspace);
        let store = if with_store {
            SqliteSessionStore::open_read_only(&RunDir::new(run_dir).sessions_db())?
                .map(RunStore::Sqlite)
        } else {
            None
        };
        Ok(Self::assemble(
            run_dir,
            project_key(&workspace),
            workspace,
            &rows,
            lineage,
            store,
        ))
    }

    /// A run whose lineage, manifest and transcripts live in a shared database (see
    /// [`crate::continuity::shared`]): the database is read, not the run directory's
    /// mirrors, so another host's view needs no `runs/` at all. Transcripts are read
    /// under the run's own project key (a named run keeps the one of the workspace that
    /// began it).
    pub fn open_shared(
        workspace: &Path,
        run_dir: &Path,
        shared: &crate::continuity::shared::SharedRun,
        store: Arc<dyn SessionStore>,
    ) -> Result<Run, InspectError> {
        let rows = manifest::shared_rows(shared)?;
        let (woke, steps) = shared.lineage()?;
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let lineage = LineageFile {
            workspace: workspace.display().to_string(),
            woke,
            steps,
            store: shared.location(),
            run_key: shared.name().map(str::to_owned),
        };
        Ok(Self::assemble(
            run_dir,
            shared.project_key().to_string(),
            workspace,
            &rows,
            Some(lineage),
            Some(RunStore::Other(store)),
        ))
    }

    fn assemble(
        run_dir: &Path,
        project_key: String,
        workspace: PathBuf,
        rows: &[ManifestRow],
        lineage: Option<LineageFile>,
        store: Option<RunStore>,
    ) -> Run {
        let mut attempts: Vec<Attempt> = rows.iter().map(Attempt::from_row).collect();
        // Stable: rows of one process keep their order when stamps tie or do not parse.
        attempts.sort_by_key(|a| a.started_ms.unwrap_or(i64::MIN));
        let mut last_run: Option<String> = None;
        let mut counted = 0;
        let mut task = 1;
        for a in attempts.iter_mut() {
            let new_process = last_run.as_ref().is_some_and(|r| *r != a.run);
            // A later process that recorded wake 1 woke no earlier task: the lineage
            // was archived (`--new`) or started afresh. Its wakes count from 1 again.
            if new_process && a.woke == 1 {
                task += 1;
                counted = 0;
            } else if new_process {
                a.wake = true;
            }
            if last_run.as_ref() != Some(&a.run) {
                counted += 1;
            }
            // Rows of an older flower do not say: count the processes so far.
            if a.woke == 0 {
                a.woke = counted;
            }
            counted = counted.max(a.woke);
            a.task = task;
            last_run = Some(a.run.clone());
        }
        let (attempts, earlier) = attempts.into_iter().partition(|a| a.task == task);
        Run {
            run_dir: run_dir.to_path_buf(),
            project_key,
            workspace,
            attempts,
            earlier,
            lineage,
            store,
        }
    }

    /// The key of a main session of this workspace.
    pub fn key(&self, session_id: &str) -> SessionKey {
        SessionKey::main(self.project_key.clone(), session_id)
    }

    /// The run's main sessions in the store, the one written last first, with when
    /// (ms since the epoch): what a live view asks to find the session at work. Empty
    /// without a store or when it cannot be read.
    pub fn recent_sessions(&self) -> Vec<(String, i64)> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let mut listed = store
            .store()
            .list_sessions(&self.project_key)
            .unwrap_or_default();
        listed.sort_by_key(|s| std::cmp::Reverse(s.mtime));
        listed
            .into_iter()
            .map(|s| (s.session_id, s.mtime))
            .collect()
    }

    /// A session's stored entries; `None` when it is not in the store.
    pub fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, InspectError> {
        match &self.store {
            Some(store) => Ok(store.load(key)?),
            None => Ok(None),
        }
    }

    /// Each stored entry's raw JSON text, in order; the number of entries (0: not in the
    /// store).
    pub fn for_each_raw(
        &self,
        key: &SessionKey,
        each: impl FnMut(&[u8]),
    ) -> Result<usize, InspectError> {
        match &self.store {
            Some(store) => Ok(store.for_each_raw(key, each)?),
            None => Ok(0),
        }
    }

    /// What a resume would feed the model: the entries pruned exactly as the runtime's
    /// [`crate::stores::PruningSessionStore`] does (`trim` as given). Trimming writes
    /// each large result to a file; here those files go to a private temporary
    /// directory, removed afterwards, and the pointers are rewritten to name the run's
    /// own `trimmed/` directory, where a resume would put them. Nothing in the run dir
    /// is written.
    pub fn load_pruned(
        &self,
        key: &SessionKey,
        trim: bool,
    ) -> Result<Option<Vec<Entry>>, InspectError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let real_dir = prune::default_trim_dir(&canonical(&self.run_dir));
        let scratch = std::env::temp_dir().join(format!(
            "flower-show-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let mut options = PruneOptions::new(scratch.clone());
        options.trim = trim;
        let pruned = store.store().load_resume(key, &options);
        let _ = std::fs::remove_dir_all(&scratch);
        let Some(pruned) = pruned? else {
            return Ok(None);
        };
        let from = scratch.display().to_string();
        let to = real_dir.display().to_string();
        Ok(Some(
            pruned
                .iter()
                .filter_map(|loaded| loaded.json.entry())
                .map(|mut entry| {
                    if trim {
                        rewrite_pointers(&mut entry, &from, &to);
                    }
                    entry
                })
                .collect(),
        ))
    }

    /// Whether the store holds this main session.
    pub fn has_session(&self, session_id: &str) -> bool {
        self.store
            .as_ref()
            .is_some_and(|s| s.store().has_session(session_id).unwrap_or(false))
    }

    /// Sub-agent subpaths stored under a main session.
    pub fn subagents(&self, key: &SessionKey) -> Vec<String> {
        self.store
            .as_ref()
            .and_then(|s| s.store().list_subkeys(key).ok())
            .unwrap_or_default()
    }

    /// `STEP | SESSION_ID | nothing` → the session to show: a plain step through
    /// lineage.json, then through the manifest's newest row of that step; a session id
    /// as given; nothing = the step of the newest attempt.
    pub fn resolve(&self, target: Option<&str>) -> Result<(String, Option<String>), InspectError> {
        let lineage_steps = self.lineage.as_ref().map(|l| &l.steps);
        let by_step = |step: &str| -> Option<String> {
            lineage_steps
                .and_then(|s| s.get(step).cloned())
                .or_else(|| {
                    self.attempts
                        .iter()
                        .rev()
                        .find(|a| {
                            a.step == step
                                || (a.base == step && !matches!(a.kind, AttemptKind::Judge(_)))
                        })
                        .and_then(|a| a.session_id.clone())
                })
        };
        let (step, id) = match target {
            Some(t) => match by_step(t) {
                Some(id) => (Some(t.to_owned()), id),
                None if self.has_session(t) => return Ok((t.to_owned(), None)),
                None if self.lineage_names_step(t) || self.attempts.iter().any(|a| a.step == t) => {
                    return Err(self.unknown_step(t));
                }
                None if looks_like_id(t) => {
                    return Err(InspectError::UnknownSession { id: t.into() });
                }
                None => return Err(self.unknown_step(t)),
            },
            None => {
                let last = self
                    .attempts
                    .iter()
                    .rev()
                    .find(|a| a.session_id.is_some())
                    .and_then(|a| a.session_id.clone().map(|id| (a.step.clone(), id)))
                    .or_else(|| {
                        lineage_steps
                            .and_then(|s| s.iter().next_back().map(|(k, v)| (k.clone(), v.clone())))
                    });
                match last {
                    Some((step, id)) => (Some(step), id),
                    None => return Err(InspectError::NothingRun),
                }
            }
        };
        if !self.has_session(&id) {
            return Err(InspectError::GoneSession {
                step: step.unwrap_or_default(),
                id,
            });
        }
        Ok((id, step))
    }

    /// [`InspectError::UnknownStep`] for `step`, with the step names this run knows:
    /// lineage's plain names, then each attempt name of the manifest once, in order.
    fn unknown_step(&self, step: &str) -> InspectError {
        let mut known: Vec<String> = Vec::new();
        let plain = self.lineage.iter().flat_map(|l| l.steps.keys().cloned());
        let attempts = self
            .attempts
            .iter()
            .flat_map(|a| [a.base.clone(), a.step.clone()]);
        for name in plain.chain(attempts) {
            if !name.is_empty() && !known.contains(&name) {
                known.push(name);
            }
        }
        let step = step.into();
        InspectError::UnknownStep { step, known }
    }

    fn lineage_names_step(&self, step: &str) -> bool {
        self.lineage
            .as_ref()
            .is_some_and(|l| l.steps.contains_key(step))
    }

    /// Every main session the manifest and lineage name, once, in order of first use:
    /// `(session id, step, whether it is a judge's)`.
    fn session_order(&self) -> Vec<(String, String, bool)> {
        let mut order: Vec<(String, String, bool)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for a in &self.attempts {
            let ids = a.retired.iter().chain(a.session_id.iter());
            for id in ids {
                if seen.insert(id.clone()) {
                    let judge = matches!(a.kind, AttemptKind::Judge(_));
                    order.push((id.clone(), a.base.clone(), judge));
                }
            }
        }
        if let Some(lineage) = &self.lineage {
            for (step, id) in &lineage.steps {
                if seen.insert(id.clone()) {
                    order.push((id.clone(), step.clone(), false));
                }
            }
        }
        order
    }

    /// The main sessions of the run (those the manifest and lineage name), each with
    /// its turn series, in order of first use.
    pub fn sessions(&self) -> Vec<Session> {
        let order = self.session_order();
        // Where each session was woken: the start of a wake row using it.
        let mut wakes: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        let mut handoffs: BTreeMap<&str, Option<i64>> = BTreeMap::new();
        for a in &self.attempts {
            if let (true, Some(id), Some(at)) = (a.wake, &a.session_id, a.started_ms) {
                wakes.entry(id).or_default().push(at);
            }
            for id in &a.retired {
                handoffs.insert(id, a.ended_ms);
            }
        }
        order
            .into_iter()
            .map(|(id, step, judge)| {
                // Only the assistant entries, a few fields each: the series needs no more.
                let scanned = self.store.as_ref().and_then(|store| {
                    store
                        .scan_type(&self.key(&id), "assistant", AssistantFacts::of_json)
                        .ok()
                        .flatten()
                });
                let mut session = match scanned {
                    Some((count, facts)) => series(&id, &step, count, facts.into_iter().flatten()),
                    None => Session {
                        session_id: id.clone(),
                        step,
                        missing: true,
                        ..Session::default()
                    },
                };
                session.judge = judge;
                for at in wakes.get(id.as_str()).into_iter().flatten() {
                    let turn = session
                        .turns
                        .iter()
                        .position(|t| t.at_ms.is_some_and(|t| t >= *at))
                        .unwrap_or(session.turns.len());
                    session.marks.push(Mark {
                        kind: MarkKind::Wake,
                        at_ms: Some(*at),
                        turn,
                        waited_s: 0.0,
                        text: "唤醒".into(),
                    });
                }
                if let Some(at) = handoffs.get(id.as_str()) {
                    session.marks.push(Mark {
                        kind: MarkKind::Handoff,
                        at_ms: *at,
                        turn: session.turns.len(),
                        waited_s: 0.0,
                        text: "换代".into(),
                    });
                }
                session.marks.sort_by_key(|m| m.turn);
                if !session.missing {
                    self.add_subagents(&mut session);
                }
                session
            })
            .collect()
    }

    /// Lists a main session's sub-agent transcripts and adds up what they say.
    fn add_subagents(&self, session: &mut Session) {
        let key = self.key(&session.session_id);
        session.subagents = self.subagents(&key);
        session.subagent_cost_usd = Some(0.0);
        let Some(store) = &self.store else {
            return;
        };
        for subpath in &session.subagents {
            let Ok(sub_key) = key.sub(subpath) else {
                continue;
            };
            let Ok(Some((count, facts))) =
                store.scan_type(&sub_key, "assistant", AssistantFacts::of_json)
            else {
                continue;
            };
            let sub = series(subpath, &session.step, count, facts.into_iter().flatten());
            session.subagent_tokens.add_tokens(&sub.tokens);
            let turns = sub.turns.len() as u64;
            session.subagent_turns += turns;
            session.subagent_requests += turns + sub.marks.len() as u64;
            session.subagent_cost_usd = match (session.subagent_cost_usd, sub.cost_usd) {
                (Some(a), Some(b)) => Some(a + b),
                (total, None) if turns == 0 => total,
                _ => None,
            };
        }
    }

    /// Totals over the attempts and the given sessions.
    pub fn totals(&self, sessions: &[Session]) -> Totals {
        let mut t = Totals::default();
        let first = self.attempts.iter().filter_map(|a| a.started_ms).min();
        let last = self.attempts.iter().filter_map(|a| a.ended_ms).max();
        if let (Some(a), Some(b)) = (first, last) {
            t.wall_s = ((b - a).max(0) as f64) / 1000.0;
        }
        for a in &self.attempts {
            match a.cost_usd {
                Some(c) => t.cost_usd += c,
                None if a.num_turns > 0 => t.cost_partial = true,
                None => {}
            }
            t.turns = t.turns.saturating_add(a.num_turns);
            t.requests = t.requests.saturating_add(a.requests);
            t.handoffs += a.retired.len();
            t.wakes = t.wakes.max(a.woke as usize);
            // A retry is a try after the first: a request that failed and was never
            // retried (a 401) is not one.
            t.retries += a.attempts.saturating_sub(1) as usize;
            for outage in &a.outages {
                t.outages += 1;
                t.outage_waited_s += outage.waited_s;
            }
            t.peak_context = t.peak_context.max(a.context);
        }
        for s in sessions {
            t.tokens.add_tokens(&s.all_tokens());
            t.subagent_turns += s.subagent_turns;
            t.subagent_requests += s.subagent_requests;
            t.requests = t.requests.saturating_add(s.subagent_requests);
            t.peak_context = t.peak_context.max(s.peak_context);
            // Retries and outages are the manifest's (each row says them); a
            // transcript's marks only place them on the curve.
        }
        t
    }
}

fn looks_like_id(text: &str) -> bool {
    text.len() >= 8 && text.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// The run dir as the runtime names it (canonical), for trim pointers.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Replaces `from` by `to` in the texts pruning writes pointers into (a tool result's
/// body, the text block standing for a server tool's result).
fn rewrite_pointers(entry: &mut Entry, from: &str, to: &str) {
    let content = entry.message.as_mut().and_then(|m| m.content.as_mut());
    let Some(Content::Blocks(blocks)) = content else {
        return;
    };
    for block in blocks {
        let text = match block {
            Block::Text(b) => b.text.as_mut(),
            Block::ToolResult(r) => match r.content.as_mut() {
                Some(Content::Text(text)) => Some(text),
                _ => None,
            },
            _ => None,
        };
        if let Some(text) = text
            && text.contains(from)
        {
            *text = text.replace(from, to);
        }
    }
}

/// The file lineage lives in, for messages.
pub fn lineage_path(run_dir: &Path) -> PathBuf {
    RunDir::new(run_dir).lineage()
}
