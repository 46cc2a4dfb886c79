//! The spec's quiet fresh starts (a lineage that cannot be read, sessions no longer in
//! the store) stay quiet in the pipeline, but lose nothing and leave a trace: the
//! unreadable `lineage.json` is kept as `lineage.json.corrupt-<time>`, `flower state`
//! (and `flower -v`) say why this wake starts afresh, a 0-byte `sessions.db` is said to
//! be empty rather than taken for a missing one, and `flower --new` on a `sessions.db`
//! that cannot be opened changes nothing.

use crate::support::FakeServer;
use crate::support::pipeline::{Project, finished_run, text};
use serde_json::Value;

fn state(project: &Project, server: &FakeServer, json: bool) -> String {
    let args: &[&str] = if json {
        &["state", "--json"]
    } else {
        &["state"]
    };
    let out = project.run(server, args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn corrupt_files(project: &Project) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(project.dir.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("lineage.json.corrupt-"))
        .collect()
}

#[test]
fn an_unreadable_lineage_is_said_and_kept_aside_when_the_run_starts_afresh() {
    let (project, server) = finished_run();
    let garbage = b"{\"workspace\": \"/x\", \"woke\": 3, \"steps\": {\"\xe5\xb9\xb2";
    std::fs::write(project.dir.join("runs/lineage.json"), garbage).unwrap();

    let said = state(&project, &server, false);
    assert!(
        said.contains("从头开始:runs/lineage.json 读不出来"),
        "{said}"
    );
    let json: Value = serde_json::from_str(&state(&project, &server, true)).unwrap();
    assert_eq!(json["afresh"][0]["why"], "lineage_unreadable", "{json:#}");

    // The wake starts afresh in silence (as the spec says), says why with -v, and
    // keeps the garbage.
    let out = project.run(&server, &["-v", "再加一句"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("从头开始:runs/lineage.json 读不出来"),
        "{stderr}"
    );
    let kept = corrupt_files(&project);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), garbage);
    assert!(project.json("runs/lineage.json")["steps"].is_object());
    // Nothing more to say afterwards.
    assert!(!state(&project, &server, false).contains("从头开始"));
}

#[test]
fn a_zero_byte_sessions_db_is_said_to_be_empty_not_missing() {
    let (project, server) = finished_run();
    project.replace_sessions_db(b"");
    let said = state(&project, &server, false);
    assert!(
        said.contains("从头开始:血缘记着的会话不在了(干活 "),
        "{said}"
    );
    assert!(said.contains("runs/sessions.db 是空的(0 字节)"), "{said}");
    let json: Value = serde_json::from_str(&state(&project, &server, true)).unwrap();
    let gone = &json["afresh"][0];
    assert_eq!(gone["why"], "sessions_gone");
    assert_eq!(gone["store"]["kind"], "empty");
    assert_eq!(gone["store"]["bytes"], 0);

    // Deleted outright it is missing, and said so.
    std::fs::remove_file(project.dir.join("runs/sessions.db")).unwrap();
    let said = state(&project, &server, false);
    assert!(said.contains("runs/sessions.db 不存在"), "{said}");
}

#[test]
fn new_on_a_sessions_db_that_cannot_be_opened_changes_nothing() {
    let (project, server) = finished_run();
    project.replace_sessions_db(b"this is not a database, it is garbage");
    let lineage = project.read("runs/lineage.json");
    let brief = project.read("notes/需求.md");
    let requests = server.request_count();

    let out = project.run(&server, &["--new", "另一件事"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("不是 SQLite 数据库"), "{stderr}");
    assert_eq!(project.read("runs/lineage.json"), lineage);
    assert_eq!(project.read("notes/需求.md"), brief);
    assert!(!project.dir.join("notes/archive").exists());
    assert_eq!(server.request_count(), requests);
}

#[test]
fn a_moved_directory_is_said_to_have_another_directory_s_lineage() {
    let (project, server) = finished_run();
    let moved = project.home.join("moved");
    std::fs::rename(&project.dir, &moved).unwrap();
    let out = project
        .command(&server, &["state"])
        .current_dir(&moved)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        said.contains("从头开始:runs/lineage.json 是另一个目录(") && said.contains("/proj)的"),
        "{said}"
    );
}
