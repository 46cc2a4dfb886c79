//! The run directory (`runs/` by default) and the names of what lives in it, spelled
//! here and nowhere else (the layout is part of the contract, spec 接续.md and
//! DESIGN.md §3). At the bottom of the layer line: the stores (trimmed results), the
//! continuity layer (lineage, manifest, locks) and the read-only views all name their
//! files through it.
//!
//! ```text
//! runs/
//!   sessions.db        transcripts (SQLite, the default store)
//!   lineage.json       which session each step used (and .tmp while it is written)
//!   manifest.json      one row per step attempt (.tmp, .lock beside it)
//!   run.lock           held by the one process that runs the pipeline here
//!   locks/<id>.lock    one per session a process appends to or forks
//!   trimmed/           old large tool results, out of the transcript fed back
//!   report.html        `flower report`'s default output
//!   said.json          what was said on a wake and is not yet derived, worked and judged
//!   transcripts/<id>.jsonl  a session as JSONL, written when its hooks need it
//!   settings-pin.json  the workspace's settings files as the run last loaded them
//!   checkpoints/       the workspace's checkpoints (`crate::checkpoint`)
//!   background/<id>.json, <id>.out  a background command's record and its output
//! ```

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// The SQLite transcript store.
pub const SESSIONS_DB: &str = "sessions.db";
/// Lineage: step → session id.
pub const LINEAGE_FILE: &str = "lineage.json";
/// The temporary file a lineage write goes through before it is renamed over.
pub const LINEAGE_TMP_FILE: &str = "lineage.json.tmp";
/// The run's manifest.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The temporary file a manifest write goes through.
pub const MANIFEST_TMP_FILE: &str = "manifest.json.tmp";
/// The sidecar file whose lock serialises manifest writers across processes.
pub const MANIFEST_LOCK_FILE: &str = "manifest.json.lock";
/// The run lock.
pub const RUN_LOCK_FILE: &str = "run.lock";
/// The directory of the session locks.
pub const LOCKS_DIR: &str = "locks";
/// Where trimmed tool results are kept.
pub const TRIMMED_DIR: &str = "trimmed";
/// `flower report`'s default output.
pub const REPORT_FILE: &str = "report.html";
/// Where sessions are exported as JSONL for hooks (`transcript_path`).
pub const TRANSCRIPTS_DIR: &str = "transcripts";
/// The workspace's settings files as the run last loaded them (`settings::pin`).
pub const SETTINGS_PIN_FILE: &str = "settings-pin.json";
/// What was said on a wake and not yet finished with (`continuity::notes::Said`).
pub const SAID_FILE: &str = "said.json";
/// Background commands' records and output files.
pub const BACKGROUND_DIR: &str = "background";
/// What the OpenTelemetry export sent and dropped, every process's added up
/// (`telemetry::Report`).
pub const TELEMETRY_FILE: &str = "telemetry.json";

/// A run directory: a path (relative to the current directory unless absolute) and the
/// paths of its files. Creating it, locking it and reading it are other modules' jobs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn new(path: impl Into<PathBuf>) -> RunDir {
        RunDir { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `transcripts/`: sessions exported for hooks.
    pub fn transcripts(&self) -> PathBuf {
        self.path.join(TRANSCRIPTS_DIR)
    }

    /// `sessions.db`.
    pub fn sessions_db(&self) -> PathBuf {
        self.path.join(SESSIONS_DB)
    }

    /// `lineage.json`.
    pub fn lineage(&self) -> PathBuf {
        self.path.join(LINEAGE_FILE)
    }

    /// `lineage.json.tmp`.
    pub fn lineage_tmp(&self) -> PathBuf {
        self.path.join(LINEAGE_TMP_FILE)
    }

    /// `manifest.json`.
    pub fn manifest(&self) -> PathBuf {
        self.path.join(MANIFEST_FILE)
    }

    /// `manifest.json.tmp`.
    pub fn manifest_tmp(&self) -> PathBuf {
        self.path.join(MANIFEST_TMP_FILE)
    }

    /// `manifest.json.lock`.
    pub fn manifest_lock(&self) -> PathBuf {
        self.path.join(MANIFEST_LOCK_FILE)
    }

    /// `run.lock`.
    pub fn run_lock(&self) -> PathBuf {
        self.path.join(RUN_LOCK_FILE)
    }

    /// `locks/`.
    pub fn locks(&self) -> PathBuf {
        self.path.join(LOCKS_DIR)
    }

    /// `trimmed/`.
    pub fn trimmed(&self) -> PathBuf {
        self.path.join(TRIMMED_DIR)
    }

    /// `report.html`.
    pub fn report(&self) -> PathBuf {
        self.path.join(REPORT_FILE)
    }

    /// `settings-pin.json`.
    pub fn settings_pin(&self) -> PathBuf {
        self.path.join(SETTINGS_PIN_FILE)
    }

    /// `said.json`.
    pub fn said(&self) -> PathBuf {
        self.path.join(SAID_FILE)
    }

    /// `background/`: each background command's record (`<id>.json`) and output
    /// (`<id>.out`).
    pub fn background(&self) -> PathBuf {
        self.path.join(BACKGROUND_DIR)
    }

    /// `telemetry.json`.
    pub fn telemetry_file(&self) -> PathBuf {
        self.path.join(TELEMETRY_FILE)
    }
}

impl Deref for RunDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for RunDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<OsStr> for RunDir {
    fn as_ref(&self) -> &OsStr {
        self.path.as_os_str()
    }
}

impl From<PathBuf> for RunDir {
    fn from(path: PathBuf) -> RunDir {
        RunDir::new(path)
    }
}

impl From<&Path> for RunDir {
    fn from(path: &Path) -> RunDir {
        RunDir::new(path)
    }
}
