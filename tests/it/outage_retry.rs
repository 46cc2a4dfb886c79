//! Issue #11, the outage case: once the endpoint answers the probe again, the retry
//! goes out at once. The offline wait was the backoff; adding `FLOWER_BASE_DELAY` after
//! it would only let the prompt cache go cold.

use crate::faults_support;
use crate::support;

use faults_support::{PATIENCE, Project, spawn_watched, wait_exit};
use flower::continuity::resilience::RESUME_PROMPT;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::{FakeServer, Gate, Reply};

/// A backoff this long (jittered: at least 45 s) could not pass within [`PROMPTLY`].
const BASE_DELAY: &str = "60";
/// Far more than a retry needs on a loaded machine, far less than any backoff.
const PROMPTLY: Duration = Duration::from_secs(30);

#[test]
fn after_an_outage_the_retry_goes_out_without_a_backoff() {
    let project = Project::resilient();
    std::fs::write(project.dir.join("a.txt"), "甲乙丙").unwrap();
    let gate = Gate::new();
    let outage = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, outage) = (gate.clone(), outage.clone());
        FakeServer::with_handler(move |_, i| {
            if outage.load(Ordering::SeqCst) {
                // A request that slipped onto a kept-alive connection fails like the
                // network would.
                return Reply::text("lost").cut_after(0);
            }
            match i {
                0 => Reply::tool_use("Read", json!({"file_path": "a.txt"})).gate_before(&gate),
                _ => Reply::text("读完了"),
            }
        })
    };
    let mut cmd = project.command(&server, &["once", "读 a.txt"]);
    cmd.env("FLOWER_BASE_DELAY", BASE_DELAY)
        .env("FLOWER_MAX_DELAY", "120")
        .env("FLOWER_PROBE_INTERVAL", "0.05")
        .env("FLOWER_MAX_OFFLINE_WAIT", "300");
    let (mut child, stderr) = spawn_watched(cmd);

    // The first reply is delivered with the server gone: the next request finds nobody.
    assert!(gate.wait_reached(PATIENCE), "never asked");
    server.stop_accepting();
    outage.store(true, Ordering::SeqCst);
    gate.open();
    // Several failed probes: flower is waiting for the network, not backing off.
    assert!(
        stderr.wait_for("网络不通", 3, PATIENCE),
        "no offline status lines: {}",
        stderr.all()
    );
    let before = server.request_count();
    outage.store(false, Ordering::SeqCst);
    server.resume_accepting();
    let back = Instant::now();

    assert!(
        server.wait_for(
            |requests| requests[before..]
                .iter()
                .any(|r| r.raw_body.contains(RESUME_PROMPT)),
            PROMPTLY
        ),
        "no retry within {PROMPTLY:?} of the endpoint coming back: {}",
        stderr.all()
    );
    let retried_after = back.elapsed();
    let status = wait_exit(&mut child, PATIENCE);
    assert!(stderr.wait_closed(PATIENCE));
    assert_eq!(status.code(), Some(0), "{}", stderr.all());
    // The retry line announces no wait at all.
    let retries: Vec<String> = stderr
        .lines()
        .into_iter()
        .filter(|l| l.contains("↻"))
        .collect();
    assert_eq!(retries.len(), 1, "{}", stderr.all());
    assert!(retries[0].contains("↻ 0s 后第 2/"), "{}", retries[0]);
    assert!(stderr.wait_for("网络恢复", 1, PATIENCE), "{}", stderr.all());
    eprintln!("retry {retried_after:?} after the endpoint came back");
}
