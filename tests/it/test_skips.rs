//! Tests that cannot run here skip, but never pass for a run: the test binary says how
//! many skipped at its end, and `FLOWER_TEST_REQUIRE` (set by `.ci/run`) turns a skip
//! of a component it lists into a failure. Checked on this very test binary, running
//! one PostgreSQL test without a server.

use crate::support::pipeline::text;
use crate::support::postgres::URL_VAR;
use crate::support::skip::REQUIRE_VAR;
use std::process::{Command, Output};

const PG_TEST: &str = "store_postgres::reopening_a_current_schema_keeps_the_data";

/// This test binary running only [`PG_TEST`], without a PostgreSQL server.
fn run_pg_test_without_server(require: Option<&str>) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([PG_TEST, "--exact", "--test-threads=1"])
        .env_remove(URL_VAR)
        .env_remove(REQUIRE_VAR);
    if let Some(require) = require {
        cmd.env(REQUIRE_VAR, require);
    }
    cmd.output().unwrap()
}

#[test]
fn a_skipped_test_is_counted_at_the_end() {
    let out = run_pg_test_without_server(None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        text(&out.stdout).contains("1 passed"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains(&format!("SKIPPED {PG_TEST}: {URL_VAR} is not set")),
        "{stderr}"
    );
    let last = stderr.trim_end().lines().rev().take(2).collect::<Vec<_>>();
    assert!(last[1].starts_with("1 test skipped"), "{stderr}");
    assert!(last[0].contains("1 × postgres"), "{stderr}");
}

#[test]
fn a_required_component_makes_its_skip_a_failure() {
    for require in ["postgres", "chromium,postgres"] {
        let out = run_pg_test_without_server(Some(require));
        assert!(!out.status.success(), "{}", text(&out.stdout));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("1 failed"), "{stdout}");
        assert!(
            stdout.contains(&format!("{REQUIRE_VAR} requires postgres")),
            "{stdout}"
        );
    }
    // Another component required: the skip stays a skip.
    let out = run_pg_test_without_server(Some("chromium"));
    assert!(out.status.success(), "{}", text(&out.stdout));
}
