//! Helpers shared by the store tests: transcript builders and a directory snapshot.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

pub fn user_text(uuid: &str, parent: Option<&str>, text: &str) -> Value {
    json!({
        "type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": "sess",
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/proj", "isSidechain": false,
        "message": {"role": "user", "content": text}
    })
}

pub fn user_blocks(uuid: &str, parent: Option<&str>, blocks: Vec<Value>) -> Value {
    json!({
        "type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": "sess",
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/proj", "isSidechain": false,
        "message": {"role": "user", "content": blocks}
    })
}

pub fn assistant(uuid: &str, parent: Option<&str>, blocks: Vec<Value>) -> Value {
    json!({
        "type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": "sess",
        "timestamp": "2026-01-01T00:00:01.000Z", "cwd": "/work/proj", "isSidechain": false,
        "message": {
            "id": format!("msg_{uuid}"), "role": "assistant", "model": "claude-test",
            "content": blocks, "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5}
        }
    })
}

pub fn api_error(uuid: &str, parent: Option<&str>) -> Value {
    json!({
        "type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": "sess",
        "isApiErrorMessage": true,
        "message": {
            "role": "assistant", "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: Can't reach the API server"}],
            "usage": {"input_tokens": 0, "output_tokens": 0}
        }
    })
}

pub fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

pub fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

pub fn bash(id: &str, command: &str) -> Value {
    tool_use(id, "Bash", json!({"command": command}))
}

pub fn tool_result(id: &str, content: &str, is_error: bool) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
}

/// Every file in a directory: name → (bytes, mtime). Comparing two snapshots proves
/// nothing was created, removed, written or touched.
pub type Snapshot = BTreeMap<String, (Vec<u8>, std::time::SystemTime)>;

pub fn snapshot(dir: &Path) -> Snapshot {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes, meta.modified().unwrap()),
            )
        })
        .collect()
}

/// Messages as the engine builds them: user/assistant entries in order, consecutive
/// same-role entries merged, string content turned into a text block.
pub fn to_messages(entries: &[Value]) -> Vec<(String, Vec<Value>)> {
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    for e in entries {
        let Some(role) = e["type"]
            .as_str()
            .filter(|t| *t == "user" || *t == "assistant")
        else {
            continue;
        };
        let blocks = match &e["message"]["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            other => panic!("bad content {other}"),
        };
        match messages.last_mut() {
            Some((r, b)) if r == role => b.extend(blocks),
            _ => messages.push((role.to_string(), blocks)),
        }
    }
    messages
}

/// Asserts what the Messages API requires of a conversation: first message from the
/// user, roles alternating, no empty message, every tool_use answered by a tool_result
/// in the next message, no tool_result that does not answer the message before.
pub fn assert_api_valid(entries: &[Value]) {
    let messages = to_messages(entries);
    if messages.is_empty() {
        return;
    }
    assert_eq!(
        messages[0].0, "user",
        "first message must be user: {entries:#?}"
    );
    for (i, (role, blocks)) in messages.iter().enumerate() {
        assert!(!blocks.is_empty(), "empty message {i}");
        if i > 0 {
            assert_ne!(role, &messages[i - 1].0, "roles must alternate");
        }
        let calls: Vec<&str> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["id"].as_str().unwrap())
            .collect();
        if role == "assistant" {
            assert!(
                blocks.iter().any(|b| b["type"] != "thinking"),
                "assistant message {i} has only thinking"
            );
            if !calls.is_empty() {
                let next = messages.get(i + 1).unwrap_or_else(|| {
                    panic!("tool_use {calls:?} unanswered at the end: {entries:#?}")
                });
                for id in &calls {
                    let n = next
                        .1
                        .iter()
                        .filter(|b| b["type"] == "tool_result" && b["tool_use_id"] == *id)
                        .count();
                    assert_eq!(n, 1, "tool_use {id} must be answered exactly once");
                }
            }
        } else {
            let prev_calls: Vec<&str> = if i > 0 {
                messages[i - 1]
                    .1
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].as_str().unwrap())
                    .collect()
            } else {
                Vec::new()
            };
            for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                let id = b["tool_use_id"].as_str().unwrap();
                assert!(prev_calls.contains(&id), "orphan tool_result {id}");
            }
        }
    }
}

/// Asserts that the entries with a uuid form one chain, in order: the first has no
/// parent, each other one's parent is the entry before it.
pub fn assert_single_chain(entries: &[Value]) {
    let chain: Vec<&Value> = entries.iter().filter(|e| e["uuid"].is_string()).collect();
    for (i, e) in chain.iter().enumerate() {
        let expected = if i == 0 {
            Value::Null
        } else {
            chain[i - 1]["uuid"].clone()
        };
        assert_eq!(
            e["parentUuid"], expected,
            "entry {i} ({}) is not linked to the one before it",
            e["uuid"]
        );
    }
}
