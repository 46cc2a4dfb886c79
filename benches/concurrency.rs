//! Concurrency benchmarks (issue #43, "Done when"). Prints each figure next to its goal;
//! asserts none. Run with `cargo bench --bench concurrency` (`-- workers` or `-- reads`
//! for one part).
//!
//! Each part runs the real release `flower` binary (`flower once`) against the fake
//! Messages API of `tests/it/support/`, and times one reply's calls from outside: the
//! interval between the coordinator's first request (whose reply holds the calls,
//! answered at once) and its second (which carries their results). Everything the
//! harness does for the calls is inside it: parsing the reply, storing it, running
//! the calls, storing each result, building the next request.
//!
//! 1. **Workers** (`workers`): the fake API answers each `Task` worker's request after
//!    a fixed [`WORKER_DELAY`]. Four independent workers dispatched in one reply, against
//!    one worker alone (the slowest of the four, as all take the same time). Goal: four
//!    take ≤ 1.3× one (not 4×). One after another (`FLOWER_MAX_TOOL_USE_CONCURRENCY=1`)
//!    is printed for scale.
//! 2. **Reads** (`reads`): twenty `Read` calls in one reply when the tool is slow,
//!    against one `Read`. The slowness is the kernel's, with no knob in flower: each
//!    file carries a write lease (`fcntl(F_SETLEASE)`) held by this bench, so flower's
//!    `open` blocks until the bench lets go; the bench sees each open begin (the lease's
//!    break is pending) and lets go [`READ_DELAY`] later. So every read takes that long
//!    from its own start, whenever it starts. Goal: twenty take ≤ 1.2× one, with
//!    `FLOWER_MAX_TOOL_USE_CONCURRENCY=20`; with the default limit (10, Claude Code's)
//!    the twenty run in two waves, printed for scale.
//!
//! The figures are ratios of intervals dominated by fixed waits, so a loaded machine
//! moves them less than it moves absolute times; still, say under what load they were
//! taken.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/child.rs"]
#[allow(dead_code)]
mod child;
#[path = "../tests/it/support/mod.rs"]
mod support;
use child::{flower_cmd, ms};

use serde_json::json;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{FakeServer, Recorded, Reply};

/// How long the fake API takes to answer a worker.
const WORKER_DELAY: Duration = Duration::from_millis(300);
/// How long each slow read takes from its start.
const READ_DELAY: Duration = Duration::from_millis(300);
/// Runs of each case; the median is printed.
const RUNS: usize = 5;

fn main() -> std::process::ExitCode {
    let parts = match child::bench_or_helper() {
        Ok(parts) => parts,
        Err(helper_exit) => return helper_exit,
    };
    let flower = &child::flower_under_test();
    println!("concurrency: {flower}, median of {RUNS} runs each");
    if parts.wants("workers") {
        workers(flower);
    }
    if parts.wants("reads") {
        reads(flower);
    }
    std::process::ExitCode::SUCCESS
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets the goal"
    } else {
        "MISSES the goal"
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn is_worker(request: &Recorded) -> bool {
    request.system().contains("sub-agent of a coding harness")
}

/// When the coordinator's requests arrived (the handler runs on arrival).
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<Instant>>>);

impl Arrivals {
    fn note(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    /// From the first request's arrival to the second's: the reply's calls.
    fn calls_took(&self) -> Duration {
        let seen = self.0.lock().unwrap();
        assert_eq!(
            seen.len(),
            2,
            "the coordinator sent {} requests",
            seen.len()
        );
        seen[1] - seen[0]
    }
}

/// Runs `flower once` in a new directory made by `prepare` against a coordinator whose
/// first reply makes `calls`, workers answered after [`WORKER_DELAY`]; returns how long
/// the calls took.
fn one_run(
    flower: &str,
    calls: Vec<(&'static str, serde_json::Value)>,
    env: &[(&str, &str)],
    prepare: impl FnOnce(&Path) -> Option<Leases>,
) -> Duration {
    let dir = tempfile::tempdir().expect("temp dir");
    let arrivals = Arrivals::default();
    let calls_made = calls.len();
    let server = {
        let arrivals = arrivals.clone();
        FakeServer::with_handler(move |request, _| {
            if is_worker(request) {
                return Reply::text(format!("{} 做完了", request.first_prompt()))
                    .delay(WORKER_DELAY);
            }
            arrivals.note();
            if request.messages().len() == 1 {
                let mut reply = Reply::text("分头做。");
                for (n, (name, input)) in calls.iter().enumerate() {
                    reply = reply.then_tool_use_with_id(format!("call_{n}"), *name, input.clone());
                }
                return reply;
            }
            Reply::text("都做完了")
        })
    };
    let leases = prepare(dir.path());
    let mut cmd = flower_cmd(flower, &server, dir.path(), &["once", "派活"]);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().expect("run flower");
    assert!(
        out.status.success(),
        "flower failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(leases) = leases {
        leases.finish(calls_made);
    }
    let last = server
        .requests()
        .into_iter()
        .rfind(|r| !is_worker(r))
        .unwrap();
    for result in last.tool_results() {
        assert_ne!(result["is_error"], json!(true), "a call failed: {result}");
    }
    arrivals.calls_took()
}

/// A case: what it is, how many calls, the environment it runs with.
type Case<'a> = (&'a str, usize, &'a [(&'a str, &'a str)]);

fn task(n: usize) -> (&'static str, serde_json::Value) {
    (
        "Task",
        json!({"description": format!("第 {n} 件"), "prompt": format!("做第 {n} 件")}),
    )
}

/// Times a part's cases: one call, many at once, the many otherwise (for scale). Prints
/// each case's median of [`RUNS`] runs of `time_calls(calls, env)`, then the many at once
/// against one with its verdict (`goal`: the ratio not to exceed), and the scale case
/// against one.
fn compare(
    cases: [Case; 3],
    (many, goal, scale): (&str, f64, &str),
    time_calls: impl Fn(usize, &[(&str, &str)]) -> Duration,
) {
    let took: Vec<Duration> = cases
        .iter()
        .map(|&(what, n, env)| {
            let median = median((0..RUNS).map(|_| time_calls(n, env)).collect());
            println!("  {what}: {:.0} ms", ms(median));
            median
        })
        .collect();
    let ratio = took[1].as_secs_f64() / took[0].as_secs_f64();
    println!(
        "  {many} at once / one: {ratio:.2}x; goal <= {goal}x: {} ({scale}: {:.2}x)",
        verdict(ratio <= goal),
        took[2].as_secs_f64() / took[0].as_secs_f64()
    );
}

/// Part 1: four workers at once against one.
fn workers(flower: &str) {
    let cases: [Case; 3] = [
        ("one worker", 1, &[]),
        ("four workers in one reply", 4, &[]),
        (
            "four workers, one after another (FLOWER_MAX_TOOL_USE_CONCURRENCY=1)",
            4,
            &[("FLOWER_MAX_TOOL_USE_CONCURRENCY", "1")],
        ),
    ];
    println!();
    println!(
        "workers: the fake API answers each worker after {} ms",
        WORKER_DELAY.as_millis()
    );
    compare(cases, ("four", 1.3, "one after another"), |n, env| {
        one_run(flower, (1..=n).map(task).collect(), env, |_| None)
    });
}

/// Part 2: twenty slow reads at once against one.
fn reads(flower: &str) {
    // The lease's break signal (SIGIO) is not wanted: the bench polls instead.
    // SAFETY: setting a signal's disposition to "ignore" has no other effect.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    println!();
    println!(
        "reads: each Read's open is held {} ms from its start (a file lease)",
        READ_DELAY.as_millis()
    );
    let read = |n: usize| ("Read", json!({"file_path": format!("slow{n}.txt")}));
    let cases: [Case; 3] = [
        ("one read", 1, &[]),
        (
            "twenty reads in one reply (FLOWER_MAX_TOOL_USE_CONCURRENCY=20)",
            20,
            &[("FLOWER_MAX_TOOL_USE_CONCURRENCY", "20")],
        ),
        ("twenty reads, the default limit (10)", 20, &[]),
    ];
    compare(cases, ("twenty", 1.2, "default limit"), |n, env| {
        one_run(flower, (0..n).map(read).collect(), env, |dir| {
            Some(Leases::hold(dir, n))
        })
    });
}

/// Files whose opens the bench holds for [`READ_DELAY`] each, by a write lease, and
/// the thread that lets go of them.
struct Leases {
    thread: std::thread::JoinHandle<usize>,
}

impl Leases {
    /// Writes `slow0.txt`… in `dir` and takes a lease on each.
    fn hold(dir: &Path, n: usize) -> Leases {
        let held: Vec<(PathBuf, OwnedFd)> = (0..n)
            .map(|i| {
                let path = dir.join(format!("slow{i}.txt"));
                std::fs::write(&path, format!("第 {i} 个慢文件\n")).unwrap();
                let file = std::fs::File::open(&path).unwrap();
                // SAFETY: fcntl on a descriptor this function owns.
                let taken =
                    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
                assert_eq!(taken, 0, "F_SETLEASE: {}", std::io::Error::last_os_error());
                (path, OwnedFd::from(file))
            })
            .collect();
        let thread = std::thread::spawn(move || let_go_in_turn(held));
        Leases { thread }
    }

    /// Waits for the thread: every file was opened (its lease broken and let go).
    fn finish(self, total: usize) {
        let released = self.thread.join().unwrap();
        assert_eq!(released, total, "not every slow file was opened");
    }
}

/// Polls each lease every millisecond: once an open is waiting on it (the lease reads
/// as the type it is to be lowered to), it is let go [`READ_DELAY`] later. Returns how many were let go;
/// ends when all were, or after a minute.
fn let_go_in_turn(mut held: Vec<(PathBuf, OwnedFd)>) -> usize {
    let total = held.len();
    let mut since: Vec<Option<Instant>> = vec![None; total];
    let mut gone = vec![false; total];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut released = 0;
    while released < total && Instant::now() < deadline {
        for (i, (_, fd)) in held.iter().enumerate() {
            if since[i].is_some() {
                continue;
            }
            // SAFETY: fcntl on a descriptor this thread owns.
            let lease = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLEASE) };
            // A reader's open asks the holder to go down to a read lease.
            if lease != libc::F_WRLCK {
                since[i] = Some(Instant::now());
            }
        }
        for (i, (_, fd)) in held.iter_mut().enumerate() {
            if !gone[i] && since[i].is_some_and(|t| t.elapsed() >= READ_DELAY) {
                // SAFETY: as above.
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
                gone[i] = true;
                released += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(held);
    released
}
