//! Continuation benchmarks (issue #4's performance section). Prints figures; asserts none.
//!
//! - `bench_manifest`: one manifest write (lock, re-read, merge, write, fsync, rename)
//!   when `runs/manifest.json` already holds 10,000 rows of other runs. Goal ≤ 20 ms.

use flower::core::manifest::{Manifest, StepResult, new_run_id};
use std::time::{Duration, Instant};

fn main() {
    bench_manifest();
}

/// A plausible row of another run: a finished step with a paragraph of output.
fn foreign_row(i: usize) -> serde_json::Value {
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
