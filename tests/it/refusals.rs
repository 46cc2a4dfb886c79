//! Refusals come before anything is written (issue #41.2, #41.11): exit 2 promises that
//! nothing moved, and a refusal says only what is true.

use crate::support;

use support::pipeline::{Project, finished_run, text};

/// `flower --new` with no prompt and nobody at a terminal is refused before the last
/// run is archived: the run still continues.
#[test]
fn new_without_a_task_and_no_terminal_archives_nothing() {
    let (project, server) = finished_run();
    let before = server.request_count();
    let out = project.run(&server, &["--new"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("已归档"), "{stderr}");
    assert!(!project.dir.join("notes/archive").exists());
    assert!(project.dir.join("notes/需求.md").exists());
    assert_eq!(server.request_count(), before);
    let state = project.run(&server, &["state"]);
    assert!(
        text(&state.stdout).contains("接得上:是"),
        "{}",
        text(&state.stdout)
    );
}
