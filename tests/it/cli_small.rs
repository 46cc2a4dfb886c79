//! The smaller promises of the command line (issue 29, item 7): a prompt from a file or
//! stdin, a wake with nothing to do after a passed judge, a refused second `flower` on a
//! PostgreSQL run that writes nothing, error text said once and in the interface's
//! language, `flower show` naming the steps it knows, `flower store sessions` without a
//! key, and a relative `-r` that would leave the workspace.

use crate::flow::{Script, held_first};
use crate::support::pipeline::{
    Agent, Project, REQUEST, agent_of, finished_run, simple_reply, text, turn_of,
};
use crate::support::postgres as pg;
use crate::support::{FakeServer, Gate, Reply};
use serde_json::Value;
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::Duration;

/// 5 MB: far beyond what one command-line argument may be (128 KB on Linux).
fn big_prompt() -> String {
    format!("开头标记\n{}\n结尾标记", "a".repeat(5 * 1024 * 1024))
}

#[test]
fn a_prompt_from_a_file_or_stdin_of_5_mb_reaches_the_model() {
    let project = Project::new();
    let server = FakeServer::with_handler(|_, _| Reply::text("好的。"));
    let prompt = big_prompt();
    std::fs::write(project.dir.join("prompt.txt"), &prompt).unwrap();
    let out = project.run(&server, &["once", "-f", "prompt.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(server.requests()[0].last_user_text(), prompt);

    // `-f -`: standard input.
    let mut child = project
        .command(&server, &["once", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let sent = prompt.clone();
    let writer = std::thread::spawn(move || stdin.write_all(sent.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(server.requests()[1].last_user_text(), prompt);

    // The pipeline takes it as the task.
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["-f", "prompt.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = &server.requests()[0];
    assert_eq!(agent_of(first), Agent::Clarifier);
    assert!(first.last_user_text().contains(&prompt));

    // A file that is not there is a usage error, before any request.
    let before = server.request_count();
    let out = project.run(&server, &["-f", "nowhere.txt"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("-f nowhere.txt"));
    let out = project.run(&server, &["-f", "prompt.txt", "also words"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(server.request_count(), before);
}

#[test]
fn a_wake_with_nothing_to_say_after_a_passed_judge_spends_nothing_and_says_what_to_type() {
    let (project, server) = finished_run();
    let manifest = project.read("runs/manifest.json");
    let lineage = project.read("runs/lineage.json");
    let requests = server.request_count();
    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("上次判定已经通过"), "{stderr}");
    assert!(stderr.contains("flower \"再加上……\""), "{stderr}");
    assert_eq!(server.request_count(), requests, "nothing spent");
    assert_eq!(project.read("runs/manifest.json"), manifest);
    assert_eq!(project.read("runs/lineage.json"), lineage);

    // Saying something goes on with the work.
    let out = project.run(&server, &["再加一行 world"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(server.request_count() > requests);
}

/// A `flower` on a run shared through the PostgreSQL store at `url`, held at its first
/// 干活 request.
fn holding_a_shared_run(url: &str) -> (Project, FakeServer, Gate, Child) {
    let project = Project::new();
    let script = Script::new(0);
    let (server, gate) = held_first(
        &script,
        |req| agent_of(req) == Agent::Coordinator && turn_of(req) == 0,
        "never delivered",
    );
    let first = project.spawn(&server, &["--store", url, REQUEST]);
    assert!(
        gate.wait_reached(Duration::from_secs(60)),
        "no 干活 request"
    );
    (project, server, gate, first)
}

fn let_go(mut first: Child, gate: Gate) {
    first.kill().unwrap();
    first.wait().unwrap();
    gate.open();
}

#[test]
fn a_second_flower_refused_by_the_database_writes_no_run_lock() {
    let Some(url) = pg::fresh_url() else { return };
    let (project, server, gate, first) = holding_a_shared_run(&url);
    // Another run directory of the same workspace: the same run in the database, no
    // run lock file of its own yet (as on another host).
    let out = project.run(&server, &["-r", "runs2", "--store", &url, "再加一句"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("另一个 flower 正在跑运行"), "{stderr}");
    assert!(!project.dir.join("runs2").exists(), "runs2 was created");
    let_go(first, gate);
}

/// In the holder's own run directory (its run lock file there) a second `flower` on the
/// same shared run is refused by the run lock, naming the local holder: the database is
/// asked first only where there is no run lock file yet.
#[test]
fn a_second_flower_in_the_holders_directory_is_refused_by_the_run_lock() {
    let Some(url) = pg::fresh_url() else { return };
    let (project, server, gate, first) = holding_a_shared_run(&url);
    let out = project.run(&server, &["--store", &url, "再加一句"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("另一个 flower 正在这里运行(pid {},", first.id())),
        "{stderr}"
    );
    let_go(first, gate);
}

#[test]
fn an_error_is_said_once_and_in_chinese() {
    let (project, server) = finished_run();
    project.replace_sessions_db(b"garbage garbage garbage garbage");
    let out = project.run(&server, &["--new", "另一件事"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("不是 SQLite 数据库").count(), 1, "{stderr}");
    assert!(
        stderr.contains("打不开存储") && stderr.contains("什么都没发给模型"),
        "{stderr}"
    );

    // The missing key, in the interface's language.
    let out = project
        .command(&server, &["once", "hi"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("没有设置 ANTHROPIC_API_KEY"), "{stderr}");
    assert!(!stderr.contains("is not set"), "{stderr}");
}

#[test]
fn show_of_an_unknown_step_lists_the_steps_it_knows() {
    let (project, server) = finished_run();
    let out = project.run(&server, &["show", "打扫"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("能看的步骤:"), "{stderr}");
    for step in ["干活", "确认需求", "设定目标", "干活·判定#1"] {
        assert!(stderr.contains(step), "{step}: {stderr}");
    }
}

#[test]
fn store_sessions_defaults_to_this_workspace() {
    let (project, server) = finished_run();
    let work = project.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();
    for command in ["sessions", "summaries"] {
        let out = project.run(&server, &["store", command]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(listed.is_array(), "{listed}");
        if command == "sessions" {
            assert!(listed.to_string().contains(&work), "{listed}");
        }
    }
}

#[test]
fn a_relative_run_dir_outside_the_workspace_is_refused_and_an_absolute_one_taken() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    for args in [
        vec!["-r", "../elsewhere", REQUEST],
        vec!["state", "-r", "../elsewhere"],
        vec!["once", "-r", "sub/../../elsewhere", "hi"],
    ] {
        let out = project.run(&server, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("写绝对路径"), "{stderr}");
    }
    assert!(!project.home.join("elsewhere").exists());
    assert_eq!(server.request_count(), 0);
    // Inside, or absolute and explicit: taken.
    let outside = project.home.join("elsewhere");
    let out = project.run(&server, &["state", "-r", outside.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = project.run(&server, &["state", "-r", "a/../runs"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
