//! The tables, their migrations and the schema version.

use super::*;

/// The schema version this build writes and the newest it can read.
pub const SCHEMA_VERSION: i64 = 3;

/// Migration `i` brings the schema from version `i` to `i + 1`. Append only.
pub(super) const MIGRATIONS: [&str; 3] = ["
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
", "
    CREATE TABLE flower_transcripts (
        id          BIGSERIAL PRIMARY KEY,
        project_key TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        subpath     TEXT NOT NULL DEFAULT '',
        UNIQUE (project_key, session_id, subpath)
    );
    INSERT INTO flower_transcripts (project_key, session_id, subpath)
        SELECT project_key, session_id, subpath FROM flower_entries
        GROUP BY project_key, session_id, subpath ORDER BY min(id);
    CREATE TABLE flower_entries_3 (
        id         BIGSERIAL PRIMARY KEY,
        transcript BIGINT NOT NULL,
        uuid       TEXT,
        type       TEXT,
        stored_at  BIGINT NOT NULL,
        data       TEXT   NOT NULL
    );
    INSERT INTO flower_entries_3 (id, transcript, uuid, type, stored_at, data)
        SELECT e.id, t.id, e.uuid, e.type, e.stored_at, e.data
        FROM flower_entries e JOIN flower_transcripts t
          ON t.project_key = e.project_key AND t.session_id = e.session_id
         AND t.subpath = e.subpath
        ORDER BY e.id;
    SELECT setval(pg_get_serial_sequence('flower_entries_3', 'id'),
                  coalesce(max(id), 0) + 1, false) FROM flower_entries_3;
    DROP TABLE flower_entries;
    ALTER TABLE flower_entries_3 RENAME TO flower_entries;
    ALTER INDEX flower_entries_3_pkey RENAME TO flower_entries_pkey;
    ALTER SEQUENCE flower_entries_3_id_seq RENAME TO flower_entries_id_seq;
    CREATE INDEX flower_entries_by_transcript ON flower_entries (transcript, id);
    CREATE UNIQUE INDEX flower_entries_uuid ON flower_entries (transcript, uuid)
        WHERE uuid IS NOT NULL;
"];

/// Serialises migrations between processes (an arbitrary constant: "flower" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x666c_6f77_6572;

impl PostgresStore {
    pub(super) fn migrate(&self) -> Result<(), StoreError> {
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

    pub(super) fn newer(&self, found: i64) -> StoreError {
        StoreError::NewerSchema {
            path: PathBuf::from(self.url.to_string()),
            found,
            known: SCHEMA_VERSION,
        }
    }
}

pub(super) fn read_version(
    c: &mut impl ::postgres::GenericClient,
) -> Result<i64, ::postgres::Error> {
    let row = c.query_opt(
        "SELECT value FROM flower_meta WHERE key = 'schema_version'",
        &[],
    )?;
    Ok(row
        .and_then(|r| r.get::<_, String>(0).trim().parse().ok())
        .unwrap_or(0))
}
