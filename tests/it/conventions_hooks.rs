//! Hooks from the settings files, each event with a real script through the binary:
//! what the hook gets on stdin (Claude Code's fields, a readable `transcript_path`),
//! exit 2 blocking with stderr fed to the model, JSON answers honoured, context added,
//! timeouts and crashes told to the person without losing the turn, hooks confined by
//! the sandbox, outcomes stored in the transcript (without breaking the alternation of
//! messages) and shown by `flower show`.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::pipeline::{Project, text};
use support::{FakeServer, Recorded, Reply};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Writes the hook script `name` (bash) into the project; returns its command.
fn script(project: &Project, name: &str, body: &str) -> String {
    let path = project.dir.join(format!(".claude/hooks/{name}.sh"));
    write(&path, &format!("#!/bin/bash\n{body}\n"));
    format!("bash \"$CLAUDE_PROJECT_DIR/.claude/hooks/{name}.sh\"")
}

/// A script that saves its input to `<event>.jsonl` in the workspace, then runs `then`.
fn recording(project: &Project, name: &str, then: &str) -> String {
    script(
        project,
        name,
        &format!("input=$(cat)\necho \"$input\" >> \"$CLAUDE_PROJECT_DIR/{name}.jsonl\"\n{then}"),
    )
}

/// `.claude/settings.json` with these hooks: `(event, matcher, command, timeout)`.
fn hooks(project: &Project, list: &[(&str, &str, &str, Option<f64>)]) {
    let mut events = serde_json::Map::new();
    for (event, matcher, command, timeout) in list {
        let mut hook = json!({"type": "command", "command": command});
        if let Some(t) = timeout {
            hook["timeout"] = json!(t);
        }
        let groups = events
            .entry(event.to_string())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap();
        groups.push(json!({"matcher": matcher, "hooks": [hook]}));
    }
    write(
        &project.dir.join(".claude/settings.json"),
        &json!({"hooks": events}).to_string(),
    );
}

/// The inputs a recording hook saved.
fn inputs(project: &Project, name: &str) -> Vec<Value> {
    project
        .read(&format!("{name}.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every request's messages alternate user / assistant, starting with the user, and
/// no text comes between tool results.
fn assert_well_formed(requests: &[Recorded]) {
    for req in requests {
        let messages = req.messages();
        for (i, m) in messages.iter().enumerate() {
            let want = if i % 2 == 0 { "user" } else { "assistant" };
            assert_eq!(m["role"], want, "message {i} of request {}", req.index);
            let blocks = m["content"].as_array().unwrap();
            if let Some(last_result) = blocks.iter().rposition(|b| b["type"] == "tool_result") {
                assert!(
                    blocks[..last_result]
                        .iter()
                        .all(|b| b["type"] == "tool_result"),
                    "text between tool results in request {}: {m}",
                    req.index
                );
            }
        }
    }
}

fn once_json(
    project: &Project,
    server: &FakeServer,
    args: &[&str],
) -> (std::process::Output, Value) {
    let mut all = vec!["once", "--json"];
    all.extend_from_slice(args);
    let out = project.run(server, &all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

#[test]
fn pre_tool_use_exit_2_blocks_the_call_and_the_model_reads_stderr() {
    let project = Project::new();
    let guard = recording(
        &project,
        "PreToolUse",
        "case \"$input\" in *forbidden*) echo 'forbidden files are off limits' >&2; exit 2;; esac",
    );
    hooks(&project, &[("PreToolUse", "Write|Edit", &guard, None)]);
    let server = FakeServer::start(vec![
        Reply::tool_use(
            "Write",
            json!({"file_path": "forbidden.txt", "content": "x"}),
        ),
        Reply::tool_use("Write", json!({"file_path": "ok.txt", "content": "fine"})),
        Reply::tool_use("Read", json!({"file_path": "ok.txt"})),
        Reply::text("完"),
    ]);
    let (out, v) = once_json(&project, &server, &["go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(!project.dir.join("forbidden.txt").exists());
    assert_eq!(project.read("ok.txt"), "fine");
    let requests = server.requests();
    let blocked = &requests[1].tool_results()[0];
    assert_eq!(blocked["is_error"], true);
    let said = blocked["content"].as_str().unwrap();
    assert!(
        said.contains("PreToolUse hook blocked") && said.contains("forbidden files are off limits"),
        "{said}"
    );
    assert_well_formed(&requests);

    // What the hook got: Claude Code's fields; the matcher kept Read out.
    let seen = inputs(&project, "PreToolUse");
    assert_eq!(seen.len(), 2, "{seen:?}");
    let session = v["session_id"].as_str().unwrap();
    let first = &seen[0];
    assert_eq!(first["hook_event_name"], "PreToolUse");
    assert_eq!(first["session_id"], session);
    assert_eq!(first["cwd"], project.dir.display().to_string());
    assert_eq!(first["tool_name"], "Write");
    assert_eq!(first["tool_input"]["file_path"], "forbidden.txt");
    assert!(first["tool_use_id"].as_str().unwrap().starts_with("toolu_"));
    // Claude Code's order, and the call's input as the model wrote it.
    assert_eq!(
        support::object_keys(first),
        [
            "session_id",
            "transcript_path",
            "cwd",
            "permission_mode",
            "hook_event_name",
            "tool_name",
            "tool_input",
            "tool_use_id"
        ]
    );
    let line = project.read("PreToolUse.jsonl");
    assert!(
        line.contains(r#""tool_input":{"file_path":"forbidden.txt","content":"x"},"tool_use_id""#),
        "{line}"
    );
    // transcript_path is a JSONL file of the session as stored, current when read.
    let transcript = Path::new(seen[1]["transcript_path"].as_str().unwrap());
    let lines: Vec<Value> = std::fs::read_to_string(transcript)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().all(|e| e["sessionId"] == session));
    assert!(
        lines.iter().any(|e| e["subtype"] == "hook"),
        "the first call's hook record is in it"
    );

    // Stored in the transcript and shown by `flower show`.
    let show = project.run(&server, &["show", session]);
    let shown = text(&show.stdout);
    assert!(
        shown.contains("[hook") && shown.contains("PreToolUse:Write 的 hook 拦下了它"),
        "{shown}"
    );
    assert!(
        shown.contains("退出码 2") && shown.contains("forbidden files are off limits"),
        "{shown}"
    );

    // A resumed session is fed a well-formed history.
    let server = FakeServer::start(vec![Reply::text("接着")]);
    let (out, _) = once_json(&project, &server, &["--resume", session, "再来"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_well_formed(&server.requests());
}

#[test]
fn json_answers_deny_allow_ask_and_add_context() {
    let project = Project::new();
    let pre = script(
        &project,
        "pre",
        r#"input=$(cat)
case "$input" in
  *deny.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"json says no"}}';;
  *allow.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}';;
  *ask.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"check this one"}}';;
esac"#,
    );
    let post = script(
        &project,
        "post",
        r#"input=$(cat)
case "$input" in
  *allow.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"formatted allow.txt"}}';;
  *plain.txt*) echo 'lint: trailing space' >&2; exit 2;;
esac"#,
    );
    write(
        &project.dir.join(".claude/settings.json"),
        &json!({
            "permissions": {"ask": ["Write(allow.txt)"]},
            "hooks": {
                "PreToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": pre}]}],
                "PostToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": post}]}]
            }
        })
        .to_string(),
    );
    let server = FakeServer::start(vec![
        Reply::tool_use("Write", json!({"file_path": "deny.txt", "content": "x"}))
            .then_tool_use("Write", json!({"file_path": "allow.txt", "content": "x"}))
            .then_tool_use("Write", json!({"file_path": "ask.txt", "content": "x"}))
            .then_tool_use("Write", json!({"file_path": "plain.txt", "content": "x"})),
        Reply::text("完"),
    ]);
    let (out, _) = once_json(&project, &server, &["go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_well_formed(&requests);
    let results = requests[1].tool_results();
    let body = |i: usize| results[i]["content"].as_str().unwrap().to_string();
    assert!(body(0).contains("json says no"), "{}", body(0));
    assert!(!project.dir.join("deny.txt").exists());
    // `allow` lifts the ask rule (nobody could have answered it).
    assert_eq!(results[1]["is_error"], false, "{}", body(1));
    assert!(project.dir.join("allow.txt").exists());
    // `ask` with nobody at the terminal: denied, and the model is told why.
    assert!(body(2).contains("check this one") && body(2).contains("nobody is at the terminal"));
    assert_eq!(results[3]["is_error"], false);
    // Context and feedback follow the last tool result, in the same user message.
    let last = requests[1].messages().last().unwrap().clone();
    let texts: Vec<&str> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    let joined = texts.join("\n");
    assert!(
        joined.contains("PostToolUse:Write hook additional context:\nformatted allow.txt"),
        "{joined}"
    );
    assert!(
        joined.contains("PostToolUse:Write hook feedback:\nlint: trailing space"),
        "{joined}"
    );
}

#[test]
fn user_prompt_submit_adds_context_or_blocks_the_prompt() {
    let project = Project::new();
    let hook = recording(
        &project,
        "UserPromptSubmit",
        "case \"$input\" in *secret*) echo 'no secrets in prompts' >&2; exit 2;; esac\necho '今天是周五'",
    );
    hooks(&project, &[("UserPromptSubmit", "", &hook, None)]);
    let server = FakeServer::start(vec![Reply::text("好")]);
    let (out, _) = once_json(&project, &server, &["写点东西"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let first = &server.requests()[0];
    let content = first.messages()[0]["content"].clone();
    assert_eq!(content[0]["text"], "写点东西");
    assert!(
        content[1]["text"].as_str().unwrap().contains("今天是周五"),
        "{content}"
    );
    assert_eq!(
        inputs(&project, "UserPromptSubmit")[0]["prompt"],
        "写点东西"
    );

    // Blocked: nothing is sent, the person is told why.
    let server = FakeServer::start(vec![]);
    let (out, v) = once_json(&project, &server, &["my secret is 42"]);
    assert!(!out.status.success());
    assert_eq!(server.request_count(), 0);
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("no secrets in prompts"),
        "{v}"
    );
}

#[test]
fn stop_and_subagent_stop_hooks_send_the_agent_back_once() {
    let project = Project::new();
    // Blocks the first stop only (stop_hook_active is then true), as Claude Code's
    // documentation recommends.
    let body = |who: &str| {
        format!(
            "input=$(cat)\necho \"$input\" >> \"$CLAUDE_PROJECT_DIR/{who}.jsonl\"\ncase \"$input\" in *'\"stop_hook_active\":true'*) exit 0;; esac\necho 'run the tests first ({who})' >&2; exit 2"
        )
    };
    let stop = script(&project, "Stop", &body("Stop"));
    let sub = script(&project, "SubagentStop", &body("SubagentStop"));
    hooks(
        &project,
        &[("Stop", "", &stop, None), ("SubagentStop", "", &sub, None)],
    );
    let server = FakeServer::with_handler(|req, _| {
        let sub = req.system().contains("sub-agent");
        let last = req.last_user_text();
        match (sub, req.messages().len()) {
            (false, 1) => Reply::tool_use("Task", json!({"description": "d", "prompt": "do it"})),
            (true, _) if last.contains("run the tests first (SubagentStop)") => {
                Reply::text("sub: tests pass")
            }
            (true, _) => Reply::text("sub: done"),
            (false, _) if last.contains("run the tests first (Stop)") => {
                Reply::text("main: tests pass")
            }
            (false, _) => Reply::text("main: done"),
        }
    });
    let (out, v) = once_json(&project, &server, &["go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(v["result"], "main: tests pass", "{v}");
    // The sub-agent went on once too, and its caller got the final report.
    let requests = server.requests();
    assert_well_formed(&requests);
    let task_result = requests
        .iter()
        .flat_map(|r| r.tool_results())
        .next()
        .unwrap();
    assert_eq!(task_result["content"], "sub: tests pass");
    let stops = inputs(&project, "Stop");
    assert_eq!(stops.len(), 2);
    assert_eq!(stops[0]["stop_hook_active"], false);
    assert_eq!(stops[1]["stop_hook_active"], true);
    assert_eq!(stops[0]["last_assistant_message"], "main: done");
    let subs = inputs(&project, "SubagentStop");
    assert_eq!(subs.len(), 2);
    assert_eq!(subs[0]["hook_event_name"], "SubagentStop");
    // The sub-agent's stop names its agent; the main agent's has no such field.
    assert!(subs[0]["agent_type"].is_string(), "{:?}", subs[0]);
    assert!(stops[0].get("agent_type").is_none(), "{:?}", stops[0]);
}

#[test]
fn session_start_says_startup_then_resume_and_session_end_runs() {
    let project = Project::new();
    let start = recording(&project, "SessionStart", "echo \"约定:先读 README\"");
    let end = recording(&project, "SessionEnd", "");
    hooks(
        &project,
        &[
            ("SessionStart", "startup|resume", &start, None),
            ("SessionEnd", "", &end, None),
        ],
    );
    let server = FakeServer::start(vec![Reply::text("好"), Reply::text("又好")]);
    let (out, v) = once_json(&project, &server, &["第一句"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let session = v["session_id"].as_str().unwrap().to_string();
    let first = &server.requests()[0];
    let opening = first.messages()[0]["content"].clone();
    assert!(
        opening[0]["text"]
            .as_str()
            .unwrap()
            .contains("约定:先读 README"),
        "context before the prompt: {opening}"
    );
    assert_eq!(opening[1]["text"], "第一句");
    let (out, _) = once_json(&project, &server, &["--resume", &session, "第二句"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let starts = inputs(&project, "SessionStart");
    let sources: Vec<&str> = starts
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["startup", "resume"]);
    assert!(starts.iter().all(|s| s["session_id"] == session.as_str()));
    let ends = inputs(&project, "SessionEnd");
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[0]["reason"], "other");
    assert_well_formed(&server.requests());
}

#[test]
fn a_hook_that_hangs_crashes_or_fails_is_a_message_and_the_turn_goes_on() {
    let project = Project::new();
    let hang = script(&project, "hang", "sleep 30");
    // A program that dies of SIGSEGV (the hook's own shell may be the init of its
    // sandbox's PID namespace, which no signal of its own kills).
    let crash = script(
        &project,
        "crash",
        "cat > /dev/null; bash -c 'kill -SEGV $$'",
    );
    let fail = script(&project, "fail", "echo 'broken hook' >&2; exit 1");
    hooks(
        &project,
        &[
            ("PreToolUse", "Write", &hang, Some(1.0)),
            ("PreToolUse", "Write", &crash, None),
            ("PostToolUse", "Write", &fail, None),
        ],
    );
    let server = FakeServer::start(vec![
        Reply::tool_use("Write", json!({"file_path": "a.txt", "content": "written"})),
        Reply::text("完"),
    ]);
    let started = Instant::now();
    let out = project.run(&server, &["once", "go"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the hang was cut at its timeout"
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(project.read("a.txt"), "written");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("超时(1 秒),已杀掉"), "{stderr}");
    assert!(stderr.contains("崩溃了(信号 11"), "{stderr}");
    assert!(
        stderr.contains("出错(退出码 1)") && stderr.contains("broken hook"),
        "{stderr}"
    );
    // The model saw an ordinary result; the transcript has the record.
    let result = &server.requests()[1].tool_results()[0];
    assert_eq!(result["is_error"], false, "{result}");
    let session = stderr
        .split("-- 会话 ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the session line");
    let show = text(&project.run(&server, &["show", session]).stdout);
    assert!(
        show.contains("超时") && show.contains("退出码 139") && show.contains("退出码 1"),
        "{show}"
    );
}

#[test]
fn hooks_run_in_the_agents_sandbox() {
    if !crate::sandbox::landlock_or_skip() {
        return;
    }
    let project = Project::new();
    // Outside the workspace and the temp directories (which the sandbox lets write).
    let scratch = crate::sandbox::scratch();
    let outside = scratch.path().join("outside.txt");
    let hook = script(
        &project,
        "touch",
        &format!(
            "cat > /dev/null; touch '{}'; touch \"$CLAUDE_PROJECT_DIR/inside.txt\"; exit 0",
            outside.display()
        ),
    );
    hooks(&project, &[("PreToolUse", "", &hook, None)]);
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "x.txt"})),
        Reply::text("完"),
    ]);
    std::fs::write(project.dir.join("x.txt"), "x").unwrap();
    let (out, _) = once_json(&project, &server, &["go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        project.dir.join("inside.txt").exists(),
        "the workspace is writable"
    );
    assert!(!outside.exists(), "outside the workspace is not");

    // An agent without Write or Edit (the judge's case) gets a read-only workspace
    // for its hooks too.
    std::fs::remove_file(project.dir.join("inside.txt")).unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "x.txt"})),
        Reply::text("完"),
    ]);
    let (out, _) = once_json(
        &project,
        &server,
        &["--allowed-tools", "Read", "Bash", "--", "go"],
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(!project.dir.join("inside.txt").exists());
}

#[test]
fn pre_compact_runs_before_a_handoff_and_the_successor_starts_as_compact() {
    let project = Project::new();
    let pre = recording(&project, "PreCompact", "");
    let start = recording(&project, "SessionStart", "");
    hooks(
        &project,
        &[
            ("PreCompact", "auto", &pre, None),
            ("SessionStart", "compact", &start, None),
        ],
    );
    let doc = crate::handoff::model_doc();
    let server = {
        let doc = doc.clone();
        FakeServer::with_handler(move |req, _| crate::handoff::script(req, &doc))
    };
    let out = project.run(&server, &["写个 hello 脚本"]);
    crate::handoff::succeeded(&out);
    let compacts = inputs(&project, "PreCompact");
    assert_eq!(compacts.len(), 1, "{compacts:?}");
    let compact = &compacts[0];
    assert_eq!(compact["hook_event_name"], "PreCompact");
    assert_eq!(compact["trigger"], "auto");
    assert_eq!(compact["handoff"]["step"], "干活");
    assert_eq!(compact["handoff"]["generation"], 2);
    let row = project
        .manifest()
        .into_iter()
        .rfind(|r| r["step"] == "干活")
        .unwrap();
    let retired = row["retired"][0].as_str().unwrap();
    assert_eq!(compact["session_id"], retired);
    // Only the successor's start matched `compact`.
    let starts = inputs(&project, "SessionStart");
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0]["source"], "compact");
    assert_eq!(
        starts[0]["session_id"],
        project.json("runs/lineage.json")["steps"]["干活"]
    );
    // The record is in the retiring session's transcript.
    let show = text(&project.run(&server, &["show", retired]).stdout);
    assert!(show.contains("PreCompact:auto 的 hook 跑过了"), "{show}");
}
