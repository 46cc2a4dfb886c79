//! Creating a new `sessions.db`. A new store is built in a private file beside it and
//! linked into place complete (see `create_complete` in `src/stores/sqlite.rs`); these
//! tests prove what that must keep: nothing but the store is left in the directory,
//! racing creators all end up on one store, and what was in place is never replaced.
//! (Concurrent creation by separate processes is in `store_sqlite.rs`.)

use crate::support::Flower;
use crate::support::LoadJson;
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Barrier};

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn entry(uuid: &str) -> Value {
    json!({"type": "user", "uuid": uuid, "message": {"role": "user", "content": uuid}})
}

#[test]
fn a_new_store_leaves_nothing_but_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    // While open: the store and SQLite's own WAL files, no private build file.
    for name in names(dir.path()) {
        assert!(name.starts_with("sessions.db"), "{name}");
        assert!(!name.contains(".new-"), "left behind: {name}");
    }
    let key = SessionKey::parse("p/s").unwrap();
    store
        .append(&key, &crate::support::typed(&[entry("a"), entry("b")]))
        .unwrap();
    drop(store);
    assert_eq!(names(dir.path()), ["sessions.db"]);
    let store = SqliteSessionStore::open(&db).unwrap();
    assert_eq!(store.load_json(&key).unwrap().unwrap().len(), 2);
}

#[test]
fn a_relative_path_works_too() {
    // `flower` opens `runs/sessions.db` relative to the current directory. Tests share
    // the process's current directory, so a child process does the `chdir`.
    let dir = tempfile::tempdir().unwrap();
    let out = Flower::bin()
        .command()
        .current_dir(dir.path())
        .args(["store", "append", "p/s"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(entry("a").to_string().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(names(&dir.path().join("runs")), ["sessions.db"]);
}

#[test]
fn racing_creators_share_one_store() {
    const THREADS: usize = 8;
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(dir.path().join("sessions.db"));
        let start = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (db, start) = (db.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let store = SqliteSessionStore::open(&db).expect("open");
                    let key = SessionKey::parse(&format!("p/s{i}")).unwrap();
                    store
                        .append(&key, &crate::support::typed(&[entry(&format!("e{i}"))]))
                        .expect("append");
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let store = SqliteSessionStore::open(&db).unwrap();
        let mut sessions: Vec<String> = store
            .list_sessions("p")
            .unwrap()
            .into_iter()
            .map(|s| s.session_id)
            .collect();
        sessions.sort();
        let want: Vec<String> = (0..THREADS).map(|i| format!("s{i}")).collect();
        assert_eq!(
            sessions, want,
            "round {round}: every writer's session is there"
        );
        drop(store);
        assert_eq!(names(dir.path()), ["sessions.db"], "round {round}");
    }
}

#[test]
fn an_existing_file_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    // Not a database: refused, and left exactly as it was.
    std::fs::write(&db, "not a database, but somebody's file").unwrap();
    assert!(SqliteSessionStore::open(&db).is_err());
    assert_eq!(
        std::fs::read_to_string(&db).unwrap(),
        "not a database, but somebody's file"
    );
    assert_eq!(names(dir.path()), ["sessions.db"]);
    // An empty file (e.g. `touch sessions.db`) becomes a store in place.
    std::fs::write(&db, "").unwrap();
    let store = SqliteSessionStore::open(&db).unwrap();
    let key = SessionKey::parse("p/s").unwrap();
    store
        .append(&key, &crate::support::typed(&[entry("a")]))
        .unwrap();
    drop(store);
    assert_eq!(names(dir.path()), ["sessions.db"]);
}

#[test]
fn a_symlink_to_a_missing_file_is_followed_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere.db");
    let db = dir.path().join("sessions.db");
    std::os::unix::fs::symlink(&target, &db).unwrap();
    let store = SqliteSessionStore::open(&db).unwrap();
    let key = SessionKey::parse("p/s").unwrap();
    store
        .append(&key, &crate::support::typed(&[entry("a")]))
        .unwrap();
    drop(store);
    assert!(
        std::fs::symlink_metadata(&db)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link stays a link"
    );
    assert!(target.is_file(), "the store was made where the link points");
    assert_eq!(names(dir.path()), ["elsewhere.db", "sessions.db"]);
}
