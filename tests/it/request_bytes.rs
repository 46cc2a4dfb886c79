//! The bytes of every request body stay what they were: the prompt cache is keyed on
//! them. A long session (an imported transcript carrying its own cache marks, tool
//! calls, a turn of 21 parallel calls, thinking, a reply cut at `max_tokens`, retries
//! after 529s, a wake) is replayed against the fake server, and each body is compared
//! with the fixture recorded before the request body was built by concatenation.
//!
//! `FLOWER_BLESS_FIXTURES=1` rewrites the fixture (only when the bytes are meant to
//! change, which they never are within a session).

use crate::support;
use crate::support::Flower;

use flower::stores::project_key;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use support::{FakeServer, Reply};
use tempfile::TempDir;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/request_bodies.json"
);
const SESSION: &str = "7d1f0c3e-5a2b-4c6d-9e8f-0a1b2c3d4e5f";

fn ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// FNV-1a, 64 bits: a stable digest without a dependency.
fn fnv(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// An imported transcript with five cache marks of its own (more than a request may
/// carry, so the oldest are dropped), a string prompt and a thinking block.
fn imported(dir: &Path) -> std::path::PathBuf {
    let mut lines = Vec::new();
    let mut parent: Option<String> = None;
    let mut push = |kind: &str, message: Value, n: usize| {
        let uuid = format!("00000000-0000-4000-8000-{n:012}");
        lines.push(json!({
            "parentUuid": parent,
            "isSidechain": false,
            "type": kind,
            "message": message,
            "uuid": uuid,
            "timestamp": "2026-11-03T09:12:04.117Z",
            "cwd": "/home/me/proj",
            "sessionId": SESSION,
        }));
        parent = Some(uuid);
    };
    let mark = || json!({"type": "ephemeral"});
    push(
        "user",
        json!({"role": "user", "content": "先看看 \"目录\"\n然后说"}),
        1,
    );
    push(
        "assistant",
        json!({"id": "msg_old_1", "type": "message", "role": "assistant", "model": "claude-fake",
               "content": [{"type": "thinking", "thinking": "想一想", "signature": "c2ln"},
                           {"type": "text", "text": "好的", "cache_control": mark()},
                           {"type": "tool_use", "id": "toolu_old_1", "name": "Bash",
                            "input": {"command": "echo 甲"}, "cache_control": mark()}],
               "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}}),
        2,
    );
    push(
        "user",
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_old_1",
               "content": [{"type": "text", "text": "甲\n", "cache_control": mark()}],
               "is_error": false}]}),
        3,
    );
    push(
        "assistant",
        json!({"id": "msg_old_2", "type": "message", "role": "assistant", "model": "claude-fake",
               "content": [{"type": "text", "text": "看完了\u{1F600} \\ \t", "cache_control": mark()}],
               "stop_reason": "end_turn", "usage": {"input_tokens": 12, "output_tokens": 6}}),
        4,
    );
    push(
        "user",
        json!({"role": "user", "content": [{"type": "text", "text": "再来", "cache_control": mark()}]}),
        5,
    );
    push(
        "assistant",
        json!({"id": "msg_old_3", "type": "message", "role": "assistant", "model": "claude-fake",
               "content": [{"type": "text", "text": "嗯"}],
               "stop_reason": "end_turn", "usage": {"input_tokens": 14, "output_tokens": 2}}),
        6,
    );
    let path = dir.join("imported.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

/// The replies of the first wake: tools, 21 parallel calls, thinking, `max_tokens`,
/// and 529s that are retried.
fn first_wake() -> Vec<Reply> {
    let mut many = Reply::tool_use("Read", json!({"file_path": "f0.txt"}));
    for i in 1..21 {
        many = many.then_tool_use("Read", json!({"file_path": format!("f{i}.txt")}));
    }
    let mut replies = vec![
        Reply::tool_use("Bash", json!({"command": "echo 乙"})),
        Reply::thinking("先读文件", "c2lnMg==")
            .then_tool_use("Read", json!({"file_path": "a.txt"})),
        Reply::overloaded(),
        Reply::tool_use(
            "Write",
            json!({"file_path": "b.txt", "content": "丙\n\"引号\"\n"}),
        ),
        many,
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::tool_use("Read", json!({"file_path": "b.txt"})),
    ];
    for i in 0..12 {
        replies.push(Reply::tool_use(
            "Bash",
            json!({"command": format!("echo 第{i}步")}),
        ));
    }
    replies.push(Reply::text("写到一半").stop_reason("max_tokens"));
    replies.push(Reply::text("写完了"));
    replies
}

fn second_wake() -> Vec<Reply> {
    vec![
        Reply::tool_use("Read", json!({"file_path": "a.txt"})),
        Reply::overloaded(),
        Reply::text("又看了一遍"),
    ]
}

#[test]
fn request_bodies_are_byte_identical_across_a_long_session() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "甲乙丙\n第二行\n").unwrap();
    for i in 0..21 {
        std::fs::write(root.join(format!("f{i}.txt")), format!("文件 {i}\n")).unwrap();
    }
    let project = project_key(&root);
    let source = imported(&root);
    let import = Flower::bin()
        .command()
        .current_dir(&root)
        .args(["store", "import"])
        .arg(&source)
        .arg(format!("--project-key={project}"))
        .args(["--session-id", SESSION])
        .output()
        .unwrap();
    ok(&import);

    let mut replies = first_wake();
    replies.extend(second_wake());
    let server = FakeServer::start(replies);
    server.simulate_cache();
    let out = Flower::new(&["once", "接着做", "--json", "--resume", SESSION])
        .server(&server)
        .dir(&root)
        .attempts(4)
        .no_delay()
        .output();
    assert_eq!(ok(&out)["result"], "写到一半写完了");
    let out = Flower::new(&["once", "再看一遍 a.txt", "--json", "--resume", SESSION])
        .server(&server)
        .dir(&root)
        .attempts(4)
        .no_delay()
        .output();
    assert_eq!(ok(&out)["result"], "又看了一遍");

    let here = root.to_string_lossy().into_owned();
    let bodies: Vec<Value> = server
        .requests()
        .iter()
        .map(|r| {
            let body = r.raw_body.replace(&here, "<DIR>");
            json!({"len": body.len(), "fnv": fnv(body.as_bytes())})
        })
        .collect();
    let got = json!({"bodies": bodies});
    if std::env::var_os("FLOWER_BLESS_FIXTURES").is_some() {
        std::fs::write(FIXTURE, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let (got, want) = (
        got["bodies"].as_array().unwrap(),
        want["bodies"].as_array().unwrap(),
    );
    assert_eq!(got.len(), want.len(), "number of requests");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "request {i}'s body changed");
    }
}

/// The messages of a long made-up history, in every shape the body builder treats
/// apart: string contents, cache marks of their own (on blocks and nested in tool
/// results), thinking, empty text, turns of more than 20 blocks.
fn made_up_history(n: usize) -> Vec<Value> {
    let mark = || json!({"type": "ephemeral"});
    let mut messages = Vec::new();
    for i in 0..n {
        let message = if i % 2 == 0 {
            match i % 14 {
                0 => json!({"role": "user", "content": format!("第 {i} 个问题 \"引号\" \\ \n")}),
                4 => json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": format!("t{}", i - 1),
                     "content": [{"type": "text", "text": "嵌套", "cache_control": mark()}]}]}),
                6 => json!({"role": "user", "content": (0..22).map(|k| json!(
                    {"type": "tool_result", "tool_use_id": format!("t{i}_{k}"), "content": format!("r{k}")}
                )).collect::<Vec<_>>()}),
                8 => {
                    json!({"role": "user", "content": [{"type": "text", "text": "标记", "cache_control": mark()}]})
                }
                _ => json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": format!("t{}", i - 1), "content": "ok", "is_error": false}]}),
            }
        } else {
            match i % 10 {
                1 => json!({"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "想", "signature": "s"},
                    {"type": "text", "text": ""}]}),
                3 => json!({"role": "assistant", "content": [
                    {"type": "text", "text": format!("回答 {i}"), "cache_control": mark()},
                    {"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"command": "ls"}}]}),
                5 => json!({"role": "assistant", "content": (0..21).map(|k| json!(
                    {"type": "tool_use", "id": format!("t{i}_{k}"), "name": "Read", "input": {"file_path": k.to_string()}}
                )).collect::<Vec<_>>()}),
                _ => json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {"command": format!("echo {i}")}}]}),
            }
        };
        messages.push(message);
    }
    messages
}

/// The same at the library's surface: the body of every prefix of a made-up history,
/// with and without a system prompt and tools (which change the marks' budget).
#[test]
fn request_bodies_of_every_history_prefix_are_unchanged() {
    use flower::model::anthropic::request_body;
    use flower::model::{MessagesRequest, Thinking, ToolDef};
    let history = made_up_history(120);
    let tool = ToolDef {
        name: "Bash".into(),
        description: "runs".into(),
        input_schema: flower::content::Raw::of_tree(&json!({"type": "object"})),
    };
    let mut digests = Vec::new();
    for (system, tools) in [("", vec![]), ("系统", vec![tool.clone()])] {
        for n in 1..=history.len() {
            let request = MessagesRequest {
                system_shared: String::new(),
                model: "claude-sonnet-4-5".into(),
                max_tokens: 1000,
                system: system.into(),
                messages: crate::support::history(history[..n].to_vec()),
                tools: tools.clone(),
                thinking: (n % 3 == 0).then_some(Thinking::Budget(1024)),
                ..MessagesRequest::default()
            };
            let body = request_body(&request);
            digests.push(json!({"len": body.len(), "fnv": fnv(&body)}));
        }
    }
    let path = FIXTURE.replace("request_bodies", "request_bodies_library");
    let got = json!({"bodies": digests});
    if std::env::var_os("FLOWER_BLESS_FIXTURES").is_some() {
        std::fs::write(&path, serde_json::to_string(&got).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (got, want) = (
        got["bodies"].as_array().unwrap(),
        want["bodies"].as_array().unwrap(),
    );
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "body {i} changed");
    }
}
