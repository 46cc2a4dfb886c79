//! `flower store …` through the real binary: output, import, and bad input (one line
//! on stderr naming the problem and the file, non-zero exit, nothing written).

use crate::store_support;
use crate::support::LoadJson;

use crate::support::Flower;
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use store_support::{api_error, assistant, snapshot, text, user_text};

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Output {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

fn command(cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = Flower::bin().command();
    cmd.arg("store").args(args).current_dir(cwd);
    cmd
}

fn run_cmd(mut cmd: Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command may exit before reading stdin (a bad key is refused first).
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn run(cwd: &Path, args: &[&str], stdin: &str) -> Output {
    run_cmd(command(cwd, args), stdin)
}

/// Asserts a failure reported as one line that mentions every `needle`.
fn assert_fails(out: &Output, needles: &[&str]) {
    assert!(!out.ok, "must fail; stdout: {}", out.stdout);
    assert_eq!(
        out.stderr.trim_end().lines().count(),
        1,
        "one line: {:?}",
        out.stderr
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "{needle:?} missing from {:?}",
            out.stderr
        );
    }
}

fn transcript() -> Vec<Value> {
    vec![
        user_text("u1", None, "hello"),
        assistant("a1", Some("u1"), vec![text("hi")]),
        api_error("e1", Some("a1")),
    ]
}

#[test]
fn append_then_load_round_trips_arrays_and_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let entries = transcript();
    let out = run(
        dir.path(),
        &["append", "p/s"],
        &serde_json::to_string(&entries).unwrap(),
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.json()["stored"], 3);
    assert!(
        dir.path().join("runs/sessions.db").exists(),
        "default database is runs/sessions.db"
    );

    let more = [json!({"type": "x", "n": 1}), json!({"type": "x", "n": 2})];
    let lines = format!("{}\n\n{}\n", more[0], more[1]);
    let out = run(dir.path(), &["append", "p/s/subagents/agent-1"], &lines);
    assert!(out.ok, "{}", out.stderr);

    let loaded = run(dir.path(), &["load", "p/s"], "").json();
    assert_eq!(loaded, Value::Array(entries.clone()));
    assert_eq!(
        run(dir.path(), &["load", "p/s/subagents/agent-1"], "").json(),
        json!(more)
    );
    assert_eq!(
        run(dir.path(), &["load", "p/never"], "").json(),
        Value::Null
    );
    // Appending the same entries again stores nothing twice (uuids are idempotency keys).
    let out = run(
        dir.path(),
        &["append", "p/s"],
        &serde_json::to_string(&entries).unwrap(),
    );
    assert_eq!(out.json()["stored"], 0);
}

#[test]
fn load_pruned_prints_what_a_resume_is_fed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    let db = db.to_str().unwrap();
    assert!(
        run(
            dir.path(),
            &["--db", db, "append", "p/s"],
            &serde_json::to_string(&transcript()).unwrap()
        )
        .ok
    );
    let pruned = run(dir.path(), &["load", "p/s", "--pruned", "--db", db], "").json();
    assert_eq!(pruned, json!(transcript()[..2]));
    let raw = run(dir.path(), &["--db", db, "load", "p/s"], "").json();
    assert_eq!(
        raw,
        json!(transcript()),
        "the stored transcript is untouched"
    );
}

#[test]
fn sessions_summaries_subkeys_and_delete_print_json() {
    let dir = tempfile::tempdir().unwrap();
    let t = serde_json::to_string(&transcript()).unwrap();
    for key in [
        "p/s1",
        "p/s2",
        "p/s1/subagents/b",
        "p/s1/subagents/a",
        "q/s3",
    ] {
        assert!(run(dir.path(), &["append", key], &t).ok);
    }
    let sessions = run(dir.path(), &["sessions", "p"], "").json();
    let mut ids: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["s1", "s2"]);
    assert!(sessions[0]["mtime"].as_i64().unwrap() > 1_000_000_000_000);
    let summaries = run(dir.path(), &["summaries", "p"], "").json();
    assert_eq!(summaries.as_array().unwrap().len(), 2);
    assert_eq!(summaries[0]["data"]["first_prompt"], "hello");
    assert_eq!(
        run(dir.path(), &["subkeys", "p/s1"], "").json(),
        json!(["subagents/a", "subagents/b"])
    );

    let deleted = run(dir.path(), &["delete", "p/s1"], "").json();
    assert_eq!(
        deleted["deleted_entries"], 9,
        "the main transcript and both subkeys"
    );
    assert_eq!(run(dir.path(), &["subkeys", "p/s1"], "").json(), json!([]));
    assert_eq!(
        run(dir.path(), &["sessions", "p"], "").json()[0]["session_id"],
        "s2"
    );
    assert_eq!(
        run(dir.path(), &["sessions", "nobody"], "").json(),
        json!([])
    );
}

#[test]
fn reading_a_missing_database_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["load", "p/s"], "").json(), Value::Null);
    assert_eq!(run(dir.path(), &["sessions", "p"], "").json(), json!([]));
    assert_eq!(run(dir.path(), &["summaries", "p"], "").json(), json!([]));
    assert_eq!(run(dir.path(), &["subkeys", "p/s"], "").json(), json!([]));
    assert_eq!(
        run(dir.path(), &["delete", "p/s"], "").json()["deleted_entries"],
        0
    );
    assert!(snapshot(dir.path()).is_empty());
}

#[test]
fn import_takes_a_claude_code_transcript_and_skips_what_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("projects/-home-me-proj");
    std::fs::create_dir_all(&project).unwrap();
    let file = project.join("7f3c2a10-aaaa-bbbb-cccc-123456789abc.jsonl");
    let mut u1 = user_text("u1", None, "写个脚本");
    u1["cwd"] = json!("/home/me/proj");
    let lines = [
        json!({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}).to_string(),
        u1.to_string(),
        assistant("a1", Some("u1"), vec![text("好")]).to_string(),
        json!({"type": "queue-operation", "operation": "enqueue"}).to_string(),
        json!({"type": "summary", "summary": "写脚本", "leafUuid": "a1"}).to_string(),
        json!({"type": "system", "subtype": "x", "uuid": "s1", "parentUuid": "a1"}).to_string(),
        r#"{"type":"user","uuid":"torn","mess"#.to_string(),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();

    let out = run(dir.path(), &["import", file.to_str().unwrap()], "");
    assert!(out.ok, "{}", out.stderr);
    let report = out.json();
    let key = format!(
        "{}/7f3c2a10-aaaa-bbbb-cccc-123456789abc",
        project_key(Path::new("/home/me/proj"))
    );
    assert_eq!(report["key"], key);
    assert_eq!(report["lines"], 7);
    assert_eq!(report["taken"], 4);
    assert_eq!(report["skipped"], 2);
    assert_eq!(report["malformed"], 1);
    let loaded = run(dir.path(), &["load", &key], "").json();
    let types: Vec<&str> = loaded
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["user", "assistant", "summary", "system"]);
    // Project keys start with '-': options may still follow them.
    assert_eq!(
        run(dir.path(), &["load", &key, "--pruned"], "").json(),
        loaded
    );
    let summaries = run(
        dir.path(),
        &["summaries", &project_key(Path::new("/home/me/proj"))],
        "",
    )
    .json();
    assert_eq!(summaries[0]["data"]["summary_hint"], "写脚本");

    // Explicit key; importing twice stores nothing new.
    let args = [
        "import",
        file.to_str().unwrap(),
        "--project-key",
        "K",
        "--session-id",
        "S",
    ];
    assert_eq!(run(dir.path(), &args, "").json()["stored"], 4);
    assert_eq!(run(dir.path(), &args, "").json()["stored"], 0);
}

#[test]
fn import_keeps_each_line_as_claude_code_wrote_it() {
    // Byte for byte as JSON.stringify writes it: unknown fields and block types (what
    // they hold as written, even escapes serde_json would not write, `\u00e9`, `\/`),
    // a float written `1.0`, a count written `3.0`, keys in Claude Code's order.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.jsonl");
    let lines = [
        r#"{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/p","sessionId":"s","version":"9.9.9","type":"user","message":{"role":"user","content":"café a/b"},"uuid":"u1","timestamp":"2026-01-01T00:00:00.000Z","futureField":{"x":[1.0,2],"y":"\u00e9\/"}}"#,
        r#"{"parentUuid":"u1","type":"assistant","message":{"id":"m","role":"assistant","content":[{"type":"mcp_tool_use","id":"x","server_name":"s","input":{}},{"type":"text","text":"ok","futureBlockField":true}],"usage":{"input_tokens":1,"output_tokens":3.0,"service_tier":"standard"}},"uuid":"a1"}"#,
        r#"{"type":"ai-title","aiTitle":"t中","sessionId":"s"}"#,
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let db = dir.path().join("x.db");
    let db_arg = db.to_str().unwrap();
    let args = [
        "--db",
        db_arg,
        "import",
        file.to_str().unwrap(),
        "--project-key",
        "K",
    ];
    let out = run(dir.path(), &args, "");
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.json()["stored"], 3);
    let store = flower::stores::SqliteSessionStore::open_read_only(&db)
        .unwrap()
        .unwrap();
    let mut rows = Vec::new();
    let key = flower::stores::SessionKey::main("K", "s");
    store
        .for_each_raw(&key, |row| {
            rows.push(String::from_utf8(row.to_vec()).unwrap())
        })
        .unwrap();
    assert_eq!(rows, lines);
    // Read back through the protocol as before (a tree of each).
    let loaded = run(dir.path(), &["--db", db_arg, "load", "K/s"], "").json();
    assert_eq!(loaded[0]["message"]["content"], "café a/b");
    assert_eq!(loaded[0]["futureField"]["y"], "é/");
    assert_eq!(loaded[2]["aiTitle"], "t中");
}

#[test]
fn import_of_a_file_without_transcript_lines_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("junk.jsonl");
    std::fs::write(&file, "not json\n{\"type\":\"queue-operation\"}\n").unwrap();
    let out = run(dir.path(), &["import", file.to_str().unwrap()], "");
    assert_fails(&out, &["junk.jsonl", "没有能导入的 transcript 行"]);
    let out = run(dir.path(), &["import", "missing.jsonl"], "");
    assert_fails(&out, &["missing.jsonl"]);
    assert!(!dir.path().join("runs").exists());
}

/// A database holding one transcript; returns its snapshot-able directory.
fn existing_db(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("runs/sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    store
        .append(
            &SessionKey::main("p", "s"),
            &crate::support::typed(&transcript()),
        )
        .unwrap();
    db
}

#[test]
fn malformed_stdin_and_non_objects_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = existing_db(dir.path());
    let runs = db.parent().unwrap();
    let before = snapshot(runs);
    let cases = [
        (
            "[{\"type\":\"x\"}, {\"type\":",
            vec!["标准输入", "JSON 数组写坏了", "runs/sessions.db"],
        ),
        (
            "{\"type\":\"x\",\"uuid\":\"new1\"}\n{oops}\n",
            vec!["标准输入", "第 2 行", "JSON 写坏了"],
        ),
        (
            "{\"type\":\"x\",\"uuid\":\"new2\"}\n42\n",
            vec!["标准输入", "第 2 行", "不是 JSON 对象"],
        ),
        (
            "[{\"type\":\"x\",\"uuid\":\"new3\"}, \"text\"]",
            vec!["标准输入", "第 1 项", "不是 JSON 对象"],
        ),
        ("\u{1}\u{ff}", vec!["标准输入"]),
    ];
    for (stdin, needles) in cases {
        let out = run(dir.path(), &["append", "p/s"], stdin);
        assert_fails(&out, &needles);
    }
    assert_eq!(snapshot(runs), before, "nothing may be written");
    let store = SqliteSessionStore::open_read_only(&db).unwrap().unwrap();
    assert_eq!(
        store
            .load_json(&SessionKey::main("p", "s"))
            .unwrap()
            .unwrap(),
        transcript()
    );
}

#[test]
fn bad_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["nokey", "p/s/../../etc", "p/s//x", "/abs/s"] {
        let out = run(dir.path(), &["append", key], "{\"type\":\"x\"}");
        assert_fails(&out, &["会话键", "不行", "runs/sessions.db"]);
        let out = run(dir.path(), &["load", key], "");
        assert_fails(&out, &["会话键"]);
    }
    assert!(snapshot(dir.path()).is_empty(), "nothing created");
}

#[test]
fn a_file_that_is_not_sqlite_or_is_corrupt_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let notdb = dir.path().join("notes.txt");
    std::fs::write(&notdb, "just text\n".repeat(200)).unwrap();
    let before = snapshot(dir.path());
    for args in [
        vec!["append", "p/s"],
        vec!["load", "p/s"],
        vec!["sessions", "p"],
        vec!["delete", "p/s"],
    ] {
        let mut args = args.clone();
        args.extend(["--db", notdb.to_str().unwrap()]);
        let out = run(dir.path(), &args, "{\"type\":\"x\"}");
        assert_fails(&out, &["notes.txt", "不是 SQLite 数据库"]);
    }
    assert_eq!(snapshot(dir.path()), before);

    let db = existing_db(dir.path());
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("PRAGMA journal_mode = DELETE").unwrap();
    drop(conn);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[100..4096].fill(0x5A);
    std::fs::write(&db, &bytes).unwrap();
    let out = run(dir.path(), &["load", "p/s"], "");
    assert_fails(&out, &["runs/sessions.db", "坏了"]);
    let out = run(dir.path(), &["append", "p/s"], "{\"type\":\"x\"}");
    assert_fails(&out, &["runs/sessions.db", "坏了"]);
}

#[test]
fn a_newer_schema_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = existing_db(dir.path());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
        .unwrap();
    let before = snapshot(db.parent().unwrap());
    for args in [["append", "p/s"], ["load", "p/s"]] {
        let out = run(dir.path(), &args, "{\"type\":\"x\"}");
        assert_fails(&out, &["runs/sessions.db", "更新版本的 flower", "7"]);
    }
    assert_eq!(snapshot(db.parent().unwrap()), before);
}

#[test]
fn a_read_only_directory_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = existing_db(dir.path());
    let runs = db.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores permissions: run the binary as an unprivileged user instead.
    let as_user = |args: &[&str]| {
        let mut cmd = command(dir.path(), args);
        if unsafe { libc::geteuid() } == 0 {
            // A home of its own: the settings read the user's settings file there.
            cmd.uid(65534).gid(65534).env("HOME", dir.path());
        }
        cmd
    };
    let before = snapshot(&runs);

    let out = run_cmd(as_user(&["append", "p/s"]), "{\"type\":\"x\"}");
    assert_fails(&out, &["runs/sessions.db"]);
    let out = run_cmd(
        as_user(&["--db", "runs/new.db", "append", "p/s"]),
        "{\"type\":\"x\"}",
    );
    assert_fails(&out, &["runs/new.db"]);
    let out = run_cmd(as_user(&["delete", "p/s"]), "");
    assert_fails(&out, &["runs/sessions.db"]);
    // Reading needs no write access at all.
    let out = run_cmd(as_user(&["load", "p/s"]), "");
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.json(), json!(transcript()));

    assert_eq!(snapshot(&runs), before);
    std::fs::set_permissions(&runs, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `flower store` takes its store from the settings as a run does: `FLOWER_STORE`
/// when no flag names one (a bad value is exit 2, nothing opened), `--store sqlite`
/// or an explicit `--db` over the variable.
#[test]
fn the_store_command_honours_flower_store() {
    let dir = tempfile::tempdir().unwrap();
    let with_store = |args: &[&str], value: &str| {
        let mut cmd = command(dir.path(), args);
        cmd.env("FLOWER_STORE", value);
        cmd
    };

    let mut cmd = with_store(&["sessions", "p"], "mysql://x/y");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FLOWER_STORE"), "{err}");

    // A PostgreSQL nobody listens on: the command goes there, not to runs/sessions.db.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://flower@127.0.0.1:{port}/flower");
    let entries = serde_json::to_string(&transcript()).unwrap();
    let out = run_cmd(with_store(&["append", "p/s"], &url), &entries);
    assert_fails(&out, &[&format!("127.0.0.1:{port}")]);
    assert!(
        !dir.path().join("runs").exists(),
        "the SQLite store is not made"
    );

    // A flag wins over the variable: `--store sqlite`, or `--db`.
    let out = run_cmd(
        with_store(&["append", "p/s", "--store", "sqlite"], &url),
        &entries,
    );
    assert!(out.ok, "{}", out.stderr);
    assert!(dir.path().join("runs/sessions.db").exists());
    let out = run_cmd(
        with_store(&["append", "p/s", "--db", "other.db"], &url),
        &entries,
    );
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.json()["stored"], 3);
}

/// With a server: what `flower store` appended through `FLOWER_STORE` is in that
/// database.
#[test]
fn the_store_command_writes_where_flower_store_says() {
    let Some(url) = crate::support::postgres::fresh_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let entries = serde_json::to_string(&transcript()).unwrap();
    let mut cmd = command(dir.path(), &["append", "q/s"]);
    cmd.env("FLOWER_STORE", &url);
    let out = run_cmd(cmd, &entries);
    assert!(out.ok, "{}", out.stderr);
    let out = run(dir.path(), &["load", "q/s", "--store", &url], "");
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.json().as_array().map(Vec::len), Some(3));
}
