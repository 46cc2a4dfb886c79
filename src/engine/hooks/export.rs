//! `transcript_path`: a JSONL file a hook can read, holding the session's transcript
//! as stored (every entry, unpruned, one JSON object per line: Claude Code's format).
//!
//! Written on demand: the first time a hook of a session fires in this process, the
//! whole transcript is exported from the store; after that each entry the engine
//! stores is appended as it is stored, so the file is current whenever a hook runs and
//! no hook costs a reload of a long session. Sessions without hooks get no file. The
//! files live in the run directory (`runs/transcripts/<session_id>.jsonl`).

use crate::stores::{PruningSessionStore, SessionKey};
use crate::transcript::Entry;
use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The exported transcripts of one engine.
#[derive(Debug)]
pub struct Exports {
    dir: PathBuf,
    /// Sessions whose file is current (appended to as entries are stored).
    live: Mutex<HashSet<String>>,
}

impl Exports {
    pub fn new(dir: PathBuf) -> Exports {
        Exports {
            dir,
            live: Mutex::new(HashSet::new()),
        }
    }

    /// The file of a session.
    pub fn path(&self, session_id: &str) -> PathBuf {
        self.dir.join(format!("{session_id}.jsonl"))
    }

    /// The session's file, brought up to date (exported whole the first time). A
    /// failed write leaves the path (the hook may find it stale or missing; it still
    /// runs).
    pub fn ensure(&self, store: &PruningSessionStore, key: &SessionKey) -> PathBuf {
        let path = self.path(&key.session_id);
        if self.live().contains(&key.session_id) {
            return path;
        }
        let entries = store.load_raw(key).ok().flatten().unwrap_or_default();
        let mut text = String::new();
        for entry in &entries {
            text.push_str(&entry.to_json().unwrap_or_default());
            text.push('\n');
        }
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| crate::atomic::write(&path, text.as_bytes()));
        if written.is_ok() {
            self.live().insert(key.session_id.clone());
        }
        path
    }

    /// Appends a stored entry of a main session whose file is live.
    pub fn append(&self, key: &SessionKey, entry: &Entry) {
        if key.subpath.is_some() || !self.live().contains(&key.session_id) {
            return;
        }
        let path = self.path(&key.session_id);
        if append_line(&path, entry).is_err() {
            // Exported whole again the next time a hook needs it.
            self.live().remove(&key.session_id);
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn append_line(path: &Path, entry: &Entry) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
    let mut line = entry.to_json().map_err(std::io::Error::other)?;
    line.push('\n');
    file.write_all(line.as_bytes())
}
