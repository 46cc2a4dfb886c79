//! The schema of `sessions.db`: its migrations, the version a file records, and how
//! entry rows name their key in each layout ([`Layout`]).

use super::{SCHEMA_VERSION, database, database_because, newer, timed_error};
use crate::stores::{SessionKey, StoreError};
use rusqlite::{Connection, OptionalExtension, params};
// SQLite's value (a column's), not JSON.
use rusqlite::types::Value as SqlValue;
use std::path::Path;
use std::time::Instant;

/// Migration `i` brings the schema from version `i` to `i + 1`. Append only: a shipped
/// migration's statements are never edited (its comments may be corrected).
const MIGRATIONS: [&str; 3] = ["
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE entries (
        id          INTEGER PRIMARY KEY,
        project_key TEXT    NOT NULL,
        session_id  TEXT    NOT NULL,
        subpath     TEXT    NOT NULL DEFAULT '',
        uuid        TEXT,
        type        TEXT,
        stored_at   INTEGER NOT NULL,
        data        TEXT    NOT NULL
    );
    CREATE INDEX entries_by_key ON entries (project_key, session_id, subpath, id);
    CREATE UNIQUE INDEX entries_uuid ON entries (project_key, session_id, subpath, uuid)
        WHERE uuid IS NOT NULL;
    CREATE TABLE summaries (
        project_key TEXT    NOT NULL,
        session_id  TEXT    NOT NULL,
        mtime       INTEGER NOT NULL,
        data        TEXT    NOT NULL,
        PRIMARY KEY (project_key, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX summaries_by_session ON summaries (session_id);
", "
    CREATE TABLE transcripts (
        id          INTEGER PRIMARY KEY,
        project_key TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        subpath     TEXT NOT NULL DEFAULT '',
        UNIQUE (project_key, session_id, subpath)
    );
    INSERT INTO transcripts (project_key, session_id, subpath)
        SELECT project_key, session_id, subpath FROM entries
        GROUP BY project_key, session_id, subpath ORDER BY min(id);
    CREATE TABLE entries_2 (
        id         INTEGER PRIMARY KEY,
        transcript INTEGER NOT NULL,
        uuid       BLOB,
        type       TEXT,
        stored_at  INTEGER NOT NULL,
        data       TEXT    NOT NULL
    );
    INSERT INTO entries_2 (id, transcript, uuid, type, stored_at, data)
        SELECT e.id, t.id,
               CASE WHEN e.uuid GLOB
                 '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
               THEN unhex(replace(e.uuid, '-', '')) ELSE e.uuid END,
               e.type, e.stored_at, e.data
        FROM entries e JOIN transcripts t
          ON t.project_key = e.project_key AND t.session_id = e.session_id
         AND t.subpath = e.subpath
        ORDER BY e.id;
    DROP TABLE entries;
    ALTER TABLE entries_2 RENAME TO entries;
    CREATE INDEX entries_by_transcript ON entries (transcript);
    CREATE UNIQUE INDEX entries_uuid ON entries (transcript, uuid) WHERE uuid IS NOT NULL;
", "
    -- Schema 3: entries.data may be a blob, the JSON compressed (packed.rs: LZ4, or
    -- deflate in rows written before LZ4). No table changes; the version keeps older
    -- builds from reading blobs as JSON.
"];
/// How entry rows name their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// Schema 1: the key's three columns in every row (a file opened read-only).
    Keyed,
    /// Since schema 2: the id of the key's `transcripts` row.
    Numbered,
}

impl Layout {
    /// The condition picking a key's entry rows; `?1`, `?2`, `?3` are its project key,
    /// session id and subpath (`''` for a main transcript).
    pub(super) fn rows_of(self) -> &'static str {
        match self {
            Layout::Keyed => "project_key = ?1 AND session_id = ?2 AND subpath = ?3",
            Layout::Numbered => {
                "transcript = (SELECT id FROM transcripts \
                 WHERE project_key = ?1 AND session_id = ?2 AND subpath = ?3)"
            }
        }
    }

    /// The sub-transcripts of a session (`?1`, `?2`) that hold entries, in order.
    pub(super) fn subkeys(self) -> &'static str {
        match self {
            Layout::Keyed => {
                "SELECT DISTINCT subpath FROM entries \
                 WHERE project_key = ?1 AND session_id = ?2 AND subpath <> '' ORDER BY subpath"
            }
            Layout::Numbered => {
                "SELECT subpath FROM transcripts t \
                 WHERE project_key = ?1 AND session_id = ?2 AND subpath <> '' \
                 AND EXISTS (SELECT 1 FROM entries WHERE transcript = t.id) ORDER BY subpath"
            }
        }
    }
}

/// An entry's `uuid` as the `entries` table keeps it: the 16 bytes of a canonical UUID
/// (36 characters, lowercase hex and hyphens at 8, 13, 18, 23), 20 bytes less in the
/// row and in the index; any other text unchanged. One to one either way. Migration 2
/// converts old rows by the same rule.
pub(super) fn uuid_key(text: &str) -> SqlValue {
    crate::stores::entry_uuid::canonical(text).map_or_else(
        || SqlValue::Text(text.to_string()),
        |bits| SqlValue::Blob(bits.to_be_bytes().to_vec()),
    )
}

/// The id of a key's `transcripts` row, made when there is none yet. Inside the
/// caller's write transaction, so no other writer makes it meanwhile.
pub(super) fn transcript_id(
    conn: &Connection,
    key: &SessionKey,
    subpath: &str,
) -> rusqlite::Result<i64> {
    let found = conn
        .prepare_cached(
            "SELECT id FROM transcripts WHERE project_key = ?1 AND session_id = ?2 AND subpath = ?3",
        )?
        .query_row(params![key.project_key, key.session_id, subpath], |r| {
            r.get(0)
        })
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    conn.prepare_cached(
        "INSERT INTO transcripts (project_key, session_id, subpath) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![key.project_key, key.session_id, subpath])?;
    Ok(conn.last_insert_rowid())
}

/// The schema version recorded in the file: 0 for a file without flower's tables.
pub(super) fn schema_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let started = Instant::now();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| timed_error(path, e, started))?;
    if !tables.iter().any(|t| t == "meta") {
        if tables.iter().any(|t| !t.starts_with("sqlite_")) {
            return Err(database(
                path,
                "是 SQLite 数据库,但不是 flower 的会话库(没有 meta 表)",
            ));
        }
        return Ok(0);
    }
    let value: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| timed_error(path, e, started))?;
    match value {
        None => Ok(0),
        Some(v) => v.trim().parse().map_err(|e| {
            database_because(path, format!("meta 表里的 schema_version {v:?} 读不懂"), e)
        }),
    }
}

pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let started = Instant::now();
    let run = || -> Result<(), StoreError> {
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| timed_error(path, e, started))?;
        // Re-read under the write lock: another process may have migrated meanwhile.
        let found = schema_version(conn, path)?;
        if found > SCHEMA_VERSION {
            return Err(newer(path, found));
        }
        for (from, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            conn.execute_batch(sql)
                .map_err(|e| timed_error(path, e, started))?;
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [(from as i64 + 1).to_string()],
            )
            .map_err(|e| timed_error(path, e, started))?;
        }
        conn.execute_batch("COMMIT")
            .map_err(|e| timed_error(path, e, started))
    };
    let result = run();
    if result.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}
