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
    assert!(last[1].starts_with("1 test skipped, not run"), "{stderr}");
    assert!(last[1].contains("1 fewer passed"), "{stderr}");
    assert!(last[0].contains("1 × postgres"), "{stderr}");
}

/// `cargo test` runs this binary last, so its skip count ends the output: no doc tests
/// after it (the library's are off), and no other integration test binary.
#[test]
fn the_skip_count_is_the_last_thing_cargo_test_prints() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let lib = manifest
        .split("\n[")
        .find(|section| section.starts_with("lib]"))
        .expect("a [lib] section");
    assert!(
        lib.lines().any(|l| l.replace(' ', "") == "doctest=false"),
        "[lib] must say doctest = false: {lib}"
    );
    assert!(!manifest.contains("[[test]]"), "another test target");
    let targets: Vec<_> = std::fs::read_dir(root.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs") || p.join("main.rs").exists())
        .collect();
    assert_eq!(targets, [root.join("tests/it")], "{targets:?}");
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
