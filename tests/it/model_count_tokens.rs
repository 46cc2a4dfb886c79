//! Counting before sending (`/v1/messages/count_tokens`), through the binary against
//! the fake: a huge tool result that would carry the next request past the handoff
//! threshold is counted and handed off before it is sent; a count that fails changes
//! nothing; a wake counts once.

use crate::support;

use serde_json::json;
use support::pipeline::{Agent, Project, agent_of, simple_reply, text, turn_of};
use support::{CountTokens, FakeServer, Recorded, Reply};

const DOC: &str = "notes/交接/干活-1.md";

fn model_doc() -> String {
    let mut doc = String::from("# 交接书\n\n");
    for section in flower::continuity::handoff::SECTIONS {
        doc.push_str(&format!("## {section}\n模型写的「{section}」。\n\n"));
    }
    doc
}

fn is_successor(req: &Recorded) -> bool {
    agent_of(req) == Agent::Coordinator && req.first_prompt().contains("你接手这一步")
}

fn asks_for_handoff(req: &Recorded) -> bool {
    req.messages()
        .iter()
        .any(|m| m["role"] == "user" && m["content"].to_string().contains("这一步要换代"))
}

/// The first coordinator session reads a big file at a small reported context; the
/// file's text alone carries the next request past the threshold.
fn script(req: &Recorded) -> Reply {
    match agent_of(req) {
        Agent::Coordinator if is_successor(req) => Reply::text("接手后做完了。").usage(4_000, 100),
        Agent::Coordinator if asks_for_handoff(req) => {
            if req.last_user_text().contains("这一步要换代") {
                Reply::tool_use("Write", json!({"file_path": DOC, "content": model_doc()}))
                    .usage(3_000, 100)
            } else {
                Reply::text("交接书写好了。").usage(3_000, 100)
            }
        }
        Agent::Coordinator => match turn_of(req) {
            0 => Reply::tool_use("Read", json!({"file_path": "big.txt"})).usage(3_000, 100),
            _ => Reply::text("做完了。").usage(3_000, 100),
        },
        _ => simple_reply(req),
    }
}

/// A project with a 90 KB file to read (about 22K tokens).
fn project() -> Project {
    let project = Project::new();
    let line = "x".repeat(89) + "\n";
    std::fs::write(project.dir.join("big.txt"), line.repeat(1000)).unwrap();
    project
}

/// The first session's requests after its first reply: what it sent next.
fn first_session_followups(server: &FakeServer) -> Vec<Recorded> {
    server
        .requests()
        .into_iter()
        .filter(|r| agent_of(r) == Agent::Coordinator && !is_successor(r) && turn_of(r) >= 1)
        .collect()
}

#[test]
fn a_huge_tool_result_is_counted_and_handed_off_before_it_is_sent() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| script(req));
    let out = project
        .command(&server, &["--handoff-at", "15000", "读一下 big.txt 再说"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let counts = server.count_requests();
    assert!(!counts.is_empty(), "the pending request was counted");
    // What was counted is the request that would have gone: it carries the file.
    assert!(
        counts
            .iter()
            .any(|c| c.to_string().contains(&"x".repeat(89)))
    );
    assert!(
        counts
            .iter()
            .all(|c| c.get("max_tokens").is_none() && c.get("stream").is_none())
    );
    // Nothing but the handoff ask went out of that session after the big result.
    let followups = first_session_followups(&server);
    assert!(!followups.is_empty());
    assert!(
        followups.iter().all(asks_for_handoff),
        "sent as a normal turn first"
    );
    assert!(project.dir.join(DOC).exists());
    assert!(server.requests().iter().any(is_successor));
}

#[test]
fn a_count_that_fails_changes_nothing() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| script(req));
    server.count_tokens(CountTokens::Fail(500));
    let out = project
        .command(&server, &["--handoff-at", "15000", "读一下 big.txt 再说"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!server.count_requests().is_empty());
    // As before counting existed: the next turn went out with the big result.
    let followups = first_session_followups(&server);
    assert!(
        followups.iter().any(|r| !asks_for_handoff(r)),
        "{}",
        followups.len()
    );
}

#[test]
fn a_wake_counts_once_and_a_small_prompt_goes_on() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = server.count_requests().len();
    let requests_before = server.request_count();
    let out = project.run(&server, &["再看一眼"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Each resumed session was counted once, before its first request; its turns
    // went on as usual.
    let counts = &server.count_requests()[before..];
    assert!(!counts.is_empty());
    let mut systems: Vec<String> = counts.iter().map(|c| c["system"].to_string()).collect();
    let all = systems.len();
    systems.sort();
    systems.dedup();
    assert_eq!(systems.len(), all, "a session counted twice");
    assert!(counts.iter().any(|c| c.to_string().contains("再看一眼")));
    assert!(server.request_count() > requests_before);
}
