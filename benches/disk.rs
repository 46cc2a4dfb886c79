//! Disk per turn (issue #30, item 6). Prints figures; asserts none. Run with
//! `cargo bench --bench disk` (`-- 100 1000` for some lengths only). The bytes do not
//! depend on the build: `cargo bench --profile dev --bench disk` gives the same figures
//! without a release build.
//!
//! What is measured: the bytes flower keeps of a session of N `Read` turns (a call of a
//! three-line file and its result, the engine bench's session), `runs/sessions.db` and
//! its `-wal` once the process has ended, over N.
//!
//! 1. live: the real `flower` binary runs the session against the fake Messages API
//!    (`once`, N `Read` calls and a final text; 100 and 300 calls);
//! 2. against session length: the same entries (minted by [`Chain`], as the engine
//!    mints them) appended one at a time, as the engine appends them, for 100, 1,000
//!    and 10,000 turns: into the store of this build, and with the same appends into
//!    schema 1's layout (every entry row carrying its key's text, in the row and in both
//!    indexes).
//!
//! 0. beside Claude Code (`-- peer` for this part alone): the `claude` binary of the
//!    `claude-agent-sdk` wheel runs the same session on the same fake API (see
//!    `shared/peer.rs`); what each left, at 101 and 301 turns, for a three-line and a
//!    48-line file. Goal: flower ≤ 0.5 × Claude Code per turn.
//!
//! Claude Code's transcript of DESIGN.md §7's 301-turn session (3.4 MB, 11.3 KB a
//! turn) is printed for scale; that session read a bigger file, so it is not the
//! baseline of the goal.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/child.rs"]
#[allow(dead_code)] // only `flower_cmd` is used here
mod child;
#[path = "shared/peer.rs"]
mod peer;
#[path = "../tests/it/support/mod.rs"]
mod support;
use child::flower_cmd;

use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use flower::transcript::Chain;
use serde_json::json;
use std::path::Path;
use support::{FakeServer, Reply};

/// Claude Code's transcript of the 301-turn session (DESIGN.md §7).
const CLAUDE_CODE_BYTES: f64 = 3.4e6;
const CLAUDE_CODE_TURNS: f64 = 301.0;

/// Schema 1 (migration 1 of `stores/sqlite.rs`).
const SCHEMA_1: &str = "
    PRAGMA journal_mode = WAL;
    PRAGMA synchronous = NORMAL;
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    INSERT INTO meta VALUES ('schema_version', '1');
    CREATE TABLE summaries (
        project_key TEXT    NOT NULL,
        session_id  TEXT    NOT NULL,
        mtime       INTEGER NOT NULL,
        data        TEXT    NOT NULL,
        PRIMARY KEY (project_key, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX summaries_by_session ON summaries (session_id);
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
";

const FILE_TEXT: &str = "a small file\nof three lines\nto read again and again\n";

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flower = std::env::var("FLOWER_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_flower").to_string());
    let mut lengths: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if lengths.is_empty() {
        lengths = vec![100, 1_000, 10_000];
    }
    let cc = CLAUDE_CODE_BYTES / CLAUDE_CODE_TURNS;
    println!("disk per turn: {flower}");
    beside_claude_code(&flower);
    if args.iter().any(|a| a == "peer") {
        return std::process::ExitCode::SUCCESS;
    }
    println!();
    println!("live sessions (the binary, N Read calls + a final text):");
    for tool_turns in [100, 300] {
        let bytes = live(&flower, tool_turns);
        let turns = tool_turns + 1;
        println!(
            "  {turns:>6} turns: {:.2} MB, {:.2} KB per turn",
            bytes as f64 / 1e6,
            bytes as f64 / turns as f64 / 1e3,
        );
    }
    println!();
    println!("against session length (entries appended one at a time):");
    for &n in &lengths {
        let turns = (n + 1) as f64;
        let (now, old, json) = appended(n);
        let per = |b: u64| b as f64 / turns / 1e3;
        let ratio = now as f64 / old as f64;
        println!(
            "  {:>6} turns: {:.2} MB, {:.2} KB per turn; schema 1: {:.2} KB per turn; this / schema 1 {ratio:.3}",
            n + 1,
            now as f64 / 1e6,
            per(now),
            per(old),
        );
        println!(
            "          entries' JSON {:.2} KB per turn (store / JSON {:.2}); DESIGN.md's 301-turn Claude Code transcript, {:.1} KB per turn: {:.3} x",
            per(json),
            now as f64 / json as f64,
            cc / 1e3,
            per(now) * 1e3 / cc
        );
    }
    if let Ok(url) = std::env::var("FLOWER_TEST_POSTGRES_URL") {
        println!();
        println!(
            "PostgreSQL (the entry rows' table, indexes and TOAST, and the transcripts table; entries appended one at a time):"
        );
        for &n in &lengths {
            let (now, old) = postgres(&url, n);
            let turns = (n + 1) as f64;
            println!(
                "  {:>6} turns: {:.2} KB per turn; version 2: {:.2} KB per turn; this / version 2 {:.3}",
                n + 1,
                now as f64 / turns / 1e3,
                old as f64 / turns / 1e3,
                now as f64 / old as f64
            );
        }
    }
    std::process::ExitCode::SUCCESS
}

/// Version 2's entry table and indexes (PostgreSQL migration 1).
const POSTGRES_2: &str = "
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
";

/// The `n`-turn session appended entry by entry into a PostgreSQL store of this build
/// and into version 2's entry table; the bytes of each.
fn postgres(base: &str, n: usize) -> (u64, u64) {
    let root = std::path::PathBuf::from("/bench/work");
    let id = uuid::Uuid::new_v4().to_string();
    let key = SessionKey::main(project_key(&root), &id);
    let entries = session(&root, &id, n);
    let now_url = fresh_schema(base);
    {
        let store =
            flower::stores::PostgresStore::open(&now_url.parse().expect("url")).expect("store");
        for entry in &entries {
            store
                .append(&key, std::slice::from_ref(entry))
                .expect("append");
        }
    }
    let old_url = fresh_schema(base);
    let sizes = std::thread::spawn(move || {
        let size = |c: &mut postgres::Client, tables: &str| -> u64 {
            c.batch_execute("CHECKPOINT").ok();
            let sql = format!(
                "SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest('{{{tables}}}'::text[]) AS t"
            );
            c.query_one(&sql, &[]).expect("size").get::<_, i64>(0) as u64
        };
        let mut now = postgres::Client::connect(&now_url, postgres::NoTls).expect("connect");
        let now = size(&mut now, "flower_entries,flower_transcripts");
        let mut old = postgres::Client::connect(&old_url, postgres::NoTls).expect("connect");
        old.batch_execute(POSTGRES_2).expect("version 2 table");
        let insert = old
            .prepare(
                "INSERT INTO flower_entries \
                 (project_key, session_id, subpath, uuid, type, stored_at, data) \
                 VALUES ($1, $2, '', $3, $4, $5, $6) \
                 ON CONFLICT (project_key, session_id, subpath, uuid) WHERE uuid IS NOT NULL \
                 DO NOTHING",
            )
            .expect("prepare");
        for entry in &entries {
            let data = entry.to_json().unwrap();
            old.execute(
                &insert,
                &[
                    &key.project_key,
                    &key.session_id,
                    &entry.uuid.as_deref(),
                    &entry.kind.as_deref(),
                    &1_796_000_000_000_i64,
                    &data,
                ],
            )
            .expect("insert");
        }
        let old = size(&mut old, "flower_entries");
        (now, old)
    });
    sizes.join().expect("sizes")
}

/// A schema of its own in the test database, so runs never meet.
fn fresh_schema(base: &str) -> String {
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let created = {
        let base = base.to_string();
        let schema = schema.clone();
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&base, postgres::NoTls)?;
            client.batch_execute(&format!("CREATE SCHEMA {schema}"))
        })
        .join()
        .expect("thread")
    };
    created.expect("create a schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-csearch_path%3D{schema}")
}

/// The bytes of a store file and its WAL.
fn store_bytes(db: &Path) -> u64 {
    let size = |suffix: &str| {
        let mut name = db.as_os_str().to_os_string();
        name.push(suffix);
        std::fs::metadata(&name).map_or(0, |m| m.len())
    };
    size("") + size("-wal")
}

/// Part 1: the real binary, `tool_turns` Read calls then a final text.
fn live(flower: &str, tool_turns: usize) -> u64 {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("notes.txt"), FILE_TEXT).expect("seed file");
    let mut script: Vec<Reply> = (0..tool_turns)
        .map(|_| Reply::tool_use("Read", json!({"file_path": "notes.txt"})).usage(2000, 30))
        .collect();
    script.push(Reply::text("done").usage(2000, 2));
    let server = FakeServer::start(script);
    let prompt = format!("Read notes.txt {tool_turns} times, then say done.");
    let out = flower_cmd(
        flower,
        &server,
        dir.path(),
        &["once", &prompt, "--json", "--allowed-tools", "Read"],
    )
    .output()
    .expect("run flower");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.requests().len(), tool_turns + 1);

    store_bytes(&dir.path().join("runs/sessions.db"))
}

/// Part 2: an `n`-turn session appended entry by entry into this build's store and
/// into schema 1's layout; their bytes and the entries' JSON bytes.
fn appended(n: usize) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical");
    let id = uuid::Uuid::new_v4().to_string();
    let key = SessionKey::main(project_key(&root), &id);
    let entries = session(&root, &id, n);
    let json: u64 = entries
        .iter()
        .map(|e| e.to_json().unwrap().len() as u64)
        .sum();

    let db = root.join("runs/sessions.db");
    {
        let store = SqliteSessionStore::open(&db).expect("store");
        for entry in &entries {
            store
                .append(&key, std::slice::from_ref(entry))
                .expect("append");
        }
    }
    let now = store_bytes(&db);

    // Schema 1: the same rows, one transaction each, as its `append` wrote them, and
    // the same summary row.
    let summary: (String, String, i64, String) = rusqlite::Connection::open(&db)
        .expect("the store")
        .query_row("SELECT * FROM summaries", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .expect("its summary");
    let old_db = root.join("schema-1.db");
    {
        let mut conn = rusqlite::Connection::open(&old_db).expect("schema 1");
        conn.execute_batch(SCHEMA_1).expect("schema 1 tables");
        conn.execute(
            "INSERT INTO summaries VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![summary.0, summary.1, summary.2, summary.3],
        )
        .expect("summary");
        for entry in &entries {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .expect("begin");
            tx.execute(
                "INSERT OR IGNORE INTO entries \
                 (project_key, session_id, subpath, uuid, type, stored_at, data) \
                 VALUES (?1, ?2, '', ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    key.project_key,
                    key.session_id,
                    entry.uuid.as_deref(),
                    entry.kind.as_deref(),
                    1_796_000_000_000_i64,
                    entry.to_json().unwrap()
                ],
            )
            .expect("insert");
            tx.commit().expect("commit");
        }
    }
    (now, store_bytes(&old_db), json)
}

/// The entries of an `n`-turn session: a prompt, `n` Read calls with their results,
/// a final text.
fn session(root: &Path, id: &str, n: usize) -> Vec<flower::transcript::Entry> {
    let mut chain = Chain::new(id, root);
    let mut entries = vec![chain.user_text("Read notes.txt again and again.")];
    let text: String = FILE_TEXT
        .lines()
        .enumerate()
        .map(|(k, l)| format!("{:>6}\t{l}\n", k + 1))
        .collect();
    for i in 0..n {
        let reply = flower::model::ModelReply {
            id: format!("msg_{i:06}"),
            model: "claude-sonnet-4-5".into(),
            content: blocks(vec![
                json!({"type": "tool_use", "id": format!("toolu_{i:06}"),
                                 "name": "Read", "input": {"file_path": "notes.txt"}}),
            ]),
            stop_reason: Some("tool_use".into()),
            stop_details: None,
            usage: flower::model::Usage {
                input_tokens: 2000,
                output_tokens: 30,
                ..Default::default()
            },
        };
        entries.push(chain.assistant(&reply));
        entries.push(chain.tool_result(&format!("toolu_{i:06}"), &text, false));
    }
    let reply = flower::model::ModelReply {
        id: "msg_last".into(),
        model: "claude-sonnet-4-5".into(),
        content: blocks(vec![json!({"type": "text", "text": "done"})]),
        stop_reason: Some("end_turn".into()),
        stop_details: None,
        usage: flower::model::Usage {
            input_tokens: 2000,
            output_tokens: 2,
            ..Default::default()
        },
    };
    entries.push(chain.assistant(&reply));
    entries
}

/// Part 0: flower and Claude Code run the same session against one fake API, each in
/// a home and project of its own; what each left there (the read file aside), at 101
/// and 301 turns. Goal: flower ≤ 0.5 × Claude Code per turn.
fn beside_claude_code(flower: &str) {
    println!();
    let claude = match peer::claude_binary() {
        Ok(claude) => claude,
        Err(why) => {
            println!("beside Claude Code: skipped: {why}");
            return;
        }
    };
    println!(
        "beside Claude Code ({}, {}), one fake API, N Read calls of a three-line file + a final text; bytes each left in its home and project:",
        peer::claude_version(&claude),
        claude.display()
    );
    // The engine bench's three-line file, and a 2.3 KB source file (48 lines of code).
    let source: String = (0..48)
        .map(|i| format!("    let value_{i:02} = compute(input, {i}); // step {i} of the parse\n"))
        .collect();
    for (what, text) in [
        ("a three-line file", FILE_TEXT.to_string()),
        ("a 48-line file", source),
    ] {
        println!("  {what} ({} B):", text.len());
        side_by_side(flower, &claude, &text);
    }
}

/// [`beside_claude_code`] for one file's text, at 101 and 301 turns.
fn side_by_side(flower: &str, claude: &Path, text: &str) {
    let mut totals = Vec::new();
    for tool_turns in [100, 300] {
        let turns = tool_turns + 1;
        let flower_left = harness_run(tool_turns, text, |server, home, dir, prompt| {
            let out = flower_cmd(
                flower,
                server,
                dir,
                &["once", prompt, "--json", "--allowed-tools", "Read"],
            )
            .env("HOME", home)
            .output()
            .expect("run flower");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        });
        let claude_left = harness_run(tool_turns, text, |server, home, dir, prompt| {
            peer::run_claude(claude, server, home, dir, prompt)
        });
        let per = |b: u64| b as f64 / turns as f64;
        let ratio = flower_left.0 as f64 / claude_left.0 as f64;
        println!(
            "    {turns:>4} turns: flower {:.0} B per turn ({} B), Claude Code {:.0} B per turn ({} B): {ratio:.3} x; goal <= 0.5: {}",
            per(flower_left.0),
            flower_left.0,
            per(claude_left.0),
            claude_left.0,
            if ratio <= 0.5 {
                "meets the goal"
            } else {
                "MISSES the goal"
            }
        );
        for (who, files) in [("flower", &flower_left.1), ("Claude Code", &claude_left.1)] {
            let shown: Vec<String> = files
                .iter()
                .take(6)
                .map(|(path, bytes)| format!("{path} {bytes}"))
                .collect();
            println!(
                "          {who}: {} files: {}",
                files.len(),
                shown.join(", ")
            );
        }
        totals.push((turns, flower_left.0, claude_left.0));
    }
    if let [(t1, f1, c1), (t2, f2, c2)] = totals[..] {
        let added = |a: u64, b: u64| (b as f64 - a as f64) / (t2 - t1) as f64;
        println!(
            "    each turn added from {t1} to {t2}: flower {:.0} B, Claude Code {:.0} B: {:.3} x",
            added(f1, f2),
            added(c1, c2),
            added(f1, f2) / added(c1, c2)
        );
    }
}

/// Runs one harness (`run(server, home, project, prompt)`) on the Read session; the
/// bytes it left under its home (the project is inside it) but the read file, and
/// the files.
fn harness_run(
    tool_turns: usize,
    text: &str,
    run: impl FnOnce(&FakeServer, &Path, &Path, &str),
) -> (u64, Vec<(String, u64)>) {
    let home = tempfile::tempdir().expect("temp dir").keep();
    let home = home.canonicalize().expect("canonical home");
    let dir = home.join("proj");
    std::fs::create_dir_all(&dir).expect("project dir");
    let file = dir.join("notes.txt");
    std::fs::write(&file, text).expect("seed file");
    let server = peer::read_session(file, tool_turns);
    let prompt = format!("Read notes.txt {tool_turns} times, then say done.");
    run(&server, &home, &dir, &prompt);
    let results = server
        .requests()
        .iter()
        .filter(|r| r.body["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .count();
    assert!(
        results > tool_turns,
        "the session ran {results} model turns"
    );
    let files: Vec<(String, u64)> = peer::tree_files(&home)
        .into_iter()
        .filter(|(path, _)| path != "proj/notes.txt")
        .collect();
    // `FLOWER_BENCH_KEEP=1` keeps the homes to look at what each harness stored.
    if std::env::var_os("FLOWER_BENCH_KEEP").is_some() {
        println!("        kept: {}", home.display());
    } else {
        let _ = std::fs::remove_dir_all(&home);
    }
    (files.iter().map(|(_, b)| b).sum(), files)
}

/// Content blocks from their JSON.
fn blocks(values: Vec<serde_json::Value>) -> Vec<flower::transcript::Block> {
    values
        .iter()
        .map(|v| serde_json::from_str(&v.to_string()).expect("a block"))
        .collect()
}
