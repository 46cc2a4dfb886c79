//! The SQLite session store: every transcript flower writes, verbatim, in one file
//! (`runs/sessions.db`) that several flower processes share.
//!
//! Layout (schema version [`SCHEMA_VERSION`]):
//! - `meta(key, value)`: `schema_version`, the version of the newest migration applied;
//! - `transcripts(id, project_key, session_id, subpath)`: one row per key (`subpath`
//!   is `''` for a main transcript), so that entry rows carry a small number instead of
//!   the key's text (in the row and in both indexes: most of a row's overhead);
//! - `entries(id, transcript, uuid, type, stored_at, data)`: one row per transcript
//!   entry, `data` the entry's JSON text, or since schema 3 that text compressed into
//!   a blob when that saves enough ([`packed`]); `id` orders a transcript's entries; a partial
//!   unique index on `(transcript, uuid)` makes `uuid` an idempotency key. `uuid` is
//!   kept as its 16 bytes when it is a canonical UUID (lowercase, hyphenated: what
//!   flower mints), any other text as it is ([`uuid_key`]; a blob never equals a text);
//! - `summaries(project_key, session_id, mtime, data)`: one row per main transcript,
//!   folded inside `append` (see [`super::summary`]); `mtime` (epoch ms, storage time)
//!   is also what `list_sessions` reports, so the two always agree.
//!
//! Schema 1 kept the key's three columns in every entry row. Opening a schema-1 file
//! for writing upgrades it in one transaction (all or nothing, like every migration);
//! a read-only open reads it as it is.
//!
//! The file is in WAL mode with `synchronous=NORMAL`: a commit is in the WAL (the OS
//! page cache) when `append` returns, so it survives the process being killed; only a
//! power loss or kernel crash can lose the last commits, never corrupt the file.
//! Writers take the write lock up front (`BEGIN IMMEDIATE`) and wait up to
//! [`BUSY_TIMEOUT`] for each other.

use super::par;
use super::prune::{self, PruneOptions};
use super::summary::{SummaryData, fold_session_summary};
use super::{Incoming, SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError};
use crate::transcript::{Entry, Loaded, MessageUsage};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod packed;
mod schema;
use schema::{Layout, migrate, schema_version, transcript_id, uuid_key};

/// The schema version this build writes and the newest it can read.
pub const SCHEMA_VERSION: i64 = 3;

/// How long a writer waits for another process's write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// When a commit reaches the disk (SQLite's `synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// The WAL is written at each commit and synced at checkpoints: a commit survives
    /// the process being killed, not necessarily a power loss. The default.
    Normal,
    /// The WAL is also synced at each commit: a commit survives a power loss.
    Full,
}

/// The SQLite [`SessionStore`]. `Send + Sync`: one connection behind a mutex.
pub struct SqliteSessionStore {
    conn: Mutex<Connection>,
    path: PathBuf,
    read_only: bool,
    /// How entry rows name their key: schema 1 (a file opened read-only, not upgraded)
    /// or the current one.
    layout: Layout,
    /// The file's (device, inode) when it was opened for writing: a file renamed or
    /// replaced meanwhile is no longer written (its `-wal` would be left orphaned
    /// beside the old name, for whatever file comes there next to pick up).
    identity: Option<(u64, u64)>,
}

impl std::fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.path)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl SqliteSessionStore {
    /// Opens the store for reading and writing, creating the file (and its parent
    /// directory) when needed, and applies pending migrations.
    ///
    /// Errors name the file: not a SQLite file or corrupt, written by a newer schema
    /// ([`StoreError::NewerSchema`]), a SQLite file that is not a flower store, or a
    /// directory or file that cannot be written.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if path.is_dir() {
            return Err(database(path, "是目录,不是数据库文件"));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.exists()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                let why = format!("建不了目录 {}({e})", parent.display());
                database_because(path, why, e)
            })?;
        }
        if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            create_complete(path);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| sql_error(path, e))?;
        // Every statement of the append path stays prepared (rusqlite keeps 16 by default).
        conn.set_prepared_statement_cache_capacity(32);
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            return Err(database(path, "打不开来写:文件是只读的"));
        }
        // Check the version before changing anything, so a newer file is left alone.
        let found = schema_version(&conn, path)?;
        if found > SCHEMA_VERSION {
            return Err(newer(path, found));
        }
        set_wal(&conn, path)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL")
            .map_err(|e| sql_error(path, e))?;
        migrate(&conn, path)?;
        Ok(SqliteSessionStore {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            read_only: false,
            layout: Layout::Numbered,
            identity: identity(path),
        })
    }

    /// Opens an existing store without writing one byte anywhere: no file is created
    /// (no `-wal`, `-shm` or `-journal`), no file's content or mtime changes, not even
    /// when a killed writer left a `-wal` and `-shm` behind. `Ok(None)` when the file
    /// does not exist or holds no flower store yet.
    ///
    /// How: without a `-wal` the file is opened `immutable` (SQLite takes no locks and
    /// touches nothing); with a `-wal` and a `-shm` it is opened `mode=ro` with
    /// `readonly_shm`, so committed transactions still in the WAL are seen while the
    /// shared-memory index is only read. The store then refuses every write.
    pub fn open_read_only(path: &Path) -> Result<Option<Self>, StoreError> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(database_because(path, format!("读不了({e})"), e)),
            Ok(meta) if meta.is_dir() => {
                return Err(database(path, "是目录,不是数据库文件"));
            }
            Ok(_) => {}
        }
        let wal = sibling(path, "-wal");
        let shm = sibling(path, "-shm");
        let wal_len = std::fs::metadata(&wal).map(|m| m.len()).ok();
        let mode = match wal_len {
            // A WAL with content needs its index; without a -shm SQLite would create one.
            Some(len) if len > 0 && !shm.exists() => {
                return Err(database(
                    path,
                    "有 -wal 日志却没有 -shm 索引;用读写方式打开一次(任何会写的 flower store 命令)就能恢复",
                ));
            }
            Some(len) if len > 0 => "mode=ro&readonly_shm=1",
            _ => "mode=ro&immutable=1",
        };
        let uri = format!("file:{}?{mode}", uri_escape(path));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&uri, flags).map_err(|e| sql_error(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| sql_error(path, e))?;
        let found = schema_version(&conn, path)?;
        if found > SCHEMA_VERSION {
            return Err(newer(path, found));
        }
        if found == 0 {
            return Ok(None);
        }
        Ok(Some(SqliteSessionStore {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
            read_only: true,
            layout: if found < 2 {
                Layout::Keyed
            } else {
                Layout::Numbered
            },
            identity: None,
        }))
    }

    /// Chooses when a commit reaches the disk. The default, [`Synchronous::Normal`],
    /// survives a killed process; [`Synchronous::Full`] also survives a power loss, at
    /// the price of an fsync per append (measured in `benches/store.rs`).
    pub fn set_synchronous(&self, level: Synchronous) -> Result<(), StoreError> {
        let sql = match level {
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
            Synchronous::Full => "PRAGMA synchronous = FULL",
        };
        self.query(|conn| conn.execute_batch(sql))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this store was opened with [`SqliteSessionStore::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// [`SessionStore::append`], returning how many entries were stored (entries whose
    /// `uuid` is already stored under the key are skipped).
    /// Each entry is stored as it serializes, so an entry read from a Claude Code line
    /// is stored as that line.
    pub fn append_counted(&self, key: &SessionKey, entries: &[Entry]) -> Result<usize, StoreError> {
        key.validate()?;
        self.append_rows(key, super::incoming(entries)?)
    }

    fn append_rows(&self, key: &SessionKey, rows: Vec<Incoming<'_>>) -> Result<usize, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.writable()?;
        let subpath = key.subpath.as_deref().unwrap_or("");
        // Deflated before the write lock is taken: other writers do not wait for it.
        let packed: Vec<Option<Vec<u8>>> = rows.iter().map(|row| packed::pack(&row.text)).collect();
        let mut conn = self.lock();
        let run = |conn: &mut Connection| -> rusqlite::Result<usize> {
            let tx = Immediate::begin(conn)?;
            let now = now_ms();
            let mut stored = Vec::new();
            {
                let transcript = transcript_id(&tx, key, subpath)?;
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO entries (transcript, uuid, type, stored_at, data) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for (index, row) in rows.iter().enumerate() {
                    let uuid = row.entry.uuid().map(uuid_key);
                    let kind = row.entry.kind.as_deref();
                    let data = match &packed[index] {
                        Some(blob) => ValueRef::Blob(blob),
                        None => ValueRef::Text(row.text.as_bytes()),
                    };
                    let data = rusqlite::types::ToSqlOutput::Borrowed(data);
                    let n = insert.execute(params![transcript, uuid, kind, now, data])?;
                    if n == 1 {
                        stored.push(index);
                    }
                }
            }
            if key.subpath.is_none() && !stored.is_empty() {
                let prev: Option<(i64, String)> = tx
                    .prepare_cached(
                        "SELECT mtime, data FROM summaries WHERE project_key = ?1 AND session_id = ?2",
                    )?
                    .query_row(params![key.project_key, key.session_id], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()?;
                let (prev_mtime, prev_data) = match prev {
                    Some((mtime, text)) => (mtime, SummaryData::parse(&text)),
                    None => (0, None),
                };
                let data = fold_session_summary(prev_data, stored.iter().map(|&i| rows[i].entry));
                // Storage time, never older than before (the clock may step back).
                let mtime = now.max(prev_mtime);
                tx.prepare_cached(
                    "INSERT INTO summaries (project_key, session_id, mtime, data) \
                     VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (project_key, session_id) \
                     DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
                )?
                .execute(params![
                    key.project_key,
                    key.session_id,
                    mtime,
                    data.to_json()
                ])?;
            }
            tx.commit()?;
            Ok(stored.len())
        };
        let started = Instant::now();
        run(&mut conn).map_err(|e| timed_error(&self.path, e, started))
    }

    /// [`SessionStore::delete`], returning how many entries were removed.
    pub fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError> {
        key.validate()?;
        self.writable()?;
        let mut conn = self.lock();
        let run = |conn: &mut Connection| -> rusqlite::Result<usize> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let removed = match &key.subpath {
                None => {
                    tx.execute(
                        "DELETE FROM summaries WHERE project_key = ?1 AND session_id = ?2",
                        params![key.project_key, key.session_id],
                    )?;
                    let removed = tx.execute(
                        "DELETE FROM entries WHERE transcript IN \
                         (SELECT id FROM transcripts WHERE project_key = ?1 AND session_id = ?2)",
                        params![key.project_key, key.session_id],
                    )?;
                    tx.execute(
                        "DELETE FROM transcripts WHERE project_key = ?1 AND session_id = ?2",
                        params![key.project_key, key.session_id],
                    )?;
                    removed
                }
                Some(sub) => {
                    let removed = tx.execute(
                        &format!("DELETE FROM entries WHERE {}", Layout::Numbered.rows_of()),
                        params![key.project_key, key.session_id, sub],
                    )?;
                    tx.execute(
                        "DELETE FROM transcripts \
                         WHERE project_key = ?1 AND session_id = ?2 AND subpath = ?3",
                        params![key.project_key, key.session_id, sub],
                    )?;
                    removed
                }
            };
            tx.commit()?;
            Ok(removed)
        };
        let started = Instant::now();
        run(&mut conn).map_err(|e| timed_error(&self.path, e, started))
    }

    /// `message.usage` of the newest `assistant` entry of a key that has a usage and is
    /// not a synthetic API error: the context size of the session's last turn, for the
    /// wake banner. Reads rows newest first and stops at the first match, so it costs
    /// one or two rows however long the session is.
    pub fn last_assistant_usage(
        &self,
        key: &SessionKey,
    ) -> Result<Option<MessageUsage>, StoreError> {
        key.validate()?;
        let subpath = key.subpath.as_deref().unwrap_or("");
        let conn = self.lock();
        let run = || -> rusqlite::Result<Option<MessageUsage>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT data FROM entries WHERE {} AND type = 'assistant' ORDER BY id DESC",
                self.layout.rows_of()
            ))?;
            let mut rows = stmt.query(params![key.project_key, key.session_id, subpath])?;
            let mut scratch = Vec::new();
            while let Some(row) = rows.next()? {
                let bytes = packed::json_bytes(row.get_ref(0)?, &mut scratch)?;
                let Ok(entry) = Entry::from_json(bytes) else {
                    continue;
                };
                if let Some(usage) = entry.turn_usage() {
                    return Ok(Some(usage.clone()));
                }
            }
            Ok(None)
        };
        let started = Instant::now();
        run().map_err(|e| timed_error(&self.path, e, started))
    }

    /// The raw JSON text of a key's entries of one `type`, in order, each `map`ped as it
    /// is read (no [`Value`] is built), with the number of entries the key holds in all.
    /// `None` when the key holds no entries. For readers that need a few fields of a
    /// few kinds of entries (the inspect commands' turn series).
    pub fn scan_type<T>(
        &self,
        key: &SessionKey,
        kind: &str,
        mut map: impl FnMut(&[u8]) -> T,
    ) -> Result<Option<(usize, Vec<T>)>, StoreError> {
        key.validate()?;
        let subpath = key.subpath.as_deref().unwrap_or("");
        self.query(|conn| {
            let total: i64 = conn
                .prepare_cached(&format!(
                    "SELECT COUNT(*) FROM entries WHERE {}",
                    self.layout.rows_of()
                ))?
                .query_row(params![key.project_key, key.session_id, subpath], |r| {
                    r.get(0)
                })?;
            if total == 0 {
                return Ok(None);
            }
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT data FROM entries WHERE {} AND type = ?4 ORDER BY id",
                self.layout.rows_of()
            ))?;
            let mut rows = stmt.query(params![key.project_key, key.session_id, subpath, kind])?;
            let mut out = Vec::new();
            let mut scratch = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(map(packed::json_bytes(row.get_ref(0)?, &mut scratch)?));
            }
            Ok(Some((usize::try_from(total).unwrap_or(0), out)))
        })
    }

    /// The raw JSON text of each of a key's entries, in order, handed to `each` as it is
    /// read (no [`Value`] is built); the number of entries. 0: the key holds none. For
    /// readers that render every entry but need few of its fields (`flower show`).
    pub fn for_each_raw(
        &self,
        key: &SessionKey,
        mut each: impl FnMut(&[u8]),
    ) -> Result<usize, StoreError> {
        key.validate()?;
        let subpath = key.subpath.as_deref().unwrap_or("");
        self.query(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT data FROM entries WHERE {} ORDER BY id",
                self.layout.rows_of()
            ))?;
            let mut rows = stmt.query(params![key.project_key, key.session_id, subpath])?;
            let mut count = 0;
            let mut scratch = Vec::new();
            while let Some(row) = rows.next()? {
                each(packed::json_bytes(row.get_ref(0)?, &mut scratch)?);
                count += 1;
            }
            Ok(count)
        })
    }

    /// The entries of a key, each read from its row's JSON text by `read`.
    fn load_mapped<T: Send>(
        &self,
        key: &SessionKey,
        order: ReadOrder,
        read: impl Fn(&[u8]) -> serde_json::Result<T> + Sync,
    ) -> Result<Option<Vec<T>>, StoreError> {
        key.validate()?;
        let subpath = key.subpath.as_deref().unwrap_or("");
        let parsed = self.query(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT id, data FROM entries WHERE {} ORDER BY id",
                self.layout.rows_of()
            ))?;
            let mut rows = stmt.query(params![key.project_key, key.session_id, subpath])?;
            match order {
                ReadOrder::Parallel => parse_rows(&mut rows, read),
                ReadOrder::InOrder => read_rows(&mut rows, read),
            }
        })?;
        match parsed {
            Ok(entries) => Ok((!entries.is_empty()).then_some(entries)),
            Err((id, e)) => Err(database_because(
                &self.path,
                format!("第 {id} 行记录不是合法的 JSON({e})"),
                e,
            )),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a transaction open (rusqlite
        // rolls back on drop), so the connection is still sound.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn writable(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(database(&self.path, "是只读打开的,不能写"));
        }
        // One stat a write: cheap next to a commit.
        if self.identity.is_some() && identity(&self.path) != self.identity {
            // What the WAL holds goes into the moved file now, and the WAL under the
            // old name is emptied, before a new file there can take it for its own
            // (SQLite does neither when it closes a moved file); then the connection
            // is closed.
            let mut conn = self.lock();
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            if let Ok(closed) = Connection::open_in_memory() {
                drop(std::mem::replace(&mut *conn, closed));
            }
            return Err(database(
                &self.path,
                "flower 开着它的时候被挪走或换掉了;不再往里写",
            ));
        }
        Ok(())
    }

    fn query<T>(
        &self,
        run: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let conn = self.lock();
        let started = Instant::now();
        run(&conn).map_err(|e| timed_error(&self.path, e, started))
    }
}

impl SessionStore for SqliteSessionStore {
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<MessageUsage>, StoreError> {
        SqliteSessionStore::last_assistant_usage(self, key)
    }

    fn append(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.append_counted(key, entries).map(|_| ())
    }

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError> {
        self.load_mapped(key, ReadOrder::Parallel, Entry::from_json)
    }

    fn load_resume(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Loaded>>, StoreError> {
        // Each entry's facts are read from its text as it is read; no tree is built.
        Ok(self
            .load_mapped(key, ReadOrder::InOrder, |bytes| {
                match std::str::from_utf8(bytes) {
                    Ok(text) => prune::prepare_text(text.into()),
                    // Not UTF-8, so not JSON: the parser says where.
                    Err(_) => Entry::from_json(bytes).map(prune::prepare_entry),
                }
            })?
            .map(|prepared| prune::prune_prepared(prepared, options)))
    }

    fn list_sessions(&self, project_key: &str) -> Result<Vec<SessionInfo>, StoreError> {
        self.query(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, mtime FROM summaries WHERE project_key = ?1 \
                 ORDER BY mtime DESC, session_id",
            )?;
            stmt.query_map([project_key], |r| {
                Ok(SessionInfo {
                    session_id: r.get(0)?,
                    mtime: r.get(1)?,
                })
            })?
            .collect()
        })
    }

    fn list_session_summaries(&self, project_key: &str) -> Result<Vec<SessionSummary>, StoreError> {
        let rows: Vec<(String, i64, String)> = self.query(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id, mtime, data FROM summaries WHERE project_key = ?1 \
                 ORDER BY mtime DESC, session_id",
            )?;
            stmt.query_map([project_key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })?;
        super::summary::parse_summary_rows(rows, |why, e| database_because(&self.path, why, e))
    }

    fn delete(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.delete_counted(key).map(|_| ())
    }

    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        key.validate()?;
        self.query(|conn| {
            let mut stmt = conn.prepare_cached(self.layout.subkeys())?;
            stmt.query_map(params![key.project_key, key.session_id], |r| r.get(0))?
                .collect()
        })
    }

    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        self.query(|conn| {
            conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM summaries WHERE session_id = ?1)")?
                .query_row([session_id], |r| r.get(0))
        })
    }
}

/// How [`SqliteSessionStore::load_mapped`] reads a transcript's rows.
#[derive(Clone, Copy)]
enum ReadOrder {
    /// Batches of rows parsed on threads ([`parse_rows`]): for building an `Entry`
    /// tree per entry, which costs several times reading the row.
    Parallel,
    /// Each row read into its result as SQLite steps to it, on this thread
    /// ([`read_rows`]): for a resume, which keeps each row's text and reads a few
    /// facts from it. Copying rows into batches and the batches' results into one
    /// vector would cost more memory (a resume's peak is its rows) and, with the
    /// threads started, more CPU than it saves in wall time.
    InOrder,
}

/// Reads a query's `(id, data)` rows and `read`s each `data`, in row order, on this
/// thread.
fn read_rows<T>(
    rows: &mut rusqlite::Rows<'_>,
    read: impl Fn(&[u8]) -> serde_json::Result<T>,
) -> rusqlite::Result<Result<Vec<T>, ParseError>> {
    let mut out = Vec::new();
    let mut inflated = Vec::new();
    while let Some(row) = rows.next()? {
        match read(packed::json_bytes(row.get_ref(1)?, &mut inflated)?) {
            Ok(entry) => out.push(entry),
            Err(e) => return Ok(Err((row.get(0)?, e))),
        }
    }
    Ok(Ok(out))
}

/// Entry rows copied out of SQLite, their JSON texts back to back.
struct Batch {
    /// Index of the first row in the whole result.
    first: usize,
    ids: Vec<i64>,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Rows are handed to parser threads in batches of about this many bytes; a
/// transcript smaller than one batch is parsed on the calling thread.
const BATCH_BYTES: usize = 512 * 1024;

type ParseError = (i64, serde_json::Error);

impl Batch {
    fn new(first: usize, capacity: usize) -> Self {
        Batch {
            first,
            ids: Vec::new(),
            bytes: Vec::with_capacity(capacity),
            ends: Vec::new(),
        }
    }

    fn push(&mut self, id: i64, data: ValueRef<'_>) -> rusqlite::Result<()> {
        packed::append_json(data, &mut self.bytes)?;
        self.ids.push(id);
        self.ends.push(self.bytes.len());
        Ok(())
    }

    fn parse<T>(
        &self,
        read: &impl Fn(&[u8]) -> serde_json::Result<T>,
    ) -> Result<Vec<T>, ParseError> {
        let mut start = 0;
        let mut out = Vec::with_capacity(self.ends.len());
        for (&end, &id) in self.ends.iter().zip(&self.ids) {
            out.push(read(&self.bytes[start..end]).map_err(|e| (id, e))?);
            start = end;
        }
        Ok(out)
    }
}

/// Reads a query's `(id, data)` rows and `read`s each `data`, in row order. Parsing is most of the cost of a long transcript, so once there is more
/// than one batch, batches go to parser threads (one per core) while SQLite is still
/// reading; the calling thread joins the parsing when the rows are read.
fn parse_rows<T: Send>(
    rows: &mut rusqlite::Rows<'_>,
    read: impl Fn(&[u8]) -> serde_json::Result<T> + Sync,
) -> rusqlite::Result<Result<Vec<T>, ParseError>> {
    // Most transcripts fit in one batch: grow it as needed.
    let mut batch = Batch::new(0, 0);
    while batch.bytes.len() < BATCH_BYTES {
        let Some(row) = rows.next()? else {
            return Ok(batch.parse(&read));
        };
        batch.push(row.get(0)?, row.get_ref(1)?)?;
    }
    let read = &read;
    let (tx, rx) = mpsc::channel::<Batch>();
    let queue = Mutex::new(rx);
    std::thread::scope(|scope| {
        let work = || {
            let mut done = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok(batch) = next else { return done };
                done.push((batch.first, batch.parse(read)));
            }
        };
        let helpers: Vec<_> = (1..par::threads())
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        let mut count = batch.ids.len();
        let mut here = Vec::new();
        let mut hand_over = |full: Batch| {
            // The receiver lives as long as this scope, but never lose a batch.
            if let Err(mpsc::SendError(full)) = tx.send(full) {
                here.push((full.first, full.parse(read)));
            }
        };
        let read_result = (|| -> rusqlite::Result<()> {
            while let Some(row) = rows.next()? {
                if batch.bytes.len() >= BATCH_BYTES {
                    let next = Batch::new(count, BATCH_BYTES + BATCH_BYTES / 4);
                    hand_over(std::mem::replace(&mut batch, next));
                }
                batch.push(row.get(0)?, row.get_ref(1)?)?;
                count += 1;
            }
            Ok(())
        })();
        hand_over(batch);
        drop(tx);
        // With no helper thread, every batch waits here for the calling thread.
        let mut done = work();
        done.append(&mut here);
        for helper in helpers {
            done.extend(
                helper
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        read_result?;
        done.sort_unstable_by_key(|(first, _)| *first);
        let mut out = Vec::with_capacity(count);
        for (_, part) in done {
            match part {
                Ok(part) => out.extend(part),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(out))
    })
}

/// Makes a new store at `path` (which does not exist) the fast way: built in a private
/// file next to it, then linked into place complete (WAL mode, every migration applied).
///
/// Why: made in place, a new store costs a rollback journal for the switch to WAL, then
/// a WAL header, then a checkpoint when the process ends, each with its fsyncs: eight
/// on ext4, about 25 ms, most of the wall time of a project's first `flower once`. The
/// private file is written without any sync (nothing in it matters until it is linked),
/// then made durable with one fsync of the file and one of the directory. The link
/// either happens whole or not at all, so no process ever sees a half-made store, and a
/// crash leaves at most a stray `<name>.new-…` file. When two processes race, the first
/// link wins and the other simply opens that store.
///
/// Best effort: on any failure (a read-only directory, a file system without hard
/// links) nothing is left behind and [`SqliteSessionStore::open`] creates the store in
/// place as before, reporting whatever error that meets.
fn create_complete(path: &Path) {
    let Some(name) = path.file_name() else {
        return;
    };
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(
        ".new-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ));
    let tmp = path.with_file_name(tmp_name);
    let build = || -> Result<(), CreateError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&tmp, flags)?;
        conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY")?;
        migrate(&conn, &tmp)?;
        // Last, so that the file says WAL; closing leaves no -wal behind.
        set_wal(&conn, &tmp)?;
        conn.close().map_err(|(_, e)| e)?;
        if sibling(&tmp, "-wal").exists() {
            return Err(CreateError::WalLeft);
        }
        std::fs::File::open(&tmp).and_then(|f| f.sync_all())?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {
                let dir = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                Ok(std::fs::File::open(dir).and_then(|d| d.sync_all())?)
            }
            // Another process made the store meanwhile: use that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e.into()),
        }
    };
    // Whatever happened, the private file goes; `open` carries on with `path`.
    let _ = build();
    for suffix in ["", "-journal", "-wal", "-shm"] {
        let _ = std::fs::remove_file(sibling(&tmp, suffix));
    }
}

/// Why [`create_complete`] gave up (then `open` creates the store in place).
#[derive(Debug, thiserror::Error)]
enum CreateError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("a -wal was left behind")]
    WalLeft,
}

/// Switches to WAL. The switch needs a moment without other connections' transactions
/// and SQLite does not always wait for that itself, so retry within the busy timeout.
fn set_wal(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        let result: rusqlite::Result<String> =
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0));
        match result {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(database(
                    path,
                    format!("切不到 WAL 模式(journal mode 还是 {mode})"),
                ));
            }
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(timed_error(path, e, deadline - BUSY_TIMEOUT)),
        }
    }
}

/// The (device, inode) of the file at `path`, if it is there.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A write transaction (`BEGIN IMMEDIATE`) begun and committed through cached
/// statements: rusqlite's `Transaction` runs both through `execute_batch`, which parses
/// the text again each time (two appends a turn, #46). Rolled back when dropped
/// uncommitted, as rusqlite's is (an error, a panic).
struct Immediate<'c>(&'c Connection);

impl<'c> Immediate<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Immediate(conn))
    }

    fn commit(self) -> rusqlite::Result<()> {
        self.0.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl std::ops::Deref for Immediate<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.0
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// [`sql_error`] for a write begun at `started`: a lock that is still held says how
/// long it was waited for, which is not always [`BUSY_TIMEOUT`] (SQLite gives up at
/// once when waiting could deadlock).
fn timed_error(path: &Path, e: rusqlite::Error, started: Instant) -> StoreError {
    if is_busy(&e) {
        // Past the whole wait a loaded machine adds its own delay: say the wait given.
        let waited = started.elapsed().min(BUSY_TIMEOUT);
        let detail = e.to_string();
        let why = if waited >= Duration::from_secs(1) {
            format!("等了 {} 秒,还被另一个进程锁着({detail})", waited.as_secs())
        } else {
            format!("被另一个进程锁着,SQLite 没有等({detail})")
        };
        return database_because(path, why, e);
    }
    sql_error(path, e)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Percent-escapes a path for a `file:` URI (everything but unreserved bytes and `/`).
fn uri_escape(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn database(path: &Path, why: impl Into<String>) -> StoreError {
    StoreError::Database {
        path: path.to_path_buf(),
        why: why.into(),
        source: None,
    }
}

/// [`database`] because of `source` (SQLite's, the file system's, a row's JSON).
fn database_because(
    path: &Path,
    why: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::Database {
        path: path.to_path_buf(),
        why: why.into(),
        source: Some(Box::new(source)),
    }
}

fn newer(path: &Path, found: i64) -> StoreError {
    StoreError::NewerSchema {
        path: path.to_path_buf(),
        found,
        known: SCHEMA_VERSION,
    }
}

/// Turns a SQLite error into one line that says what is wrong with the file.
fn sql_error(path: &Path, e: rusqlite::Error) -> StoreError {
    let detail = e.to_string();
    let why = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => "不是 SQLite 数据库(或者加密了)".to_string(),
        Some(ErrorCode::DatabaseCorrupt) => format!("数据库坏了({detail})"),
        Some(ErrorCode::CannotOpen) => {
            format!("打不开也建不了数据库({detail});它的目录可写吗?")
        }
        Some(ErrorCode::ReadOnly) => {
            format!("写不进去({detail});文件或目录是只读的吗?")
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            format!("被另一个进程锁着({detail})")
        }
        Some(ErrorCode::DiskFull) => "磁盘满了".to_string(),
        Some(ErrorCode::PermissionDenied) => format!("没有权限({detail})"),
        _ => format!("SQLite 出错({detail})"),
    };
    database_because(path, why, e)
}
