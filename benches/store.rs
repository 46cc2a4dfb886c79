//! Session-store figures (`cargo bench --bench store`): batched appends, single-entry
//! durable append latency (synchronous NORMAL and FULL), load of a 10,000-entry ~20 MB
//! session raw and pruned, list_sessions over 1,000 sessions.
//!
//! Goals (issue #3): pruned load ≤ 50 ms and within 2× raw; single append ≤ 1 ms
//! median; list_sessions ≤ 5 ms. Prints figures only; nothing here asserts.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::stores::prune::{PruneOptions, prune};
use flower::stores::sqlite::Synchronous;
use flower::stores::{PruningSessionStore, SessionKey, SessionStore, SqliteSessionStore};
use serde_json::{Value, json};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(mut samples: Vec<Duration>, p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

/// A ~1 KB assistant entry, what the engine appends once per turn.
/// JSON objects as the typed entries a store appends (every field kept as written).
fn typed(values: &[Value]) -> Vec<flower::transcript::Entry> {
    values
        .iter()
        .map(|v| serde::Deserialize::deserialize(v).unwrap())
        .collect()
}

fn small_entry(i: usize) -> Value {
    json!({
        "type": "assistant", "uuid": format!("small-{i}"), "parentUuid": format!("small-{}", i.wrapping_sub(1)),
        "sessionId": "bench", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/proj",
        "isSidechain": false,
        "message": {"id": format!("msg_{i}"), "role": "assistant", "model": "claude-test",
                    "content": [{"type": "text", "text": "x".repeat(800)}],
                    "usage": {"input_tokens": 1000 + i, "output_tokens": 50}}
    })
}

/// A realistic long session: `turns` tool-calling turns (assistant tool_use + user
/// tool_result of ~4 KB), with a denial every 50 turns, an API error every 100, and
/// snapshot commands that repeat. 5,000 turns ≈ 10,000 entries ≈ 20 MB.
fn long_session(turns: usize) -> Vec<Value> {
    let mut out = vec![json!({
        "type": "user", "uuid": "u0", "parentUuid": null, "sessionId": "bench",
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/proj",
        "message": {"role": "user", "content": "build the thing"}
    })];
    let mut parent = "u0".to_string();
    let body = "let x = compute(y); // some source line of a file being read\n".repeat(65);
    for t in 0..turns {
        let id = format!("toolu_{t:06}");
        let (name, input) = match t % 4 {
            0 => ("Bash", json!({"command": "git status"})),
            1 => (
                "Read",
                json!({"file_path": format!("/work/proj/src/f{t}.rs")}),
            ),
            2 => ("Bash", json!({"command": "cargo test"})),
            _ => ("Grep", json!({"pattern": "fn main"})),
        };
        let a = format!("a{t}");
        out.push(json!({
            "type": "assistant", "uuid": a, "parentUuid": parent, "sessionId": "bench",
            "timestamp": "2026-01-01T00:00:01.000Z", "cwd": "/work/proj", "isSidechain": false,
            "message": {"id": format!("msg_{t}"), "role": "assistant", "model": "claude-test",
                        "content": [{"type": "text", "text": "Let me look at that next."},
                                    {"type": "tool_use", "id": id, "name": name, "input": input}],
                        "stop_reason": "tool_use",
                        "usage": {"input_tokens": 3, "cache_read_input_tokens": 40000 + t, "output_tokens": 120}}
        }));
        let (content, is_error) = if t % 50 == 49 {
            (
                "Permission to use Bash with command rm -rf / has been denied.".to_string(),
                true,
            )
        } else {
            (body.clone(), false)
        };
        let r = format!("r{t}");
        out.push(json!({
            "type": "user", "uuid": r, "parentUuid": a, "sessionId": "bench",
            "timestamp": "2026-01-01T00:00:02.000Z", "cwd": "/work/proj", "isSidechain": false,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                                                       "content": content, "is_error": is_error}]}
        }));
        parent = r;
        if t % 100 == 99 {
            let e = format!("e{t}");
            out.push(json!({
                "type": "assistant", "uuid": e, "parentUuid": parent, "sessionId": "bench",
                "isApiErrorMessage": true,
                "message": {"role": "assistant", "model": "<synthetic>",
                            "content": [{"type": "text", "text": "API Error: Can't reach the API server"}]}
            }));
            parent = e;
        }
    }
    out
}

fn bench_appends(dir: &std::path::Path, level: Synchronous, label: &str) {
    let store = SqliteSessionStore::open(&dir.join(format!("append-{label}.db"))).unwrap();
    store.set_synchronous(level).unwrap();

    // Batched: 100 batches of 100 entries (one turn's worth of streaming is smaller; an
    // import or a sub-agent flush looks like this).
    let key = SessionKey::main("proj", "batched");
    let batches: Vec<Vec<_>> = (0..100)
        .map(|b| {
            typed(
                &(0..100)
                    .map(|i| small_entry(b * 100 + i))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let (took, ()) = timed(|| {
        for batch in &batches {
            store.append(&key, batch).unwrap();
        }
    });
    println!(
        "  [{label}] batched append: 10,000 entries in 100 batches: {:.1} ms → {:.0} entries/s, {:.0} batches/s",
        ms(took),
        10_000.0 / took.as_secs_f64(),
        100.0 / took.as_secs_f64()
    );

    // Single-entry appends to a main transcript (the summary is folded each time).
    let key = SessionKey::main("proj", "single");
    let entries = typed(
        &(0..2000)
            .map(|i| small_entry(100_000 + i))
            .collect::<Vec<_>>(),
    );
    let samples: Vec<Duration> = entries
        .iter()
        .map(|e| timed(|| store.append(&key, std::slice::from_ref(e)).unwrap()).0)
        .collect();
    println!(
        "  [{label}] single-entry append (2,000): median {:.3} ms, p99 {:.3} ms",
        ms(median(samples.clone())),
        ms(percentile(samples, 0.99))
    );
}

/// Set in the child processes that time one load of a fresh process.
const CHILD: &str = "FLOWER_BENCH_CHILD";

/// Times one load in this fresh process and prints the nanoseconds.
fn child(mode: &str) {
    let db = std::path::PathBuf::from(std::env::var("FLOWER_BENCH_DB").unwrap());
    let key = SessionKey::main("proj", "long");
    let store = SqliteSessionStore::open(&db).unwrap();
    let options = PruneOptions::new(db.with_file_name("trimmed"));
    let took = match mode {
        "rows" => {
            let conn = rusqlite::Connection::open(&db).unwrap();
            timed(|| {
                let mut stmt = conn
                    .prepare(
                        "SELECT data FROM entries WHERE transcript = (SELECT id FROM transcripts \
                         WHERE project_key = 'proj' AND session_id = 'long' AND subpath = '') \
                         ORDER BY id",
                    )
                    .unwrap();
                let mut rows = stmt.query([]).unwrap();
                while let Some(row) = rows.next().unwrap() {
                    black_box(row.get_ref(0).unwrap().as_bytes().unwrap());
                }
            })
            .0
        }
        // For callgrind (docs/performance.md): the 5,000-turn session stored in one
        // batch, or 200 single-entry appends after it; "…-generate" builds the same
        // entries and stores nothing, the baseline to subtract.
        "store" | "store-generate" => {
            let entries = typed(&long_session(5000));
            if mode == "store" {
                store.append(&key, &entries).unwrap();
            }
            Duration::ZERO
        }
        "single" | "single-generate" => {
            let small: Vec<Value> = (0..200).map(|i| small_entry(100_000 + i)).collect();
            let entries = typed(&small);
            let key = SessionKey::main("proj", "single");
            if mode == "single" {
                for e in &entries {
                    store.append(&key, std::slice::from_ref(e)).unwrap();
                }
            }
            Duration::ZERO
        }
        "raw" => timed(|| std::mem::forget(store.load(&key).unwrap())).0,
        _ => timed(|| std::mem::forget(store.load_pruned(&key, &options).unwrap())).0,
    };
    println!("{}", took.as_nanos());
}

fn main() {
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let dir = tempfile::tempdir().unwrap();
    println!("flower session store benchmark (release build)");
    // Wall-clock figures on a shared machine mean little without its load.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at start: {}", load.trim());
    }

    println!("appends:");
    bench_appends(
        dir.path(),
        Synchronous::Normal,
        "synchronous=NORMAL (default)",
    );
    bench_appends(dir.path(), Synchronous::Full, "synchronous=FULL");

    println!("load of a long session:");
    let db = dir.path().join("sessions.db");
    let store = Arc::new(SqliteSessionStore::open(&db).unwrap());
    let key = SessionKey::main("proj", "long");
    let session = long_session(5000);
    let bytes: usize = session.iter().map(|e| e.to_string().len()).sum();
    let typed_session = typed(&session);
    let (took, ()) = timed(|| store.append(&key, &typed_session).unwrap());
    println!(
        "  stored {} entries, {:.1} MB of JSON, in one batch: {:.0} ms",
        session.len(),
        bytes as f64 / 1e6,
        ms(took)
    );
    drop(session);
    drop(store);

    // A resume is a fresh process loading once: time that, in child processes.
    let runs = 15;
    let fresh = |mode: &str| -> Vec<Duration> {
        (0..runs)
            .map(|_| {
                let out = std::process::Command::new(std::env::current_exe().unwrap())
                    .env(CHILD, mode)
                    .env("FLOWER_BENCH_DB", &db)
                    .output()
                    .unwrap();
                let text = String::from_utf8(out.stdout).unwrap();
                Duration::from_nanos(
                    text.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("child: {text}")),
                )
            })
            .collect()
    };
    let (sql, raw, pruned) = (fresh("rows"), fresh("raw"), fresh("pruned"));
    let min = |v: &[Duration]| v.iter().copied().min().unwrap_or_default();
    let show = |label: &str, v: &[Duration]| {
        println!(
            "  {label}: median {:.1} ms, min {:.1} ms",
            ms(median(v.to_vec())),
            ms(min(v))
        );
    };
    println!("  fresh process, one load each ({runs} runs; min = least disturbed by other load):");
    show("rows only (SQLite, no JSON parsing)", &sql);
    show("load raw   ", &raw);
    show("load pruned", &pruned);
    println!(
        "  pruned / raw: {:.2}× (medians)",
        median(pruned).as_secs_f64() / median(raw).as_secs_f64()
    );

    // The same, repeated in one process (a warm heap).
    let store = Arc::new(SqliteSessionStore::open(&db).unwrap());
    let pruning =
        PruningSessionStore::new(store.clone(), PruneOptions::new(dir.path().join("trimmed")));
    let (mut raw, mut pruned, mut prune_only) = (vec![], vec![], vec![]);
    let mut out_len = 0;
    for _ in 0..runs {
        // Timed without dropping what they return, as a resume keeps it.
        let (t, entries) = timed(|| store.load(&key).unwrap().unwrap());
        raw.push(t);
        let (t, fed) = timed(|| pruning.load(&key).unwrap().unwrap());
        pruned.push(t);
        out_len = fed.len();
        drop(fed);
        let (t, fed) = timed(|| prune(entries, pruning.options()));
        prune_only.push(t);
        drop(fed);
    }
    println!("  in one process, repeated ({out_len} of the entries are fed back):");
    show("load raw   ", &raw);
    show("load pruned", &pruned);
    show("prune() alone on loaded entries", &prune_only);
    let samples: Vec<Duration> = (0..200)
        .map(|_| timed(|| black_box(store.last_assistant_usage(&key).unwrap())).0)
        .collect();
    println!(
        "  last_assistant_usage: median {:.3} ms",
        ms(median(samples))
    );

    println!("list_sessions:");
    let entries = typed(&(0..3).map(small_entry).collect::<Vec<_>>());
    for s in 0..1000 {
        store
            .append(
                &SessionKey::main("many", format!("session-{s:04}")),
                &entries,
            )
            .unwrap();
    }
    let samples: Vec<Duration> = (0..100)
        .map(|_| timed(|| black_box(store.list_sessions("many").unwrap().len())).0)
        .collect();
    println!(
        "  list_sessions over 1,000 sessions: median {:.3} ms",
        ms(median(samples))
    );
    let samples: Vec<Duration> = (0..100)
        .map(|_| timed(|| black_box(store.list_session_summaries("many").unwrap().len())).0)
        .collect();
    println!(
        "  list_session_summaries over 1,000 sessions: median {:.3} ms",
        ms(median(samples))
    );
    let samples: Vec<Duration> = (0..1000)
        .map(|_| timed(|| black_box(store.has_session("session-0500").unwrap())).0)
        .collect();
    println!("  has_session: median {:.3} ms", ms(median(samples)));
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at end: {}", load.trim());
    }
}
