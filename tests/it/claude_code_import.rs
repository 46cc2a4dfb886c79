//! A real Claude Code transcript shape through `flower store import` and
//! `flower once --resume`: the `parentUuid` chain from the leaf reaches the first
//! prompt before and after the resume, and the model is sent only the conversation.
//!
//! The fixture is a Claude Code 2.1.332 session: `permission-mode` and
//! `file-history-snapshot` lines, `attachment` lines (nested memory, skill listing, an
//! edited file) and `system` `api_error` retry lines inside the chain, a split assistant
//! message, two tool calls, `turn_duration` lines, a request that failed after its
//! retries (the synthetic `isApiErrorMessage` assistant line), and `ai-title` and
//! `last-prompt` lines (no uuid) at the end.

use crate::support;

use crate::support::Flower;
use flower::stores::project_key;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use support::pipeline::flower_in as flower;
use support::{FakeServer, Reply};
use tempfile::TempDir;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/claude_code_2.1.332_session.jsonl"
);
const SESSION: &str = "4f1c9a2e-8d3b-4e6f-a1c7-2b9d5e8f0a13";
const FIRST_PROMPT: &str = "greet.sh 里的问候改成 hello";
/// The last line of the fixture that has a uuid (a `turn_duration` line after the
/// failed request).
const LAST_LINK: &str = "1bac9eab-cfcd-4bea-8d9e-bcdecafcde18";

fn store(dir: &Path, args: &[&str]) -> Value {
    let out = Flower::bin()
        .command()
        .arg("store")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The text of a user entry's message (a string, or its text blocks).
fn text(entry: &Value) -> String {
    crate::support::content_text(&entry["message"]["content"])
}

/// Walks `parentUuid` back from the last entry that has a uuid, as Claude Code does
/// from the leaf. Panics on a link to nothing or a cycle; returns the entries from the
/// leaf to the root.
fn walk_from_leaf(entries: &[Value]) -> Vec<Value> {
    let by_uuid: HashMap<&str, &Value> = entries
        .iter()
        .filter_map(|e| Some((e["uuid"].as_str()?, e)))
        .collect();
    let mut entry: &Value = entries
        .iter()
        .rev()
        .find(|e| e["uuid"].is_string())
        .expect("an entry with a uuid");
    let mut walked = vec![entry.clone()];
    while let Some(parent) = entry["parentUuid"].as_str() {
        entry = by_uuid
            .get(parent)
            .copied()
            .unwrap_or_else(|| panic!("parentUuid {parent} points at nothing"));
        assert!(walked.len() <= entries.len(), "a cycle through {parent}");
        walked.push(entry.clone());
    }
    walked
}

fn assert_reaches_first_prompt(walked: &[Value]) {
    let root = walked.last().unwrap();
    assert_eq!(root["type"], "user", "{root}");
    assert_eq!(text(root), FIRST_PROMPT);
}

#[test]
fn the_chain_from_the_leaf_reaches_the_first_prompt_before_and_after_a_resume() {
    let dir = TempDir::new().unwrap();
    let project = project_key(dir.path());
    let key = format!("{project}/{SESSION}");

    // The project key starts with '-': it goes with `=`.
    let report = store(
        dir.path(),
        &[
            "import",
            FIXTURE,
            &format!("--project-key={project}"),
            "--session-id",
            SESSION,
        ],
    );
    assert_eq!(report["lines"], 25);
    // 18 lines with a uuid (attachment and system lines included) and 3 summary lines;
    // permission-mode and the file-history snapshots are left out.
    assert_eq!(report["taken"], 21);
    assert_eq!(report["skipped"], 4);
    assert_eq!(report["malformed"], 0);

    let stored = store(dir.path(), &["load", &key]);
    let stored = stored.as_array().unwrap();
    let walked = walk_from_leaf(stored);
    assert_reaches_first_prompt(&walked);
    // The file is one chain: every line with a uuid is on it.
    assert_eq!(walked.len(), 18);
    for kind in ["attachment", "system"] {
        assert!(walked.iter().any(|e| e["type"] == kind), "no {kind} link");
    }
    // What a resume is fed stays walkable too (the failed request is pruned and its
    // child relinked to its parent).
    let pruned = store(dir.path(), &["load", &key, "--pruned"]);
    let pruned_walk = walk_from_leaf(pruned.as_array().unwrap());
    assert_reaches_first_prompt(&pruned_walk);
    assert!(
        !pruned_walk
            .iter()
            .any(|e| e["isApiErrorMessage"] == Value::Bool(true))
    );

    let server = FakeServer::start(vec![Reply::text("加好了")]);
    let result = json_of(&flower(
        &server,
        dir.path(),
        &[
            "once",
            "继续,把 bye 那行加上",
            "--json",
            "--resume",
            SESSION,
        ],
    ));
    assert_eq!(result["session_id"], SESSION);

    // The model was sent the conversation: user/assistant messages only, alternating,
    // the prompt that failed and the new one in one user message.
    let sent = server.requests()[0].messages().to_vec();
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    for message in &sent {
        let mut keys: Vec<&String> = message.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["content", "role"], "{message}");
    }
    assert_eq!(sent[0]["content"][0]["text"], FIRST_PROMPT);
    assert_eq!(sent[1]["content"][1]["type"], "tool_use");
    assert_eq!(sent[2]["content"][0]["type"], "tool_result");
    let last: Vec<&str> = sent[6]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(last, ["再加一行 echo bye", "继续,把 bye 那行加上"]);
    let sent_text = Value::Array(sent).to_string();
    for leaked in ["项目约定", "写提交说明", "API Error", "Overloaded", "retry"] {
        assert!(
            !sent_text.contains(leaked),
            "{leaked} was sent: {sent_text}"
        );
    }

    // flower's turns hang below the last line that has a uuid, and the chain from the
    // new leaf runs through them back to the first prompt.
    let stored = store(dir.path(), &["load", &key]);
    let stored = stored.as_array().unwrap();
    let prompt = stored
        .iter()
        .find(|e| e["type"] == "user" && text(e) == "继续,把 bye 那行加上")
        .expect("the resumed prompt is stored");
    assert_eq!(prompt["parentUuid"], LAST_LINK);
    assert_eq!(prompt["sessionId"], SESSION);
    let walked = walk_from_leaf(stored);
    assert_reaches_first_prompt(&walked);
    assert_eq!(walked.len(), 20, "flower's two entries, then the file's 18");
    assert_eq!(walked[0]["type"], "assistant");
    assert_eq!(walked[0]["message"]["content"][0]["text"], "加好了");
    assert_eq!(walked[1]["uuid"], prompt["uuid"]);
    assert_eq!(walked[2]["uuid"], LAST_LINK);
}

/// The leaf a resume continues from skips lines without a uuid and old sub-agent
/// entries kept in a main transcript; any other line with a uuid is a link.
#[test]
fn the_resume_leaf_is_the_last_main_chain_entry_with_a_uuid() {
    use flower::transcript::resume_leaf;
    use serde_json::json;
    let entries = [
        json!({"type": "user", "uuid": "u1", "parentUuid": null}),
        json!({"type": "attachment", "uuid": "a1", "parentUuid": "u1"}),
        json!({"type": "assistant", "uuid": "s1", "parentUuid": null, "isSidechain": true}),
        json!({"type": "last-prompt", "lastPrompt": "hi", "leafUuid": "a1"}),
        json!({"type": "file-history-snapshot", "messageId": "u1"}),
    ];
    let entries = crate::support::typed(&entries);
    assert_eq!(resume_leaf(&entries), Some("a1"));
    assert_eq!(resume_leaf(&entries[3..]), None);
    assert_eq!(resume_leaf(&[]), None);
}
