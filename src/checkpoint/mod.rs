//! Checkpoints of the workspace (issue #44): its files as they were before each step
//! attempt and after each turn that may have changed them, so that `flower rewind` can
//! take them back.
//!
//! The objects are git's (content-addressed, deduplicated, incremental through an index
//! whose stat data makes an unchanged file cost one `lstat`), kept in a git directory of
//! flower's own under `runs/checkpoints/` (a protected path no agent writes), written
//! in-process (`snapshot`; a turn's from the inotify change feed, `feed`) and read by
//! the `git` binary's plumbing ([`git`]). What is kept follows the workspace's
//! `.gitignore` files; `runs/`, `.git/` and files over the size cap are never kept.
//!
//! ```text
//! runs/checkpoints/
//!   git/            the object store (a bare git directory; no refs, no gc)
//!   index           flower's index of the workspace (stat data of the last checkpoint)
//!   list.jsonl      one line per checkpoint (Checkpoint), appended
//!   journal.json    a restore in progress (restore.rs)
//! ```

mod feed;
pub mod git;
mod objects;
mod restore;
mod snapshot;

pub use git::Change;
pub use restore::{RestoreHook, finish_interrupted};

use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The directory under the run directory.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// Files larger than this are not kept unless a setting says otherwise.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("检查点:运行 git {what} 失败")]
    Git {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("检查点:git {what} 出错:{stderr}")]
    GitFailed { what: String, stderr: String },
    #[error("检查点:读写 {path} 失败")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("检查点:{what}失败")]
    Objects {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("检查点:{path} 不在工作区里,不恢复")]
    UnsafePath { path: String },
    #[error("检查点:恢复后的工作区与检查点不一致(树 {got},应为 {want})")]
    Mismatch { got: String, want: String },
}

/// What a checkpoint was taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// Before a step attempt (`step` is the attempt's row name: `干活`, `干活#round2`).
    Attempt,
    /// After a turn of a session that ran a tool which may change files.
    Turn,
    /// The workspace as a rewind found it, kept so that the rewind can be undone.
    Rewind,
    /// After a background command ended (Bash `run_in_background`; `command` its id):
    /// its writes after the turn that started it.
    Background,
}

/// One line of `list.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// 1, 2, …: the point's number in `flower rewind`.
    pub n: u32,
    pub kind: CheckpointKind,
    /// The attempt's row name (the judge's rounds included).
    pub step: String,
    /// The session whose turn it follows (turn checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Turns of that session in this attempt so far.
    #[serde(default)]
    pub turn: u32,
    /// The background command whose end it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// RFC 3339 with milliseconds, UTC: the conversation is cut here on a rewind.
    pub time: String,
    /// The workspace's tree (git object id).
    pub tree: String,
}

/// Files added, modified, deleted and lines added, removed between two checkpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChangeSummary {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    pub lines_added: u64,
    pub lines_removed: u64,
}

/// How a snapshot found what changed (for tests and the bench's figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every kept file's `lstat` (else only the paths the change feed reported).
    pub full_walk: bool,
    /// The paths looked at: the files kept (a full walk) or those reported.
    pub looked_at: usize,
}

/// The checkpoints of one workspace, kept under one run directory.
#[derive(Debug)]
pub struct Checkpoints {
    git: git::Git,
    snapshots: snapshot::Snapshots,
    dir: PathBuf,
    max_file_bytes: u64,
    /// The last checkpoint's number and tree, once read: a turn's checkpoint does not
    /// read the whole list (its writer holds the run lock, so nobody else appends).
    last: std::sync::Mutex<Option<(u32, String)>>,
}

impl Checkpoints {
    /// Opens (creating on first use) the checkpoints of `workspace` under `run_dir`,
    /// and finishes a restore a kill interrupted (see [`finish_interrupted`]).
    pub fn open(
        workspace: &Path,
        run_dir: &Path,
        max_file_bytes: u64,
    ) -> Result<Checkpoints, CheckpointError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CheckpointError::Io { path, source }
        };
        let workspace = workspace.canonicalize().map_err(io(workspace))?;
        std::fs::create_dir_all(run_dir).map_err(io(run_dir))?;
        let run_dir = run_dir.canonicalize().map_err(io(run_dir))?;
        let dir = run_dir.join(CHECKPOINTS_DIR);
        let checkpoints = Checkpoints {
            snapshots: snapshot::Snapshots::new(
                &dir.join("git"),
                dir.join("index"),
                workspace.clone(),
                run_dir.clone(),
            ),
            git: git::Git {
                git_dir: dir.join("git"),
                index: dir.join("index"),
                workspace: workspace.clone(),
            },
            dir,
            max_file_bytes,
            last: std::sync::Mutex::new(None),
        };
        // The run directory is never kept, wherever it is in the workspace.
        let mut excludes = Vec::new();
        if let Ok(inside) = run_dir.strip_prefix(&workspace) {
            excludes.push(format!("/{}/", inside.to_string_lossy()));
        }
        checkpoints.git.init(&excludes)?;
        finish_interrupted(&checkpoints)?;
        Ok(checkpoints)
    }

    pub fn workspace(&self) -> &Path {
        &self.git.workspace
    }

    /// `runs/checkpoints/`: the store, the list, the journals.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn list_path(&self) -> PathBuf {
        self.dir.join("list.jsonl")
    }

    /// The workspace's tree now, its changed files' contents written to the store.
    /// Unchanged files cost an `lstat` each (the index's stat data); no `git` runs.
    pub fn snapshot(&self) -> Result<String, CheckpointError> {
        self.snapshots.take(self.max_file_bytes, false)
    }

    /// How the last snapshot of this process found its changes.
    pub fn last_scan(&self) -> Scan {
        self.snapshots.last_scan()
    }

    /// Takes a checkpoint and appends it to the list. A turn checkpoint whose tree is
    /// the last one's is not listed (nothing changed): `Ok(None)`.
    pub fn record(
        &self,
        kind: CheckpointKind,
        step: &str,
        session_id: Option<&str>,
        turn: u32,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        self.record_after(kind, step, session_id, turn, None)
    }

    /// [`Checkpoints::record`], naming the background command whose end it follows
    /// (a `Background` checkpoint, which like a turn's is not listed when nothing
    /// changed).
    pub fn record_after(
        &self,
        kind: CheckpointKind,
        step: &str,
        session_id: Option<&str>,
        turn: u32,
        command: Option<&str>,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let changes_only = matches!(kind, CheckpointKind::Turn | CheckpointKind::Background);
        // A turn's looks at what the change feed reports and leaves the index to be
        // written later (it is the hot path); the others walk the whole workspace.
        let tree = self.snapshots.take(self.max_file_bytes, changes_only)?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none() {
            *last = self.list()?.pop().map(|c| (c.n, c.tree));
        }
        if changes_only && last.as_ref().is_some_and(|(_, t)| *t == tree) {
            return Ok(None);
        }
        let checkpoint = Checkpoint {
            n: last.as_ref().map_or(1, |(n, _)| n + 1),
            kind,
            step: step.to_string(),
            session_id: session_id.map(str::to_string),
            turn,
            command: command.map(str::to_string),
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            tree,
        };
        let mut line = serde_json::to_vec(&checkpoint).unwrap_or_default();
        line.push(b'\n');
        let path = self.list_path();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(&line))
            .map_err(|source| CheckpointError::Io { path, source })?;
        *last = Some((checkpoint.n, checkpoint.tree.clone()));
        Ok(Some(checkpoint))
    }

    /// Every checkpoint, oldest first. A line that does not read (a kill mid-append)
    /// is skipped.
    pub fn list(&self) -> Result<Vec<Checkpoint>, CheckpointError> {
        let path = self.list_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(CheckpointError::Io { path, source }),
        };
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }

    /// The paths that differ from `from` to `to` (trees), with the "after" blobs.
    pub fn changes(&self, from: &str, to: &str) -> Result<Vec<Change>, CheckpointError> {
        objects::changes(&self.objects(), from, to)
    }

    /// What changed from `from` to `to`: files by kind, and lines.
    pub fn summary(&self, from: &str, to: &str) -> Result<ChangeSummary, CheckpointError> {
        let mut summary = ChangeSummary::default();
        for change in self.changes(from, to)? {
            match change.status {
                'A' => summary.added += 1,
                'D' => summary.deleted += 1,
                _ => summary.modified += 1,
            }
        }
        let numstat = self.git.run(
            [
                "diff-tree",
                "-r",
                "-z",
                "--no-renames",
                "--numstat",
                from,
                to,
            ],
            None,
        )?;
        (summary.lines_added, summary.lines_removed) = git::sum_numstat(&numstat);
        Ok(summary)
    }

    /// The patch from `from` to `to` (`flower diff`).
    pub fn patch(&self, from: &str, to: &str) -> Result<Vec<u8>, CheckpointError> {
        self.git.run(
            [
                "diff-tree",
                "-r",
                "-p",
                "--no-renames",
                "--no-color",
                from,
                to,
            ],
            None,
        )
    }

    fn objects(&self) -> gix_odb::loose::Store {
        gix_odb::loose::Store::at(self.git.git_dir.join("objects"), gix_hash::Kind::Sha1)
    }

    /// A blob's content, read in-process (a restore spawns no `git`).
    fn blob(&self, id: &str) -> Result<Vec<u8>, CheckpointError> {
        objects::read(&self.objects(), id, gix_object::Kind::Blob)
    }

    /// Takes the workspace back to `tree`: see [`restore`].
    pub fn restore(
        &self,
        tree: &str,
        hook: Option<&RestoreHook>,
    ) -> Result<usize, CheckpointError> {
        restore::restore(self, tree, hook)
    }
}
