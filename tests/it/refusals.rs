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

/// `once --resume` of a session that does not exist: the error, and no session footer
/// naming a session that never was.
#[test]
fn once_resume_of_an_unknown_session_prints_no_footer() {
    let project = Project::new();
    let server = support::FakeServer::with_handler(|req, _| support::pipeline::simple_reply(req));
    let out = project.run(&server, &["once", "hi", "--resume", "nosuch-id"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("nosuch-id"), "{stderr}");
    assert!(!stderr.contains("-- 会话"), "{stderr}");
    assert_eq!(server.request_count(), 0);
}

/// `state` sends nothing to any model: a store it cannot open is not told as if it
/// could have.
#[test]
fn state_on_a_store_it_cannot_open_does_not_speak_of_the_model() {
    let project = Project::new();
    let out = project.run(
        &support::FakeServer::start(vec![]),
        &[
            "state",
            "--store",
            "postgres://flower:wrong@127.0.0.1:1/flower",
        ],
    );
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("打不开存储"), "{stderr}");
    assert!(!stderr.contains("模型"), "{stderr}");
}
