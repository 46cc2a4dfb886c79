//! Faults described rightly (issue #41.9): a corrupt `sessions.db` or `lineage.json`
//! is named for what it is by `state`, `log` and the run, and a wake that cannot
//! continue the conversation does not say it does.

use crate::support;

use support::pipeline::{finished_run, text};

/// `sessions.db` overwritten by bytes that are no SQLite file, as large as it was.
fn corrupt_sessions_db(project: &support::pipeline::Project) {
    let len = std::fs::metadata(project.dir.join("runs/sessions.db"))
        .unwrap()
        .len();
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    project.replace_sessions_db(&garbage);
}

#[test]
fn a_corrupt_sessions_db_is_called_unreadable_not_empty_by_state() {
    let (project, server) = finished_run();
    corrupt_sessions_db(&project);
    let out = project.run(&server, &["state"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("接得上:否"), "{stdout}");
    assert!(stdout.contains("sessions.db 读不出来"), "{stdout}");
    assert!(stdout.contains("不是 SQLite 数据库"), "{stdout}");
    assert!(!stdout.contains("是空的"), "{stdout}");
}

#[test]
fn log_still_lists_the_manifest_when_sessions_db_is_corrupt() {
    let (project, server) = finished_run();
    let rows = project.manifest().len();
    corrupt_sessions_db(&project);
    let out = project.run(&server, &["log"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // Shown, and exit 1: the totals are not the whole run's.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains("  请求 ")).count(),
        rows,
        "{stdout}"
    );
    assert!(stdout.contains("合计:"), "{stdout}");
    assert!(stderr.contains("sessions.db"), "{stderr}");
    assert!(stderr.contains("manifest.json"), "{stderr}");
}

/// The run refuses before its banner, and says the cause once.
#[test]
fn a_run_on_a_corrupt_sessions_db_refuses_before_claiming_a_continuation() {
    let (project, server) = finished_run();
    corrupt_sessions_db(&project);
    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stdout.contains("接上上次"), "{stdout}");
    assert!(stderr.contains("不是 SQLite 数据库"), "{stderr}");
    assert!(
        !stderr.contains("Error code 26"),
        "the cause twice: {stderr}"
    );
    assert_eq!(
        stderr.lines().last(),
        Some("什么都没发给模型。"),
        "the hint ends the message: {stderr}"
    );
    assert_eq!(server.request_count(), before);
}

/// A broken lineage.json: the silent fresh start of the page, kept aside, and a banner
/// that does not call it a continuation.
#[test]
fn a_corrupt_lineage_starts_fresh_without_claiming_a_continuation() {
    let (project, server) = finished_run();
    std::fs::write(project.dir.join("runs/lineage.json"), "{\"steps\": [tru").unwrap();
    let out = project.run(&server, &["--again"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let banner = stdout.lines().next().unwrap_or_default();
    assert!(banner.starts_with("<- 在 ~/proj "), "{stdout}");
    assert!(!banner.contains("接上上次"), "{banner}");
    assert!(banner.contains("开新对话"), "{banner}");
    assert!(!stdout.contains("<- 接上次"), "{stdout}");
    let kept = std::fs::read_dir(project.dir.join("runs"))
        .unwrap()
        .any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("lineage.json.corrupt-")
        });
    assert!(kept, "the broken file is kept aside");
}

/// `flower state -r DIR` for a run directory that does not exist: nothing to continue.
#[test]
fn state_of_a_missing_run_directory_cannot_continue() {
    let (project, server) = finished_run();
    let out = project.run(&server, &["state", "-r", "nodir"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("接得上:否"), "{stdout}");
    assert!(stdout.contains("nodir 不存在"), "{stdout}");
}
