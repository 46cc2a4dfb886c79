//! Tests that cannot run here (no PostgreSQL server, no Chromium, no Landlock …) skip,
//! so that `cargo test` passes on a laptop; but a skip must never pass for a run:
//!
//! - each skip is counted, and the test binary says how many tests skipped and why at
//!   its very end, after the harness's `test result:` line, and that its `passed` counts
//!   them although they did not run (the harness has no "skipped"); it is the last test
//!   binary `cargo test` runs (no doc tests), so these are the last lines printed;
//! - `FLOWER_TEST_REQUIRE=postgres,chromium,netns` (set by `.ci/run`, which starts the
//!   server, installs the browser, iproute2 and nftables, and runs as root) turns a skip
//!   of a listed component into a failure.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once};

/// The variable listing the components whose tests must run (comma-separated).
pub const REQUIRE_VAR: &str = "FLOWER_TEST_REQUIRE";

/// The components a test may need and skip without (the names `FLOWER_TEST_REQUIRE` takes).
pub const POSTGRES: &str = "postgres";
pub const CHROMIUM: &str = "chromium";
pub const LANDLOCK: &str = "landlock";
pub const ROOT: &str = "root";
pub const PYTHON: &str = "python3";
/// The official Anthropic Python SDK (`anthropic`), whose types validate what flower sends.
pub const ANTHROPIC_SDK: &str = "anthropic-sdk";
pub const TMPFS: &str = "tmpfs";
/// A network namespace whose packets can be dropped (root, iproute2, nftables).
pub const NETNS: &str = "netns";

/// Skipped test (the harness names each test's thread after it) → component and why.
static SKIPPED: Mutex<BTreeMap<String, (String, String)>> = Mutex::new(BTreeMap::new());

/// Whether `FLOWER_TEST_REQUIRE` lists `component`.
pub fn required(component: &str) -> bool {
    std::env::var(REQUIRE_VAR)
        .unwrap_or_default()
        .split(',')
        .any(|c| c.trim() == component)
}

/// The current test skips because `component` is missing (`why`): counted and said at
/// the end, or, when `FLOWER_TEST_REQUIRE` lists the component, a failure (panics).
pub fn skip(component: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed>")
        .to_string();
    assert!(
        !required(component),
        "{test} did not run: {why}; {REQUIRE_VAR} requires {component}"
    );
    static REPORT: Once = Once::new();
    REPORT.call_once(|| {
        // SAFETY: registering a plain `extern "C"` function that touches only a static.
        unsafe {
            libc::atexit(report);
        }
    });
    let mut skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner());
    if skipped.contains_key(&test) {
        return;
    }
    // Straight to the process's stderr: the harness would swallow eprintln!.
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
    skipped.insert(test, (component.to_string(), why.to_string()));
}

/// At the process's exit, after the harness's summary: how many tests skipped, per
/// component, with the first reason given.
extern "C" fn report() {
    let skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner());
    let mut by_component: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (component, why) in skipped.values() {
        by_component.entry(component).or_insert((0, why)).0 += 1;
    }
    let mut err = std::io::stderr().lock();
    let n = skipped.len();
    let (tests, them) = if n == 1 {
        ("test", "it")
    } else {
        ("tests", "them")
    };
    let _ = writeln!(
        err,
        "\n{n} {tests} skipped, not run: the `passed` above counts {them}, so {n} fewer passed \
         ({REQUIRE_VAR}=<component,…> makes a skip a failure):"
    );
    for (component, (count, why)) in by_component {
        let _ = writeln!(err, "  {count} × {component}: {why}");
    }
}
