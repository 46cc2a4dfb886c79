//! Upgrading a schema-1 `sessions.db` (the key's three columns in every entry row) to
//! the current layout: what was stored reads the same before and after, a read-only
//! open reads an old file without upgrading it, and the upgrade is all or nothing, also
//! when the process is killed in the middle of it. The same for PostgreSQL's version 2,
//! upgraded by several stores (hosts) opening it at once.
//!
//! Old files are made the way schema 1 laid them out: a store of today, turned back by
//! SQL into schema 1's tables and indexes (migration 1's own text).

use crate::store_support;
use crate::support::LoadJson;
use crate::support::postgres as pg;

use flower::stores::{PostgresStore, SessionKey, SessionStore, SqliteSessionStore};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use store_support::{assistant, snapshot, text, user_text};

const ROLE: &str = "FLOWER_MIGRATE_ROLE";

/// Turns a current store back into schema 1.
const TO_SCHEMA_1: &str = "
    CREATE TABLE entries_1 (
        id          INTEGER PRIMARY KEY,
        project_key TEXT    NOT NULL,
        session_id  TEXT    NOT NULL,
        subpath     TEXT    NOT NULL DEFAULT '',
        uuid        TEXT,
        type        TEXT,
        stored_at   INTEGER NOT NULL,
        data        TEXT    NOT NULL
    );
    INSERT INTO entries_1
        SELECT e.id, t.project_key, t.session_id, t.subpath, e.uuid, e.type, e.stored_at, e.data
        FROM entries e JOIN transcripts t ON t.id = e.transcript ORDER BY e.id;
    DROP TABLE entries;
    DROP TABLE transcripts;
    ALTER TABLE entries_1 RENAME TO entries;
    CREATE INDEX entries_by_key ON entries (project_key, session_id, subpath, id);
    CREATE UNIQUE INDEX entries_uuid ON entries (project_key, session_id, subpath, uuid)
        WHERE uuid IS NOT NULL;
    UPDATE meta SET value = '1' WHERE key = 'schema_version';
";

fn to_schema_1(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(&format!("BEGIN; {TO_SCHEMA_1} COMMIT;"))
        .unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
}

fn schema_version(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

fn keys() -> [SessionKey; 4] {
    [
        SessionKey::parse("p/s1").unwrap(),
        SessionKey::parse("p/s1/subagents/agent-a").unwrap(),
        SessionKey::parse("p/s2").unwrap(),
        SessionKey::parse("q/s1").unwrap(),
    ]
}

/// Turns appended to the keys in turn, so their rows interleave in the file.
fn fill(store: &dyn SessionStore) {
    let keys = keys();
    for round in 0..5 {
        for (k, key) in keys.iter().enumerate() {
            // A canonical UUID (kept as its 16 bytes) and a name (kept as text).
            let u = format!("00000000-0000-4000-8000-{k:06}{round:06}");
            let a = format!("a-{k}-{round}");
            let mut usage = assistant(&a, Some(&u), vec![text(&format!("reply {round}"))]);
            usage["message"]["usage"] = json!({"input_tokens": 100 * round + k});
            store
                .append(
                    key,
                    &crate::support::typed(&[
                        user_text(&u, None, &format!("prompt {round}")),
                        usage,
                    ]),
                )
                .unwrap();
        }
        // An entry without a uuid is stored as it comes.
        store
            .append(
                &keys[0],
                &crate::support::typed(&[json!({"type": "custom-title", "title": round})]),
            )
            .unwrap();
    }
}

/// Everything a resume, `show` and `log` read of the keys.
fn everything(store: &SqliteSessionStore) -> Value {
    let mut out = vec![read_back(store)];
    for key in keys() {
        let mut raw = Vec::new();
        let n = store
            .for_each_raw(&key, |row| {
                raw.push(String::from_utf8_lossy(row).into_owned())
            })
            .unwrap();
        let assistants = store.scan_type(&key, "assistant", |row| row.len()).unwrap();
        out.push(json!({
            "raw": raw,
            "n": n,
            "assistants": assistants.map(|(total, lens)| json!([total, lens])),
        }));
    }
    Value::Array(out)
}

/// What every store reads back of the keys.
fn read_back(store: &dyn SessionStore) -> Value {
    let mut out = Vec::new();
    for key in keys() {
        out.push(json!({
            "key": key.to_string(),
            "load": store.load_json(&key).unwrap(),
            "usage": store.last_usage_json(&key).unwrap(),
            "subkeys": store.list_subkeys(&key).unwrap(),
        }));
    }
    for project in ["p", "q"] {
        let summaries: Vec<Value> = store
            .list_session_summaries(project)
            .unwrap()
            .into_iter()
            .map(|s| json!([s.session_id, s.mtime, s.data]))
            .collect();
        out.push(json!({"project": project, "summaries": summaries}));
    }
    out.push(json!({"has": [store.has_session("s1").unwrap(), store.has_session("s9").unwrap()]}));
    Value::Array(out)
}

#[test]
fn a_schema_1_file_reads_the_same_read_only_and_after_its_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    fill(&SqliteSessionStore::open(&db).unwrap());
    let want = everything(&SqliteSessionStore::open(&db).unwrap());
    to_schema_1(&db);
    assert_eq!(schema_version(&db), "1");

    // Read-only: read as it is, not a byte written.
    let before = snapshot(dir.path());
    let old = SqliteSessionStore::open_read_only(&db).unwrap().unwrap();
    assert!(everything(&old) == want, "read differently");
    drop(old);
    assert_eq!(snapshot(dir.path()), before);
    assert_eq!(schema_version(&db), "1");

    // Opened for writing: upgraded, the same contents.
    let store = SqliteSessionStore::open(&db).unwrap();
    assert_eq!(schema_version(&db), "3");
    assert!(everything(&store) == want, "read differently");
    drop(store);
    let store = SqliteSessionStore::open_read_only(&db).unwrap().unwrap();
    assert!(everything(&store) == want, "read differently");
    drop(store);

    // Still idempotent by uuid, new entries come after the old ones, deletes work.
    let store = SqliteSessionStore::open(&db).unwrap();
    let [main, sub, other, _] = keys();
    let again = store.load_json(&main).unwrap().unwrap();
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(&again))
            .unwrap(),
        5
    );
    let fresh = user_text(
        "00000000-0000-4000-8000-ffffffffffff",
        Some("a-0-4"),
        "later",
    );
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(std::slice::from_ref(&fresh)))
            .unwrap(),
        1
    );
    let loaded = store.load_json(&main).unwrap().unwrap();
    assert_eq!(loaded.len(), 3 * 5 + 5 + 1);
    assert_eq!(loaded.last(), Some(&fresh));
    // Another spelling of the same UUID is another uuid, as before.
    let upper = user_text("00000000-0000-4000-8000-FFFFFFFFFFFF", None, "upper");
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(std::slice::from_ref(&upper)))
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(&[upper, fresh]))
            .unwrap(),
        0
    );
    assert_eq!(store.delete_counted(&sub).unwrap(), 10);
    assert_eq!(store.list_subkeys(&main).unwrap(), Vec::<String>::new());
    assert_eq!(store.delete_counted(&other).unwrap(), 10);
    assert_eq!(store.load_json(&other).unwrap(), None);
    assert_eq!(store.load_json(&main).unwrap().unwrap().len(), 22);
}

/// The upgrade is one transaction: when it fails part way, the file is left as it was.
#[test]
fn a_failed_upgrade_leaves_the_schema_1_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    fill(&SqliteSessionStore::open(&db).unwrap());
    let want = everything(&SqliteSessionStore::open(&db).unwrap());
    to_schema_1(&db);
    // A table in the way of the upgrade's last step.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE entries_by_transcript_blocker (x); CREATE INDEX entries_by_transcript ON entries_by_transcript_blocker (x);")
        .unwrap();
    let err = SqliteSessionStore::open(&db).unwrap_err().to_string();
    assert!(err.contains("sessions.db"), "{err}");
    assert_eq!(schema_version(&db), "1");
    let old = SqliteSessionStore::open_read_only(&db).unwrap().unwrap();
    assert!(everything(&old) == want, "read differently");
}

/// Not a test: the body of the child process [`an_upgrade_killed_half_way_is_redone`]
/// starts. Does nothing in a normal test run.
#[test]
fn child_process_entry_point() {
    let Ok(db) = std::env::var(ROLE) else {
        return;
    };
    let store = SqliteSessionStore::open(Path::new(&db)).unwrap();
    drop(store);
    println!("@@flower@@ upgraded");
}

#[test]
fn an_upgrade_killed_half_way_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let key = SessionKey::parse("p/long").unwrap();
    // Random text, so that rows stay large when compressed (schema 3).
    let noise: String = (0..64_000).map(|_| fastrand::alphanumeric()).collect();
    let batch = |b: usize| -> Vec<Value> {
        (0..500)
            .map(|i| {
                let at = (b * 500 + i) * 97 % 60_000;
                let pad = &noise[at..at + 2000];
                json!({"type": "user", "uuid": format!("e-{b}-{i}"), "pad": pad})
            })
            .collect()
    };
    {
        let store = SqliteSessionStore::open(&db).unwrap();
        for b in 0..40 {
            store
                .append(&key, &crate::support::typed(&batch(b)))
                .unwrap();
        }
        store
            .append(
                &SessionKey::parse("p/short").unwrap(),
                &crate::support::typed(&batch(99)),
            )
            .unwrap();
    }
    to_schema_1(&db);
    let wal = dir.path().join("sessions.db-wal");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "store_migrate::child_process_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, &db)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed once the upgrade has written a good part of its copy into the WAL (not
    // committed: the copy is 30 MB, the WAL is flushed only at the commit).
    let started = std::time::Instant::now();
    let mut killed = false;
    while started.elapsed() < std::time::Duration::from_secs(120) {
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 8 << 20) {
            child.kill().unwrap();
            killed = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let status = child.wait().unwrap();
    let mut said = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert!(
        killed,
        "the upgrade ended before it was killed: {status} {said}"
    );
    assert!(!said.contains("upgraded"), "{said}");
    assert_eq!(schema_version(&db), "1");
    // Reopened: upgraded whole.
    let store = SqliteSessionStore::open(&db).unwrap();
    assert_eq!(schema_version(&db), "3");
    let loaded = store.load_json(&key).unwrap().unwrap();
    assert_eq!(loaded.len(), 40 * 500);
    let want: Vec<Value> = (0..40).flat_map(batch).collect();
    assert!(loaded == want, "the long session changed");
    assert_eq!(
        store
            .load_json(&SessionKey::parse("p/short").unwrap())
            .unwrap(),
        Some(batch(99))
    );
}

/// Turns a PostgreSQL store of today back into version 2.
pub const TO_POSTGRES_2: &str = "
    CREATE TABLE flower_entries_2 (
        id          BIGSERIAL PRIMARY KEY,
        project_key TEXT   NOT NULL,
        session_id  TEXT   NOT NULL,
        subpath     TEXT   NOT NULL DEFAULT '',
        uuid        TEXT,
        type        TEXT,
        stored_at   BIGINT NOT NULL,
        data        TEXT   NOT NULL
    );
    INSERT INTO flower_entries_2
        SELECT e.id, t.project_key, t.session_id, t.subpath, e.uuid, e.type, e.stored_at, e.data
        FROM flower_entries e JOIN flower_transcripts t ON t.id = e.transcript;
    SELECT setval(pg_get_serial_sequence('flower_entries_2', 'id'), max(id)) FROM flower_entries_2;
    DROP TABLE flower_entries;
    DROP TABLE flower_transcripts;
    ALTER TABLE flower_entries_2 RENAME TO flower_entries;
    CREATE INDEX flower_entries_by_key ON flower_entries (project_key, session_id, subpath, id);
    CREATE UNIQUE INDEX flower_entries_uuid ON flower_entries (project_key, session_id, subpath, uuid)
        WHERE uuid IS NOT NULL;
    UPDATE flower_meta SET value = '2' WHERE key = 'schema_version';
";

fn postgres_version(url: &str) -> String {
    let url = url.to_string();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT value FROM flower_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get::<_, String>(0)
    })
    .join()
    .unwrap()
}

#[test]
fn a_postgres_version_2_store_is_upgraded_once_by_stores_opening_it_at_once() {
    let Some(url) = pg::fresh_url() else { return };
    let parsed: flower::stores::PostgresUrl = url.parse().unwrap();
    let want = {
        let store = PostgresStore::open(&parsed).unwrap();
        fill(&store);
        read_back(&store)
    };
    pg::execute(&url, &format!("BEGIN; {TO_POSTGRES_2} COMMIT;"));
    assert_eq!(postgres_version(&url), "2");
    // Four stores (four hosts) open it at once: one upgrades, all read the same.
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let parsed = parsed.clone();
            std::thread::spawn(move || read_back(&PostgresStore::open(&parsed).unwrap()))
        })
        .collect();
    for thread in opened {
        assert!(
            thread.join().unwrap() == want,
            "read differently after the upgrade"
        );
    }
    assert_eq!(postgres_version(&url), "3");
    let store = PostgresStore::open(&parsed).unwrap();
    let [main, sub, other, _] = keys();
    let again = store.load_json(&main).unwrap().unwrap();
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(&again))
            .unwrap(),
        5
    );
    let fresh = user_text(
        "00000000-0000-4000-8000-ffffffffffff",
        Some("a-0-4"),
        "later",
    );
    assert_eq!(
        store
            .append_counted(&main, &crate::support::typed(std::slice::from_ref(&fresh)))
            .unwrap(),
        1
    );
    let loaded = store.load_json(&main).unwrap().unwrap();
    assert_eq!(loaded.len(), 21);
    assert_eq!(loaded.last(), Some(&fresh));
    assert_eq!(store.delete_counted(&sub).unwrap(), 10);
    assert_eq!(store.list_subkeys(&main).unwrap(), Vec::<String>::new());
    assert_eq!(store.delete_counted(&other).unwrap(), 10);
    assert_eq!(store.load_json(&other).unwrap(), None);
    // Appended again after its delete, a key starts afresh.
    store
        .append(&sub, &crate::support::typed(&again[..2]))
        .unwrap();
    assert_eq!(store.load_json(&sub).unwrap().unwrap(), again[..2].to_vec());
    assert_eq!(
        store.list_subkeys(&main).unwrap(),
        vec!["subagents/agent-a".to_string()]
    );
}
