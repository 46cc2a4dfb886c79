//! Checkpoints (issue #44). Prints figures beside their goals; asserts none. Run with
//! `cargo bench --bench checkpoint` (optimized: the figure that counts, on a quiet
//! machine) or under callgrind for instruction counts (`CHECKPOINT_BENCH_ROUNDS=5`).
//!
//! What is measured: a workspace of 10,000 files (100 directories of 100 files of about
//! 200 bytes); the first checkpoint (every file hashed), then a turn's checkpoint after
//! 5 files changed (`Checkpoints::record`: the change feed's paths only; its time, the
//! paths it looked at, the bytes the object store grew by), a turn's checkpoint with
//! nothing changed, and a full walk (an attempt's checkpoint: every file's `lstat`).
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::checkpoint::{CheckpointKind, Checkpoints, DEFAULT_MAX_FILE_BYTES};
use std::path::Path;
use std::time::Instant;

const DIRS: usize = 100;
const FILES: usize = 100;
/// `CHECKPOINT_BENCH_ROUNDS=N` (30 unless set): fewer under callgrind.
fn rounds() -> usize {
    std::env::var("CHECKPOINT_BENCH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30)
}

fn disk(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            disk(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[v.len() * 95 / 100])
}

fn main() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    for d in 0..DIRS {
        let dir = ws.join(format!("src{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES {
            let body = format!("// file {d}/{f}\n{}\n", "fn x() {}\n".repeat(18));
            std::fs::write(dir.join(format!("m{f:03}.rs")), body).unwrap();
        }
    }
    let runs = ws.join("runs");
    let checkpoints = Checkpoints::open(&ws, &runs, DEFAULT_MAX_FILE_BYTES).unwrap();
    let started = Instant::now();
    checkpoints
        .record(CheckpointKind::Attempt, "干活", None, 0)
        .unwrap();
    let first = started.elapsed().as_secs_f64() * 1e3;
    let store = runs.join("checkpoints");
    let after_first = disk(&store);
    println!(
        "10,000 files: first checkpoint {first:.1} ms, store {:.1} MB",
        after_first as f64 / 1e6
    );

    let mut changed = Vec::new();
    let mut grown = Vec::new();
    for round in 0..rounds() {
        for k in 0..5 {
            let path = ws.join(format!(
                "src{:03}/m{:03}.rs",
                (round * 7 + k * 13) % DIRS,
                k
            ));
            let mut body = std::fs::read_to_string(&path).unwrap();
            body.push_str(&format!("// round {round}\n"));
            std::fs::write(&path, body).unwrap();
        }
        let before = disk(&store);
        let started = Instant::now();
        checkpoints
            .record(CheckpointKind::Turn, "干活", None, round as u32)
            .unwrap();
        changed.push(started.elapsed().as_secs_f64() * 1e3);
        grown.push((disk(&store) - before) as f64);
    }
    let looked_at = checkpoints.last_scan();
    let mut unchanged = Vec::new();
    for round in 0..rounds() {
        let started = Instant::now();
        checkpoints
            .record(
                CheckpointKind::Turn,
                "干活",
                None,
                (rounds() + round) as u32,
            )
            .unwrap();
        unchanged.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let mut walked = Vec::new();
    for _ in 0..rounds() {
        let started = Instant::now();
        checkpoints.snapshot().unwrap();
        walked.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let (m, p) = median(changed);
    let (g, _) = median(grown);
    let (u, up) = median(unchanged);
    let (w, wp) = median(walked);
    println!(
        "5 files changed: a turn's checkpoint median {m:.2} ms, p95 {p:.2} ms (goal ≤ 10 ms; \
         {} paths looked at, full walk: {})",
        looked_at.looked_at, looked_at.full_walk
    );
    println!(
        "5 files changed: the store grows by {:.1} KB median (goal: proportional to the change; \
         5 blobs, the trees on their paths)",
        g / 1e3
    );
    println!(
        "nothing changed: a turn's checkpoint median {u:.2} ms, p95 {up:.2} ms (goal ≤ 10 ms)"
    );
    println!(
        "a full walk (an attempt's checkpoint, a rewind's): median {w:.2} ms, p95 {wp:.2} ms \
         (no goal: once per step attempt)"
    );
}
