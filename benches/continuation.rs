//! Continuation benchmarks (issue #4's performance section). Prints figures; asserts none.
//!
//! - `bench_wake_state`: `wake_state` on a `sessions.db` of 1,000 sessions and 1,000,000
//!   entries, with a realistic `lineage.json` and notes. Goal ≤ 5 ms.
//! - `bench_manifest`: one manifest write (lock, re-read, merge, write, fsync, rename)
//!   when `runs/manifest.json` already holds 10,000 rows of other runs. Goal ≤ 20 ms.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::continuity::manifest::{Manifest, ManifestRow, StepResult, new_run_id};
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn main() {
    bench_wake_state();
    bench_manifest();
}

/// A plausible row of another run: a finished step with a paragraph of output.
fn foreign_row(i: usize) -> ManifestRow {
    let r = StepResult {
        step: if i.is_multiple_of(3) {
            format!("干活#round{}", i % 7)
        } else {
            "干活".into()
        },
        session_id: Some(format!("{:08x}-bec7-466e-80cd-f4d60b360235", i)),
        ok: !i.is_multiple_of(5),
        cost_usd: Some(0.01 * (i % 100) as f64),
        num_turns: (i % 70) as u32,
        text: "已完成:md 转 html 的脚本写好了,支持标题、列表、代码块高亮,测试全过。".repeat(4),
        error: i
            .is_multiple_of(5)
            .then(|| "API Error: 529 overloaded_error: Overloaded".into()),
        started_at: "2026-09-07T01:52:40.123456+08:00".into(),
        ended_at: "2026-09-07T01:55:41.654321+08:00".into(),
        attempts: 1 + (i % 3) as u32,
        errors: vec!["API Error: Can't reach the API server (dns error)".into(); i % 3],
        resumed: !i.is_multiple_of(3),
        retired: Vec::new(),
        context: 28_700 + i as u64,
        outages: Vec::new(),
    };
    r.to_row(&format!("20260901-{:06}-a1b2c3", i / 100))
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times `SAMPLES` records by the writers in turn; each writer alternates starting a new
/// attempt and finishing it, as a step's life does.
fn time_records(writers: &mut [Manifest]) -> Vec<Duration> {
    const SAMPLES: usize = 31;
    let mut results: Vec<StepResult> = Vec::new();
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let w = i % writers.len();
        let round = i / writers.len();
        if results.len() <= w {
            results.push(StepResult::started("干活"));
        }
        if round.is_multiple_of(2) {
            results[w] = StepResult::started(&format!("干活#retry{}", round / 2 + 1));
        } else {
            results[w].ok = true;
            results[w].finish();
        }
        let start = Instant::now();
        writers[w].record(&results[w]).expect("record");
        samples.push(start.elapsed());
    }
    samples
}

fn report(what: &str, mut samples: Vec<Duration>) {
    let (min, max) = (
        *samples.iter().min().expect("samples"),
        *samples.iter().max().expect("samples"),
    );
    let n = samples.len();
    let med = median(&mut samples);
    println!(
        "  {what}: median {:.2} ms (min {:.2}, max {:.2}, n={n})",
        ms(med),
        ms(min),
        ms(max)
    );
}

pub fn bench_manifest() {
    const EXISTING: usize = 10_000;
    let tmp = tempfile::tempdir().expect("temp dir");
    let run_dir = tmp.path().join("runs");
    std::fs::create_dir_all(&run_dir).expect("run dir");
    let rows: Vec<_> = (0..EXISTING).map(foreign_row).collect();
    let bytes = serde_json::to_vec_pretty(&rows).expect("rows");
    std::fs::write(run_dir.join("manifest.json"), &bytes).expect("seed manifest");
    println!(
        "manifest write (lock, merge, write, fsync, rename), {EXISTING} rows of other runs already there ({:.1} MB); goal <= 20 ms",
        bytes.len() as f64 / 1e6
    );

    // Two processes taking turns: every write must re-read and merge the whole file.
    let mut two = [
        Manifest::new(&run_dir, new_run_id()),
        Manifest::new(&run_dir, new_run_id()),
    ];
    report(
        "another process wrote in between (full re-read + merge)",
        time_records(&mut two),
    );
    // One process, the usual case: the other runs' part is copied in the kernel.
    let mut one = [Manifest::new(&run_dir, new_run_id())];
    report(
        "this process wrote last (steady state)",
        time_records(&mut one),
    );
}

// ---------------------------------------------------------------------------------
// wake_state
// ---------------------------------------------------------------------------------

/// Names the cached database's recipe: change it whenever the generator below changes,
/// so that a stale cache is rebuilt rather than measured.
const WAKE_DB_VERSION: &str = "wake-v1-1000x1000";
const SESSIONS: usize = 1_000;
const ENTRIES_PER_SESSION: usize = 1_000;
/// Of each session's entries, this many belong to one sub-agent (its own subpath).
const SUBAGENT_ENTRIES: usize = 100;
const WAKE_CALLS: usize = 50;

const BENCH_BRIEF: &str = "## 目标\n写一个把 Markdown 转成 HTML 的命令行脚本,支持标题、列表、链接、代码块(带语法高亮)。\n\n\
## 范围\n- 一个 Python 脚本 `md2html.py`,读文件或标准输入,写标准输出\n- 测试放在 `tests/`\n\n\
## 约束\n- 只用标准库和 pygments\n- Python 3.10+\n- 不改动工作区里与此无关的文件\n\n\
## 验收\n- `python md2html.py README.md` 输出合法 HTML\n- 代码块按语言高亮\n- `pytest` 全部通过\n\n\
## 唤醒时追加\n- 顺便支持代码块高亮\n";

/// The directory the generated workspace is cached in: `<target>/bench-data/<version>`.
fn wake_cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            // benches run from target/<profile>/deps/
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("bench-data").join(WAKE_DB_VERSION)
}

fn session_id(i: usize) -> String {
    format!(
        "{:08x}-bec7-466e-80cd-{:012x}",
        i * 2_654_435_761 % (1 << 32),
        i
    )
}

/// One realistic turn of a transcript: the `k`-th entry of a session, shaped like the
/// engine's entries (a prompt, tool calls, tool results of varied size, answers with
/// usage).
fn bench_entry(session: &str, cwd: &str, k: usize, parent: Option<&str>, side: bool) -> Value {
    let uuid = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        k,
        fxhash(session) ^ k as u64
    );
    let message = match k % 4 {
        0 if k == 0 => {
            json!({"role": "user", "content": "照这份需求做(notes/需求.md):写一个把 Markdown 转成 HTML 的命令行脚本。"})
        }
        0 => {
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{k:06}"),
            "content": "    1\tdef convert(text):\n    2\t    lines = text.splitlines()\n".repeat(1 + k % 13),
            "is_error": false}]})
        }
        1 => {
            json!({"id": format!("msg_{k:06}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": format!("toolu_{:06}", k + 3), "name": "Read",
                "input": {"file_path": format!("src/md2html_{}.py", k % 17)}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3 + k, "cache_creation_input_tokens": 412, "cache_read_input_tokens": 28_700 + 60 * k, "output_tokens": 96}})
        }
        2 => {
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{:06}", k + 2),
            "content": "ok: 12 passed in 0.31s\n".repeat(1 + k % 5), "is_error": false}]})
        }
        _ => {
            json!({"id": format!("msg_{k:06}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "代码块高亮已经接上 pygments,下一步补列表嵌套的测试。"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 30_000 + 60 * k, "output_tokens": 41}})
        }
    };
    let kind = message["role"].as_str().unwrap_or("user").to_string();
    json!({
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": session,
        "timestamp": format!("2026-09-07T01:{:02}:{:02}.{:03}Z", k / 60 % 60, k % 60, k % 1000),
        "cwd": cwd,
        "isSidechain": side,
        "message": message,
    })
}

/// JSON objects as the typed entries a store appends (every field kept as written).
fn typed(values: &[Value]) -> Vec<flower::transcript::Entry> {
    values
        .iter()
        .map(|v| serde::Deserialize::deserialize(v).expect("an object"))
        .collect()
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) & 0xffff_ffff_ffff
}

/// Builds (or finds) the cached workspace: `runs/sessions.db` with [`SESSIONS`] ×
/// [`ENTRIES_PER_SESSION`] entries, `notes/需求.md` and `notes/目标.md`.
fn wake_workspace() -> PathBuf {
    let dir = wake_cache_dir();
    let done = dir.join("complete");
    if done.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("runs")).expect("cache dir");
    std::fs::create_dir_all(dir.join("notes")).expect("notes dir");
    let dir = dir.canonicalize().expect("canonical cache dir");
    println!(
        "  building {} ({SESSIONS} sessions x {ENTRIES_PER_SESSION} entries, once) ...",
        dir.display()
    );
    let started = Instant::now();
    let store = SqliteSessionStore::open(&dir.join("runs/sessions.db")).expect("open store");
    let project = project_key(&dir);
    let cwd = dir.to_string_lossy().into_owned();
    const BATCH: usize = 300;
    for i in 0..SESSIONS {
        let id = session_id(i);
        let key = SessionKey::main(&project, &id);
        let mains: Vec<Value> = (0..ENTRIES_PER_SESSION - SUBAGENT_ENTRIES)
            .scan(None::<String>, |parent, k| {
                let e = bench_entry(&id, &cwd, k, parent.as_deref(), false);
                *parent = e["uuid"].as_str().map(str::to_string);
                Some(e)
            })
            .collect();
        for batch in mains.chunks(BATCH) {
            store.append(&key, &typed(batch)).expect("append");
        }
        let sub = key.sub("subagents/agent-a1b2c3").expect("subkey");
        let subs: Vec<Value> = (0..SUBAGENT_ENTRIES)
            .map(|k| bench_entry(&id, &cwd, 100_000 + k, None, true))
            .collect();
        store.append(&sub, &typed(&subs)).expect("append sub");
    }
    drop(store);
    std::fs::write(dir.join("notes/需求.md"), BENCH_BRIEF).expect("brief");
    let goal: String = (1..=15)
        .map(|n| format!("- [ ] 第 {n} 条:运行 `pytest tests/test_{n}.py`,期望全部通过\n"))
        .collect();
    std::fs::write(dir.join("notes/目标.md"), goal).expect("goal");
    std::fs::write(&done, WAKE_DB_VERSION).expect("marker");
    let size = std::fs::metadata(dir.join("runs/sessions.db")).map_or(0, |m| m.len());
    println!(
        "  built in {:.0} s, sessions.db {:.0} MB",
        started.elapsed().as_secs_f64(),
        size as f64 / 1e6
    );
    dir
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn time_wake_state(what: &str, workspace: &Path, run_dir: &Path, expect_steps: usize) {
    // One call first, untimed: the OS page cache, as on any machine that ran flower.
    let first = Instant::now();
    let state = flower::wake_state(workspace, run_dir);
    let first = first.elapsed();
    assert!(state.waking, "the cached workspace can be woken");
    assert_eq!(state.checks, 15);
    assert_eq!(
        state.steps.len(),
        expect_steps,
        "live steps: {:?}",
        state.steps
    );
    let mut samples: Vec<Duration> = (0..WAKE_CALLS)
        .map(|_| {
            let start = Instant::now();
            let state = flower::wake_state(workspace, run_dir);
            let elapsed = start.elapsed();
            std::hint::black_box(state);
            elapsed
        })
        .collect();
    samples.sort();
    println!(
        "  {what}: median {:.3} ms, p95 {:.3} ms (min {:.3}, max {:.3}, first {:.3}; n={WAKE_CALLS})",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.95)),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        ms(first)
    );
}

pub fn bench_wake_state() {
    println!(
        "wake_state, sessions.db of {SESSIONS} sessions and {} entries; goal <= 5 ms",
        SESSIONS * ENTRIES_PER_SESSION
    );
    let dir = wake_workspace();
    let run_dir = dir.join("runs");
    // The lineage of a run three wakes in, its sessions among the thousand. Written on
    // every run: the cache may have moved with its target directory.
    let lineage = json!({
        "workspace": dir.to_string_lossy(),
        "woke": 3,
        "steps": {"确认需求": session_id(17), "设定目标": session_id(503), "干活": session_id(998)},
    });
    std::fs::write(
        run_dir.join("lineage.json"),
        serde_json::to_vec_pretty(&lineage).expect("lineage"),
    )
    .expect("write lineage");

    time_wake_state("clean (no -wal: opened immutable)", &dir, &run_dir, 3);

    // While a flower runs here (or after one was killed): a WAL with commits in it and
    // its -shm index, read through `readonly_shm`.
    let writer = SqliteSessionStore::open(&run_dir.join("sessions.db")).expect("writer");
    let live = SessionKey::main(project_key(&dir), "bench-live-writer");
    let cwd = dir.to_string_lossy().into_owned();
    let entries: Vec<Value> = (0..200)
        .map(|k| bench_entry("bench-live-writer", &cwd, k, None, false))
        .collect();
    writer.append(&live, &typed(&entries)).expect("live append");
    let wal = std::fs::metadata(run_dir.join("sessions.db-wal")).map_or(0, |m| m.len());
    time_wake_state(
        &format!("a writer open, {:.1} MB in its WAL", wal as f64 / 1e6),
        &dir,
        &run_dir,
        3,
    );
    // Leave the cache as it was.
    writer.delete(&live).expect("live delete");
    drop(writer);
}
