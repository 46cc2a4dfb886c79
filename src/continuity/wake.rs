//! `wake_state`: the read-only probe that says whether a directory can be woken.

use super::lineage::{Lineage, LineageOnDisk};
use super::shared::SharedRun;
use crate::continuity::notes;
use crate::run_dir::RunDir;
use crate::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `wake_state` sees (the spec's `{"waking", "brief", "goal", "checks", "woke", "steps"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WakeState {
    /// `notes/需求.md` exists with all four sections filled.
    pub waking: bool,
    /// The text of `notes/需求.md`.
    pub brief: Option<String>,
    /// The text of `notes/目标.md`.
    pub goal: Option<String>,
    /// Checklist items in `目标.md`.
    pub checks: usize,
    /// How many times this directory was woken (lineage's `woke`).
    pub woke: u64,
    /// Step name → session id, only those still in `sessions.db`.
    pub steps: BTreeMap<String, String>,
}

/// Probes `workspace` with `run_dir` (relative to the current directory). Writes not
/// one byte anywhere: the database is opened read-only and immutable where possible.
/// Anything that does not fit (another workspace's lineage, a corrupt file) reads as
/// absent, like the runtime would treat it.
pub fn wake_state(workspace: impl AsRef<Path>, run_dir: impl AsRef<Path>) -> WakeState {
    wake_state_in(workspace, run_dir, None)
}

/// [`wake_state`] for a run whose transcripts live in `store` (a shared database)
/// rather than `run_dir/sessions.db`; `None` is `run_dir/sessions.db`.
pub fn wake_state_in(
    workspace: impl AsRef<Path>,
    run_dir: impl AsRef<Path>,
    store: Option<&dyn SessionStore>,
) -> WakeState {
    wake_state_of(workspace, run_dir, store, None)
}

/// [`wake_state_in`] for a run whose lineage lives in a shared database (`shared`,
/// with `store` its transcripts): lineage is read from there, `lineage.json` not at
/// all. Reads only. A database that cannot be read reads as no lineage.
pub fn wake_state_of(
    workspace: impl AsRef<Path>,
    run_dir: impl AsRef<Path>,
    store: Option<&dyn SessionStore>,
    shared: Option<&SharedRun>,
) -> WakeState {
    let workspace = workspace.as_ref();
    let run_dir = run_dir.as_ref();
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let brief = notes::read(&notes::brief_path(&canonical));
    let goal = notes::read(&notes::goal_path(&canonical));
    let mut state = WakeState {
        waking: brief.as_deref().is_some_and(notes::brief_complete),
        checks: goal.as_deref().map_or(0, notes::count_checks),
        brief,
        goal,
        ..WakeState::default()
    };
    if let (Some(shared), Some(store)) = (shared, store) {
        if let Ok((woke, steps)) = shared.lineage() {
            state.woke = woke;
            state.steps = steps
                .into_iter()
                .filter(|(_, id)| store.has_session(id).unwrap_or(false))
                .collect();
        }
    } else if let Some(file) = Lineage::read(run_dir, &canonical) {
        state.woke = file.woke;
        let sqlite = match store {
            Some(_) => None,
            None => SqliteSessionStore::open_read_only(&RunDir::new(run_dir).sessions_db())
                .ok()
                .flatten(),
        };
        let store = store.or(sqlite.as_ref().map(|s| s as &dyn SessionStore));
        if let Some(store) = store {
            state.steps = file
                .steps
                .into_iter()
                .filter(|(_, id)| store.has_session(id).unwrap_or(false))
                .collect();
        }
    }
    state
}

/// Why a wake starts (part of) a run afresh although the run directory has a history:
/// what the spec's silent fallbacks (a lineage that does not fit, a session no longer
/// in the store) would drop without a word. `flower state` and `flower -v` say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Afresh {
    /// `lineage.json` is there and cannot be read; the run keeps it aside
    /// (`lineage.json.corrupt-<time>`) before writing a new one.
    LineageUnreadable { path: PathBuf },
    /// `lineage.json` was written for another workspace (the directory was moved or
    /// copied): its sessions mean nothing here.
    LineageElsewhere { path: PathBuf, workspace: String },
    /// Sessions the lineage names are not in the store.
    SessionsGone {
        /// Step → session id.
        steps: BTreeMap<String, String>,
        /// Where they were looked for.
        store: StoreSeen,
    },
}

/// The store as [`Afresh::SessionsGone`] found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreSeen {
    /// `sessions.db` does not exist.
    Missing { path: PathBuf },
    /// `sessions.db` exists and holds nothing (0 bytes, or no flower store in it).
    Empty { path: PathBuf, bytes: u64 },
    /// `sessions.db` exists and has other sessions.
    Sqlite { path: PathBuf },
    /// `sessions.db` exists and cannot be read (not a database, damaged, locked):
    /// nothing is known to be gone, and a run refuses to start until it is fixed.
    Unreadable {
        path: PathBuf,
        bytes: u64,
        /// What SQLite said, in flower's words.
        why: String,
    },
    /// The shared database.
    Database,
}

/// Why a wake of this run starts afresh ([`Afresh`]); empty when nothing is dropped.
/// Reads only.
pub fn afresh_of(
    workspace: &Path,
    run_dir: &Path,
    store: Option<&dyn SessionStore>,
    shared: Option<&SharedRun>,
) -> Vec<Afresh> {
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let dir = RunDir::new(run_dir);
    let (steps, seen) = match (shared, store) {
        (Some(shared), Some(_)) => match shared.lineage() {
            Ok((_, steps)) => (steps, StoreSeen::Database),
            Err(_) => return Vec::new(),
        },
        _ => match Lineage::on_disk(run_dir, &canonical) {
            LineageOnDisk::Missing => return Vec::new(),
            LineageOnDisk::Unreadable => {
                return vec![Afresh::LineageUnreadable {
                    path: dir.lineage(),
                }];
            }
            LineageOnDisk::Elsewhere(other) => {
                return vec![Afresh::LineageElsewhere {
                    path: dir.lineage(),
                    workspace: other,
                }];
            }
            LineageOnDisk::Matching(file) => {
                let path = dir.sessions_db();
                let seen = match (store, std::fs::metadata(&path)) {
                    (Some(_), _) => StoreSeen::Database,
                    (None, Err(_)) => StoreSeen::Missing { path },
                    (None, Ok(meta)) => match SqliteSessionStore::open_read_only(&path) {
                        Ok(Some(_)) => StoreSeen::Sqlite { path },
                        Ok(None) => StoreSeen::Empty {
                            path,
                            bytes: meta.len(),
                        },
                        Err(e) => StoreSeen::Unreadable {
                            path,
                            bytes: meta.len(),
                            why: store_why(&e),
                        },
                    },
                };
                (file.steps, seen)
            }
        },
    };
    let sqlite = match (&seen, store) {
        (StoreSeen::Sqlite { path }, None) => {
            SqliteSessionStore::open_read_only(path).ok().flatten()
        }
        _ => None,
    };
    let look_in = store.or(sqlite.as_ref().map(|s| s as &dyn SessionStore));
    let gone: BTreeMap<String, String> = steps
        .into_iter()
        .filter(|(step, id)| {
            super::lineage::is_plain_step_name(step)
                && !look_in.is_some_and(|s| s.has_session(id).unwrap_or(true))
        })
        .collect();
    match gone.is_empty() {
        true => Vec::new(),
        false => vec![Afresh::SessionsGone {
            steps: gone,
            store: seen,
        }],
    }
}

/// What is wrong with a store, in flower's words (a SQLite file's reason without its path).
fn store_why(error: &crate::stores::StoreError) -> String {
    match error {
        crate::stores::StoreError::Database { why, .. } => why.clone(),
        other => other.to_string(),
    }
}

/// The context size (tokens) of the last turn of a session, read-only from
/// `run_dir/sessions.db` (the wake banner's `干活上下文`). `None` when it cannot be read.
pub fn session_context(workspace: &Path, run_dir: &Path, session_id: &str) -> Option<u64> {
    let store = SqliteSessionStore::open_read_only(&RunDir::new(run_dir).sessions_db()).ok()??;
    context_in(
        &store,
        &SessionKey::main(project_key(workspace), session_id),
    )
}

/// The context size (tokens) of the last turn of the session `key` in any store (see
/// [`SessionStore::last_assistant_usage`]). `None` when it cannot be read.
pub fn context_in(store: &dyn SessionStore, key: &SessionKey) -> Option<u64> {
    let usage = store.last_assistant_usage(key).ok()??.to_model();
    Some(usage.context_tokens()).filter(|&tokens| tokens > 0)
}

/// The generation of a step's session (换代): 1, plus one per predecessor that the
/// run's manifest (`run_dir/manifest.json`, or the shared database's) lists in
/// `retired[]`. Read-only; an unreadable manifest counts as no handoff.
pub fn session_generation(
    run_dir: &Path,
    shared: Option<&super::shared::SharedRun>,
    session_id: &str,
) -> u32 {
    let rows = super::manifest::rows_of(run_dir, shared).unwrap_or_default();
    super::manifest::generation_of(&rows, session_id)
}

/// Where a run lives, for what a person is shown about it without touching it (the
/// wake banner, `flower state`): its workspace and run directory, and with a shared
/// database its transcripts' store and its lineage and manifest there. Reads only.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// The workspace (canonical).
    pub workspace: &'a Path,
    pub run_dir: &'a Path,
    /// The transcripts' store; `None`: `run_dir/sessions.db`.
    pub store: Option<&'a dyn SessionStore>,
    pub shared: Option<&'a SharedRun>,
}

impl Place<'_> {
    /// The wake probe of this run ([`wake_state_of`]).
    pub fn wake_state(&self) -> WakeState {
        wake_state_of(self.workspace, self.run_dir, self.store, self.shared)
    }

    /// Why a wake of this run starts afresh ([`afresh_of`]).
    pub fn afresh(&self) -> Vec<Afresh> {
        afresh_of(self.workspace, self.run_dir, self.store, self.shared)
    }

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
