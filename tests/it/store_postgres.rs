//! The PostgreSQL store beyond the shared conformance suite: URL validation, schema
//! versions, refused connections, concurrent writers, and the binary's `--store`.
//! Tests that need a server skip (saying why) when `FLOWER_TEST_POSTGRES_URL` is unset.

use crate::store_conformance::postgres_store;
use crate::support::Flower;
use crate::support::LoadJson;
use crate::support::pipeline::flower_in;
use crate::support::postgres as pg;
use crate::support::{FakeServer, Reply};
use flower::stores::{PostgresStore, PostgresUrl, SessionKey, SessionStore, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;
use tempfile::TempDir;

#[test]
fn malformed_urls_are_refused_with_a_reason() {
    for (bad, why) in [
        ("mysql://h/db", "postgres://"),
        ("postgres://", "没有主机"),
        ("postgres://127.0.0.1:5432", "没有数据库名"),
        ("postgres://127.0.0.1:notaport/db", "不是 PostgreSQL 的 URL"),
        ("/tmp/sessions.db", "postgres://"),
    ] {
        let err = bad.parse::<PostgresUrl>().unwrap_err().to_string();
        assert!(err.contains(why), "{bad}: {err}");
    }
    let url: PostgresUrl = "postgresql://me:s3cret@db.example:6543/runs"
        .parse()
        .unwrap();
    assert_eq!(url.to_string(), "postgres://me:***@db.example:6543/runs");
    assert!(!format!("{url:?}").contains("s3cret"));
}

#[test]
fn a_bad_store_url_exits_2_before_any_request() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该有请求")]);
    let out = flower_in(
        &server,
        dir.path(),
        &["once", "hi", "--store", "mysql://x/y"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--store") && err.contains("postgres://"),
        "{err}"
    );
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(dir.path())
        .args(["once", "hi"])
        .env("FLOWER_STORE", "postgres://me:s3cret@h:99999999/db")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FLOWER_STORE") && !err.contains("s3cret"),
        "{err}"
    );
    assert!(server.requests().is_empty());
    assert!(!dir.path().join("runs").exists());
}

#[test]
fn a_refused_connection_is_fatal_before_any_request() {
    let Some(base) = pg::url() else { return };
    // A role the server does not know: refused at the start.
    let refused = match base.split_once('@') {
        Some((_, rest)) => format!("postgres://nobody_flower_role@{rest}"),
        None => base.replacen("://", "://nobody_flower_role@", 1),
    };
    let err = PostgresStore::open(&refused.parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("nobody_flower_role"), "{err}");

    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该有请求")]);
    let out = flower_in(&server, dir.path(), &["once", "hi", "--store", &refused]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("打不开存储"), "{err}");
    assert!(server.requests().is_empty());

    // The pipeline too: before any request, and before anything is written.
    let out = flower_in(&server, dir.path(), &["写个脚本", "--store", &refused]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nobody_flower_role"), "{err}");
    assert!(server.requests().is_empty());
    assert!(!dir.path().join("runs/lineage.json").exists());
    assert!(!dir.path().join("runs/manifest.json").exists());
}

#[test]
fn a_newer_schema_is_a_clear_error_and_nothing_is_touched() {
    let Some(url) = pg::fresh_url() else { return };
    pg::execute(
        &url,
        "CREATE TABLE flower_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO flower_meta VALUES ('schema_version', '99');",
    );
    let err = PostgresStore::open(&url.parse().unwrap()).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("更新版本的 flower"), "{err}");
    // Nothing was created next to it.
    let check = url.clone();
    let tables = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&check, postgres::NoTls).unwrap();
        c.query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
    })
    .join()
    .unwrap();
    assert_eq!(tables, 1);
}

#[test]
fn reopening_a_current_schema_keeps_the_data() {
    let Some(url) = pg::fresh_url() else { return };
    let url: PostgresUrl = url.parse().unwrap();
    let key = SessionKey::main("p", "s");
    PostgresStore::open(&url)
        .unwrap()
        .append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "a"})]),
        )
        .unwrap();
    let again = PostgresStore::open(&url).unwrap();
    assert_eq!(again.load_json(&key).unwrap().unwrap().len(), 1);
}

/// 8 writers at once, each appending batches to its own session and to one shared
/// session: nothing is lost and a batch is never split by another writer's.
#[test]
fn eight_concurrent_writers_lose_nothing_and_never_interleave() {
    let Some(store) = postgres_store() else {
        return;
    };
    let store = Arc::new(store);
    let shared = SessionKey::main("p", "shared");
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let store = store.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let own = SessionKey::main("p", format!("w{w}"));
                for b in 0..20 {
                    let batch: Vec<Value> = (0..5)
                        .map(|i| json!({"type": "x", "uuid": format!("{w}-{b}-{i}"), "w": w, "b": b}))
                        .collect();
                    store.append(&own, &crate::support::typed(&batch)).unwrap();
                    store.append(&shared, &crate::support::typed(&batch)).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    for w in 0..8 {
        let own = store
            .load_json(&SessionKey::main("p", format!("w{w}")))
            .unwrap()
            .unwrap();
        assert_eq!(own.len(), 100);
    }
    let all = store.load_json(&shared).unwrap().unwrap();
    assert_eq!(all.len(), 8 * 20 * 5);
    for batch in all.chunks(5) {
        let first = (&batch[0]["w"], &batch[0]["b"]);
        assert!(
            batch.iter().all(|e| (&e["w"], &e["b"]) == first),
            "a batch was interleaved: {batch:?}"
        );
    }
    assert_eq!(store.list_sessions("p").unwrap().len(), 9);
}

/// `flower once --store postgres://…`: the transcript lands in the database, no
/// `runs/sessions.db` is made, and `--resume` continues it after `runs/` is gone (a
/// container's ephemeral file system).
#[test]
fn once_keeps_its_transcript_in_postgres_and_resumes_without_runs_dir() {
    let Some(url) = pg::fresh_url() else { return };
    let a = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("第一"), Reply::text("第二")]);
    let out = flower_in(
        &server,
        a.path(),
        &["once", "记住 42", "--json", "--store", &url],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = v["session_id"].as_str().unwrap().to_string();
    assert!(!a.path().join("runs/sessions.db").exists());
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    assert!(store.has_session(&session).unwrap());

    std::fs::remove_dir_all(a.path().join("runs")).unwrap();
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(a.path())
        .args(["once", "是多少?", "--json", "--resume", &session])
        .env("FLOWER_STORE", &url)
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let sent = serde_json::to_string(&requests[1].body["messages"]).unwrap();
    assert!(sent.contains("记住 42") && sent.contains("第一"), "{sent}");
}

/// The pipeline on a PostgreSQL store, killed inside 干活 and woken: the wake resumes
/// the same 干活 session from the database (no `runs/sessions.db` anywhere), and
/// `flower state --store` sees the step's session there.
#[test]
fn the_pipeline_killed_inside_work_resumes_from_postgres() {
    use crate::flow::Script;
    use crate::support::pipeline::{Agent, Project, agent_of};
    use std::time::Duration;

    let Some(url) = pg::fresh_url() else { return };
    let project = Project::new();
    let script = Script::new(0);
    let (server, gate) = crate::flow::held_first(
        &script,
        |req| agent_of(req) == Agent::Coordinator,
        "never delivered",
    );
    let mut child = project
        .command(&server, &["写个 hello 脚本", "--store", &url])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        gate.wait_reached(Duration::from_secs(60)),
        "干活 was never asked"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let id = project.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();

    let state = project
        .command(&server, &["state", "--json"])
        .env("FLOWER_STORE", &url)
        .output()
        .unwrap();
    assert!(state.status.success(), "{state:?}");
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(state["steps"]["干活"], id.as_str());

    let before = server.request_count();
    let out = project
        .command(&server, &[])
        .env("FLOWER_STORE", &url)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resumed = server.requests()[before].clone();
    assert_eq!(agent_of(&resumed), Agent::Coordinator);
    assert_eq!(
        project.json("runs/lineage.json")["steps"]["干活"],
        id.as_str()
    );
    assert_eq!(project.read("hello.txt"), "hello");
    assert!(!project.dir.join("runs/sessions.db").exists());
}

/// The server drops every connection of the store (a restart, a failover): appends it
/// acknowledged are all there; a call that meets a dead connection may fail once, with an
/// error naming the database, and the store reconnects by itself.
#[test]
fn a_dropped_connection_loses_no_acknowledged_append_and_reconnects() {
    let Some(url) = pg::fresh_url() else { return };
    // Its own application name, so only its connections are dropped.
    let name = format!("drop_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{url}&application_name={name}");
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let key = SessionKey::main("p", "s");
    for i in 0..10 {
        store
            .append(
                &key,
                &crate::support::typed(&[json!({"type": "x", "uuid": format!("u{i}")})]),
            )
            .unwrap();
    }
    pg::execute(
        &url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND application_name = '{name}'"
        ),
    );
    // Every connection (the pool's, the append connection) may meet its dead socket
    // once, in whichever call it serves; then it reconnects. So over all the calls that
    // follow, at most CONNECTIONS fail, each with an error naming the database.
    let mut failures = 0;
    let loaded = retrying(&mut failures, || store.load_json(&key));
    assert_eq!(loaded.unwrap().len(), 10);
    retrying(&mut failures, || {
        store.append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "after"})]),
        )
    });
    let loaded = retrying(&mut failures, || store.load_json(&key));
    assert_eq!(loaded.unwrap().len(), 11);
}

/// `call` until it succeeds, counting its failures into `failures`, at most
/// `CONNECTIONS` in all (one per dead connection), each naming the database.
fn retrying<T>(
    failures: &mut usize,
    mut call: impl FnMut() -> Result<T, flower::stores::StoreError>,
) -> T {
    loop {
        match call() {
            Ok(value) => return value,
            Err(e) => {
                assert!(e.to_string().contains("postgres://"), "{e}");
                *failures += 1;
                assert!(*failures <= flower::stores::postgres::CONNECTIONS, "{e}");
            }
        }
    }
}

/// `--store sqlite` (and `FLOWER_STORE=sqlite`) name the default store explicitly.
#[test]
fn store_sqlite_is_the_default_store() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好的"), Reply::text("好的")]);
    let out = flower_in(&server, dir.path(), &["once", "hi", "--store", "sqlite"]);
    assert!(out.status.success(), "{out:?}");
    assert!(dir.path().join("runs/sessions.db").exists());
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(dir.path())
        .args(["state", "--json"])
        .env("FLOWER_STORE", "sqlite")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["woke"], 0);
}

/// `flower store --store URL …` works on the database like on a SQLite file.
#[test]
fn the_store_command_reads_and_writes_a_postgres_store() {
    let Some(url) = pg::fresh_url() else { return };
    let dir = TempDir::new().unwrap();
    let flower = |args: &[&str], stdin: &str| {
        use std::io::Write as _;
        let mut child = Flower::bin()
            .command()
            .current_dir(dir.path())
            .arg("store")
            .args(["--store", url.as_str()])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let appended = flower(
        &["append", "-p/s1"],
        r#"[{"type":"user","uuid":"u1","message":{"role":"user","content":"hi"}}]"#,
    );
    assert_eq!(appended["stored"], 1);
    assert_eq!(flower(&["load", "-p/s1"], "")[0]["uuid"], "u1");
    assert_eq!(flower(&["sessions", "-p"], "")[0]["session_id"], "s1");
    assert_eq!(flower(&["delete", "-p/s1"], "")["deleted_entries"], 1);
    assert_eq!(flower(&["load", "-p/s1"], ""), Value::Null);
    assert!(!dir.path().join("runs").exists(), "no SQLite file made");
    // What the database holds is what the library sees.
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    assert_eq!(
        store.load_json(&SessionKey::main("-p", "s1")).unwrap(),
        None
    );
}

/// A row whose text is not JSON (written by hand, or a bad disk): loading and resuming
/// name the row and say why, and the store goes on answering on the same connections
/// (the rows after the bad one, never read, do not answer the next call).
#[test]
fn a_corrupt_row_is_named_and_the_store_keeps_answering() {
    let Some(url) = pg::fresh_url() else { return };
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let key = SessionKey::main("p", "s");
    let entries: Vec<_> = (0..50)
        .map(|i| json!({"type": "x", "uuid": format!("u{i}")}))
        .collect();
    store
        .append(&key, &crate::support::typed(&entries))
        .unwrap();
    pg::execute(
        &url,
        "UPDATE flower_entries SET data = '{not json' WHERE id = \
         (SELECT min(id) + 10 FROM flower_entries)",
    );
    let options = flower::stores::prune::PruneOptions::new(std::env::temp_dir());
    for _ in 0..2 * flower::stores::postgres::POOL_SIZE {
        let e = store.load_json(&key).unwrap_err().to_string();
        assert!(e.contains("行记录不是合法的 JSON"), "{e}");
        let e = store.load_resume(&key, &options).unwrap_err().to_string();
        assert!(e.contains("行记录不是合法的 JSON"), "{e}");
        // Every pooled connection still answers the next call in step.
        assert!(store.has_session("s").unwrap());
        let other = SessionKey::main("p", "t");
        store
            .append(&other, &crate::support::typed(&entries[..1]))
            .unwrap();
        assert_eq!(store.load_json(&other).unwrap().unwrap().len(), 1);
    }
}
