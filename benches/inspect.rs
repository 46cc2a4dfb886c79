//! `flower log`, `flower show` and `flower report` on a big run (issue #12's benchmark).
//! Prints figures; asserts none. Whole-process times of the `flower` binary built by
//! cargo for this bench (`cargo bench --bench inspect` builds it in release).
//!
//! - a 10,000-entry session (5,000 turns: a Bash call and its result each, the second
//!   generation of the run below): `flower log` and `flower show` ≤ 100 ms each;
//! - a 10,000-turn run (a 干活 session of 10,000 turns with a handoff halfway, synthetic
//!   errors every 500 turns, a judge): `flower report` ≤ 1 s and ≤ 5 MB.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::continuity::lineage::Lineage;
use flower::continuity::manifest::{Manifest, StepResult};
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let flower = binary();
    // One run serves both: 干活's current session (the successor) has 5,000 turns,
    // 10,000-odd entries; the run has 10,000 turns.
    let big = build(10_000, "big");
    let small = big.clone();
    let median = |dir: &Path, args: &[&str]| -> (Duration, Duration) {
        let mut times: Vec<(Duration, Duration)> = (0..5)
            .map(|_| {
                let cpu = children_cpu();
                let start = Instant::now();
                let out = Command::new(&flower)
                    .current_dir(dir)
                    .args(args)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                (start.elapsed(), children_cpu() - cpu)
            })
            .collect();
        times.sort();
        times[2]
    };
    println!("inspect: a 10,000-entry session (5,000 turns), whole process, median of 5");
    println!(
        "  flower log            {:>30} (goal ≤ 100 ms)",
        ms(median(&small, &["log"]))
    );
    println!(
        "  flower log --json     {:>30}",
        ms(median(&small, &["log", "--json"]))
    );
    println!(
        "  flower show 干活      {:>30} (goal ≤ 100 ms)",
        ms(median(&small, &["show", "干活"]))
    );
    println!(
        "  flower show --pruned  {:>30}",
        ms(median(&small, &["show", "干活", "--pruned"]))
    );
    println!("inspect: 10,000-turn run (20,000 entries in the main sessions)");
    let report = median(&big, &["report"]);
    let size = std::fs::metadata(big.join("runs/report.html"))
        .unwrap()
        .len();
    println!(
        "  flower report         {:>30}, {:.2} MB (goal ≤ 1 s, ≤ 5 MB)",
        ms(report),
        size as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&big);
}

/// `wall ms (CPU ms)`: on a loaded machine the CPU time is the steadier figure.
fn ms((wall, cpu): (Duration, Duration)) -> String {
    format!(
        "{:.1} ms (CPU {:.1} ms)",
        wall.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0
    )
}

/// User + system time of all waited-for children so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The release `flower` next to this bench's executable (cargo builds it for benches).
fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("flower");
    assert!(
        path.exists(),
        "build the binary first: cargo build --release"
    );
    path
}

fn entry(id: &str, n: usize, parent: &str, at_s: i64, body: Value) -> Value {
    let mut e = body;
    let t = chrono::DateTime::from_timestamp(1_780_000_000 + at_s, 0).unwrap();
    e["uuid"] = json!(format!("{id}-{n:07}"));
    e["parentUuid"] = if parent.is_empty() {
        Value::Null
    } else {
        json!(parent)
    };
    e["sessionId"] = json!(id);
    e["timestamp"] = json!(t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
    e["cwd"] = json!("/w");
    e["isSidechain"] = json!(false);
    e
}

/// `turns` turns of a session: an assistant Bash call and its result, context growing.
fn session(id: &str, turns: usize, start_s: i64) -> Vec<Value> {
    let mut out = vec![entry(
        id,
        0,
        "",
        start_s,
        json!({"type": "user", "message": {"role": "user", "content": "照这份需求做"}}),
    )];
    for t in 0..turns {
        let n = out.len();
        let parent = format!("{id}-{:07}", n - 1);
        let at = start_s + t as i64 * 6;
        out.push(entry(id, n, &parent, at, json!({"type": "assistant", "message": {
            "id": format!("msg_{t}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "看一下测试结果,再改。"},
                        {"type": "tool_use", "id": format!("toolu_{t}"), "name": "Bash",
                         "input": {"command": format!("cargo test --test it -- case_{t}")}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 120, "cache_creation_input_tokens": 400,
                      "cache_read_input_tokens": 20_000 + (t % 5000) as u64 * 30}}})));
        let n = out.len();
        let parent = format!("{id}-{:07}", n - 1);
        out.push(entry(id, n, &parent, at + 3, json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{t}"),
             "content": "running 1 test\ntest case ... ok\n\ntest result: ok. 1 passed; 0 failed\n".repeat(3),
             "is_error": false}]}})));
        if t % 500 == 499 {
            let n = out.len();
            let parent = format!("{id}-{:07}", n - 1);
            out.push(entry(id, n, &parent, at + 4, json!({"type": "assistant", "isApiErrorMessage": true,
                "message": {"id": "msg_synthetic", "type": "message", "role": "assistant", "model": "<synthetic>",
                "content": [{"type": "text", "text": "API Error: 529 overloaded_error: Overloaded"}],
                "stop_reason": "stop_sequence", "usage": {}}})));
        }
    }
    out
}

/// A run whose 干活 step made `turns` turns in two generations (a handoff halfway).
fn build(turns: usize, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "flower-bench-inspect-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let run_dir = dir.join("runs");
    let store = SqliteSessionStore::open(&run_dir.join("sessions.db")).unwrap();
    let key = |id: &str| SessionKey::main(project_key(&dir), id);
    let (a, b) = (
        "aaaaaaaa-0000-4000-8000-000000000001",
        "aaaaaaaa-0000-4000-8000-000000000002",
    );
    let half = turns / 2;
    store.append(&key(a), &typed(&session(a, half, 0))).unwrap();
    store
        .append(&key(b), &typed(&session(b, turns - half, half as i64 * 6)))
        .unwrap();
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
            session_id: Some(b.into()),
            ok: true,
            cost_usd: Some(42.0),
            num_turns: turns as u32,
            started_at: stamp(0),
            ended_at: stamp(turns as i64 * 6),
            attempts: 1,
            retired: vec![a.into()],
            ..StepResult::default()
        })
        .unwrap();
    let mut lineage = Lineage::empty(&run_dir, &dir);
    lineage.remember("干活", b);
    drop(store);
    // What a finished process leaves: no WAL.
    let store = SqliteSessionStore::open(&run_dir.join("sessions.db")).unwrap();
    drop(store);
    dir
}

/// JSON objects as the typed entries a store appends (every field kept as written).
fn typed(values: &[Value]) -> Vec<flower::transcript::Entry> {
    values
        .iter()
        .map(|v| serde::Deserialize::deserialize(v).expect("an object"))
        .collect()
}
