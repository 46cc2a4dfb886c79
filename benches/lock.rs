//! The run lock and a session lock (issue 15), taken and released: what they add to a
//! `flower` (the run lock) and to a one-turn `flower once` (one session lock: created,
//! written, removed). Prints figures next to the goal (≤ 1 ms); asserts none.
//! Run with `cargo bench --bench lock`.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::continuity::lock::{RunLock, SessionLocks, probe_run};
use std::time::Instant;

const RUNS: usize = 2000;

fn main() {
    let dir = tempfile::TempDir::new().unwrap();
    let run_dir = dir.path().join("runs");
    let mut figures: Vec<(&str, Vec<f64>)> = vec![
        ("run lock, take + release", Vec::new()),
        (
            "session lock, take + release (file created, written, removed)",
            Vec::new(),
        ),
        ("run lock probe (`flower state`)", Vec::new()),
    ];
    for i in 0..RUNS {
        let t = Instant::now();
        drop(RunLock::acquire(&run_dir).unwrap());
        figures[0].1.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let sessions = SessionLocks::new(&run_dir);
        sessions.claim(&format!("session-{i}")).unwrap();
        drop(sessions);
        figures[1].1.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::hint::black_box(probe_run(&run_dir));
        figures[2].1.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!("locks (n={RUNS} each), goal: taking and releasing adds <= 1 ms");
    for (name, mut ms) in figures {
        ms.sort_by(|a, b| a.total_cmp(b));
        println!(
            "  {name}: median {:.3} ms, p95 {:.3} ms, max {:.3} ms",
            ms[RUNS / 2],
            ms[RUNS * 95 / 100],
            ms[RUNS - 1]
        );
    }
}
