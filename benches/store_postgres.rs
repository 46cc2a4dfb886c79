//! PostgreSQL store figures next to SQLite's, in the same run
//! (`cargo bench --bench store_postgres`): single durable append (median, p99),
//! batched append throughput, pruned load of a 10,000-entry session, `wake_state`, and
//! one whole `flower once` turn against the fake Messages API; then a run's state:
//! lineage's write of one step and a manifest write with 200 other rows, in the run
//! directory's files and in the database (a `SharedRun`).
//!
//! Needs a server: `FLOWER_TEST_POSTGRES_URL` (`.ci/postgres.sh` starts one on
//! loopback). Without it the PostgreSQL column is skipped with a printed reason.
//! Goals (issue 14): append ≤ 1 ms median; pruned load within 2× SQLite's.
//! Prints figures only; nothing here asserts.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use flower::continuity::lineage::Lineage;
use flower::stores::prune::PruneOptions;
use flower::stores::{PostgresStore, SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::{FakeServer, Reply};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn entry(i: usize, size: usize) -> Value {
    json!({
        "type": "assistant", "uuid": format!("e{i}"), "parentUuid": format!("e{}", i.wrapping_sub(1)),
        "sessionId": "bench", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/proj",
        "message": {"role": "assistant", "model": "claude-test",
                    "content": [{"type": "text", "text": "x".repeat(size)}],
                    "usage": {"input_tokens": 1000 + i, "output_tokens": 50}}
    })
}

/// A 10,000-entry session of tool-calling turns (~2 KB results).
fn long_session() -> Vec<Value> {
    let mut out = vec![json!({"type": "user", "uuid": "u0", "parentUuid": null,
        "message": {"role": "user", "content": "build the thing"}})];
    let mut parent = "u0".to_string();
    let body = "let x = compute(y); // a line of a file being read\n".repeat(40);
    for t in 0..5000 {
        let id = format!("toolu_{t:06}");
        let a = format!("a{t}");
        out.push(json!({"type": "assistant", "uuid": a, "parentUuid": parent,
            "message": {"role": "assistant", "model": "claude-test", "content": [
                {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": format!("src/f{t}.rs")}}]}}));
        let r = format!("r{t}");
        out.push(json!({"type": "user", "uuid": r, "parentUuid": a,
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": body, "is_error": false}]}}));
        parent = r;
    }
    out.truncate(10_000);
    out
}

struct Figures {
    append_median: Duration,
    append_p99: Duration,
    batch_per_s: f64,
    pruned_load: Duration,
    wake_state: Duration,
}

fn measure(store: &dyn SessionStore, dir: &Path, pg: Option<&dyn SessionStore>) -> Figures {
    let key = SessionKey::main("bench", "single");
    let mut samples = Vec::new();
    for i in 0..500 {
        let e = support::typed_one(&entry(i, 800));
        let start = Instant::now();
        store.append(&key, std::slice::from_ref(&e)).unwrap();
        samples.push(start.elapsed());
    }
    let append_median = percentile(&mut samples, 0.5);
    let append_p99 = percentile(&mut samples, 0.99);

    let key = SessionKey::main("bench", "batched");
    let batches: Vec<Vec<_>> = (0..20)
        .map(|b| {
            support::typed(
                &(0..100)
                    .map(|i| entry(b * 100 + i, 800))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let start = Instant::now();
    for batch in &batches {
        store.append(&key, batch).unwrap();
    }
    let batch_per_s = 2000.0 / start.elapsed().as_secs_f64();

    let key = SessionKey::main("bench", "long");
    for chunk in support::typed(&long_session()).chunks(500) {
        store.append(&key, chunk).unwrap();
    }
    let options = PruneOptions::new(dir.join("trimmed"));
    let mut loads: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let fed = store.load_pruned(&key, &options).unwrap().unwrap();
            std::hint::black_box(fed);
            start.elapsed()
        })
        .collect();
    let pruned_load = percentile(&mut loads, 0.5);

    // wake_state over a workspace whose lineage names three live sessions.
    let workspace = dir.join("ws");
    std::fs::create_dir_all(workspace.join("notes")).unwrap();
    let workspace = workspace.canonicalize().unwrap();
    let run_dir = workspace.join("runs");
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut lineage = Lineage::empty(&run_dir, &workspace);
    for step in ["确认需求", "设定目标", "干活"] {
        let id = format!("s-{step}");
        store
            .append(
                &SessionKey::main(project_key(&workspace), &id),
                &support::typed(&[entry(0, 10)]),
            )
            .unwrap();
        lineage.remember(step, &id);
    }
    lineage.save().unwrap();
    if pg.is_none() {
        // The default store is run_dir/sessions.db.
        let db = SqliteSessionStore::open(&run_dir.join("sessions.db")).unwrap();
        for step in ["确认需求", "设定目标", "干活"] {
            db.append(
                &SessionKey::main(project_key(&workspace), format!("s-{step}")),
                &support::typed(&[entry(0, 10)]),
            )
            .unwrap();
        }
    }
    let mut wakes: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let state = flower::wake_state_in(&workspace, &run_dir, pg);
            assert_eq!(state.steps.len(), 3);
            start.elapsed()
        })
        .collect();
    let wake_state = percentile(&mut wakes, 0.5);
    Figures {
        append_median,
        append_p99,
        batch_per_s,
        pruned_load,
        wake_state,
    }
}

/// Median wall time of a whole `flower once` turn (process start to exit).
fn once_turn(store: Option<&str>) -> Duration {
    let server = FakeServer::with_handler(|_, _| Reply::text("好的"));
    let dir = tempfile::tempdir().unwrap();
    let mut samples: Vec<Duration> = (0..5)
        .map(|_| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flower"));
            server.configure(&mut cmd);
            cmd.current_dir(dir.path()).args(["once", "说好的"]);
            if let Some(url) = store {
                cmd.args(["--store", url]);
            }
            let start = Instant::now();
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            start.elapsed()
        })
        .collect();
    percentile(&mut samples, 0.5)
}

fn row(name: &str, f: &Figures, once: Duration) {
    println!(
        "{name:<10} {:>9.3} {:>9.3} {:>12.0} {:>11.1} {:>10.3} {:>10.1}",
        ms(f.append_median),
        ms(f.append_p99),
        f.batch_per_s,
        ms(f.pruned_load),
        ms(f.wake_state),
        ms(once)
    );
}

/// Median and p99 of lineage's write of one step, and of a manifest write (one row
/// recorded) with 200 rows of another process already there.
fn run_state(
    dir: &Path,
    shared: Option<flower::continuity::shared::SharedRun>,
) -> (Duration, Duration, Duration, Duration) {
    use flower::continuity::manifest::{Manifest, StepResult, new_run_id};
    let run_dir = dir.join("runs");
    let mut lineage = match &shared {
        Some(run) => Lineage::load_shared(&run_dir, dir, run.clone(), |_| Ok(true)).unwrap(),
        None => Lineage::empty(&run_dir, dir),
    };
    let mut remember: Vec<Duration> = (0..200)
        .map(|i| {
            let start = Instant::now();
            lineage.remember("干活", &format!("session-{i}"));
            start.elapsed()
        })
        .collect();
    let manifest = |run_id: String| match &shared {
        Some(run) => Manifest::shared(&run_dir, run_id, run.clone()),
        None => Manifest::new(&run_dir, run_id),
    };
    let mut other = manifest(new_run_id());
    for i in 0..200 {
        let mut result = StepResult::started(&format!("别人{i}"));
        result.finish();
        other.record(&result).unwrap();
    }
    let mut mine = manifest(new_run_id());
    let mut record: Vec<Duration> = (0..100)
        .map(|i| {
            let mut result = StepResult::started(&format!("步骤{i}"));
            result.finish();
            let start = Instant::now();
            mine.record(&result).unwrap();
            start.elapsed()
        })
        .collect();
    (
        percentile(&mut remember, 0.5),
        percentile(&mut remember, 0.99),
        percentile(&mut record, 0.5),
        percentile(&mut record, 0.99),
    )
}

fn state_row(name: &str, (a, b, c, d): (Duration, Duration, Duration, Duration)) {
    println!(
        "{name:<10} {:>14.3} {:>9.3} {:>14.3} {:>9.3}",
        ms(a),
        ms(b),
        ms(c),
        ms(d)
    );
}

fn main() {
    println!("flower PostgreSQL store benchmark, next to SQLite (times in ms)");
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at start: {}", load.trim());
    }
    println!(
        "{:<10} {:>9} {:>9} {:>12} {:>11} {:>10} {:>10}",
        "store", "append", "p99", "batch ent/s", "pruned 10k", "wake", "once turn"
    );
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteSessionStore::open(&dir.path().join("sessions.db")).unwrap();
    let figures = measure(&sqlite, dir.path(), None);
    row("sqlite", &figures, once_turn(None));

    let Some(url) = support::postgres::fresh_url() else {
        println!("postgres   skipped: FLOWER_TEST_POSTGRES_URL is not set");
        return;
    };
    let pg = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let figures = measure(&pg, dir.path(), Some(&pg));
    row("postgres", &figures, once_turn(Some(&url)));

    println!();
    println!(
        "{:<10} {:>14} {:>9} {:>14} {:>9}",
        "run state", "lineage step", "p99", "manifest row", "p99"
    );
    let dir = tempfile::tempdir().unwrap();
    state_row("files", run_state(dir.path(), None));
    let dir = tempfile::tempdir().unwrap();
    let pg = std::sync::Arc::new(pg);
    let run = flower::continuity::shared::SharedRun::open(pg, dir.path(), None)
        .unwrap()
        .unwrap();
    // Each write also replaces the mirror file, as a run does.
    state_row("postgres", run_state(dir.path(), Some(run)));

    // The floor under every durable write: one round trip, and one committed one-row
    // insert (the server's WAL flush), on a plain connection, at this moment.
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute("CREATE TABLE flower_bench_floor (x int)")
        .unwrap();
    let insert = c
        .prepare("INSERT INTO flower_bench_floor VALUES (1)")
        .unwrap();
    let ping = c.prepare("SELECT 1").unwrap();
    let mut median_of = |what: &postgres::Statement| {
        let mut samples: Vec<Duration> = (0..500)
            .map(|_| {
                let start = Instant::now();
                c.execute(what, &[]).unwrap();
                start.elapsed()
            })
            .collect();
        percentile(&mut samples, 0.5)
    };
    let (trip, commit) = (median_of(&ping), median_of(&insert));
    println!();
    println!(
        "floor: a round trip {:.3} ms, a committed one-row insert {:.3} ms (medians; the \
         server's WAL flush is the difference)",
        ms(trip),
        ms(commit)
    );
}
