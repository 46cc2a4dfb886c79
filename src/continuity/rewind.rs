//! `flower rewind`: the workspace's files back to a checkpoint (`crate::checkpoint`)
//! and, unless files only, the conversation too: every step session lineage names is
//! cut at the checkpoint's moment (entries written after it are left out of a fork,
//! the original stays as it was), lineage points at the forks (or forgets a step that
//! had not started then), and the manifest records the rewind as a row of the
//! checkpoint's step with `error: "rewound"`, so that the next `flower` continues from
//! there (the judge's earlier verdict no longer counts).
//!
//! The whole rewind is journaled (`runs/checkpoints/rewind.json`, written atomically
//! before anything changes): the target, whether the files are back, and the planned
//! cut of each session with the fork's id chosen in advance. A rewind killed at any
//! point is finished by the next runtime that opens the run ([`Runtime::finish_rewind`]),
//! each part idempotent: the files (the checkpoint's own journal), the forks' entries
//! (only those the fork does not hold yet), lineage, the manifest row (not written
//! twice). So the run is either as before (no journal yet) or, once a flower opened
//! it, as after: never a mix.
//!
//! The checkpoints stay on the host that took them (under `runs/`): a run in a shared
//! PostgreSQL database rewinds its files only where its checkpoints are, and refuses
//! the conversation part (`--files-only` is required there).

use super::attempt::AttemptName;
use super::manifest::StepResult;
use super::runtime::Runtime;
use crate::checkpoint::{
    Change, Checkpoint, CheckpointError, CheckpointKind, Checkpoints, RestoreHook,
};
use crate::stores::{SessionKey, SessionStore, StoreError, project_key};
use crate::transcript::Entry;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `error` of the manifest row a rewind writes.
pub const REWOUND: &str = "rewound";

#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    #[error("这个运行没有检查点")]
    NoCheckpoints,
    #[error("没有叫 {0} 的检查点(`flower rewind` 列出它们)")]
    NoSuchPoint(String),
    #[error(
        "工作区在上一个检查点之后有 flower 之外的改动({}),不回退;确定不要这些改动就加 --discard",
        .files.join("、")
    )]
    OutsideChanges { files: Vec<String> },
    #[error("这个运行的会话里没有消息 {0}")]
    NoSuchMessage(String),
    #[error("共享数据库里的运行只能回退文件(加 --files-only)")]
    SharedRun,
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("回退对话时读写会话 {session_id} 失败")]
    Store {
        session_id: String,
        #[source]
        source: StoreError,
    },
}

/// How to rewind.
#[derive(Debug, Clone, Default)]
pub struct RewindOptions {
    /// Restore the files only; the conversation goes on where it is.
    pub files_only: bool,
    /// Discard changes made outside flower since the last checkpoint (they are kept as
    /// a checkpoint of their own first, so they can still be taken back).
    pub discard: bool,
    /// The crash test's pause in the file restore ([`RestoreHook`]).
    pub hook: Option<RestoreHook>,
    /// The crash test's pause in the conversation part: once the first fork's entries
    /// are written (before lineage names it), write this file and wait to be killed.
    pub fork_pause: Option<PathBuf>,
}

/// The journal's file name under `runs/checkpoints/`.
const JOURNAL_FILE: &str = "rewind.json";

/// Whether a rewind a kill interrupted waits in `run_dir` to be finished (by the next
/// runtime): until then, the judge's earlier verdict no longer counts.
pub fn pending(run_dir: &Path) -> bool {
    run_dir
        .join(crate::checkpoint::CHECKPOINTS_DIR)
        .join(JOURNAL_FILE)
        .exists()
}

/// One step's planned cut: `keep` entries of `from` copied to `fork`, or (no fork) the
/// step forgotten.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cut {
    step: String,
    from: String,
    keep: usize,
    fork: Option<String>,
}

/// A rewind in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    point: Checkpoint,
    files_only: bool,
    /// The files are the checkpoint's and `回退到 #N` is recorded.
    files_done: bool,
    cuts: Vec<Cut>,
    /// The manifest row's `started_at`: a replay finds the row it already wrote.
    row_started_at: String,
}

/// What a rewind did.
#[derive(Debug, Clone)]
pub struct Rewound {
    pub point: Checkpoint,
    /// Paths restored (written or removed).
    pub files: usize,
    /// Per step: the fork lineage now names, or `None` when the step was forgotten.
    pub sessions: Vec<(String, Option<String>)>,
}

/// The checkpoint `point` names: its number (`12`, `#12`), or a step attempt's row name
/// (`干活` before that step's first attempt, `干活#round2` before that attempt).
pub fn resolve<'a>(list: &'a [Checkpoint], point: &str) -> Option<&'a Checkpoint> {
    if let Ok(n) = point.trim_start_matches('#').parse::<u32>() {
        return list.iter().find(|c| c.n == n);
    }
    list.iter()
        .find(|c| c.kind == CheckpointKind::Attempt && c.step == point)
}

/// Changes made since the last checkpoint (outside flower, when no flower runs).
pub fn outside_changes(checkpoints: &Checkpoints) -> Result<Vec<Change>, CheckpointError> {
    let Some(last) = checkpoints.list()?.pop() else {
        return Ok(Vec::new());
    };
    let now = checkpoints.snapshot()?;
    checkpoints.changes(&last.tree, &now)
}

impl Runtime {
    /// Rewinds the workspace (and, unless `files_only`, the conversation) to `point`
    /// (see [`resolve`]). Refuses when the workspace changed outside flower since the
    /// last checkpoint, unless `discard`.
    pub fn rewind(&self, point: &str, options: &RewindOptions) -> Result<Rewound, RewindError> {
        let checkpoints = self.checkpoints().ok_or(RewindError::NoCheckpoints)?;
        let list = checkpoints.list()?;
        let target = resolve(&list, point)
            .cloned()
            .ok_or_else(|| RewindError::NoSuchPoint(point.to_string()))?;
        let shared = self.lineage().shared().is_some();
        if shared && !options.files_only {
            return Err(RewindError::SharedRun);
        }
        let outside = outside_changes(checkpoints)?;
        if !outside.is_empty() && !options.discard {
            let mut files: Vec<String> = outside.into_iter().map(|c| c.path).collect();
            if files.len() > 5 {
                let more = files.len() - 5;
                files.truncate(5);
                files.push(format!("另 {more} 个"));
            }
            return Err(RewindError::OutsideChanges { files });
        }
        // What the rewind leaves: a checkpoint of its own, so that it can be undone.
        checkpoints.record(CheckpointKind::Rewind, "回退前的样子", None, 0)?;
        let cuts = match options.files_only {
            true => Vec::new(),
            false => self.plan_cuts(&target)?,
        };
        let mut journal = Journal {
            point: target,
            files_only: options.files_only,
            files_done: false,
            cuts,
            row_started_at: StepResult::started("").started_at,
        };
        write_journal(checkpoints, &journal)?;
        self.complete(checkpoints, &mut journal, options)
    }

    /// The Agent SDK's `rewind_files(user_message_id)`: the files back to the last
    /// checkpoint taken before that message was written (for a step's prompt, the one
    /// before its attempt); the conversation stays where it is. The message is looked
    /// up in the sessions lineage names.
    pub fn rewind_files(
        &self,
        user_message_id: &str,
        options: &RewindOptions,
    ) -> Result<Rewound, RewindError> {
        let checkpoints = self.checkpoints().ok_or(RewindError::NoCheckpoints)?;
        let at = self
            .message_time(user_message_id)?
            .ok_or_else(|| RewindError::NoSuchMessage(user_message_id.to_string()))?;
        let list = checkpoints.list()?;
        // RFC 3339 in UTC with milliseconds on both sides: text order is time order.
        let point = list
            .iter()
            .rfind(|c| c.time.as_str() <= at.as_str())
            .ok_or_else(|| RewindError::NoSuchPoint(user_message_id.to_string()))?;
        let options = RewindOptions {
            files_only: true,
            ..options.clone()
        };
        self.rewind(&point.n.to_string(), &options)
    }

    /// When the entry `uuid` of one of lineage's sessions was written.
    fn message_time(&self, uuid: &str) -> Result<Option<String>, RewindError> {
        let sessions: Vec<String> = self.lineage().steps().values().cloned().collect();
        for id in sessions {
            let key = self.session_key(&id);
            let loaded = self.store().load_raw(&key).map_err(store_failed(&id))?;
            for entry in loaded.unwrap_or_default() {
                if entry.uuid() == Some(uuid) {
                    return Ok(entry.timestamp);
                }
            }
        }
        Ok(None)
    }

    /// Finishes a rewind a kill interrupted, if there is one (the runtime that opens
    /// the run calls this before anything else).
    pub fn finish_rewind(&self) -> Result<Option<Rewound>, RewindError> {
        let Some(checkpoints) = self.checkpoints() else {
            return Ok(None);
        };
        let path = checkpoints.dir().join(JOURNAL_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Io { path, source }.into()),
        };
        // Written atomically: a journal that does not parse was never a journal.
        let Ok(mut journal) = serde_json::from_slice::<Journal>(&bytes) else {
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        };
        self.complete(checkpoints, &mut journal, &RewindOptions::default())
            .map(Some)
    }

    /// Carries out a journaled rewind from wherever it stopped; removes the journal.
    fn complete(
        &self,
        checkpoints: &Checkpoints,
        journal: &mut Journal,
        options: &RewindOptions,
    ) -> Result<Rewound, RewindError> {
        let target = journal.point.clone();
        let mut files = 0;
        if !journal.files_done {
            files = checkpoints.restore(&target.tree, options.hook.as_ref())?;
            // The workspace now: the next rewind compares with it.
            checkpoints.record(
                CheckpointKind::Rewind,
                &format!("回退到 #{}", target.n),
                None,
                0,
            )?;
            journal.files_done = true;
            write_journal(checkpoints, journal)?;
        }
        let step = AttemptName::parse(&target.step).step().to_string();
        let mut sessions = Vec::new();
        for cut in &journal.cuts {
            if let Some(fork) = &cut.fork {
                self.write_fork(cut, fork)?;
                if let Some(marker) = &options.fork_pause {
                    pause_for_kill(marker);
                }
            }
        }
        {
            let mut lineage = self.lineage();
            for cut in &journal.cuts {
                match &cut.fork {
                    Some(fork) => lineage.remember(&cut.step, fork),
                    None => lineage.forget(&cut.step),
                };
                sessions.push((cut.step.clone(), cut.fork.clone()));
            }
        }
        let mut row = StepResult::started(&step);
        row.started_at = journal.row_started_at.clone();
        row.error = Some(REWOUND.to_string());
        row.text = format!("回退到检查点 #{}({})", target.n, target.step);
        row.session_id = journal
            .cuts
            .iter()
            .find(|cut| cut.step == step)
            .and_then(|cut| cut.fork.clone());
        row.finish();
        if !self.has_row(&row) {
            self.record(&row);
        }
        let path = checkpoints.dir().join(JOURNAL_FILE);
        std::fs::remove_file(&path).map_err(|source| CheckpointError::Io { path, source })?;
        Ok(Rewound {
            point: target,
            files,
            sessions,
        })
    }

    fn has_row(&self, row: &StepResult) -> bool {
        let rows = self.manifest_rows();
        rows.iter()
            .any(|r| r.result.step == row.step && r.result.started_at == row.started_at)
    }

    /// Plans the cut of every step session lineage names at the checkpoint's moment
    /// (reads only): a step whose session has entries after it is forked with those up
    /// to it, a step whose session began after it is forgotten.
    fn plan_cuts(&self, target: &Checkpoint) -> Result<Vec<Cut>, RewindError> {
        let steps: Vec<(String, String)> = self
            .lineage()
            .steps()
            .iter()
            .map(|(s, id)| (s.clone(), id.clone()))
            .collect();
        let mut cuts = Vec::new();
        for (step, id) in steps {
            let key = self.session_key(&id);
            let loaded = self.store().load_raw(&key).map_err(store_failed(&id))?;
            let entries = loaded.unwrap_or_default();
            let keep = entries
                .iter()
                .take_while(|entry| {
                    // RFC 3339 in UTC with milliseconds on both sides: text order is time order.
                    let at = entry.timestamp.as_deref();
                    at.is_none_or(|at| at <= target.time.as_str())
                })
                .count();
            if keep == entries.len() {
                continue;
            }
            let fork = (keep > 0).then(|| uuid::Uuid::new_v4().to_string());
            cuts.push(Cut {
                step,
                from: id,
                keep,
                fork,
            });
        }
        Ok(cuts)
    }

    fn session_key(&self, id: &str) -> SessionKey {
        SessionKey::main(project_key(Path::new(self.lineage().workspace())), id)
    }

    /// Copies the cut's entries to the fork, those it does not hold yet (a replay after
    /// a kill mid-way appends the rest).
    fn write_fork(&self, cut: &Cut, fork: &str) -> Result<(), RewindError> {
        let store = self.store();
        let fork_key = self.session_key(fork);
        let held = store.load_raw(&fork_key).map_err(store_failed(fork))?;
        let held = held.map_or(0, |entries| entries.len());
        let from_key = self.session_key(&cut.from);
        let from = store.load_raw(&from_key).map_err(store_failed(&cut.from))?;
        let copied: Vec<Entry> = from
            .unwrap_or_default()
            .into_iter()
            .take(cut.keep)
            .skip(held)
            .map(|entry| entry.forked(fork, &cut.from))
            .collect();
        if !copied.is_empty() {
            store
                .append(&fork_key, &copied)
                .map_err(store_failed(fork))?;
        }
        // Ours for the rest of this runtime, as any session it continues.
        let _ = self.claim_session(fork);
        Ok(())
    }
}

fn store_failed(id: &str) -> impl FnOnce(StoreError) -> RewindError + '_ {
    move |source| RewindError::Store {
        session_id: id.to_string(),
        source,
    }
}

fn write_journal(checkpoints: &Checkpoints, journal: &Journal) -> Result<(), CheckpointError> {
    let path = checkpoints.dir().join(JOURNAL_FILE);
    let bytes = serde_json::to_vec(journal).unwrap_or_default();
    crate::atomic::write(&path, &bytes).map_err(|source| CheckpointError::Io { path, source })
}

/// The crash test's pause: the marker written, wait for the kill.
fn pause_for_kill(marker: &Path) {
    let _ = std::fs::write(marker, "paused");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}
