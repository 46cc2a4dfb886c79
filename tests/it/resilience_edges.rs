//! Resilience edges that mutation testing (cargo-mutants on
//! `src/continuity/resilience.rs`) found untested: the retry numbers really read from
//! the process environment (through the settings' one snapshot of it), `secs`
//! saturating negative seconds to zero, and the last pause of an offline wait being cut
//! to what is left.

use flower::continuity::resilience::{Endpoint, Resilience};
use flower::settings::{Environment, Settings};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set for the child run of [`from_env_sees_the_process_environment`].
const CHILD: &str = "FLOWER_TEST_RESILIENCE_CHILD";

/// The test binary runs itself with `FLOWER_*` set (setting variables in this process
/// would race with every other test): the child must see them through the settings'
/// snapshot of the process environment, a bad one refused by name.
#[test]
fn from_env_sees_the_process_environment() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "resilience_edges::from_env_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("FLOWER_BASE_DELAY", "0.5")
        .env("FLOWER_MAX_ATTEMPTS", "9")
        .env("FLOWER_PROBE_INTERVAL", "bogus")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "the child ran: {stdout}");
}

#[test]
#[ignore = "run by from_env_sees_the_process_environment, with the environment it sets"]
fn from_env_child() {
    assert_eq!(
        std::env::var(CHILD).as_deref(),
        Ok("1"),
        "run by its parent only"
    );
    let env = Environment::from_process();
    assert_eq!(env.var("FLOWER_BASE_DELAY"), Some("0.5"));
    let (r, warnings) = Resilience::from_lookup(|name| env.var(name).map(str::to_string));
    assert_eq!(r.base_delay, 0.5);
    assert_eq!(r.max_attempts, 9);
    assert_eq!(r.probe_interval, Resilience::default().probe_interval);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("FLOWER_PROBE_INTERVAL"),
        "{warnings:?}"
    );
    let refused = Settings::from_env().unwrap_err();
    assert_eq!(refused.setting(), "FLOWER_PROBE_INTERVAL", "{refused}");
}

/// Negative seconds are no wait, not forever. (A NaN base is not: `NaN.min(max_delay)`
/// is `max_delay`; `from_lookup` never lets a NaN through.)
#[test]
fn negative_seconds_are_no_delay() {
    for base_delay in [-1.0, -1e-9, f64::NEG_INFINITY] {
        let r = Resilience {
            base_delay,
            ..Resilience::default()
        };
        assert_eq!(r.base_delay_for(1), Duration::ZERO, "{base_delay}");
        assert_eq!(r.delay(1, None), Duration::ZERO, "{base_delay}");
    }
    // Too large saturates to the cap, then to Duration::MAX without a cap.
    let r = Resilience {
        base_delay: 1e300,
        max_delay: f64::INFINITY,
        ..Resilience::default()
    };
    assert_eq!(r.base_delay_for(1), Duration::MAX);
}

/// A probe interval longer than the whole offline limit: the wait ends at the limit,
/// not one interval later.
#[tokio::test]
async fn the_last_pause_is_cut_to_what_is_left_of_the_limit() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port,
    };
    let r = Resilience {
        probe_interval: 120.0,
        probe_timeout: 2.0,
        max_offline_wait: 0.5,
        ..Resilience::default()
    };
    let started = Instant::now();
    let mut calls = 0;
    assert!(!r.wait_until_reachable(&ep, |_| calls += 1).await);
    // Generous: the limit is 0.5 s, one interval would be 120 s.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(calls, 2, "one probe at the start, one at the limit");
}
