//! The SQLite store with real processes and real files: durability across SIGKILL,
//! concurrent writers, read-only opening that writes nothing, bad files.
//!
//! Tests that need another process re-run this test binary with `FLOWER_STORE_ROLE`
//! set; [`child_process_entry_point`] then plays that role instead of testing.

use crate::store_support;
use crate::support::LoadJson;

use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, StoreError};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use store_support::{assistant, snapshot, text, user_text};

const ROLE: &str = "FLOWER_STORE_ROLE";

fn entry(id: &str) -> Value {
    json!({"type": "x", "uuid": id, "payload": "p".repeat(100)})
}

/// Starts this test binary as a child playing `role` with `args`.
fn spawn_role(role: &str, args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "store_sqlite::child_process_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env("FLOWER_STORE_ROLE_ARGS", args.join("\u{1f}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// Marks the child's own lines: the test harness shares its stdout and may print
/// `test … ... ` before them on the same line.
const MARK: &str = "@@flower@@";

/// Reads the child's stdout until it says `want`; panics if it ends first.
fn wait_for(out: &mut BufReader<ChildStdout>, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended before {want:?}"
        );
        if line
            .split_once(MARK)
            .is_some_and(|(_, said)| said.trim_end() == want)
        {
            return;
        }
    }
}

/// Not a test: the body of the child processes the other tests start. Does nothing
/// in a normal test run.
#[test]
fn child_process_entry_point() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let args_text = std::env::var("FLOWER_STORE_ROLE_ARGS").unwrap();
    let args: Vec<&str> = args_text.split('\u{1f}').collect();
    let say = |line: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{MARK}{line}").unwrap();
        out.flush().unwrap();
    };
    let wait_for_parent = || {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    };
    let store = SqliteSessionStore::open(Path::new(args[0])).unwrap();
    let key = SessionKey::parse(args[1]).unwrap();
    match role.as_str() {
        // Appends batches of `args[3]` entries forever, acknowledging each.
        "append-forever" => {
            let batch: usize = args[3].parse().unwrap();
            for i in 0.. {
                let entries: Vec<Value> = (0..batch)
                    .map(|j| entry(&format!("{}-{i}-{j}", args[2])))
                    .collect();
                store
                    .append(&key, &crate::support::typed(&entries))
                    .unwrap();
                say(&format!("acked {i}"));
            }
        }
        // Waits for "go", then appends `args[3]` single entries and exits.
        "append-n" => {
            let n: usize = args[3].parse().unwrap();
            say("ready");
            wait_for_parent();
            for i in 0..n {
                store
                    .append(
                        &key,
                        &crate::support::typed(&[entry(&format!("{}-{i}", args[2]))]),
                    )
                    .unwrap();
            }
            say("done");
        }
        // Appends a transcript, acknowledges, then holds the store open until killed.
        "append-and-hold" => {
            let entries = transcript();
            store
                .append(&key, &crate::support::typed(&entries))
                .unwrap();
            say("acked");
            wait_for_parent();
        }
        other => panic!("unknown role {other}"),
    }
}

fn transcript() -> Vec<Value> {
    vec![
        user_text("u1", None, "hello"),
        assistant("a1", Some("u1"), vec![text("hi")]),
    ]
}

#[test]
fn an_acknowledged_append_survives_sigkill_and_batches_land_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let (mut child, mut out) =
        spawn_role("append-forever", &[db.to_str().unwrap(), "p/s", "e", "3"]);
    wait_for(&mut out, "acked 20");
    child.kill().unwrap(); // SIGKILL: no destructor, no checkpoint, no close.
    child.wait().unwrap();

    let store = SqliteSessionStore::open(&db).unwrap();
    let loaded = store
        .load_json(&SessionKey::parse("p/s").unwrap())
        .unwrap()
        .unwrap();
    assert!(
        loaded.len() >= 21 * 3,
        "acknowledged batches lost: only {} entries",
        loaded.len()
    );
    assert_eq!(loaded.len() % 3, 0, "a batch landed partly");
    for (n, e) in loaded.iter().enumerate() {
        assert_eq!(
            e["uuid"],
            format!("e-{}-{}", n / 3, n % 3),
            "entry {n} out of order or missing"
        );
    }
}

#[test]
fn concurrent_processes_lose_no_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new/sessions.db");
    let db_text = db.to_str().unwrap();
    const N: usize = 120;
    let n = N.to_string();
    // Two processes on two sessions, two more on one shared session; all four create
    // the (missing) database at the same moment.
    let plan = [("p/x", "a"), ("p/y", "b"), ("p/z", "c"), ("p/z", "d")];
    let mut children: Vec<_> = plan
        .iter()
        .map(|(key, prefix)| spawn_role("append-n", &[db_text, key, prefix, &n]))
        .collect();
    for (_, out) in &mut children {
        wait_for(out, "ready");
    }
    for (child, _) in &mut children {
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    for (child, out) in &mut children {
        wait_for(out, "done");
        assert!(child.wait().unwrap().success());
    }

    let store = SqliteSessionStore::open(&db).unwrap();
    let load = |k: &str| {
        store
            .load_json(&SessionKey::parse(k).unwrap())
            .unwrap()
            .unwrap()
    };
    let uuids = |entries: &[Value], prefix: &str| -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| e["uuid"].as_str())
            .filter(|u| u.starts_with(&format!("{prefix}-")))
            .map(str::to_string)
            .collect()
    };
    let expected =
        |prefix: &str| -> Vec<String> { (0..N).map(|i| format!("{prefix}-{i}")).collect() };
    assert_eq!(uuids(&load("p/x"), "a"), expected("a"));
    assert_eq!(uuids(&load("p/y"), "b"), expected("b"));
    let shared = load("p/z");
    assert_eq!(shared.len(), 2 * N);
    assert_eq!(
        uuids(&shared, "c"),
        expected("c"),
        "each writer's order is kept"
    );
    assert_eq!(uuids(&shared, "d"), expected("d"));
    let mut listed: Vec<String> = store
        .list_sessions("p")
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    listed.sort();
    assert_eq!(listed, ["x", "y", "z"]);
}

#[test]
fn read_only_open_of_a_missing_file_is_none_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    assert!(SqliteSessionStore::open_read_only(&db).unwrap().is_none());
    assert!(snapshot(dir.path()).is_empty());
}

/// Everything a reader does, through the read-only store.
fn read_everything(db: &Path) -> SqliteSessionStore {
    let store = SqliteSessionStore::open_read_only(db)
        .unwrap()
        .expect("the store exists");
    let key = SessionKey::parse("p/s").unwrap();
    assert_eq!(store.load_json(&key).unwrap().unwrap(), transcript());
    assert!(store.has_session("s").unwrap());
    assert_eq!(store.list_sessions("p").unwrap().len(), 1);
    assert_eq!(
        store.list_session_summaries("p").unwrap()[0].data["first_prompt"],
        "hello"
    );
    assert!(store.list_subkeys(&key).unwrap().is_empty());
    assert_eq!(
        store.last_usage_json(&key).unwrap(),
        Some(json!({"input_tokens": 10, "output_tokens": 5}))
    );
    assert!(matches!(
        store.append(&key, &crate::support::typed(&[json!({})])),
        Err(StoreError::Database { .. })
    ));
    assert!(matches!(
        store.delete(&key),
        Err(StoreError::Database { .. })
    ));
    store
}

/// `dir/sessions.db` holding [`transcript`] under `p/s`, closed again.
fn closed_store(dir: &Path) -> PathBuf {
    let db = dir.join("sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    store
        .append(
            &SessionKey::parse("p/s").unwrap(),
            &crate::support::typed(&transcript()),
        )
        .unwrap();
    db
}

#[test]
fn read_only_open_of_a_closed_store_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = closed_store(dir.path());
    let before = snapshot(dir.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["sessions.db"],
        "a clean close leaves no -wal"
    );
    drop(read_everything(&db));
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn read_only_open_after_a_killed_writer_sees_its_commits_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let (mut child, mut out) = spawn_role("append-and-hold", &[db.to_str().unwrap(), "p/s"]);
    wait_for(&mut out, "acked");
    child.kill().unwrap();
    child.wait().unwrap();

    let before = snapshot(dir.path());
    assert!(before.contains_key("sessions.db-wal") && before.contains_key("sessions.db-shm"));
    assert!(
        !before["sessions.db-wal"].0.is_empty(),
        "the commit lives in the WAL only"
    );
    drop(read_everything(&db));
    assert_eq!(
        snapshot(dir.path()),
        before,
        "reading must not touch any file"
    );
}

#[test]
fn read_only_open_beside_a_live_writer_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let (mut child, mut out) = spawn_role("append-and-hold", &[db.to_str().unwrap(), "p/s"]);
    wait_for(&mut out, "acked");
    let before = snapshot(dir.path());
    drop(read_everything(&db));
    assert_eq!(snapshot(dir.path()), before);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_wal_without_its_index_is_refused_read_only_and_recovered_read_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let (mut child, mut out) = spawn_role("append-and-hold", &[db.to_str().unwrap(), "p/s"]);
    wait_for(&mut out, "acked");
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_file(dir.path().join("sessions.db-shm")).unwrap();
    let before = snapshot(dir.path());
    let err = SqliteSessionStore::open_read_only(&db).unwrap_err();
    assert!(err.to_string().contains("sessions.db"), "{err}");
    // Says what is wrong and how to mend it, not whatever SQLite would say.
    assert!(err.to_string().contains("没有 -shm 索引"), "{err}");
    assert!(err.to_string().contains("用读写方式打开一次"), "{err}");
    assert_eq!(snapshot(dir.path()), before);
    // A writer rebuilds the index from the WAL: nothing acknowledged is lost.
    let store = SqliteSessionStore::open(&db).unwrap();
    assert_eq!(
        store
            .load_json(&SessionKey::parse("p/s").unwrap())
            .unwrap()
            .unwrap(),
        transcript()
    );
}

/// An empty write-ahead log (a writer opened the file and wrote nothing, or a
/// checkpoint emptied it) holds nothing to read: the file alone is read, whether or not
/// the index beside it is there, and nothing is written either way.
#[test]
fn read_only_open_beside_an_empty_wal_reads_the_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = closed_store(dir.path());
    std::fs::write(dir.path().join("sessions.db-wal"), b"").unwrap();
    assert!(!dir.path().join("sessions.db-shm").exists());
    let before = snapshot(dir.path());
    drop(read_everything(&db));
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn last_assistant_usage_skips_synthetic_errors_and_entries_without_usage() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
    let key = SessionKey::parse("p/s").unwrap();
    assert_eq!(store.last_usage_json(&key).unwrap(), None);
    let mut first = assistant("a1", Some("u1"), vec![text("one")]);
    first["message"]["usage"] = json!({"input_tokens": 1000, "cache_read_input_tokens": 5});
    let mut no_usage = assistant("a2", Some("a1"), vec![text("two")]);
    no_usage["message"].as_object_mut().unwrap().remove("usage");
    store
        .append(
            &key,
            &crate::support::typed(&[
                user_text("u1", None, "hi"),
                first,
                no_usage,
                store_support::api_error("e1", Some("a2")),
                user_text("u2", Some("e1"), "again"),
            ]),
        )
        .unwrap();
    assert_eq!(
        store.last_usage_json(&key).unwrap(),
        Some(json!({"input_tokens": 1000, "cache_read_input_tokens": 5}))
    );
    assert_eq!(
        store
            .last_usage_json(&key.sub("subagents/a").unwrap())
            .unwrap(),
        None
    );
}

fn write_db_with(db: &Path, sql: &str) {
    {
        let store = SqliteSessionStore::open(db).unwrap();
        store
            .append(
                &SessionKey::parse("p/s").unwrap(),
                &crate::support::typed(&transcript()),
            )
            .unwrap();
    }
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    write_db_with(
        &db,
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
    );
    let before = snapshot(dir.path());
    for result in [
        SqliteSessionStore::open(&db).map(|_| ()),
        SqliteSessionStore::open_read_only(&db).map(|_| ()),
    ] {
        match result {
            Err(StoreError::NewerSchema {
                path,
                found: 99,
                known: 3,
            }) => assert_eq!(path, db),
            other => panic!("expected NewerSchema, got {other:?}"),
        }
    }
    assert_eq!(snapshot(dir.path()), before);
}

fn assert_database_error(result: Result<(), StoreError>, db: &Path, needle: &str) {
    match result {
        Err(e @ StoreError::Database { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(db.to_str().unwrap()),
                "must name the file: {text}"
            );
            assert!(text.contains(needle), "must say {needle:?}: {text}");
            assert!(!text.contains('\n'), "one line: {text}");
        }
        other => panic!("expected a Database error, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    std::fs::write(
        &db,
        "this is not a database, just some text long enough to matter\n".repeat(100),
    )
    .unwrap();
    let before = snapshot(dir.path());
    assert_database_error(
        SqliteSessionStore::open(&db).map(|_| ()),
        &db,
        "不是 SQLite 数据库",
    );
    assert_database_error(
        SqliteSessionStore::open_read_only(&db).map(|_| ()),
        &db,
        "不是 SQLite 数据库",
    );
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_corrupt_file_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    write_db_with(&db, "PRAGMA journal_mode = DELETE");
    // Keep the 100-byte header, garble the rest of the first page (the schema).
    let mut bytes = std::fs::read(&db).unwrap();
    for b in &mut bytes[100..4096] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let open = SqliteSessionStore::open(&db).map(|_| ());
    assert_database_error(open, &db, "数据库坏了");
    assert_database_error(
        SqliteSessionStore::open_read_only(&db).map(|_| ()),
        &db,
        "数据库坏了",
    );
}

#[test]
fn a_foreign_sqlite_database_is_not_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE users (name TEXT)")
        .unwrap();
    let before = snapshot(dir.path());
    assert_database_error(
        SqliteSessionStore::open(&db).map(|_| ()),
        &db,
        "不是 flower 的会话库",
    );
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn open_creates_the_parent_directory_and_a_versioned_wal_database() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("a/b/sessions.db");
    drop(SqliteSessionStore::open(&db).unwrap());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: String = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, "3");
    let mut tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables.sort();
    assert_eq!(tables, ["entries", "meta", "summaries", "transcripts"]);
    // Reopening an up-to-date store is fine and keeps the data.
    drop(conn);
    let store = SqliteSessionStore::open(&db).unwrap();
    store
        .append(
            &SessionKey::parse("p/s").unwrap(),
            &crate::support::typed(&transcript()),
        )
        .unwrap();
    drop(store);
    let store = SqliteSessionStore::open(&db).unwrap();
    assert_eq!(
        store
            .load_json(&SessionKey::parse("p/s").unwrap())
            .unwrap()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn the_store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SqliteSessionStore>();
    assert_send_sync::<flower::stores::PruningSessionStore>();
}

/// Big enough to be parsed in several batches on several threads.
fn long_transcript(turns: usize) -> Vec<Value> {
    let mut t = vec![user_text("u", None, "go")];
    let mut parent = "u".to_string();
    for n in 0..turns {
        let (a, r, id) = (format!("a{n}"), format!("r{n}"), format!("t{n}"));
        let command = if n % 3 == 0 {
            "git status"
        } else {
            "cargo build"
        };
        t.push(assistant(
            &a,
            Some(&parent),
            vec![store_support::bash(&id, command)],
        ));
        let (body, error) = if n % 10 == 9 {
            ("Permission to use Bash has been denied".to_string(), true)
        } else {
            (format!("{n}:{}", "output line\n".repeat(200)), false)
        };
        t.push(store_support::user_blocks(
            &r,
            Some(&a),
            vec![store_support::tool_result(&id, &body, error)],
        ));
        parent = r;
        if n % 25 == 24 {
            let e = format!("e{n}");
            t.push(store_support::api_error(&e, Some(&parent)));
            parent = e;
        }
    }
    t
}

#[test]
fn a_long_transcript_loads_whole_and_in_order_and_prunes_like_prune() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
    let key = SessionKey::parse("p/long").unwrap();
    let input = long_transcript(1500);
    assert!(serde_json::to_string(&input).unwrap().len() > 3_000_000);
    store.append(&key, &crate::support::typed(&input)).unwrap();
    assert_eq!(store.load_json(&key).unwrap().unwrap(), input);
    let options = flower::stores::PruneOptions::new(dir.path().join("trimmed"));
    let fused = store.load_pruned_json(&key, &options).unwrap().unwrap();
    assert_eq!(fused, crate::support::prune_json(input, &options));
}

/// Rows whose JSON compresses well are kept as blobs (schema 3), and every reader gets
/// each entry's JSON back byte for byte; text rows of an older file read as before.
#[test]
fn entry_rows_are_compressed_and_read_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let key = SessionKey::parse("p/long").unwrap();
    let input = long_transcript(40);
    let texts: Vec<String> = input
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    SqliteSessionStore::open(&db)
        .unwrap()
        .append(&key, &crate::support::typed(&input))
        .unwrap();
    // A row as schema 2 wrote it (text), after the packed ones.
    let old = json!({"type": "x", "uuid": "old", "payload": "p".repeat(2000)});
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let (blobs, blob_bytes, text_bytes): (i64, i64, i64) = conn
            .query_row(
                "SELECT count(*), sum(length(data)),                  (SELECT sum(length(data)) FROM entries WHERE typeof(data) = 'text')                  FROM entries WHERE typeof(data) = 'blob'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        let packed_len: usize = texts
            .iter()
            .filter(|t| t.len() > 1000)
            .map(String::len)
            .sum();
        assert!(blobs >= 30, "{blobs} rows packed");
        assert!(
            (blob_bytes as usize) < packed_len / 4,
            "{blob_bytes} bytes for {packed_len} (text rows: {text_bytes})"
        );
        conn.execute(
            "INSERT INTO entries (transcript, uuid, type, stored_at, data) \
             VALUES (1, 'old', 'x', 0, ?1)",
            [serde_json::to_string(&old).unwrap()],
        )
        .unwrap();
        conn.execute_batch("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
            .unwrap();
    }
    let mut want = texts.clone();
    want.push(serde_json::to_string(&old).unwrap());
    let store = SqliteSessionStore::open(&db).unwrap();
    let mut raw = Vec::new();
    store
        .for_each_raw(&key, |row| {
            raw.push(String::from_utf8(row.to_vec()).unwrap())
        })
        .unwrap();
    assert!(raw == want, "raw rows differ");
    let mut all = input.clone();
    all.push(old);
    assert_eq!(store.load_json(&key).unwrap().unwrap(), all);
    let (_, assistants) = store
        .scan_type(&key, "assistant", |row| row.to_vec())
        .unwrap()
        .unwrap();
    let want_assistants: Vec<&String> = texts
        .iter()
        .filter(|t| t.contains("\"assistant\""))
        .collect();
    assert_eq!(assistants.len(), want_assistants.len());
    assert!(
        assistants
            .iter()
            .zip(want_assistants)
            .all(|(a, b)| a == b.as_bytes())
    );
    let options = flower::stores::PruneOptions::new(dir.path().join("trimmed"));
    let fused = store.load_pruned_json(&key, &options).unwrap().unwrap();
    assert_eq!(fused, crate::support::prune_json(all, &options));
}

#[test]
fn a_row_that_is_not_json_is_reported_by_row() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let key = SessionKey::parse("p/long").unwrap();
    {
        let store = SqliteSessionStore::open(&db).unwrap();
        store
            .append(&key, &crate::support::typed(&long_transcript(600)))
            .unwrap();
    }
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("UPDATE entries SET data = '{\"broken' WHERE id = 1000")
        .unwrap();
    let store = SqliteSessionStore::open(&db).unwrap();
    for result in [
        store.load_json(&key).map(|_| ()),
        store
            .load_pruned_json(&key, &flower::stores::PruneOptions::new(dir.path()))
            .map(|_| ()),
    ] {
        let err = result.unwrap_err().to_string();
        assert!(err.contains("s.db") && err.contains("第 1000 行"), "{err}");
    }
}

/// A database renamed (or replaced) while open is not written any more: its WAL
/// would be left under the old name, for the next file there to pick up. What was
/// stored before stays in the renamed file.
#[test]
fn a_database_renamed_while_open_is_not_written_to_again() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("sessions.db");
    let key = SessionKey::main("p", "s");
    let store = SqliteSessionStore::open(&path).unwrap();
    store
        .append(&key, &crate::support::typed(&[entry("before")]))
        .unwrap();
    let moved = dir.path().join("moved.db");
    std::fs::rename(&path, &moved).unwrap();
    let refused = store
        .append(&key, &crate::support::typed(&[entry("after")]))
        .unwrap_err();
    assert!(refused.to_string().contains("被挪走或换掉了"), "{refused}");
    // A new file at the old name is not written by the old store either.
    let fresh = SqliteSessionStore::open(&path).unwrap();
    assert!(
        store
            .append(&key, &crate::support::typed(&[entry("after")]))
            .is_err()
    );
    assert_eq!(fresh.load_json(&key).unwrap(), None);
    drop(store);
    drop(fresh);
    let kept = SqliteSessionStore::open(&moved).unwrap();
    assert_eq!(
        kept.load_json(&key).unwrap().unwrap(),
        vec![entry("before")]
    );
}
