//! Session stores: where every transcript lives, and what a resumed session is fed.
//!
//! [`SessionStore`] follows the Claude Agent SDK's `SessionStore` protocol (DESIGN.md §4),
//! so that it means the same as the stores users already know. [`SqliteSessionStore`]
//! keeps everything verbatim in `runs/sessions.db`; [`PruningSessionStore`] wraps any
//! store and cleans what `load` feeds back to the model, never what is stored.

mod entry_uuid;
pub mod key;
mod par;
pub mod postgres;
pub mod prune;
pub mod sqlite;
pub mod summary;

pub use self::postgres::{PostgresStore, PostgresUrl, UrlError};
pub use key::{KeyError, SessionKey, project_key};
pub use prune::{CacheWindow, PruneOptions, PruningSessionStore};
pub use sqlite::SqliteSessionStore;

use crate::transcript::{Entry, Loaded, MessageUsage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// A session of a project, as `list_sessions` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: String,
    /// Last write, epoch milliseconds.
    pub mtime: i64,
}

/// A session's summary, as `list_session_summaries` reports it. `data` uses the SDK's
/// field names (`first_prompt`, `created_at`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub session_id: String,
    /// Storage time of the summary, epoch milliseconds.
    pub mtime: i64,
    pub data: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("会话键 {key:?} 不行:{why}")]
    BadKey {
        key: String,
        #[source]
        why: KeyError,
    },
    /// The database failed or refused: `why` says how in a line (quoting the cause),
    /// `source` is the driver's error behind it when there is one.
    #[error("{path}:{why}")]
    Database {
        path: PathBuf,
        why: String,
        #[source]
        source: Option<DriverError>,
    },
    /// The database is away for now (connection lost or refused, server restarting):
    /// the same call may succeed later. Retried like a network outage.
    #[error("{path}:{why}")]
    Unavailable {
        path: PathBuf,
        why: String,
        #[source]
        source: Option<DriverError>,
    },
    #[error(
        "{path} 是更新版本的 flower 写的(schema 版本 {found},这个 flower 只认到 {known});升级 flower 再用它"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("第 {index} 条不是 JSON 对象")]
    NotAnObject { index: usize },
    /// An entry that cannot be written as JSON.
    #[error("第 {index} 条写不成 JSON({source})")]
    Encode {
        index: usize,
        #[source]
        source: serde_json::Error,
    },
    /// A stored record that is not what it should be (`what` says which).
    #[error("{what} 读不出来({source})")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// Something local the store needs failed (a database thread would not start).
    #[error("{what}({source})")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// An entry of an append, as a store keeps it: its JSON text (what is stored, the
/// bytes every reader gets back) and the entry itself (what the store reads of it:
/// uuid, type, the summary's fields).
pub(crate) struct Incoming<'a> {
    pub(crate) text: String,
    pub(crate) entry: &'a Entry,
}

/// The entries of an append as [`Incoming`]s, in order: each serialized once (an
/// entry read from a line is that line again), never parsed back.
pub(crate) fn incoming(entries: &[Entry]) -> Result<Vec<Incoming<'_>>, StoreError> {
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let text = entry
                .to_json()
                .map_err(|source| StoreError::Encode { index, source })?;
            Ok(Incoming { text, entry })
        })
        .collect()
}

/// The error a database driver gave, kept as it is: `rusqlite::Error` (SQLite),
/// `postgres::Error` (or the server's `postgres::error::DbError` for what the server
/// refused), `std::io::Error` (the file system), `serde_json::Error` (a stored row).
/// `downcast_ref` it to look at its kind (`sqlite_error_code()`, `code()`).
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

impl StoreError {
    /// Whether waiting and trying again may help (see [`StoreError::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

/// What [`SessionStore::hold_session`] found.
pub enum SessionHold {
    /// Held until this guard is dropped.
    Held(Box<dyn Send + Sync>),
    /// Someone else holds it: how it described itself, if known.
    Busy(Option<String>),
}

/// How a process holding a session through a shared store describes itself:
/// `flower <pid> <since, RFC 3339> <host>`.
pub const HOLDER_TAG: &str = "flower";

/// The session-store protocol. Entries are JSON objects (typed [`Entry`]s that keep
/// every field as written); `load` returns them deep-equal and in append order. An entry's `uuid` is an idempotency key within a key.
pub trait SessionStore: Send + Sync {
    /// Appends a batch atomically: it lands whole or not at all. `[]` is a no-op.
    fn append(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError>;
    /// [`append`](Self::append), for a batch that another append follows shortly (a
    /// reply whose tool results come next): the store may acknowledge it once it is
    /// committed (it survives this process being killed, and every reader sees it)
    /// but before it is flushed to stable storage, which the next `append` then does
    /// for both. The default is `append`.
    fn append_deferred(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.append(key, entries)
    }
    /// `None` for a key never written. Each entry is parsed from its stored text
    /// straight into its [`Entry`] (no `Value` tree), every field kept as written.
    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError>;
    /// Main sessions of a project (never subpaths), with mtime in epoch ms.
    fn list_sessions(&self, project_key: &str) -> Result<Vec<SessionInfo>, StoreError>;
    fn list_session_summaries(&self, project_key: &str) -> Result<Vec<SessionSummary>, StoreError>;
    /// Deletes a key; a main key cascades to its subkeys. Unknown keys are fine.
    fn delete(&self, key: &SessionKey) -> Result<(), StoreError>;
    /// The subpaths stored under a main key.
    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError>;
    /// Whether a main transcript with this session id exists, in any project.
    fn has_session(&self, session_id: &str) -> Result<bool, StoreError>;

    /// The `usage` of the key's last assistant turn that has one (synthetic API errors
    /// skipped, [`Entry::turn_usage`]): the context size of the
    /// session's last turn. The default loads the transcript; a store may read less.
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<MessageUsage>, StoreError> {
        Ok(self
            .load(key)?
            .and_then(|entries| entries.iter().rev().find_map(|e| e.turn_usage().cloned())))
    }

    /// Holds session `session_id` for this process beyond this machine, until the
    /// returned guard is dropped: exclusively while it may append, `shared` while a
    /// fork reads it. A store that lives on one machine needs nothing beyond the run
    /// directory's file locks (the default); one that hosts share takes a lock in the
    /// database, so that two hosts mounting a workspace at one path never append to
    /// one session at once. [`SessionHold::Busy`] says who holds it, as the holder
    /// described itself ([`HOLDER_TAG`] text), if known.
    fn hold_session(&self, session_id: &str, shared: bool) -> Result<SessionHold, StoreError> {
        let _ = (session_id, shared);
        Ok(SessionHold::Held(Box::new(())))
    }

    /// Where a store on the network lives (host, port), so that a run waiting for it
    /// can probe it like the model's endpoint. `None` for a local store.
    fn endpoint(&self) -> Option<(String, u16)> {
        None
    }

    /// What a resumed session is fed: `load` then [`prune::prune`]; the default goes
    /// through [`load_resume`](Self::load_resume).
    fn load_pruned(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Entry>>, StoreError> {
        Ok(self
            .load_resume(key, options)?
            .map(|entries| entries.iter().filter_map(|e| e.json.entry()).collect()))
    }

    /// [`load_pruned`](Self::load_pruned), each entry a [`Loaded`]. A store that reads
    /// entries as JSON text hands each one to [`prune::prepare_text`] as it reads it:
    /// an entry no rule changes stays that text, and no `Value` tree of the transcript
    /// is ever built (on a long one, 5 × its text).
    fn load_resume(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Loaded>>, StoreError> {
        Ok(self.load(key)?.map(|entries| {
            let prepared = entries.into_iter().map(prune::prepare_entry).collect();
            prune::prune_prepared(prepared, options)
        }))
    }
}
