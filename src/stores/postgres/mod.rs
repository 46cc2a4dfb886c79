//! The PostgreSQL session store: the same transcripts as [`super::SqliteSessionStore`],
//! in a database that several hosts share, so a run outlives its machine.
//!
//! Layout (schema version [`SCHEMA_VERSION`], every table prefixed `flower_` so the
//! store can live in a database that holds other things):
//! - `flower_meta(key, value)`: `schema_version`;
//! - `flower_transcripts(id, project_key, session_id, subpath)`: one row per key, kept
//!   when its entries are deleted (an append racing a delete never refers to a row
//!   that is gone);
//! - `flower_entries(id, transcript, uuid, type, stored_at, data)`: one row per entry,
//!   `data` the entry's JSON text (text, not `jsonb`: it is given back byte for byte),
//!   `transcript` its key's row, `id` orders a key's entries, a partial unique index
//!   makes `uuid` an idempotency key. Until version 3 every row carried the key's three
//!   columns itself (in the row and both indexes); the upgrade copies the rows into the
//!   new table in the migration's one transaction;
//! - `flower_summaries(project_key, session_id, mtime, data)`: folded inside `append`;
//! - since version 2, a run's state beside its transcripts: `flower_runs(run_key, named,
//!   project_key, workspace, woke, …)` (one row per run), `flower_lineage(run_key, step,
//!   session_id)` and `flower_manifest(id, run_key, run, data)` (one row per manifest
//!   row, `id` in write order). What the rows mean is `continuity::shared`'s business.
//!
//! Connections: the trait is synchronous and is called from inside a tokio runtime, so
//! each connection (the `postgres` crate's blocking client, which runs its own small
//! runtime) lives on a dedicated thread and serves requests over a channel. A few such
//! threads form the pool. No TLS ([`::postgres::NoTls`]): meant for loopback or a
//! trusted network; put a TLS-terminating proxy in front for anything else.
//!
//! Durability: `append` returns after PostgreSQL committed the transaction (with the
//! server's default `synchronous_commit`, the commit is flushed to its WAL), so an
//! acknowledged append survives this process and the server being killed.
//! `append_deferred` (the engine's reply with tool calls, and every tool result of a
//! turn but the last) commits without waiting for the flush: it survives this process
//! being killed and the connection being lost, and the turn's last append, durable,
//! flushes the WAL through all of them: one WAL flush a turn, not one per entry. Only
//! the server itself dying in the few hundred milliseconds before that can lose them,
//! as SQLite's `synchronous=NORMAL` may lose its last commits to a power cut; the
//! engine then meets the failed durable append and the step resumes from what is
//! stored (the reply is asked again).
//!
//! Network: every connection has TCP keepalives (30 s idle, 10 s apart, 3 probes) and a
//! `tcp_user_timeout` of [`TCP_USER_TIMEOUT`] unless the URL sets its own (in
//! milliseconds, as libpq reads it), so a call on a network that silently drops packets
//! fails (and is waited out as an outage) instead of hanging (tests/it/store_network_drop.rs).
//! Appends to one session take a transaction-scoped advisory lock on it (keys never hold `/`), so batches
//! from several processes never interleave within a transcript. Advisory locks belong to
//! a database, not a schema: every key starts with `current_schema()`, so that stores in
//! several schemas of one database (a `search_path` per team) never block each other.

mod lease;
mod locks;
mod pipe;
mod pool;
mod runs;
mod schema;
mod transcripts;
mod url;

pub use lease::{LEASE_CHECK, Leased, OnLeaseLost, RunLease, hostname};
pub use runs::{ListedRun, ManifestSeen, MergedManifest, RunRow};
pub use schema::SCHEMA_VERSION;
pub use url::{PostgresUrl, UrlError};

use lease::*;
use locks::*;
use pipe::*;
use pool::*;
use transcripts::WrittenSummary;

use super::prune::{self, PruneOptions};
use super::summary::{SummaryData, fold_session_summary};
use super::{
    DriverError, HOLDER_TAG, Incoming, SessionHold, SessionInfo, SessionKey, SessionStore,
    SessionSummary, StoreError,
};
use crate::transcript::{Entry, Loaded, MessageUsage};
use ::postgres::types::Type;
use ::postgres::{Client, NoTls};
use std::collections::HashSet;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{SystemTime, UNIX_EPOCH};

/// Set on every connection the store opens, in the round trip after it connects (not
/// as the startup packet's `options`, which connection poolers such as PgBouncer
/// refuse). The server's own keepalives end a connection whose host vanished within
/// about a minute, so its session locks are let go; `idle_in_transaction_session_timeout`
/// ends a transaction whose client stopped sending (a partition that healed, a process
/// stopped with SIGSTOP), so that no transaction holds a session's or the run's lock
/// for longer. flower's transactions send their statements back to back: none waits on
/// the client for anything but the network.
pub const SERVER_SETTINGS: &str = "SET tcp_keepalives_idle = 30; \
     SET tcp_keepalives_interval = 10; SET tcp_keepalives_count = 3; \
     SET idle_in_transaction_session_timeout = '60s'";

/// How long a connection attempt may take unless the URL says (`connect_timeout=`).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long sent data may go unacknowledged before a connection counts as lost.
pub const TCP_USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How many connections (threads) a store keeps.
pub const POOL_SIZE: usize = 2;

/// How many connections a store's calls use at most: the pool and the append
/// connection (`pipe.rs`); besides them, one that holds session locks, when one is held.
pub const CONNECTIONS: usize = POOL_SIZE + 1;

/// The PostgreSQL [`SessionStore`]. `Send + Sync`; cheap to share behind an `Arc`.
pub struct PostgresStore {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    url: PostgresUrl,
    /// The connection that holds this process's session locks, started on first use.
    locker: Mutex<Option<mpsc::Sender<LockJob>>>,
    /// The schema the store's tables are in (`current_schema()`), read at open.
    schema: std::sync::OnceLock<String>,
    /// The append connection's queue (`pipe.rs`), started on first use.
    pipe: Mutex<Option<mpsc::Sender<PipeJob>>>,
    /// Each session's summary as this process last wrote it, so that the next append
    /// can fold into it without reading it first (`transcripts.rs`).
    summaries: Mutex<std::collections::HashMap<(String, String), WrittenSummary>>,
    /// How this store's appends went ([`PostgresStore::append_trips`]).
    trips: AppendTripCounters,
}

/// How many of a store's appends took one round trip and how many read the session's
/// summary first (the first append to a session in this process, one after another
/// writer, a retry). What the tests read to know that the one-round-trip path is the one
/// taken: a guard that always failed would pass every other test and show only in a
/// bench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendTrips {
    pub one_trip: u64,
    pub read_first: u64,
}

#[derive(Debug, Default)]
struct AppendTripCounters {
    one_trip: std::sync::atomic::AtomicU64,
    read_first: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .finish()
    }
}

impl PostgresStore {
    /// Connects, checks the schema and applies pending migrations.
    ///
    /// Errors name the database (without password): unreachable, credentials refused,
    /// a schema written by a newer flower ([`StoreError::NewerSchema`], nothing is
    /// touched then).
    pub fn open(url: &PostgresUrl) -> Result<Self, StoreError> {
        let store = Self::connect(url, url.blocking())?;
        store.migrate()?;
        store.read_schema_name()?;
        Ok(store)
    }

    /// Connects for reading only (`flower serve`): no migration, and every transaction
    /// of every connection is read-only on the server's side
    /// (`default_transaction_read_only`), so a write would fail there too. A schema of
    /// another version than this flower's is refused, nothing touched.
    pub fn open_read_only(url: &PostgresUrl) -> Result<Self, StoreError> {
        let mut config = url.blocking();
        let options = match config.get_options() {
            Some(given) => format!("{given} -c default_transaction_read_only=on"),
            None => "-c default_transaction_read_only=on".to_string(),
        };
        config.options(&options);
        let store = Self::connect(url, config)?;
        let found = store.call(|c| {
            let exists: Option<String> = c
                .query_one("SELECT to_regclass('flower_meta')::text", &[])?
                .get(0);
            if exists.is_none() {
                return Ok(0);
            }
            schema::read_version(c)
        })?;
        if found > SCHEMA_VERSION {
            return Err(store.newer(found));
        }
        if found < SCHEMA_VERSION {
            return Err(StoreError::Database {
                path: PathBuf::from(url.to_string()),
                why: format!(
                    "表是第 {found} 版,这个 flower 读第 {SCHEMA_VERSION} 版:先用会写的 flower 命令打开一次"
                ),
                source: None,
            });
        }
        store.read_schema_name()?;
        Ok(store)
    }

    fn read_schema_name(&self) -> Result<(), StoreError> {
        let schema: Option<String> =
            self.call(|c| Ok(c.query_one("SELECT current_schema()::text", &[])?.get(0)))?;
        let _ = self.schema.set(schema.unwrap_or_default());
        Ok(())
    }

    fn connect(url: &PostgresUrl, config: ::postgres::Config) -> Result<Self, StoreError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::with_capacity(POOL_SIZE);
        for i in 0..POOL_SIZE {
            let rx = rx.clone();
            let config = config.clone();
            let thread = std::thread::Builder::new()
                .name(format!("flower-pg-{i}"))
                .spawn(move || {
                    let mut slot = Slot::new(config);
                    loop {
                        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        match job {
                            Ok(job) => job(&mut slot),
                            Err(_) => break,
                        }
                    }
                })
                .map_err(|source| StoreError::Io {
                    what: "起不了数据库线程".into(),
                    source,
                })?;
            threads.push(thread);
        }
        let store = PostgresStore {
            jobs: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
            url: url.clone(),
            locker: Mutex::new(None),
            schema: std::sync::OnceLock::new(),
            pipe: Mutex::new(None),
            summaries: Mutex::new(std::collections::HashMap::new()),
            trips: AppendTripCounters::default(),
        };
        Ok(store)
    }

    /// The URL, without password.
    pub fn url(&self) -> &PostgresUrl {
        &self.url
    }

    /// How this store's appends went so far.
    pub fn append_trips(&self) -> AppendTrips {
        use std::sync::atomic::Ordering::Relaxed;
        AppendTrips {
            one_trip: self.trips.one_trip.load(Relaxed),
            read_first: self.trips.read_first.load(Relaxed),
        }
    }

    /// A server setting (`current_setting(name)`) as a pooled connection of this store
    /// sees it: what [`SERVER_SETTINGS`] set, for an operator or a test to check.
    pub fn server_setting(&self, name: &str) -> Result<String, StoreError> {
        let name = name.to_string();
        self.call(move |c| Ok(c.query_one("SELECT current_setting($1)", &[&name])?.get(0)))
    }

    /// Runs `run` on a pooled connection and waits for its result. A connection that
    /// was lost is dropped and reopened by the next call.
    fn call<T: Send + 'static>(
        &self,
        run: impl FnOnce(&mut Client) -> Result<T, ::postgres::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = mpsc::channel();
        let job: Job = Box::new(move |slot: &mut Slot| {
            let result = slot.client().and_then(run);
            // A connection-class error drops the connection even before the driver
            // has noticed that it is closed, so that the next call reconnects.
            if let Err(e) = &result
                && (is_unavailable(e) || slot.client.as_ref().is_some_and(Client::is_closed))
            {
                slot.client = None;
            }
            let _ = reply.send(result);
        });
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|jobs| jobs.send(job).is_ok());
        if sent != Some(true) {
            return Err(self.error("存储已经关了"));
        }
        match answer.recv() {
            Ok(result) => result.map_err(|e| self.failed(e)),
            Err(_) => Err(self.error("数据库线程停了")),
        }
    }

    /// The host and port the store connects to first, for the reachability probe
    /// while the database is away.
    pub fn endpoint(&self) -> Option<(String, u16)> {
        let host = match self.url.config.get_hosts().first()? {
            ::postgres::config::Host::Tcp(host) => host.clone(),
            ::postgres::config::Host::Unix(_) => return None,
        };
        let port = self.url.config.get_ports().first().copied().unwrap_or(5432);
        Some((host, port))
    }

    /// A key's entries, each `read` from its row's JSON text, in order; `None` for a key
    /// never written. Each row is read as it arrives, on the connection's thread, so
    /// that only the entries are held, never all the rows' text a second time (a
    /// resume's peak memory is its transcript).
    fn load_texts<T: Send + 'static>(
        &self,
        key: &SessionKey,
        read: impl Fn(String) -> serde_json::Result<T> + Send + 'static,
    ) -> Result<Option<Vec<T>>, StoreError> {
        use ::postgres::fallible_iterator::FallibleIterator;
        key.validate()?;
        let key = key.clone();
        let entries = self.call(move |c| {
            let subpath = key.subpath.clone().unwrap_or_default();
            let params: [&(dyn ::postgres::types::ToSql + Sync); 3] =
                [&key.project_key, &key.session_id, &subpath];
            let mut rows = c.query_raw(
                "SELECT id, data FROM flower_entries WHERE transcript = \
                 (SELECT id FROM flower_transcripts \
                  WHERE project_key = $1 AND session_id = $2 AND subpath = $3) ORDER BY id",
                params,
            )?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                match read(row.try_get(1)?) {
                    Ok(entry) => entries.push(entry),
                    // The rows not read yet are discarded by the driver when `rows`
                    // is dropped; the connection stays in step for the next call.
                    Err(e) => return Ok(Err((row.try_get::<_, i64>(0)?, e))),
                }
            }
            Ok(Ok(entries))
        })?;
        match entries {
            Ok(entries) => Ok((!entries.is_empty()).then_some(entries)),
            Err((id, e)) => {
                Err(self.error_because(format!("第 {id} 行记录不是合法的 JSON({e})"), e))
            }
        }
    }

    fn error(&self, why: impl Into<String>) -> StoreError {
        StoreError::Database {
            path: PathBuf::from(self.url.to_string()),
            why: why.into(),
            source: None,
        }
    }

    /// [`error`](Self::error) because of `source`, which `why` quotes.
    fn error_because(
        &self,
        why: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Database {
            path: PathBuf::from(self.url.to_string()),
            why: why.into(),
            source: Some(Box::new(source)),
        }
    }

    /// The driver's error as the store's: [`StoreError::Unavailable`] when its kind
    /// says the database is away ([`is_unavailable`]), else a database error. What
    /// the server refused keeps the server's error as its source, anything else the
    /// driver's.
    fn failed(&self, e: ::postgres::Error) -> StoreError {
        let path = PathBuf::from(self.url.to_string());
        let why = describe(&e);
        let unavailable = is_unavailable(&e);
        let source: DriverError = match e.as_db_error() {
            Some(db) => Box::new(db.clone()),
            None => Box::new(e),
        };
        if unavailable {
            StoreError::Unavailable {
                path,
                why,
                source: Some(source),
            }
        } else {
            StoreError::Database {
                path,
                why,
                source: Some(source),
            }
        }
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Closing the channel ends each thread after its current job.
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl SessionStore for PostgresStore {
    fn append(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.append_counted(key, entries).map(|_| ())
    }

    fn append_deferred(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.append_with(key, super::incoming(entries)?, false)
            .map(|_| ())
    }

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError> {
        self.load_texts(key, |text| Entry::parse(&text))
    }

    fn load_resume(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Loaded>>, StoreError> {
        // Each entry's facts are read from its text; no tree is built.
        Ok(self
            .load_texts(key, |text| prune::prepare_text(text.into_boxed_str()))?
            .map(|prepared| prune::prune_prepared(prepared, options)))
    }

    /// One statement: the newest assistant row whose usage counts
    /// ([`crate::transcript::Entry::turn_usage`]'s rules, in SQL), read backwards
    /// along the key's index. `json`, not `jsonb`: the usage comes back as it was
    /// written, key order and all.
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<MessageUsage>, StoreError> {
        use crate::transcript::markers::{API_ERROR_FLAG, SYNTHETIC_MODEL};
        key.validate()?;
        let key = key.clone();
        let text: Option<String> = self.call(move |c| {
            let subpath = key.subpath.clone().unwrap_or_default();
            let usage = prepared(
                c,
                "SELECT (data::json -> 'message' -> 'usage')::text FROM flower_entries \
                 WHERE transcript = (SELECT id FROM flower_transcripts \
                   WHERE project_key = $1 AND session_id = $2 AND subpath = $3) \
                   AND type = 'assistant' \
                   AND json_typeof(data::json -> 'message' -> 'usage') = 'object' \
                   AND (json_typeof(data::json -> $4) IS DISTINCT FROM 'boolean' \
                        OR (data::json ->> $4) <> 'true') \
                   AND (json_typeof(data::json -> 'message' -> 'model') IS DISTINCT FROM 'string' \
                        OR (data::json -> 'message' ->> 'model') <> $5) \
                 ORDER BY id DESC LIMIT 1",
                &[Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT, Type::TEXT],
            )?;
            let row = c.query_opt(
                &usage,
                &[
                    &key.project_key,
                    &key.session_id,
                    &subpath,
                    &API_ERROR_FLAG,
                    &SYNTHETIC_MODEL,
                ],
            )?;
            Ok(row.map(|r| r.get(0)))
        })?;
        text.map(|text| {
            serde_json::from_str(&text)
                .map_err(|e| self.error_because(format!("存着的用量读不出来({e})"), e))
        })
        .transpose()
    }

    fn list_sessions(&self, project_key: &str) -> Result<Vec<SessionInfo>, StoreError> {
        let project_key = project_key.to_string();
        self.call(move |c| {
            let rows = c.query(
                "SELECT session_id, mtime FROM flower_summaries WHERE project_key = $1 \
                 ORDER BY mtime DESC, session_id COLLATE \"C\"",
                &[&project_key],
            )?;
            Ok(rows
                .into_iter()
                .map(|r| SessionInfo {
                    session_id: r.get(0),
                    mtime: r.get(1),
                })
                .collect())
        })
    }

    fn list_session_summaries(&self, project_key: &str) -> Result<Vec<SessionSummary>, StoreError> {
        let project_key = project_key.to_string();
        let rows: Vec<(String, i64, String)> = self.call(move |c| {
            let rows = c.query(
                "SELECT session_id, mtime, data FROM flower_summaries WHERE project_key = $1 \
                 ORDER BY mtime DESC, session_id COLLATE \"C\"",
                &[&project_key],
            )?;
            Ok(rows
                .into_iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })?;
        super::summary::parse_summary_rows(rows, |why, e| self.error_because(why, e))
    }

    fn delete(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.delete_counted(key).map(|_| ())
    }

    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        key.validate()?;
        let key = key.clone();
        self.call(move |c| {
            let rows = c.query(
                "SELECT subpath COLLATE \"C\" AS s FROM flower_transcripts t \
                 WHERE project_key = $1 AND session_id = $2 AND subpath <> '' \
                   AND EXISTS (SELECT 1 FROM flower_entries e WHERE e.transcript = t.id) \
                 ORDER BY s",
                &[&key.project_key, &key.session_id],
            )?;
            Ok(rows.into_iter().map(|r| r.get(0)).collect())
        })
    }

    fn endpoint(&self) -> Option<(String, u16)> {
        PostgresStore::endpoint(self)
    }

    fn hold_session(&self, session_id: &str, shared: bool) -> Result<SessionHold, StoreError> {
        let locker = self.locker()?;
        let (reply, answer) = mpsc::channel();
        locker
            .send(LockJob::Take {
                session_id: session_id.to_string(),
                shared,
                reply,
            })
            .map_err(|_| self.error("数据库线程停了"))?;
        match answer.recv() {
            Ok(Ok(SessionHold::Held(_))) => Ok(SessionHold::Held(Box::new(SessionGuard {
                session_id: session_id.to_string(),
                shared,
                locker,
            }))),
            Ok(Ok(busy)) => Ok(busy),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(self.error("数据库线程停了")),
        }
    }

    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let session_id = session_id.to_string();
        self.call(move |c| {
            c.query_one(
                "SELECT EXISTS (SELECT 1 FROM flower_summaries WHERE session_id = $1)",
                &[&session_id],
            )
            .map(|r| r.get(0))
        })
    }
}

/// Whether an error means the database is away for now (a lost or refused connection,
/// a server shutting down or starting, too many connections), not that the request
/// was wrong: such a call may succeed once the server is back.
fn is_unavailable(e: &::postgres::Error) -> bool {
    match e.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || code.starts_with("57P") || code == "53300"
        }
        // No SQLSTATE: the connection failed (closed, or an I/O error connecting or
        // talking to the server), or something local went wrong (a type conversion, a
        // message that would not encode or parse: `InvalidData`/`InvalidInput`): only
        // the first kind is worth a wait. Decided by the kind of the driver's cause.
        None => {
            let io = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .is_some_and(|io| {
                    !matches!(
                        io.kind(),
                        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
                    )
                });
            e.is_closed() || io
        }
    }
}

/// The driver's error with the server's message when there is one (the plain
/// `Display` says only "db error").
fn describe(e: &::postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("PostgreSQL 出错({} ({}))", db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(source) => format!("PostgreSQL 出错({e}: {source})"),
        None => format!("PostgreSQL 出错({e})"),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
