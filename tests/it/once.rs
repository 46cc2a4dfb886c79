//! `flower once` against the fake Messages API: the real binary, end to end.

use crate::support;

use crate::support::Flower;
use serde_json::{Value, json};
use std::process::Output;
use support::pipeline::flower_in as flower;
use support::{FakeServer, Reply};
use tempfile::TempDir;

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// The spec's minimal example: the model reads seed.txt, then answers with its word.
#[test]
fn reads_the_seed_and_prints_the_word() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "向日葵\n").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
        Reply::text("向日葵"),
    ]);
    let out = flower(
        &server,
        dir.path(),
        &[
            "once",
            "读 seed.txt,只回文件里那个词。",
            "--allowed-tools",
            "Read",
            "Glob",
        ],
    );
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "向日葵");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Only the allowed tools are offered.
    assert_eq!(requests[0].tool_names(), vec!["Read", "Glob"]);
    // The second request carries the file's content as the Read result.
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(results[0].to_string().contains("向日葵"), "{results:?}");
    assert_eq!(results[0]["is_error"], json!(false));
    // The summary line names the session and the turns.
    assert!(stderr(&out).contains("2 轮"), "{}", stderr(&out));
    // `once` writes no lineage and no manifest rows.
    assert!(!dir.path().join("runs/lineage.json").exists());
    assert!(!dir.path().join("runs/manifest.json").exists());
    assert!(dir.path().join("runs/sessions.db").exists());
}

#[test]
fn json_output_has_every_field() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好的").usage(120, 7)]);
    let out = flower(
        &server,
        dir.path(),
        &["once", "说好的", "--json", "--model", "claude-unknown-9"],
    );
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let v = json_of(&out);
    for field in [
        "session_id",
        "result",
        "is_error",
        "num_turns",
        "total_cost_usd",
        "usage",
        "permission_denials",
        "duration_ms",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["result"], "好的");
    assert_eq!(v["is_error"], false);
    assert_eq!(v["num_turns"], 1);
    assert_eq!(v["usage"]["input_tokens"], 120);
    assert_eq!(v["usage"]["output_tokens"], 7);
    assert!(uuid::Uuid::parse_str(v["session_id"].as_str().unwrap()).is_ok());
    // An unknown model's cost is unknown, not guessed.
    assert_eq!(v["total_cost_usd"], Value::Null);
}

#[test]
fn known_model_has_a_cost() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("ok").usage(1_000_000, 0)]);
    let out = flower(
        &server,
        dir.path(),
        &["once", "hi", "--json", "--model", "claude-sonnet-4-5"],
    );
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let v = json_of(&out);
    let cost = v["total_cost_usd"].as_f64().expect("a cost");
    assert!(
        (cost - 3.0).abs() < 1e-9,
        "1M input tokens of Sonnet 4.5 cost $3, got {cost}"
    );
    assert_eq!(server.requests()[0].model(), "claude-sonnet-4-5");
}

#[test]
fn resume_continues_the_same_session_and_fork_leaves_it_alone() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("第一句"),
        Reply::text("第二句"),
        Reply::text("分叉"),
        Reply::text("第三句"),
    ]);
    let first = json_of(&flower(&server, dir.path(), &["once", "一", "--json"]));
    let id = first["session_id"].as_str().unwrap().to_string();

    let second = json_of(&flower(
        &server,
        dir.path(),
        &["once", "二", "--json", "--resume", &id],
    ));
    assert_eq!(second["session_id"], id.as_str());
    let sent = server.requests()[1].messages().to_vec();
    assert_eq!(sent.len(), 3, "history + the new prompt: {sent:?}");
    assert_eq!(sent[0]["content"][0]["text"], "一");
    assert_eq!(sent[1]["content"][0]["text"], "第一句");
    assert_eq!(sent[2]["content"][0]["text"], "二");

    let fork = json_of(&flower(
        &server,
        dir.path(),
        &["once", "叉", "--json", "--resume", &id, "--fork"],
    ));
    let fork_id = fork["session_id"].as_str().unwrap();
    assert_ne!(fork_id, id);
    assert_eq!(server.requests()[2].messages().len(), 5);

    // The original never saw the fork's turn.
    json_of(&flower(
        &server,
        dir.path(),
        &["once", "三", "--json", "--resume", &id],
    ));
    let sent = server.requests()[3].messages().to_vec();
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert!(!Value::Array(sent).to_string().contains("分叉"));
}

#[test]
fn denied_calls_are_reported_and_the_session_goes_on() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Bash", json!({"command": "git status; rm -rf ~"})),
        Reply::text("好吧"),
    ]);
    let out = flower(
        &server,
        dir.path(),
        &[
            "once",
            "看看状态",
            "--json",
            "--allowed-tools",
            "Bash(git status:*)",
        ],
    );
    let v = json_of(&out);
    assert_eq!(v["is_error"], false);
    let denials = v["permission_denials"].as_array().unwrap();
    assert_eq!(denials.len(), 1);
    assert_eq!(denials[0]["tool_name"], "Bash");
    let results = server.requests()[1].tool_results();
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Permission to use ")
    );
}

#[test]
fn max_turns_stops_and_says_so() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Glob", json!({"pattern": "*"})),
        Reply::tool_use("Glob", json!({"pattern": "*"})),
        Reply::text("never reached"),
    ]);
    let out = flower(
        &server,
        dir.path(),
        &["once", "loop", "--json", "--max-turns", "2"],
    );
    assert!(!out.status.success());
    let v = json_of(&out);
    assert_eq!(v["is_error"], true);
    assert_eq!(v["num_turns"], 2);
    assert!(v["result"].as_str().unwrap().contains("max_turns"), "{v}");
    assert_eq!(server.request_count(), 2);
}

#[test]
fn missing_api_key_is_a_clear_error_before_any_network_use() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(dir.path())
        .env_remove("ANTHROPIC_API_KEY")
        .args(["once", "hi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("ANTHROPIC_API_KEY"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.connections(), 0);
    assert!(
        !dir.path().join("runs").exists(),
        "nothing is created without a key"
    );
}

#[test]
fn a_fatal_api_error_fails_with_its_message() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]);
    let out = flower(&server, dir.path(), &["once", "hi"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("invalid x-api-key"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.request_count(), 1);
}

/// A tool call whose streamed input is not valid JSON (a reply cut by max_tokens
/// mid-call) becomes an error result; the session goes on.
#[test]
fn a_tool_call_with_broken_json_input_gets_an_error_result() {
    let dir = TempDir::new().unwrap();
    let event = |name: &str, data: Value| (name.to_string(), data.to_string());
    let broken = Reply::events(vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude-fake", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": "{\"file_path\": \"a.txt\", \"content\": \"hal"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 5}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]);
    let server = FakeServer::start(vec![broken, Reply::text("我重来")]);
    let out = flower(&server, dir.path(), &["once", "写 a.txt", "--json"]);
    let v = json_of(&out);
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["result"], "我重来");
    assert!(!dir.path().join("a.txt").exists(), "nothing was run");
    let second = &server.requests()[1];
    let results = second.tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert_eq!(results[0]["is_error"], true);
    // Cut by max_tokens: said so, with the parse error of what arrived.
    let body = results[0]["content"].as_str().unwrap();
    assert!(
        body.contains("cut off") && body.contains("max_tokens"),
        "{body}"
    );
    assert!(body.contains("nothing was run"), "{body}");
    // The call itself went back to the API as an object, so the request is valid.
    assert!(second.messages()[1]["content"][0]["input"].is_object());
}

/// `--disallowed-tools` and the settings files' deny rules bind the sub-agent a Task
/// starts: its denied calls are refused (the files stay), a whole-tool deny is not
/// even offered to it, and the denials are counted with the run's.
#[test]
fn disallowed_tools_bind_the_subagent_a_task_starts() {
    let project = support::pipeline::Project::new();
    std::fs::write(project.dir.join("victim.txt"), "keep me").unwrap();
    std::fs::write(project.dir.join("notes.txt"), "hello\n").unwrap();
    std::fs::create_dir_all(project.dir.join(".claude")).unwrap();
    std::fs::write(
        project.dir.join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Edit(notes.txt)"]}}"#,
    )
    .unwrap();
    let edit = json!({"file_path": "notes.txt", "old_string": "h", "new_string": "H"});
    let task = json!({"description": "清理", "prompt": "删掉 victim.txt,改 notes.txt"});
    let server = FakeServer::start(vec![
        Reply::tool_use("Task", task),
        // The sub-agent's turns.
        Reply::tool_use("Bash", json!({"command": "rm victim.txt"}))
            .then_tool_use("Edit", edit)
            .then_tool_use("Bash", json!({"command": "echo ran > made.txt"})),
        Reply::text("删不掉,也改不了"),
        // The caller's.
        Reply::text("子代理说做不了"),
    ]);
    let out = project.run(
        &server,
        &[
            "once",
            "清理一下",
            "--json",
            "--disallowed-tools",
            "Bash(rm:*)",
            "Write",
        ],
    );
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // The sub-agent's first request: its own task, no Write (nor Task) offered.
    assert_eq!(requests[1].first_prompt(), "删掉 victim.txt,改 notes.txt");
    let offered = requests[1].tool_names();
    assert!(!offered.contains(&"Write".to_string()), "{offered:?}");
    assert!(offered.contains(&"Bash".to_string()), "{offered:?}");
    let results = requests[2].tool_results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0]["is_error"], true, "{}", results[0]);
    assert!(
        results[0].to_string().contains("Bash(rm:*)"),
        "{}",
        results[0]
    );
    assert_eq!(results[1]["is_error"], true, "{}", results[1]);
    assert!(
        results[1].to_string().contains("Edit(notes.txt)"),
        "{}",
        results[1]
    );
    assert_eq!(project.read("victim.txt"), "keep me");
    assert_eq!(project.read("notes.txt"), "hello\n");
    // The control: what no rule covers runs in the sub-agent.
    assert_eq!(results[2]["is_error"], false, "{}", results[2]);
    assert_eq!(project.read("made.txt").trim(), "ran");
    let v = json_of(&out);
    assert_eq!(
        v["permission_denials"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
}
