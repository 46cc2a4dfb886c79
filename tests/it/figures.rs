//! Figures that agree (issue 29, item 5): each figure a person is shown has one source,
//! and `flower log --json` reads the same one. Wake numbers as the banner says them,
//! retries that count retries, outages counted, and the row of a step cut short by
//! SIGTERM or a double Ctrl-C, with what its finished turn cost and reached.

use crate::faults_support;
use crate::support;

use crate::support::Flower;
use faults_support::*;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use support::{FakeServer, Gate, Reply};

/// `flower log --json` in the project.
pub fn log_json(project: &Project) -> Value {
    let out = Flower::bin()
        .command()
        .current_dir(&project.dir)
        .args(["log", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `flower log` (text) in the project.
fn log_text(project: &Project) -> String {
    let out = Flower::bin()
        .command()
        .current_dir(&project.dir)
        .arg("log")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// A 401 is never retried, so it is no retry; the second process is the banner's
/// 第 2 次唤醒 and `flower log`'s 唤醒 #2, in the rows and in the totals.
#[test]
fn a_request_never_retried_is_no_retry_and_wakes_are_numbered_as_the_banner_says() {
    let project = Project::resilient();
    let refused = Arc::new(AtomicBool::new(true));
    let server = {
        let refused = refused.clone();
        FakeServer::with_handler(move |req, _| {
            if agent_of(req) == Agent::Coordinator && refused.load(Ordering::SeqCst) {
                return Reply::error(401, "authentication_error", "invalid x-api-key");
            }
            simple_reply(req)
        })
    };
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let log = log_json(&project);
    assert_eq!(log["totals"]["retries"], 0, "{log:#}");
    let work = project.rows("干活");
    assert_eq!(work[0]["attempts"], 1);
    assert_eq!(work[0]["errors"].as_array().unwrap().len(), 1);

    refused.store(false, Ordering::SeqCst);
    let out = project.run(&server, &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("第 2 次唤醒"), "{stdout}");

    let log = log_json(&project);
    assert_eq!(log["totals"]["wakes"], 2, "{log:#}");
    assert_eq!(log["totals"]["retries"], 0, "{log:#}");
    let woke: Vec<u64> = log["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["woke"].as_u64().unwrap())
        .collect();
    assert_eq!(woke.first(), Some(&1), "{woke:?}");
    assert_eq!(woke.last(), Some(&2), "{woke:?}");
    for row in project.manifest() {
        assert!(row["woke"].as_u64().is_some(), "{row:#}");
    }
    let log = log_text(&project);
    assert!(log.contains("唤醒 #2"), "{log}");
    assert!(!log.contains("唤醒 #1"), "{log}");
    assert!(log.contains("唤醒 2 · 重试 0"), "{log}");
}

/// The coordinator's first turn finishes (cost and context known), then the process is
/// stopped while the sub-agent works: by SIGTERM, or by Ctrl-C twice. Either way the
/// in-flight row is written, with the finished turn's cost and context.
fn cut_short_by(signals: &[i32]) {
    let project = Project::resilient();
    project.freeze_notes();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |req, _| match (agent_of(req), turn_of(req)) {
            (Agent::Coordinator, 0) => simple_reply(req).usage(12_000, 300),
            (Agent::Worker, _) => simple_reply(req).gate_before(&gate),
            _ => simple_reply(req),
        })
    };
    let (mut child, stderr) = project.spawn_watched(&server, &[]);
    assert!(gate.wait_reached(PATIENCE), "{}", stderr.all());
    for sig in signals {
        signal(&child, *sig);
        if signals.len() > 1 {
            // The first Ctrl-C interrupts the sub-agent's request; it is asked again.
            assert!(gate.wait_reached_n(2, PATIENCE), "{}", stderr.all());
        }
    }
    let status = wait_exit(&mut child, PATIENCE);
    gate.open();
    if signals.len() > 1 {
        assert_eq!(status.code(), Some(130), "{status:?} {}", stderr.all());
    }

    let rows = project.rows("干活");
    assert_eq!(rows.len(), 1, "{:#?}", project.manifest());
    let row = &rows[0];
    assert_eq!(row["error"], "killed-by-signal", "{row:#}");
    assert_eq!(row["num_turns"], 1, "{row:#}");
    assert!(row["context"].as_u64().unwrap() >= 12_000, "{row:#}");
    let cost = row["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0, "{row:#}");
    let log = log_json(&project);
    let logged = log["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["step"] == "干活")
        .unwrap();
    assert_eq!(logged["cost_usd"], row["cost_usd"]);
    assert_eq!(logged["context"], row["context"]);
}

#[test]
fn sigterm_while_a_sub_agent_works_writes_the_finished_turns_cost_and_context() {
    cut_short_by(&[libc::SIGTERM]);
}

#[test]
fn ctrl_c_twice_leaves_a_row_for_the_interrupted_step() {
    cut_short_by(&[libc::SIGINT, libc::SIGINT]);
}
