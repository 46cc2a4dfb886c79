//! `flower serve` (issue #47): the run list of a directory of 1,000 runs, a run page
//! and a transcript page of a 10,000-turn run, and the server's private memory when
//! idle. Prints each figure beside its goal; asserts none. The server is the release
//! `flower` cargo builds for this bench (`cargo bench --bench serve`), or the binary
//! `FLOWER_BENCH_BIN` names.
//!
//! - `GET /` of 1,000 runs: ≤ 200 ms (warm: each run's figures are kept until one of
//!   its files changes; the first look, which reads every run, is printed beside it);
//! - a page of a 10,000-turn run (its run page, and a transcript page): ≤ 1 s;
//! - idle: ≤ 20 MiB private memory (`Private_Clean + Private_Dirty` of
//!   `/proc/PID/smaps_rollup`), after start and after the list was served.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::continuity::lineage::Lineage;
use flower::continuity::manifest::{Manifest, StepResult};
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 1000;
const BIG_TURNS: usize = 10_000;

fn main() {
    let flower = binary();
    let root = scratch("tree");
    let started = Instant::now();
    for i in 0..RUNS {
        build(&root.join(format!("ws-{i:04}")), 10, i);
    }
    println!(
        "serve: {RUNS} runs of 10 turns built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let tree = Server::start(&flower, &root);
    std::thread::sleep(Duration::from_millis(500));
    let idle = tree.private_mib();
    let (cold, body) = tree.time("/");
    assert_eq!(
        body.matches("<tr class=\"run").count(),
        RUNS,
        "{body:.2000}"
    );
    let warm = median(5, || tree.time("/").0);
    let api = median(5, || tree.time("/api/runs").0);
    println!("serve: the run list of {RUNS} runs, whole request");
    println!(
        "  GET /           {:>9.1} ms (goal ≤ 200 ms; first look {:.1} ms)",
        ms(warm),
        ms(cold)
    );
    println!("  GET /api/runs   {:>9.1} ms", ms(api));
    std::thread::sleep(Duration::from_millis(500));
    let after = tree.private_mib();
    println!(
        "  idle memory     {idle:>9.1} MiB after start, {after:.1} MiB after the list (goal ≤ 20 MiB private)"
    );
    drop(tree);
    let _ = std::fs::remove_dir_all(&root);

    let big = scratch("big");
    build(&big, BIG_TURNS, 0);
    let server = Server::start(&flower, &big);
    let run_page = median(3, || server.time("/runs/runs").0);
    let session = "aaaaaaaa-0000-4000-8000-000000000000";
    let first = median(3, || {
        server.time(&format!("/runs/runs/sessions/{session}")).0
    });
    let last_page = (2 * BIG_TURNS + 1).div_ceil(200);
    let last = median(3, || {
        server
            .time(&format!("/runs/runs/sessions/{session}?page={last_page}"))
            .0
    });
    println!(
        "serve: a {BIG_TURNS}-turn run ({} entries), whole request, median of 3",
        2 * BIG_TURNS + 1
    );
    println!("  run page        {:>9.1} ms (goal ≤ 1 s)", ms(run_page));
    println!("  transcript p.1  {:>9.1} ms (goal ≤ 1 s)", ms(first));
    println!(
        "  transcript p.{last_page} {:>8.1} ms (goal ≤ 1 s)",
        ms(last)
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&big);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..n).map(|_| f()).collect();
    times.sort();
    times[n / 2]
}

/// `flower serve` in a directory, killed when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(flower: &Path, dir: &Path) -> Server {
        let mut child = Command::new(flower)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let line = lines.next().unwrap().unwrap();
        let address = line
            .split("http://")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Server { child, address }
    }

    /// A whole `GET path` (connect to last byte) and its body.
    fn time(&self, path: &str) -> (Duration, String) {
        let start = Instant::now();
        let mut stream = TcpStream::connect(&self.address).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        )
        .unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let took = start.elapsed();
        let text = String::from_utf8_lossy(&response).into_owned();
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text:.300}");
        (took, text)
    }

    /// Private memory (MiB): what this process alone holds.
    fn private_mib(&self) -> f64 {
        let text =
            std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.child.id())).unwrap();
        let kb: u64 = text
            .lines()
            .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        kb as f64 / 1024.0
    }
}

fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FLOWER_BENCH_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("flower");
    assert!(
        path.exists(),
        "build the binary first: cargo build --release"
    );
    path
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("flower-bench-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn entry(id: &str, n: usize, at_s: i64, body: Value) -> Value {
    let mut e = body;
    let t = chrono::DateTime::from_timestamp(1_780_000_000 + at_s, 0).unwrap();
    e["uuid"] = json!(format!("{id}-{n:07}"));
    e["parentUuid"] = if n == 0 {
        Value::Null
    } else {
        json!(format!("{id}-{:07}", n - 1))
    };
    e["sessionId"] = json!(id);
    e["timestamp"] = json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
    e
}

/// A session of `turns` turns: a Bash call and its result each, context growing.
fn session(id: &str, turns: usize) -> Vec<Value> {
    let mut out = vec![entry(
        id,
        0,
        0,
        json!({"type": "user", "message": {"role": "user", "content": "照这份需求做"}}),
    )];
    for t in 0..turns {
        let at = t as i64 * 6;
        out.push(entry(id, out.len(), at, json!({"type": "assistant", "message": {
            "id": format!("msg_{t}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "看一下测试结果,再改。"},
                        {"type": "tool_use", "id": format!("toolu_{t}"), "name": "Bash",
                         "input": {"command": format!("cargo test -- case_{t}")}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 120, "cache_creation_input_tokens": 400,
                      "cache_read_input_tokens": 20_000 + (t % 5000) as u64 * 30}}})));
        out.push(entry(
            id,
            out.len(),
            at + 3,
            json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{t}"),
             "content": "running 1 test\ntest case ... ok\n\ntest result: ok. 1 passed; 0 failed\n",
             "is_error": false}]}}),
        ));
    }
    out
}

/// A workspace at `dir` whose 干活 step made `turns` turns in one session.
fn build(dir: &Path, turns: usize, i: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let run_dir = dir.join("runs");
    let id = format!("aaaaaaaa-0000-4000-8000-{i:012}");
    let store = SqliteSessionStore::open(&run_dir.join("sessions.db")).unwrap();
    store
        .append(
            &SessionKey::main(project_key(dir), &id),
            &typed(&session(&id, turns)),
        )
        .unwrap();
    drop(store);
    let stamp = |s: i64| {
        chrono::DateTime::from_timestamp(1_780_000_000 + s, 0)
            .unwrap()
            .with_timezone(&chrono::Local)
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
    };
    let mut manifest = Manifest::new(&run_dir, "20260101-000000-aaaaaa".into());
    manifest
        .record(&StepResult {
            step: "干活".into(),
            session_id: Some(id.clone()),
            ok: true,
            cost_usd: Some(1.5),
            num_turns: turns as u32,
            started_at: stamp(0),
            ended_at: stamp(turns as i64 * 6),
            attempts: 1,
            ..StepResult::default()
        })
        .unwrap();
    let mut lineage = Lineage::empty(&run_dir, dir);
    lineage.remember("干活", &id);
}

/// JSON objects as the typed entries a store appends (every field kept as written).
fn typed(values: &[Value]) -> Vec<flower::transcript::Entry> {
    values
        .iter()
        .map(|v| serde::Deserialize::deserialize(v).expect("an object"))
        .collect()
}
