//! The PostgreSQL session store: the same transcripts as [`super::SqliteSessionStore`],
//! in a database that several hosts share, so a run outlives its machine.
//!
//! Layout (schema version [`SCHEMA_VERSION`], every table prefixed `flower_` so the
//! store can live in a database that holds other things):
//! - `flower_meta(key, value)`: `schema_version`;
//! - `flower_entries(id, project_key, session_id, subpath, uuid, type, stored_at, data)`:
//!   one row per entry, `data` the entry's JSON text (text, not `jsonb`: it is given
//!   back byte for byte), `id` orders a key's entries, a partial unique index makes
//!   `uuid` an idempotency key;
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
//! Appends to one session take a transaction-scoped advisory lock on it (keys never hold `/`), so batches
//! from several processes never interleave within a transcript. Advisory locks belong to
//! a database, not a schema: every key starts with `current_schema()`, so that stores in
//! several schemas of one database (a `search_path` per team) never block each other.

use super::summary::fold_session_summary;
use super::{
    HOLDER_TAG, SessionHold, SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError,
};
use ::postgres::types::Type;
use ::postgres::{Client, NoTls};
use serde_json::Value;
use std::collections::HashSet;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{SystemTime, UNIX_EPOCH};

/// The schema version this build writes and the newest it can read.
pub const SCHEMA_VERSION: i64 = 2;

/// How long a connection attempt may take unless the URL says (`connect_timeout=`).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How many connections (threads) a store keeps.
pub const POOL_SIZE: usize = 2;

/// Migration `i` brings the schema from version `i` to `i + 1`. Append only.
const MIGRATIONS: [&str; 2] = ["
    CREATE TABLE flower_entries (
        id          BIGSERIAL PRIMARY KEY,
        project_key TEXT   NOT NULL,
        session_id  TEXT   NOT NULL,
        subpath     TEXT   NOT NULL DEFAULT '',
        uuid        TEXT,
        type        TEXT,
        stored_at   BIGINT NOT NULL,
        data        TEXT   NOT NULL
    );
    CREATE INDEX flower_entries_by_key ON flower_entries (project_key, session_id, subpath, id);
    CREATE UNIQUE INDEX flower_entries_uuid ON flower_entries (project_key, session_id, subpath, uuid)
        WHERE uuid IS NOT NULL;
    CREATE TABLE flower_summaries (
        project_key TEXT   NOT NULL,
        session_id  TEXT   NOT NULL,
        mtime       BIGINT NOT NULL,
        data        TEXT   NOT NULL,
        PRIMARY KEY (project_key, session_id)
    );
    CREATE INDEX flower_summaries_by_session ON flower_summaries (session_id);
", "
    CREATE TABLE flower_runs (
        run_key     TEXT    PRIMARY KEY,
        named       BOOLEAN NOT NULL,
        project_key TEXT    NOT NULL,
        workspace   TEXT    NOT NULL,
        woke        BIGINT  NOT NULL DEFAULT 0,
        holder      TEXT,
        created_at  BIGINT  NOT NULL,
        updated_at  BIGINT  NOT NULL
    );
    CREATE TABLE flower_lineage (
        run_key     TEXT   NOT NULL REFERENCES flower_runs (run_key),
        step        TEXT   NOT NULL,
        session_id  TEXT   NOT NULL,
        updated_at  BIGINT NOT NULL,
        PRIMARY KEY (run_key, step)
    );
    CREATE TABLE flower_manifest (
        id      BIGSERIAL PRIMARY KEY,
        run_key TEXT NOT NULL REFERENCES flower_runs (run_key),
        run     TEXT NOT NULL,
        data    TEXT NOT NULL
    );
    CREATE INDEX flower_manifest_by_run ON flower_manifest (run_key, run);
"];

/// Serialises migrations between processes (an arbitrary constant: "flower" in ASCII).
const MIGRATION_LOCK: i64 = 0x666c_6f77_6572;

/// A validated store URL: `postgres://` or `postgresql://`, parseable by the driver.
#[derive(Clone)]
pub struct PostgresUrl {
    config: ::postgres::Config,
    shown: String,
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Display for PostgresUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Why a store URL was refused. Never repeats the password.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("expected a URL starting with postgres:// or postgresql://")]
    Scheme,
    #[error("not a PostgreSQL URL: {0}")]
    Driver(#[source] ::postgres::Error),
    #[error("the URL names no host")]
    NoHost,
    #[error("the URL names no database (postgres://host:port/DATABASE)")]
    NoDatabase,
}

impl FromStr for PostgresUrl {
    type Err = UrlError;

    /// Accepts `postgres://[user[:password]@]host[:port]/database[?options]`. The reason
    /// of an error never repeats the password.
    fn from_str(text: &str) -> Result<Self, UrlError> {
        let text = text.trim();
        let Some(rest) = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
        else {
            return Err(UrlError::Scheme);
        };
        let config = ::postgres::Config::from_str(text).map_err(UrlError::Driver)?;
        if config.get_hosts().is_empty() {
            return Err(UrlError::NoHost);
        }
        if config.get_dbname().is_none_or(str::is_empty) {
            return Err(UrlError::NoDatabase);
        }
        // Shown without the password: everything after `user:` up to the last `@`
        // before the host part.
        let shown = match rest.split_once('/') {
            Some((authority, path)) => format!("postgres://{}/{path}", redact(authority)),
            None => format!("postgres://{}", redact(rest)),
        };
        Ok(PostgresUrl { config, shown })
    }
}

fn redact(authority: &str) -> String {
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_string(),
    }
}

type Job = Box<dyn FnOnce(&mut Slot) + Send>;

/// One pooled connection, opened on first use and again after it was lost.
struct Slot {
    config: ::postgres::Config,
    client: Option<Client>,
    /// When the connection last served a job.
    used: std::time::Instant,
}

/// A connection idle this long is asked whether it still works before it is used.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl Slot {
    fn new(config: ::postgres::Config) -> Slot {
        Slot {
            config,
            client: None,
            used: std::time::Instant::now(),
        }
    }

    /// The connection, opened anew when it is closed. One that sat idle is checked
    /// first (one round trip): the database may have restarted or the network
    /// dropped it meanwhile, and the job would fail on it though the database is
    /// there, which would cost a run a retry (and a model request).
    fn client(&mut self) -> Result<&mut Client, ::postgres::Error> {
        let idle = std::mem::replace(&mut self.used, std::time::Instant::now()).elapsed();
        if self.client.as_mut().is_some_and(|c| {
            c.is_closed() || (idle >= IDLE_CHECK && c.is_valid(CONNECT_TIMEOUT).is_err())
        }) {
            self.client = None;
        }
        match &mut self.client {
            Some(client) => Ok(client),
            slot @ None => {
                PREPARED.with(|p| p.borrow_mut().clear());
                Ok(slot.insert(self.config.connect(NoTls)?))
            }
        }
    }
}

thread_local! {
    /// The statements prepared on this pool thread's connection (each pool thread has
    /// one; [`Slot::client`] forgets them when it opens a new one).
    static PREPARED: std::cell::RefCell<std::collections::HashMap<&'static str, ::postgres::Statement>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `sql` prepared on this pool thread's connection, once: parsing and planning a
/// statement costs more than running a small one. Only for jobs run by
/// [`PostgresStore::call`].
fn prepared(
    c: &mut Client,
    sql: &'static str,
    types: &[Type],
) -> Result<::postgres::Statement, ::postgres::Error> {
    if let Some(statement) = PREPARED.with(|p| p.borrow().get(sql).cloned()) {
        return Ok(statement);
    }
    let statement = c.prepare_typed(sql, types)?;
    PREPARED.with(|p| p.borrow_mut().insert(sql, statement.clone()));
    Ok(statement)
}

/// The PostgreSQL [`SessionStore`]. `Send + Sync`; cheap to share behind an `Arc`.
pub struct PostgresStore {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    url: PostgresUrl,
    /// The connection that holds this process's session locks, started on first use.
    locker: Mutex<Option<mpsc::Sender<LockJob>>>,
    /// The schema the store's tables are in (`current_schema()`), read at open.
    schema: std::sync::OnceLock<String>,
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
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::with_capacity(POOL_SIZE);
        for i in 0..POOL_SIZE {
            let rx = rx.clone();
            let config = url.config.clone();
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
                .map_err(|e| StoreError::Io(format!("cannot start a database thread: {e}")))?;
            threads.push(thread);
        }
        let store = PostgresStore {
            jobs: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
            url: url.clone(),
            locker: Mutex::new(None),
            schema: std::sync::OnceLock::new(),
        };
        store.migrate()?;
        let schema: Option<String> =
            store.call(|c| Ok(c.query_one("SELECT current_schema()::text", &[])?.get(0)))?;
        let _ = store.schema.set(schema.unwrap_or_default());
        Ok(store)
    }

    /// The URL, without password.
    pub fn url(&self) -> &PostgresUrl {
        &self.url
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let found = self.call(|c| {
            // Read before writing anything, so a newer schema is left untouched.
            let exists: Option<String> = c
                .query_one("SELECT to_regclass('flower_meta')::text", &[])?
                .get(0);
            if exists.is_none() {
                return Ok(0);
            }
            read_version(c)
        })?;
        if found > SCHEMA_VERSION {
            return Err(self.newer(found));
        }
        let found = self.call(|c| {
            let mut tx = c.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS flower_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            )?;
            // A newer flower may have migrated meanwhile: then every migration is
            // skipped, the commit changes nothing, and the version is refused below.
            let found = read_version(&mut tx)?;
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
                tx.batch_execute(sql)?;
                tx.execute(
                    "INSERT INTO flower_meta (key, value) VALUES ('schema_version', $1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    &[&(i as i64 + 1).to_string()],
                )?;
            }
            tx.commit()?;
            Ok(found)
        })?;
        if found > SCHEMA_VERSION {
            return Err(self.newer(found));
        }
        Ok(())
    }

    fn newer(&self, found: i64) -> StoreError {
        StoreError::NewerSchema {
            path: PathBuf::from(self.url.to_string()),
            found,
            known: SCHEMA_VERSION,
        }
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
            if result.is_err() && slot.client.as_ref().is_some_and(Client::is_closed) {
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
            return Err(self.error("the store is closed"));
        }
        match answer.recv() {
            Ok(result) => result.map_err(|e| {
                if is_unavailable(&e) {
                    StoreError::Unavailable {
                        path: PathBuf::from(self.url.to_string()),
                        why: describe(&e),
                    }
                } else {
                    self.error(describe(&e))
                }
            }),
            Err(_) => Err(self.error("the database thread stopped")),
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

    fn error(&self, why: impl Into<String>) -> StoreError {
        StoreError::Database {
            path: PathBuf::from(self.url.to_string()),
            why: why.into(),
        }
    }

    /// [`SessionStore::append`], returning how many entries were stored.
    pub fn append_counted(&self, key: &SessionKey, entries: &[Value]) -> Result<usize, StoreError> {
        key.validate()?;
        let mut rows = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let Some(object) = entry.as_object() else {
                return Err(StoreError::NotAnObject { index });
            };
            let uuid = object
                .get("uuid")
                .and_then(Value::as_str)
                .map(str::to_string);
            let kind = object
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_string);
            let data = serde_json::to_string(entry)
                .map_err(|e| StoreError::Io(format!("entry {index}: {e}")))?;
            rows.push((uuid, kind, data));
        }
        if rows.is_empty() {
            return Ok(0);
        }
        let lock = session_lock(self.schema.get().map_or("", String::as_str), key);
        let key = key.clone();
        let entries = entries.to_vec();
        self.call(move |c| {
            let subpath = key.subpath.clone().unwrap_or_default();
            let (mut uuids, mut kinds, mut datas) = (vec![], vec![], vec![]);
            for (uuid, kind, data) in rows {
                uuids.push(uuid);
                kinds.push(kind);
                datas.push(data);
            }
            // Round trips and planning are what a single append costs on a fast disk,
            // so BEGIN and the lock go in one (the key is a number: nothing to quote),
            // the statements are prepared once per connection, and the insert reads
            // the summary it folds into: BEGIN + lock, insert, summary, COMMIT.
            let open = Open {
                client: c,
                committed: false,
            };
            let tx = &mut *open.client;
            tx.batch_execute(&format!("BEGIN; SELECT pg_advisory_xact_lock({lock})"))?;
            let now = now_ms();
            // One statement, after the lock (so it reads the summary as the last
            // append left it); ids follow the batch's order.
            let insert = prepared(
                tx,
                "WITH ins AS ( \
                   INSERT INTO flower_entries \
                   (project_key, session_id, subpath, uuid, type, stored_at, data) \
                   SELECT $1, $2, $3, u, t, $7, d \
                   FROM unnest($4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS x(u, t, d, n) \
                   ORDER BY n \
                   ON CONFLICT (project_key, session_id, subpath, uuid) WHERE uuid IS NOT NULL \
                   DO NOTHING RETURNING uuid) \
                 SELECT (SELECT count(*) FROM ins), \
                        (SELECT array_agg(uuid) FILTER (WHERE uuid IS NOT NULL) FROM ins), \
                        s.mtime, s.data \
                 FROM (SELECT 1) AS one LEFT JOIN flower_summaries s \
                   ON s.project_key = $1 AND s.session_id = $2",
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT_ARRAY,
                    Type::TEXT_ARRAY,
                    Type::TEXT_ARRAY,
                    Type::INT8,
                ],
            )?;
            let row = tx.query_one(
                &insert,
                &[
                    &key.project_key,
                    &key.session_id,
                    &subpath,
                    &uuids,
                    &kinds,
                    &datas,
                    &now,
                ],
            )?;
            let count = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            if key.subpath.is_none() && count > 0 {
                let mut fresh: HashSet<String> = row
                    .get::<_, Option<Vec<String>>>(1)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                // An entry without a uuid is always stored; of a uuid the batch holds
                // twice, only the first.
                let stored = entries.iter().zip(&uuids).filter_map(|(entry, uuid)| {
                    match uuid {
                        None => Some(entry),
                        Some(uuid) => fresh.remove(uuid).then_some(entry),
                    }
                });
                let prev_mtime = row.get::<_, Option<i64>>(2).unwrap_or(0);
                let prev_data = row
                    .get::<_, Option<&str>>(3)
                    .and_then(|text| serde_json::from_str(text).ok());
                let data = fold_session_summary(prev_data, stored);
                let mtime = now.max(prev_mtime);
                let upsert = prepared(
                    tx,
                    "INSERT INTO flower_summaries (project_key, session_id, mtime, data) \
                     VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (project_key, session_id) \
                     DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
                    &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
                )?;
                tx.execute(
                    &upsert,
                    &[&key.project_key, &key.session_id, &mtime, &data.to_string()],
                )?;
            }
            open.commit()?;
            Ok(count)
        })
    }

    /// [`SessionStore::delete`], returning how many entries were removed.
    pub fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError> {
        key.validate()?;
        let key = key.clone();
        self.call(move |c| {
            let mut tx = c.transaction()?;
            let removed = match &key.subpath {
                None => {
                    tx.execute(
                        "DELETE FROM flower_summaries WHERE project_key = $1 AND session_id = $2",
                        &[&key.project_key, &key.session_id],
                    )?;
                    tx.execute(
                        "DELETE FROM flower_entries WHERE project_key = $1 AND session_id = $2",
                        &[&key.project_key, &key.session_id],
                    )?
                }
                Some(sub) => tx.execute(
                    "DELETE FROM flower_entries \
                     WHERE project_key = $1 AND session_id = $2 AND subpath = $3",
                    &[&key.project_key, &key.session_id, sub],
                )?,
            };
            tx.commit()?;
            Ok(removed as usize)
        })
    }
}

/// One row of `flower_runs`: a run and the workspace it began in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub run_key: String,
    /// Named by the user (`--run-key`), not derived from a workspace path.
    pub named: bool,
    /// The project key of the workspace that began the run: its transcripts' keys.
    pub project_key: String,
    /// That workspace's canonical path, as its host saw it.
    pub workspace: String,
    pub woke: u64,
}

/// A run's state in the database (schema version 2). Each call is one transaction.
impl PostgresStore {
    /// The run's row, if it was ever registered.
    pub fn run_find(&self, run_key: &str) -> Result<Option<RunRow>, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let row = c.query_opt(
                "SELECT run_key, named, project_key, workspace, woke FROM flower_runs \
                 WHERE run_key = $1",
                &[&run_key],
            )?;
            Ok(row.map(|r| run_row(&r)))
        })
    }

    /// Registers `row` unless its key exists; returns the row as stored (the existing
    /// one wins: nothing of an existing run is overwritten).
    pub fn run_register(&self, row: &RunRow) -> Result<RunRow, StoreError> {
        let row = row.clone();
        self.call(move |c| {
            let now = now_ms();
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO flower_runs \
                 (run_key, named, project_key, workspace, woke, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, 0, $5, $5) ON CONFLICT (run_key) DO NOTHING",
                &[
                    &row.run_key,
                    &row.named,
                    &row.project_key,
                    &row.workspace,
                    &now,
                ],
            )?;
            let stored = tx.query_one(
                "SELECT run_key, named, project_key, workspace, woke FROM flower_runs \
                 WHERE run_key = $1",
                &[&row.run_key],
            )?;
            tx.commit()?;
            Ok(run_row(&stored))
        })
    }

    /// The run's wake count and step → session id.
    pub fn run_lineage(&self, run_key: &str) -> Result<(u64, Vec<(String, String)>), StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            // One snapshot for both reads: a concurrent remember never half shows.
            let mut tx = c.build_transaction().read_only(true).start()?;
            let woke = tx
                .query_opt(
                    "SELECT woke FROM flower_runs WHERE run_key = $1",
                    &[&run_key],
                )?
                .map_or(0, |r| r.get::<_, i64>(0).max(0) as u64);
            let steps = tx
                .query(
                    "SELECT step, session_id FROM flower_lineage WHERE run_key = $1 \
                     ORDER BY step COLLATE \"C\"",
                    &[&run_key],
                )?
                .into_iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            tx.commit()?;
            Ok((woke, steps))
        })
    }

    /// Sets the session of one step of a registered run.
    pub fn run_remember(
        &self,
        run_key: &str,
        step: &str,
        session_id: &str,
    ) -> Result<(), StoreError> {
        let (run_key, step, session_id) = (
            run_key.to_string(),
            step.to_string(),
            session_id.to_string(),
        );
        self.call(move |c| {
            // One statement, so one round trip and one commit.
            c.execute(
                "WITH touched AS (UPDATE flower_runs SET updated_at = $4 WHERE run_key = $1) \
                 INSERT INTO flower_lineage (run_key, step, session_id, updated_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (run_key, step) \
                 DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
                &[&run_key, &step, &session_id, &now_ms()],
            )?;
            Ok(())
        })
    }

    /// Counts one more wake of a registered run; returns the new count.
    pub fn run_wake(&self, run_key: &str) -> Result<u64, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let row = c.query_opt(
                "UPDATE flower_runs SET woke = woke + 1, updated_at = $2 WHERE run_key = $1 \
                 RETURNING woke",
                &[&run_key, &now_ms()],
            )?;
            Ok(row.map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
        })
    }

    /// `/new`: forgets the run's steps and wakes (its manifest rows stay: a record).
    pub fn run_reset(&self, run_key: &str) -> Result<(), StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let mut tx = c.transaction()?;
            tx.execute("DELETE FROM flower_lineage WHERE run_key = $1", &[&run_key])?;
            tx.execute(
                "UPDATE flower_runs SET woke = 0, updated_at = $2 WHERE run_key = $1",
                &[&run_key, &now_ms()],
            )?;
            tx.commit()
        })
    }

    /// Replaces the manifest rows of process `run` in the run `run_key` by `rows` (JSON
    /// texts), leaving every other process's rows as they are, and returns all rows of
    /// the run in write order (a process's rows follow its latest write, as in the file).
    pub fn manifest_merge(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let (run_key, run) = (run_key.to_string(), run.to_string());
        self.call(move |c| {
            let mut tx = c.transaction()?;
            // One merge of a run at a time: each then sees every merge before it, so
            // the mirror written from its answer is never missing a committed row.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/manifest/' || $1, 0))",
                &[&run_key],
            )?;
            tx.execute(
                "DELETE FROM flower_manifest WHERE run_key = $1 AND run = $2",
                &[&run_key, &run],
            )?;
            // All rows in one statement, ids in their order.
            tx.execute(
                "INSERT INTO flower_manifest (run_key, run, data) \
                 SELECT $1, $2, d FROM unnest($3::text[]) WITH ORDINALITY AS t(d, n) ORDER BY n",
                &[&run_key, &run, &rows],
            )?;
            let all = tx
                .query(
                    "SELECT data FROM flower_manifest WHERE run_key = $1 ORDER BY id",
                    &[&run_key],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            tx.commit()?;
            Ok(all)
        })
    }

    /// Every manifest row of the run (JSON texts), in write order.
    pub fn manifest_rows(&self, run_key: &str) -> Result<Vec<String>, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            Ok(c.query(
                "SELECT data FROM flower_manifest WHERE run_key = $1 ORDER BY id",
                &[&run_key],
            )?
            .into_iter()
            .map(|r| r.get(0))
            .collect())
        })
    }
}

/// A run held by this process across hosts: a session-level advisory lock on a
/// connection of its own, released when the lease is dropped, or by the server when the
/// process dies (its connection closes; for a host that vanishes, the keepalives below
/// end its connection within about a minute).
///
/// A lock dies with its connection, so a lease checks its connection every
/// [`LEASE_CHECK`]; when the database went away (a restart, a network cut) it takes the
/// lock again as soon as the database answers. If another process took the run in
/// between, the lease is lost: the `on_lost` callback given to
/// [`PostgresStore::lease_run`] hears who holds it now, and the lease does nothing more.
pub struct RunLease {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RunLease {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What [`PostgresStore::lease_run`] found.
pub enum Leased {
    Held(RunLease),
    /// Another process holds the run: what it wrote about itself, if anything.
    Busy(Option<String>),
}

/// The advisory-lock key of a run's hold, `$1` the run key (see the module docs on
/// `current_schema()`).
const RUN_LOCK_KEY: &str = "hashtextextended(current_schema() || '/run/' || $1, 0)";

/// A connection that holds session-level locks: TCP keepalives on, so that the server
/// ends it, and lets go of its locks, within about a minute of its host vanishing.
fn connect_holding(config: &::postgres::Config) -> Result<Client, ::postgres::Error> {
    let mut c = config.connect(NoTls)?;
    c.batch_execute(
        "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; \
         SET tcp_keepalives_count = 3",
    )?;
    Ok(c)
}

/// Closes a connection that stopped answering, on a thread of its own: closing waits
/// for the server to see the end, which over a hung network (packets dropped, nothing
/// refused) it may not for many minutes, and the lock's holder must go on meanwhile.
fn close_apart(client: Client) {
    let closing = std::thread::Builder::new()
        .name("flower-pg-close".into())
        .spawn(move || drop(client));
    // Without a thread to spare (the closure and its client come back dropped here),
    // this waits like any close.
    drop(closing);
}

/// This machine's name, as holders describe themselves (`?` when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// How often a held lease makes sure its connection, and so its lock, is still there.
pub const LEASE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Told who holds a run now that this process's lease on it is lost.
pub type OnLeaseLost = Box<dyn FnOnce(Option<String>) + Send>;

/// The lease's side of one run: its connection's lock on `run_key`.
struct LeaseConn {
    config: ::postgres::Config,
    run_key: String,
    holder: String,
}

impl LeaseConn {
    fn connect(&self) -> Result<Client, ::postgres::Error> {
        connect_holding(&self.config)
    }

    /// Takes the lock without waiting, recording who holds it; `false`: someone else does.
    fn try_take(&self, c: &mut Client) -> Result<bool, ::postgres::Error> {
        let got: bool = c
            .query_one(
                &format!("SELECT pg_try_advisory_lock({RUN_LOCK_KEY})"),
                &[&self.run_key],
            )?
            .get(0);
        if got {
            c.execute(
                "UPDATE flower_runs SET holder = $2 WHERE run_key = $1",
                &[&self.run_key, &self.holder],
            )?;
        }
        Ok(got)
    }

    fn holder(&self, c: &mut Client) -> Result<Option<String>, ::postgres::Error> {
        Ok(c.query_opt(
            "SELECT holder FROM flower_runs WHERE run_key = $1",
            &[&self.run_key],
        )?
        .and_then(|r| r.get(0)))
    }

    /// Keeps the lock until `stopped` says so (or its sender is dropped), taking it again
    /// after the connection was lost; then lets go.
    fn keep(&self, mut c: Client, stopped: &mpsc::Receiver<()>, on_lost: OnLeaseLost) {
        // `true` when the lease is to end; else it slept one check interval.
        let stop_after_wait = || {
            !matches!(
                stopped.recv_timeout(LEASE_CHECK),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        };
        loop {
            if stop_after_wait() {
                break;
            }
            if c.is_valid(LEASE_CHECK).is_ok() {
                continue;
            }
            // Gone, or too slow to tell: let go of it for sure (a live connection
            // would keep the lock, and the retake below would take it for another's).
            close_apart(c);
            // Refusals while the run still names this process: the server has not yet
            // ended the old connection. A few are waited out; more mean someone took
            // the run without saying so.
            let mut refused_as_ours = 0;
            loop {
                if stop_after_wait() {
                    return;
                }
                let Ok(mut fresh) = self.connect() else {
                    continue;
                };
                match self.try_take(&mut fresh) {
                    Ok(true) => {
                        c = fresh;
                        break;
                    }
                    Ok(false) => {
                        let held = self.holder(&mut fresh).ok().flatten();
                        if held.as_deref() == Some(self.holder.as_str()) && refused_as_ours < 10 {
                            refused_as_ours += 1;
                            continue;
                        }
                        on_lost(held);
                        return;
                    }
                    Err(_) => continue,
                }
            }
        }
        let _ = c.execute(
            "UPDATE flower_runs SET holder = NULL WHERE run_key = $1 AND holder = $2",
            &[&self.run_key, &self.holder],
        );
        let _ = c.query_one(
            &format!("SELECT pg_advisory_unlock({RUN_LOCK_KEY})"),
            &[&self.run_key],
        );
    }
}

impl PostgresStore {
    /// Takes the run `run_key` for this process, recording `holder` (who is running it)
    /// beside it. Waits up to `wait` for a holder to let go (`None`: for ever) — a
    /// process that was just killed may take the server a moment to notice. See
    /// [`RunLease`] for `on_lost`.
    pub fn lease_run(
        &self,
        run_key: &str,
        holder: &str,
        wait: Option<std::time::Duration>,
        on_lost: OnLeaseLost,
    ) -> Result<Leased, StoreError> {
        let lease = LeaseConn {
            config: self.url.config.clone(),
            run_key: run_key.to_string(),
            holder: holder.to_string(),
        };
        let (answer_tx, answer) =
            mpsc::channel::<Result<Option<Option<String>>, ::postgres::Error>>();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("flower-pg-lease".into())
            .spawn(move || {
                let take = || -> Result<(Client, Option<Option<String>>), ::postgres::Error> {
                    let mut c = lease.connect()?;
                    let deadline = wait.map(|w| std::time::Instant::now() + w);
                    loop {
                        if lease.try_take(&mut c)? {
                            return Ok((c, None));
                        }
                        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                            let held = lease.holder(&mut c)?;
                            return Ok((c, Some(held)));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                };
                match take() {
                    Ok((c, None)) => {
                        let _ = answer_tx.send(Ok(None));
                        lease.keep(c, &stopped, on_lost);
                    }
                    Ok((_, busy)) => {
                        let _ = answer_tx.send(Ok(busy));
                    }
                    Err(e) => {
                        let _ = answer_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("cannot start a database thread: {e}")))?;
        match answer.recv() {
            Ok(Ok(None)) => Ok(Leased::Held(RunLease {
                stop: Some(stop),
                thread: Some(thread),
            })),
            Ok(Ok(Some(held))) => {
                let _ = thread.join();
                Ok(Leased::Busy(held))
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(self.error(describe(&e)))
            }
            Err(_) => Err(self.error("the database thread stopped")),
        }
    }
}

/// A request to the session-lock connection.
enum LockJob {
    Take {
        session_id: String,
        shared: bool,
        reply: mpsc::Sender<Result<SessionHold, ::postgres::Error>>,
    },
    Release {
        session_id: String,
        shared: bool,
    },
}

/// The guard of one session lock: releases it when dropped.
struct SessionGuard {
    session_id: String,
    shared: bool,
    locker: mpsc::Sender<LockJob>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let _ = self.locker.send(LockJob::Release {
            session_id: std::mem::take(&mut self.session_id),
            shared: self.shared,
        });
    }
}

/// The advisory-lock key of a session hold (see the module docs on `current_schema()`).
const SESSION_HOLD_KEY: &str = "hashtextextended(current_schema() || '/hold/' || $1, 0)";

/// `flower <pid> <since> <host>`, cut to what `application_name` keeps (63 bytes).
fn holder_tag() -> String {
    let host = hostname();
    let mut tag = format!(
        "{HOLDER_TAG} {} {} {host}",
        std::process::id(),
        chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
    );
    while tag.len() > 63 {
        tag.pop();
    }
    tag
}

/// The session locks one process holds, on one connection: the locks are
/// session-level, so the server drops them with the connection (the process died, or
/// its host vanished and the keepalives ended the connection). A connection found lost
/// is opened again and every lock taken again; one someone else took meanwhile is
/// given up.
struct Locker {
    config: ::postgres::Config,
    client: Option<Client>,
    /// Held locks: (session id, shared) → how many guards hold it.
    held: std::collections::HashMap<(String, bool), usize>,
}

impl Locker {
    fn client(&mut self) -> Result<&mut Client, ::postgres::Error> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        match &mut self.client {
            Some(client) => Ok(client),
            slot @ None => {
                let mut config = self.config.clone();
                config.application_name(&holder_tag());
                Ok(slot.insert(connect_holding(&config)?))
            }
        }
    }

    fn try_lock(c: &mut Client, session_id: &str, shared: bool) -> Result<bool, ::postgres::Error> {
        let function = if shared {
            "pg_try_advisory_lock_shared"
        } else {
            "pg_try_advisory_lock"
        };
        let query = format!("SELECT {function}({SESSION_HOLD_KEY})");
        Ok(c.query_one(query.as_str(), &[&session_id])?.get(0))
    }

    /// Who holds the lock on `session_id`, as its connection names itself.
    fn holder(c: &mut Client, session_id: &str) -> Result<Option<String>, ::postgres::Error> {
        let query = format!(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND ((l.classid::bigint << 32) | l.objid::bigint) = {SESSION_HOLD_KEY} \
             LIMIT 1"
        );
        Ok(c.query_opt(query.as_str(), &[&session_id])?
            .map(|r| r.get::<_, String>(0))
            .filter(|name| name.starts_with(HOLDER_TAG)))
    }

    fn take(&mut self, session_id: &str, shared: bool) -> Result<SessionHold, ::postgres::Error> {
        let key = (session_id.to_string(), shared);
        if let Some(count) = self.held.get_mut(&key) {
            *count += 1;
            return Ok(SessionHold::Held(Box::new(())));
        }
        let c = self.client()?;
        if Locker::try_lock(c, session_id, shared)? {
            self.held.insert(key, 1);
            Ok(SessionHold::Held(Box::new(())))
        } else {
            Ok(SessionHold::Busy(Locker::holder(c, session_id)?))
        }
    }

    fn release(&mut self, session_id: String, shared: bool) {
        let key = (session_id, shared);
        let Some(count) = self.held.get_mut(&key) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.held.remove(&key);
        let function = if shared {
            "pg_advisory_unlock_shared"
        } else {
            "pg_advisory_unlock"
        };
        if let Some(c) = self.client.as_mut() {
            let query = format!("SELECT {function}({SESSION_HOLD_KEY})");
            let _ = c.query_one(query.as_str(), &[&key.0]);
        }
    }

    /// With locks held, makes sure the connection still holds them.
    fn check(&mut self) {
        if self.held.is_empty() {
            return;
        }
        if self
            .client
            .as_mut()
            .is_some_and(|c| c.is_valid(LEASE_CHECK).is_ok())
        {
            return;
        }
        // Gone, or too slow to tell: end it for sure, then take every lock again.
        if let Some(gone) = self.client.take() {
            close_apart(gone);
        }
        let held = std::mem::take(&mut self.held);
        let Ok(c) = self.client() else {
            self.held = held;
            return;
        };
        let mut keep = std::collections::HashMap::new();
        for ((session_id, shared), count) in held {
            if let Ok(true) = Locker::try_lock(c, &session_id, shared) {
                keep.insert((session_id, shared), count);
            }
        }
        self.held = keep;
    }

    fn serve(mut self, jobs: mpsc::Receiver<LockJob>) {
        loop {
            match jobs.recv_timeout(LEASE_CHECK) {
                Ok(LockJob::Take {
                    session_id,
                    shared,
                    reply,
                }) => {
                    let result = self.take(&session_id, shared);
                    if result.is_err() {
                        self.client = None;
                    }
                    let _ = reply.send(result);
                }
                Ok(LockJob::Release { session_id, shared }) => self.release(session_id, shared),
                Err(mpsc::RecvTimeoutError::Timeout) => self.check(),
                // The store is gone: closing the connection releases what is left.
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

impl PostgresStore {
    /// The session-lock connection's queue, started on first use.
    fn locker(&self) -> Result<mpsc::Sender<LockJob>, StoreError> {
        let mut locker = self.locker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(jobs) = locker.as_ref() {
            return Ok(jobs.clone());
        }
        let (jobs, queue) = mpsc::channel();
        let serving = Locker {
            config: self.url.config.clone(),
            client: None,
            held: std::collections::HashMap::new(),
        };
        std::thread::Builder::new()
            .name("flower-pg-locks".into())
            .spawn(move || serving.serve(queue))
            .map_err(|e| StoreError::Io(format!("cannot start a database thread: {e}")))?;
        *locker = Some(jobs.clone());
        Ok(jobs)
    }
}

fn run_row(r: &::postgres::Row) -> RunRow {
    RunRow {
        run_key: r.get(0),
        named: r.get(1),
        project_key: r.get(2),
        workspace: r.get(3),
        woke: r.get::<_, i64>(4).max(0) as u64,
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
    fn append(&self, key: &SessionKey, entries: &[Value]) -> Result<(), StoreError> {
        self.append_counted(key, entries).map(|_| ())
    }

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        key.validate()?;
        let key = key.clone();
        let texts: Vec<(i64, String)> = self.call(move |c| {
            let subpath = key.subpath.clone().unwrap_or_default();
            let rows = c.query(
                "SELECT id, data FROM flower_entries \
                 WHERE project_key = $1 AND session_id = $2 AND subpath = $3 ORDER BY id",
                &[&key.project_key, &key.session_id, &subpath],
            )?;
            Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
        })?;
        if texts.is_empty() {
            return Ok(None);
        }
        texts
            .into_iter()
            .map(|(id, text)| {
                serde_json::from_str(&text)
                    .map_err(|e| self.error(format!("entry row {id} is not valid JSON: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Reads assistant rows newest first, a page at a time, and stops at the first
    /// with a usage: one or two rows however long the session is.
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<Value>, StoreError> {
        const PAGE: i64 = 8;
        key.validate()?;
        let mut before = i64::MAX;
        loop {
            let key = key.clone();
            let page: Vec<(i64, String)> = self.call(move |c| {
                let subpath = key.subpath.clone().unwrap_or_default();
                let rows = c.query_typed(
                    "SELECT id, data FROM flower_entries \
                     WHERE project_key = $1 AND session_id = $2 AND subpath = $3 \
                       AND type = 'assistant' AND id < $4 \
                     ORDER BY id DESC LIMIT $5",
                    &[
                        (&key.project_key, Type::TEXT),
                        (&key.session_id, Type::TEXT),
                        (&subpath, Type::TEXT),
                        (&before, Type::INT8),
                        (&PAGE, Type::INT8),
                    ],
                )?;
                Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
            })?;
            for (_, text) in &page {
                if let Ok(entry) = serde_json::from_str::<Value>(text)
                    && let Some(usage) = crate::transcript::markers::turn_usage(&entry)
                {
                    return Ok(Some(usage.clone()));
                }
            }
            match page.last() {
                Some(&(id, _)) if page.len() as i64 == PAGE => before = id,
                _ => return Ok(None),
            }
        }
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
        super::summary::parse_summary_rows(rows, |why| self.error(why))
    }

    fn delete(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.delete_counted(key).map(|_| ())
    }

    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        key.validate()?;
        let key = key.clone();
        self.call(move |c| {
            let rows = c.query(
                "SELECT DISTINCT subpath COLLATE \"C\" AS s FROM flower_entries \
                 WHERE project_key = $1 AND session_id = $2 AND subpath <> '' ORDER BY s",
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
            .map_err(|_| self.error("the database thread stopped"))?;
        match answer.recv() {
            Ok(Ok(SessionHold::Held(_))) => Ok(SessionHold::Held(Box::new(SessionGuard {
                session_id: session_id.to_string(),
                shared,
                locker,
            }))),
            Ok(Ok(busy)) => Ok(busy),
            Ok(Err(e)) if is_unavailable(&e) => Err(StoreError::Unavailable {
                path: PathBuf::from(self.url.to_string()),
                why: describe(&e),
            }),
            Ok(Err(e)) => Err(self.error(describe(&e))),
            Err(_) => Err(self.error("the database thread stopped")),
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
        // No SQLSTATE: the connection failed (I/O, closed, timed out), or something
        // local went wrong (a type conversion): only the first kind is worth a wait.
        None => {
            let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
            let text = e.to_string();
            e.is_closed()
                || io
                || [
                    "error connecting",
                    "error communicating",
                    "timeout",
                    "connection closed",
                ]
                .iter()
                .any(|t| text.starts_with(t))
        }
    }
}

fn read_version(c: &mut impl ::postgres::GenericClient) -> Result<i64, ::postgres::Error> {
    let row = c.query_opt(
        "SELECT value FROM flower_meta WHERE key = 'schema_version'",
        &[],
    )?;
    Ok(row
        .and_then(|r| r.get::<_, String>(0).trim().parse().ok())
        .unwrap_or(0))
}

/// The driver's error with the server's message when there is one (the plain
/// `Display` says only "db error").
fn describe(e: &::postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}

/// The advisory-lock key that serialises appends to one session: FNV-1a of
/// `<schema>/session/<project>/<session>`, computed here so that it can be sent as a
/// literal beside BEGIN.
fn session_lock(schema: &str, key: &SessionKey) -> i64 {
    let text = format!("{schema}/session/{}/{}", key.project_key, key.session_id);
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// A transaction begun by hand (`BEGIN` sent with the first statement): rolled back when
/// dropped unless it was committed, so that an error never leaves the pooled
/// connection inside an aborted transaction.
struct Open<'a> {
    client: &'a mut Client,
    committed: bool,
}

impl Open<'_> {
    fn commit(mut self) -> Result<(), ::postgres::Error> {
        self.committed = true;
        self.client.batch_execute("COMMIT")
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        // On a closed connection there is nothing to roll back: it is replaced anyway.
        if !self.committed && !self.client.is_closed() {
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
