//! What each request of a session carries, turn after turn, through the real `flower`
//! binary. The engine lends a session's history to each request instead of copying it
//! (see `Engine::drive_inner`); these tests prove nothing is lost or mixed up that way:
//! every request holds the whole history so far, and a sub-agent's own requests neither
//! see nor disturb the parent's.

use crate::support;

use serde_json::{Value, json};
use std::process::Output;
use support::pipeline::{flower_in as flower, without_cache_marks};
use support::{FakeServer, Recorded, Reply};
use tempfile::TempDir;

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn messages(request: &Recorded) -> Vec<Value> {
    request.messages().iter().map(without_cache_marks).collect()
}

fn role(message: &Value) -> &str {
    message["role"].as_str().unwrap_or("")
}

/// Asserts that `later` starts with all of `earlier`'s messages, unchanged.
fn assert_extends(earlier: &[Value], later: &[Value], what: &str) {
    assert!(
        later.len() > earlier.len(),
        "{what}: {} messages, then {}",
        earlier.len(),
        later.len()
    );
    for (i, (a, b)) in earlier.iter().zip(later).enumerate() {
        assert_eq!(a, b, "{what}: message {i} changed");
    }
}

#[test]
fn every_request_carries_the_whole_history_so_far() {
    const CALLS: usize = 6;
    let dir = TempDir::new().unwrap();
    for i in 0..CALLS {
        std::fs::write(dir.path().join(format!("f{i}.txt")), format!("内容 {i}\n")).unwrap();
    }
    let mut script: Vec<Reply> = (0..CALLS)
        .map(|i| Reply::tool_use("Read", json!({"file_path": format!("f{i}.txt")})))
        .collect();
    script.push(Reply::text("读完了"));
    let server = FakeServer::start(script);
    let out = flower(
        &server,
        dir.path(),
        &["once", "把六个文件都读一遍", "--allowed-tools", "Read"],
    );
    assert!(out.status.success(), "stderr: {}", stderr(&out));

    let requests = server.requests();
    assert_eq!(requests.len(), CALLS + 1);
    for (i, request) in requests.iter().enumerate() {
        let sent = messages(request);
        // The prompt, then an assistant call and a user result per earlier turn.
        assert_eq!(sent.len(), 2 * i + 1, "request {i}: {sent:?}");
        assert_eq!(sent[0]["content"][0]["text"], "把六个文件都读一遍");
        for (j, message) in sent.iter().enumerate() {
            let want = if j % 2 == 0 { "user" } else { "assistant" };
            assert_eq!(role(message), want, "request {i}, message {j}");
        }
        if i > 0 {
            // The newest message is the result of the previous turn's Read.
            let results = request.tool_results();
            assert_eq!(results.len(), 1, "request {i}");
            assert!(
                results[0].to_string().contains(&format!("内容 {}", i - 1)),
                "request {i}: {results:?}"
            );
            assert_extends(&messages(&requests[i - 1]), &sent, "consecutive requests");
        }
        // The system prompt, the tools and the model are the same on every turn.
        assert_eq!(request.system(), requests[0].system());
        assert_eq!(request.body["tools"], requests[0].body["tools"]);
        assert_eq!(request.body["model"], requests[0].body["model"]);
        assert_eq!(request.tool_names(), ["Read"]);
    }
}

/// A sub-agent (`Task`) runs its own conversation between two turns of its parent:
/// the sub-agent's requests hold only its own history, and the parent's next request
/// holds the parent's whole history plus the sub-agent's report.
#[test]
fn a_sub_agent_neither_sees_nor_disturbs_the_parents_history() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "向日葵\n").unwrap();
    let server = FakeServer::with_handler(|request, _| {
        let is_sub = request.system().contains("sub-agent of a coding harness");
        match (is_sub, request.messages().len()) {
            (false, 1) => Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
            (false, 3) => Reply::tool_use(
                "Task",
                json!({"description": "read the seed", "prompt": "读 seed.txt,报告那个词"}),
            ),
            (true, 1) => Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
            (true, 3) => Reply::text("子代理报告:向日葵"),
            (false, 5) => Reply::text("完成"),
            (sub, n) => Reply::error(
                400,
                "invalid_request_error",
                format!("unexpected request (sub-agent: {sub}, {n} messages)"),
            ),
        }
    });
    let out = flower(&server, dir.path(), &["once", "派个子代理去读"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "完成");

    let requests = server.requests();
    let (sub, main): (Vec<&Recorded>, Vec<&Recorded>) = requests
        .iter()
        .partition(|r| r.system().contains("sub-agent of a coding harness"));
    assert_eq!(main.len(), 3, "parent requests");
    assert_eq!(sub.len(), 2, "sub-agent requests");
    // The sub-agent starts from its own prompt only, and continues its own history.
    let sub_first = messages(sub[0]);
    assert_eq!(sub_first.len(), 1);
    assert_eq!(sub_first[0]["content"][0]["text"], "读 seed.txt,报告那个词");
    assert_extends(&sub_first, &messages(sub[1]), "sub-agent requests");
    // The parent's requests each extend the one before, across the sub-agent's run.
    assert_extends(&messages(main[0]), &messages(main[1]), "parent requests");
    let last = messages(main[2]);
    assert_extends(
        &messages(main[1]),
        &last,
        "parent requests around the sub-agent",
    );
    assert_eq!(last.len(), 5);
    assert!(
        main[2].tool_results()[0]
            .to_string()
            .contains("子代理报告:向日葵"),
        "{:?}",
        main[2].tool_results()
    );
    // Nothing of the sub-agent's conversation leaks into the parent's.
    let sub_last = messages(sub[1]);
    assert!(
        !last.iter().any(|m| sub_last.contains(m)),
        "parent: {last:?}\nsub-agent: {sub_last:?}"
    );
    assert!(main[2].tool_names().contains(&"Task".to_string()));
    assert!(!sub[1].tool_names().contains(&"Task".to_string()));
}
