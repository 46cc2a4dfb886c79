//! Costs against session length (issue #30). Prints figures; asserts none. Run with
//! `cargo bench --bench session_length` (`-- 100 1000` for some lengths only; the
//! default is 100, 1,000 and 10,000 turns).
//!
//! For each length N a session of N tool turns (a `Read` call and its result, the
//! shape of a real working session, about 1.4 KB of entries per turn) is written
//! straight into the store, then the real release `flower` binary continues it
//! against the fake Messages API answering at once:
//!
//! 1. the request body: building it in process (`request_body` over a `History` of
//!    the session's messages), per request;
//! 2. resume: `flower once --resume ID` for one more turn: CPU and peak RSS of the
//!    whole process, per turn of history, next to the session's stored bytes.
//!    Goals: RSS ≤ 2 × stored bytes + 12 MiB, CPU ≤ 20 µs per turn of history;
//! 3. live turns: the same resume with 20 more `Read` turns; the difference to (2)
//!    over 20 is what one turn costs at that length (CPU, and wall: the appends'
//!    flushes are waited for, not worked);
//! 4. with `FLOWER_TEST_POSTGRES_URL`, 2 and 3 again with the session in PostgreSQL:
//!    per-turn wall against SQLite's. Goal ≤ 1.5 ×.
//!
//! Peak RSS and CPU are the child's own, read with `wait4` by a helper process.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/child.rs"]
#[allow(dead_code)] // `Parts::wants` is for the benches run by part
mod child;
#[path = "shared/instructions.rs"]
mod instructions;
#[path = "shared/peer.rs"]
#[allow(dead_code)] // the disk bench uses the rest
mod peer;
#[path = "../tests/it/support/mod.rs"]
mod support;
use child::{Usage, flower_cmd, measure, mib, ms};

use flower::model::MessagesRequest;
use flower::model::anthropic::request_body;
use flower::stores::{PostgresStore, SessionKey, SessionStore, SqliteSessionStore, project_key};
use flower::transcript::{Chain, Entry, Messages};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{FakeServer, Reply};

/// Extra live turns measured on top of a resume: enough that a process's start and
/// resume, whose wall time varies by milliseconds, is a small part of the difference.
const LIVE_TURNS: usize = 20;
/// Runs of each measurement (the median is printed).
const RUNS: usize = 5;

const FILE_TEXT: &str = "a small file\nof three lines\nto read again and again\n";

fn main() -> std::process::ExitCode {
    let parts = match child::bench_or_helper() {
        Ok(parts) => parts,
        Err(helper_exit) => return helper_exit,
    };
    let args = parts.named();
    let flower = &child::flower_under_test();
    let mut lengths: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if lengths.is_empty() && !args.iter().any(|a| a == "instructions" || a == "peer") {
        lengths = vec![100, 1_000, 10_000];
    }
    if args.iter().any(|a| a == "peer") {
        if lengths.is_empty() {
            lengths = vec![100, 1_000];
        }
        beside_claude_code(flower, &lengths);
        return std::process::ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "instructions") {
        if lengths.is_empty() {
            lengths = vec![100, 1_000, 3_000];
        }
        per_turn_instructions(flower, &lengths);
        return std::process::ExitCode::SUCCESS;
    }
    let pg = std::env::var("FLOWER_TEST_POSTGRES_URL").ok();
    println!("session length: {flower}, against the fake server answering at once");
    for n in lengths {
        println!();
        println!("{n} turns:");
        body_build(n);
        let mut subjects = vec![Subject::new(n, None)];
        if let Some(url) = &pg {
            subjects.push(Subject::new(n, Some(url)));
        }
        // Interleaved (a run of each store in turn, RUNS times), so that the machine's
        // load drifting over the minutes weighs on both alike.
        let mut resumes: Vec<Vec<Usage>> = subjects.iter().map(|_| Vec::new()).collect();
        let mut lives: Vec<Vec<Usage>> = subjects.iter().map(|_| Vec::new()).collect();
        for _ in 0..RUNS {
            for (i, subject) in subjects.iter().enumerate() {
                resumes[i].push(subject.run(flower, 0));
                lives[i].push(subject.run(flower, LIVE_TURNS));
            }
        }
        let turns: Vec<Duration> = subjects
            .iter()
            .zip(resumes.into_iter().zip(lives))
            .map(|(subject, (resume, live))| subject.report(n, median(resume), median(live)))
            .collect();
        if let [sqlite, postgres] = turns[..] {
            println!(
                "  PostgreSQL / SQLite per live turn (wall): {:.2}; goal <= 1.5: {}",
                postgres.as_secs_f64() / sqlite.as_secs_f64(),
                verdict(postgres.as_secs_f64() <= 1.5 * sqlite.as_secs_f64())
            );
        }
    }
    std::process::ExitCode::SUCCESS
}

/// The entries of an `n`-turn session: a prompt, `n` Read calls with their results,
/// a final text.
fn session(id: &str, n: usize) -> Vec<Entry> {
    let mut chain = Chain::new(id, Path::new("/bench/work"));
    let mut entries = vec![chain.user_text("Read notes.txt again and again.")];
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
        let text: String = FILE_TEXT
            .lines()
            .enumerate()
            .map(|(k, l)| format!("{:>6}\t{l}\n", k + 1))
            .collect();
        entries.push(chain.tool_result(&format!("toolu_{i:06}"), &text, false));
    }
    entries
}

/// Part 1: the body of the next request, built in process.
fn body_build(n: usize) {
    let entries = session("bench", n);
    let mut messages = Messages::default();
    for entry in entries {
        messages.push_entry(entry);
    }
    let request = MessagesRequest {
        system_shared: String::new(),
        model: "claude-sonnet-4-5".into(),
        max_tokens: 32_000,
        system: "system prompt ".repeat(200),
        messages: messages.history().clone(),
        tools: Vec::new(),
        thinking: None,
        effort: None,
        server_tools: Vec::new(),
    };
    let rounds = (2_000_000 / (n + 10)).clamp(3, 2000);
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..rounds {
        bytes = request_body(&request).len();
    }
    let per = start.elapsed() / rounds as u32;
    // For scale, what the old path did on every request: serialize every message.
    let values = request.messages.to_messages();
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(serde_json::to_vec(&values).map(|v| v.len()).unwrap_or(0));
    }
    let reserialized = start.elapsed() / rounds as u32;
    println!(
        "  request body ({:.0} KB): built by concatenation {:.1} µs; every message serialized again {:.1} µs",
        bytes as f64 / 1e3,
        per.as_secs_f64() * 1e6,
        reserialized.as_secs_f64() * 1e6
    );
}

/// `-- instructions` (#46 item 2): per live turn at each length, what callgrind counts
/// in the process (the difference of a resume with [`LIVE_TURNS`] more turns and one
/// with none, over [`LIVE_TURNS`]), split into copying bytes and flower's own work,
/// beside the floor: the request bytes written per turn. Goal: own work per turn flat
/// within 1.2 × from the shortest length to the longest.
fn per_turn_instructions(flower: &str, lengths: &[usize]) {
    println!(
        "instructions per live turn (valgrind --tool=callgrind, {flower}; the session's N turns stored, then `once --resume` for 0 and {LIVE_TURNS} more):"
    );
    let mut own = Vec::new();
    for &n in lengths {
        let subject = Subject::new(n, None);
        let (Some((none, _)), Some((more, bytes))) = (
            subject.counted(flower, 0),
            subject.counted(flower, LIVE_TURNS),
        ) else {
            return;
        };
        let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / LIVE_TURNS as f64;
        let own_per = per(none.own(), more.own());
        let copying_per = per(none.copying, more.copying);
        let body_per = bytes as f64 / (LIVE_TURNS + 1) as f64;
        println!(
            "  {:>5} turns: {:.0} K instructions per turn: own work {:.0} K, copying bytes (memcpy/memmove) {:.0} K; the floor: {:.0} KB of request body written per turn",
            n + 1,
            (own_per + copying_per) / 1e3,
            own_per / 1e3,
            copying_per / 1e3,
            body_per / 1e3
        );
        own.push((n + 1, own_per));
    }
    if let (Some(&(first_n, first)), Some(&(last_n, last))) = (own.first(), own.last()) {
        let ratio = last / first;
        println!(
            "  own work per turn at {last_n} / at {first_n} turns: {ratio:.2} x; goal <= 1.2: {}",
            verdict(ratio <= 1.2)
        );
    }
}

/// `-- peer` (#46 item 2): flower and Claude Code run the same fresh session of N
/// `Read` turns on one fake API; CPU (user + system, `wait4`) per turn of each, the
/// whole session over its turns. Goal: flower ≤ 0.02 × Claude Code. CPU time, not
/// instructions (node under valgrind is out of reach): take it on a quiet machine.
fn beside_claude_code(flower: &str, lengths: &[usize]) {
    let claude = match peer::claude_binary() {
        Ok(claude) => claude,
        Err(why) => {
            println!("beside Claude Code: skipped: {why}");
            return;
        }
    };
    println!(
        "CPU per turn beside Claude Code ({}), the same session of N Read calls + a final text, each fresh (load average {}):",
        peer::claude_version(&claude),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );
    for &n in lengths {
        let turns = n + 1;
        let fresh = || {
            let home = tempfile::tempdir().expect("temp dir");
            let dir = home.path().canonicalize().expect("canonical").join("proj");
            std::fs::create_dir_all(&dir).expect("project dir");
            std::fs::write(dir.join("notes.txt"), FILE_TEXT).expect("seed file");
            (home, dir)
        };
        let prompt = format!("Read notes.txt {n} times, then say done.");
        let (home, dir) = fresh();
        let server = peer::read_session(dir.join("notes.txt"), n);
        server.forget_bodies();
        let mut cmd = flower_cmd(
            flower,
            &server,
            &dir,
            &["once", &prompt, "--json", "--allowed-tools", "Read"],
        );
        cmd.env("HOME", home.path());
        let ours = measure(cmd, &dir).0;
        let (home, dir) = fresh();
        let server = peer::read_session(dir.join("notes.txt"), n);
        server.forget_bodies();
        let cmd = peer::claude_command(&claude, &server, home.path(), &dir, &prompt);
        let theirs = measure(cmd, &dir).0;
        let per = |u: &Usage| u.cpu.as_secs_f64() * 1e3 / turns as f64;
        let ratio = per(&ours) / per(&theirs);
        let system = |u: &Usage| u.system.as_secs_f64() * 1e3 / turns as f64;
        println!(
            "  {turns:>5} turns: flower {:.2} ms CPU per turn ({:.2} system), Claude Code {:.2} ms ({:.2} system; {} requests): {ratio:.4} x; goal <= 0.02: {}",
            per(&ours),
            system(&ours),
            per(&theirs),
            system(&theirs),
            server.request_count(),
            verdict(ratio <= 0.02)
        );
    }
}

/// Parts 2 and 3: one store holding an `n`-turn session, continued by the binary.
struct Subject {
    name: &'static str,
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    id: String,
    /// The PostgreSQL store's URL (its own schema); `None` for SQLite.
    store_url: Option<String>,
    stored: usize,
    stored_turns: usize,
}

impl Subject {
    fn new(n: usize, pg: Option<&str>) -> Subject {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::write(root.join("notes.txt"), FILE_TEXT).expect("seed file");
        let id = uuid::Uuid::new_v4().to_string();
        let key = SessionKey::main(project_key(&root), &id);
        let entries = session(&id, n);
        let stored: usize = entries.iter().map(|e| e.to_json().unwrap().len()).sum();
        let store_url = pg.map(support::postgres::schema_in);
        match &store_url {
            None => {
                let store =
                    SqliteSessionStore::open(&root.join("runs/sessions.db")).expect("store");
                store.append(&key, &entries).expect("append");
            }
            Some(url) => {
                let store = PostgresStore::open(&url.parse().expect("url")).expect("store");
                for chunk in entries.chunks(1000) {
                    store.append(&key, chunk).expect("append");
                }
            }
        }
        Subject {
            name: if pg.is_some() { "PostgreSQL" } else { "SQLite" },
            _dir: dir,
            root,
            id,
            store_url,
            stored,
            stored_turns: n,
        }
    }

    /// [`Subject::run`] under callgrind: what it counted, and the request bytes the
    /// fake received.
    fn counted(&self, flower: &str, turns: usize) -> Option<(instructions::Counted, usize)> {
        let (cmd, server) = self.command(flower, turns);
        let label = format!("{}-{turns}", self.stored_turns);
        let counted = instructions::callgrind(&cmd, &self.root, &label)?;
        let bytes = server.requests().iter().map(|r| r.raw_body.len()).sum();
        Some((counted, bytes))
    }

    /// One `once --resume` of the session that makes `turns` tool calls and ends.
    fn run(&self, flower: &str, turns: usize) -> Usage {
        let (cmd, _server) = self.command(flower, turns);
        measure(cmd, &self.root).0
    }

    /// The command of [`Subject::run`], and the fake it talks to.
    fn command(&self, flower: &str, turns: usize) -> (std::process::Command, FakeServer) {
        let mut script: Vec<Reply> = (0..turns)
            .map(|_| Reply::tool_use("Read", json!({"file_path": "notes.txt"})))
            .collect();
        script.push(Reply::text("done"));
        let server = FakeServer::start(script);
        let mut cmd = flower_cmd(
            flower,
            &server,
            &self.root,
            &[
                "once",
                "再读一遍",
                "--json",
                "--resume",
                &self.id,
                "--allowed-tools",
                "Read",
            ],
        );
        if let Some(url) = &self.store_url {
            cmd.env("FLOWER_STORE", url);
        }
        (cmd, server)
    }

    /// Prints the resume's and a live turn's figures; returns a live turn's wall time.
    fn report(&self, n: usize, resume: Usage, live: Usage) -> Duration {
        let name = self.name;
        let per_history_turn = resume.cpu / n as u32;
        let rss_goal = 2 * self.stored as u64 + 12 * 1024 * 1024;
        println!(
            "  {name}: stored {:.1} MB of entries; resume + 1 turn: wall {:.0} ms, CPU {:.0} ms ({:.1} µs per turn of history; goal <= 20: {}), peak RSS {:.1} MiB (goal <= {:.1}: {})",
            self.stored as f64 / 1e6,
            ms(resume.wall),
            ms(resume.cpu),
            per_history_turn.as_secs_f64() * 1e6,
            verdict(per_history_turn <= Duration::from_micros(20)),
            mib(resume.max_rss),
            mib(rss_goal),
            verdict(resume.max_rss <= rss_goal),
        );
        let private_goal = 2 * self.stored as u64;
        println!(
            "  {name}: resume + 1 turn, private (anonymous) memory at exit {:.1} MiB (goal <= 2 × stored, {:.1} MiB: {})",
            mib(resume.private),
            mib(private_goal),
            verdict(resume.private <= private_goal),
        );
        let turn_wall = live.wall.saturating_sub(resume.wall) / LIVE_TURNS as u32;
        let turn_cpu = live.cpu.saturating_sub(resume.cpu) / LIVE_TURNS as u32;
        println!(
            "  {name}: one live turn at this length: wall {:.2} ms, CPU {:.2} ms (peak RSS {:.1} MiB over {LIVE_TURNS} more turns)",
            ms(turn_wall),
            ms(turn_cpu),
            mib(live.max_rss),
        );
        turn_wall
    }
}

/// Each figure's own median: the run with the median CPU time need not have the median
/// wall time, and a live turn's wall is a difference of two medians.
fn median(samples: Vec<Usage>) -> Usage {
    let middle = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let nanos = |d: Duration| d.as_nanos() as u64;
    Usage {
        wall: Duration::from_nanos(middle(samples.iter().map(|u| nanos(u.wall)).collect())),
        cpu: Duration::from_nanos(middle(samples.iter().map(|u| nanos(u.cpu)).collect())),
        system: Duration::from_nanos(middle(samples.iter().map(|u| nanos(u.system)).collect())),
        max_rss: middle(samples.iter().map(|u| u.max_rss).collect()),
        private: middle(samples.iter().map(|u| u.private).collect()),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets the goal"
    } else {
        "MISSES the goal"
    }
}

/// Content blocks from their JSON.
fn blocks(values: Vec<serde_json::Value>) -> Vec<flower::transcript::Block> {
    values
        .iter()
        .map(|v| serde_json::from_str(&v.to_string()).expect("a block"))
        .collect()
}
