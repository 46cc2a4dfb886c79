//! Pruning: each rule on a hand-made transcript, then a property test over random
//! transcripts with API errors, denials, interruptions, missing and stray results.
//!
//! Every pruned transcript is checked for the three invariants: one unbroken
//! `parentUuid` chain, a conversation the Messages API accepts, and idempotence.

use crate::store_support;
use crate::support::LoadJson;

use crate::support::is_synthesized_json as is_synthesized_result;
use crate::support::prune_json as prune;
use flower::stores::prune::{
    IMAGE_POINTER_PREFIX, INTERRUPTED_BODY, PruneOptions, STALE_BODY, TRIM_POINTER_PREFIX,
    is_denial_text, is_interruption_text, snapshot_command,
};
use flower::stores::{PruningSessionStore, SessionKey, SessionStore, SqliteSessionStore};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use store_support::{
    api_error, assert_api_valid, assert_single_chain, assistant, bash, text, tool_result, tool_use,
    user_blocks, user_text,
};

fn options() -> PruneOptions {
    PruneOptions::new(std::env::temp_dir().join("flower-prune-tests-unused"))
}

/// Prunes and checks the invariants every output must have.
fn pruned(entries: Vec<Value>, opts: &PruneOptions) -> Vec<Value> {
    let out = prune(entries, opts);
    assert_single_chain(&out);
    assert_api_valid(&out);
    assert_eq!(prune(out.clone(), opts), out, "pruning must be idempotent");
    out
}

fn uuids(entries: &[Value]) -> Vec<&str> {
    entries.iter().filter_map(|e| e["uuid"].as_str()).collect()
}

fn find<'a>(entries: &'a [Value], uuid: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["uuid"] == uuid)
        .unwrap_or_else(|| panic!("{uuid} missing"))
}

/// The tool_result block answering `id`, wherever it is.
pub(crate) fn result_for<'a>(entries: &'a [Value], id: &str) -> Option<&'a Value> {
    entries
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
}

fn has_call(entries: &[Value], id: &str) -> bool {
    entries
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .any(|b| b["type"] == "tool_use" && b["id"] == id)
}

#[test]
fn synthetic_api_errors_are_dropped_and_their_children_relinked() {
    let mut model_only = api_error("e2", Some("e1"));
    model_only
        .as_object_mut()
        .unwrap()
        .remove("isApiErrorMessage");
    let mut flag_only = api_error("e3", Some("e2"));
    flag_only["message"]["model"] = json!("claude-test");
    let input = vec![
        user_text("u1", None, "do it"),
        assistant("a1", Some("u1"), vec![bash("t1", "cargo build")]),
        user_blocks("u2", Some("a1"), vec![tool_result("t1", "built", false)]),
        api_error("e1", Some("u2")),
        model_only,
        flag_only,
        user_text("u3", Some("e3"), "上一轮在中途被打断,没有跑完。"),
        assistant("a2", Some("u3"), vec![text("done")]),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), ["u1", "a1", "u2", "u3", "a2"]);
    assert_eq!(find(&out, "u3")["parentUuid"], "u2");
}

/// Entry ids in the form flower mints (lowercase uuids) and in any other form (the
/// same uuid in capitals, Claude Code's or a hand-made id) relink as the exact text
/// they were written as, and the two forms of one uuid stay two ids.
#[test]
fn relinked_parents_keep_the_exact_text_of_any_id() {
    let lower = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
    let upper = lower.to_uppercase();
    let error = "0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3";
    let input = vec![
        user_text(lower, None, "do it"),
        assistant(&upper, Some(lower), vec![bash("t1", "cargo build")]),
        user_blocks("u2", Some(&upper), vec![tool_result("t1", "built", false)]),
        api_error(error, Some("u2")),
        api_error("E2", Some(error)),
        user_text("u3", Some("E2"), "继续"),
        assistant("a2", Some("u3"), vec![text("done")]),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), [lower, upper.as_str(), "u2", "u3", "a2"]);
    assert_eq!(find(&out, &upper)["parentUuid"], lower);
    assert_eq!(find(&out, "u2")["parentUuid"], upper.as_str());
    assert_eq!(find(&out, "u3")["parentUuid"], "u2");

    // Relinked past a removed entry to a parent whose id is in capitals.
    let input = vec![
        user_text(lower, None, "do it"),
        assistant(&upper, Some(lower), vec![text("ok")]),
        api_error(error, Some(&upper)),
        user_text("u3", Some(error), "继续"),
        assistant("a2", Some("u3"), vec![text("done")]),
    ];
    let out = pruned(input, &options());
    assert_eq!(find(&out, "u3")["parentUuid"], upper.as_str());

    // A removed entry's id in capitals is not the lowercase id of another entry.
    let input = vec![
        user_text(lower, None, "do it"),
        api_error(&upper, Some(lower)),
        user_text("u3", Some(&upper), "继续"),
        assistant("a2", Some("u3"), vec![text("done")]),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), [lower, "u3", "a2"]);
    assert_eq!(find(&out, "u3")["parentUuid"], lower);
}

fn denied_turn(n: u32, parent: &str, denial: &str) -> Vec<Value> {
    let a = format!("a{n}");
    let u = format!("r{n}");
    let id = format!("deny{n}");
    vec![
        assistant(&a, Some(parent), vec![bash(&id, "rm -rf build")]),
        user_blocks(&u, Some(&a), vec![tool_result(&id, denial, true)]),
    ]
}

fn denial_transcript() -> Vec<Value> {
    let mut t = vec![user_text("u0", None, "clean up")];
    t.extend(denied_turn(
        1,
        "u0",
        "Permission to use Bash with command rm -rf build has been denied.",
    ));
    t.extend(denied_turn(
        2,
        "r1",
        "Claude requested permissions to use Bash, but you haven't granted it yet.",
    ));
    // An allowed call whose output merely mentions approval is not a denial.
    t.push(assistant(
        "a3",
        Some("r2"),
        vec![text("trying another way"), bash("ok3", "git status")],
    ));
    t.push(user_blocks(
        "r3",
        Some("a3"),
        vec![tool_result(
            "ok3",
            "this change needs approval from a reviewer",
            false,
        )],
    ));
    t.extend(denied_turn(4, "r3", "This Bash command needs approval"));
    t.push(assistant("a5", Some("r4"), vec![text("giving up")]));
    t
}

#[test]
fn only_the_newest_denied_call_is_kept_by_default() {
    let out = pruned(denial_transcript(), &options());
    assert!(!has_call(&out, "deny1") && result_for(&out, "deny1").is_none());
    assert!(!has_call(&out, "deny2") && result_for(&out, "deny2").is_none());
    assert!(
        has_call(&out, "deny4") && result_for(&out, "deny4").is_some(),
        "the newest denial stays"
    );
    assert!(has_call(&out, "ok3") && result_for(&out, "ok3").is_some());
    // Entries left empty are gone; the chain skips them.
    assert_eq!(uuids(&out), ["u0", "a3", "r3", "a4", "r4", "a5"]);
    assert_eq!(find(&out, "a3")["parentUuid"], "u0");
}

#[test]
fn keep_denials_counts_pairs_from_the_newest() {
    for (keep, kept) in [
        (0, vec![]),
        (2, vec!["deny2", "deny4"]),
        (9, vec!["deny1", "deny2", "deny4"]),
    ] {
        let mut opts = options();
        opts.keep_denials = keep;
        let out = pruned(denial_transcript(), &opts);
        for id in ["deny1", "deny2", "deny4"] {
            let want = kept.contains(&id);
            assert_eq!(has_call(&out, id), want, "keep {keep}: tool_use {id}");
            assert_eq!(
                result_for(&out, id).is_some(),
                want,
                "keep {keep}: tool_result {id}"
            );
        }
    }
}

#[test]
fn a_denied_call_in_a_split_assistant_message_loses_its_own_entry_only() {
    // Claude Code writes one assistant message as several entries (same message.id).
    let mut thinking = assistant(
        "a1",
        Some("u0"),
        vec![json!({"type": "thinking", "thinking": "hmm", "signature": "s"})],
    );
    let mut denied = assistant("a2", Some("a1"), vec![bash("d1", "sudo rm x")]);
    let mut allowed = assistant(
        "a3",
        Some("a2"),
        vec![tool_use("t1", "Read", json!({"file_path": "/x"}))],
    );
    for e in [&mut thinking, &mut denied, &mut allowed] {
        e["message"]["id"] = json!("msg_same");
    }
    let input = vec![
        user_text("u0", None, "go"),
        thinking,
        denied,
        allowed,
        user_blocks(
            "r1",
            Some("a3"),
            vec![tool_result(
                "d1",
                "Permission to use Bash has been denied",
                true,
            )],
        ),
        user_blocks(
            "r2",
            Some("r1"),
            vec![tool_result("t1", "file body", false)],
        ),
        assistant("a4", Some("r2"), vec![bash("d2", "sudo rm y")]),
        user_blocks(
            "r3",
            Some("a4"),
            vec![tool_result(
                "d2",
                "Permission to use Bash has been denied",
                true,
            )],
        ),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), ["u0", "a1", "a3", "r2", "a4", "r3"]);
    assert_eq!(find(&out, "a3")["parentUuid"], "a1");
    assert_eq!(find(&out, "r2")["parentUuid"], "a3");
}

#[test]
fn interrupted_results_get_the_neutral_body_and_stay() {
    let input = vec![
        user_text("u0", None, "run the tests"),
        assistant(
            "a1",
            Some("u0"),
            vec![bash("t1", "cargo test"), bash("t2", "cargo bench")],
        ),
        user_blocks(
            "r1",
            Some("a1"),
            vec![
                tool_result("t1", "[Request interrupted by user for tool use]", true),
                json!({"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                       "content": [{"type": "text", "text": "[Request interrupted by user] partial output"}]}),
            ],
        ),
        user_blocks(
            "r2",
            Some("r1"),
            vec![text("[Request interrupted by user for tool use]")],
        ),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), ["u0", "a1", "r1", "r2"]);
    for id in ["t1", "t2"] {
        let result = result_for(&out, id).unwrap();
        assert_eq!(result["content"], INTERRUPTED_BODY);
        assert_eq!(result["is_error"], true);
    }
    // A user's own text block is not a tool result: it is left alone.
    assert_eq!(
        find(&out, "r2")["message"]["content"][0]["text"],
        "[Request interrupted by user for tool use]"
    );
}

#[test]
fn a_call_without_result_gets_one_right_after_its_assistant_message() {
    let input = vec![
        user_text("u0", None, "go"),
        assistant(
            "a1",
            Some("u0"),
            vec![bash("t1", "sleep 1000"), bash("t2", "echo hi")],
        ),
        user_blocks("r1", Some("a1"), vec![tool_result("t2", "hi", false)]),
        user_text("u2", Some("r1"), "还在吗"),
        assistant(
            "a2",
            Some("u2"),
            vec![
                text("yes"),
                tool_use("t3", "Read", json!({"file_path": "/a"})),
            ],
        ),
    ];
    let out = pruned(input, &options());
    assert_eq!(out.len(), 7);
    let synth_t1 = &out[2];
    assert_eq!(synth_t1["type"], "user");
    assert_eq!(synth_t1["parentUuid"], "a1");
    assert_eq!(synth_t1["message"]["content"][0]["tool_use_id"], "t1");
    assert_eq!(
        synth_t1["message"]["content"][0]["content"],
        INTERRUPTED_BODY
    );
    assert_eq!(synth_t1["message"]["content"][0]["is_error"], true);
    assert_eq!(find(&out, "r1")["parentUuid"], synth_t1["uuid"]);
    // The process died while t3 ran: the transcript ends with its answer.
    let synth_t3 = out.last().unwrap();
    assert_eq!(synth_t3["parentUuid"], "a2");
    assert_eq!(synth_t3["message"]["content"][0]["tool_use_id"], "t3");
    assert_eq!(synth_t3["sessionId"], "sess");
    // Same input, same synthesized uuids; they can be told apart from stored entries.
    let again = pruned(out.clone(), &options());
    assert_eq!(again, out);
    let synthesized: Vec<&Value> = out.iter().filter(|e| is_synthesized_result(e)).collect();
    assert_eq!(synthesized, [synth_t1, synth_t3]);
}

#[test]
fn stray_results_and_leading_assistant_messages_are_dropped() {
    let input = vec![
        assistant("a0", None, vec![text("I speak first"), bash("t0", "ls")]),
        user_blocks(
            "u1",
            Some("a0"),
            vec![tool_result("t0", "files", false), text("hello")],
        ),
        assistant("a1", Some("u1"), vec![bash("t1", "pwd")]),
        user_blocks(
            "r1",
            Some("a1"),
            vec![
                tool_result("t1", "/work", false),
                tool_result("t1", "/work again", false),
                tool_result("nobody", "orphan", false),
            ],
        ),
        user_blocks(
            "r2",
            Some("r1"),
            vec![tool_result("gone", "orphan too", false)],
        ),
        assistant("a2", Some("r2"), vec![text("ok")]),
    ];
    let out = pruned(input, &options());
    assert_eq!(uuids(&out), ["u1", "a1", "r1", "a2"]);
    assert_eq!(find(&out, "u1")["parentUuid"], Value::Null);
    assert_eq!(
        find(&out, "u1")["message"]["content"],
        json!([text("hello")])
    );
    assert_eq!(
        find(&out, "r1")["message"]["content"],
        json!([tool_result("t1", "/work", false)])
    );
    assert_eq!(find(&out, "a2")["parentUuid"], "r1");
}

fn snapshot_transcript() -> Vec<Value> {
    let calls = [
        ("s1", "git status"),
        ("l1", "ls  -la"),
        ("c1", "git status && rm -rf tmp"),
        ("b1", "cargo build"),
        ("s2", "git  status"),
        ("c2", "git status && rm -rf tmp"),
        ("b2", "cargo build"),
        ("s3", "git status"),
        ("d1", "git diff src/a.rs"),
    ];
    let mut t = vec![user_text("u0", None, "look around")];
    let mut parent = "u0".to_string();
    for (id, command) in calls {
        let a = format!("a-{id}");
        let r = format!("r-{id}");
        t.push(assistant(&a, Some(&parent), vec![bash(id, command)]));
        t.push(user_blocks(
            &r,
            Some(&a),
            vec![tool_result(id, &format!("output of {id}"), false)],
        ));
        parent = r;
    }
    t
}

#[test]
fn rerun_snapshot_commands_leave_only_the_newest_result_intact() {
    let out = pruned(snapshot_transcript(), &options());
    assert_eq!(result_for(&out, "s1").unwrap()["content"], STALE_BODY);
    assert_eq!(
        result_for(&out, "s2").unwrap()["content"],
        STALE_BODY,
        "whitespace does not matter"
    );
    assert_eq!(result_for(&out, "s3").unwrap()["content"], "output of s3");
    for id in ["l1", "c1", "c2", "b1", "b2", "d1"] {
        assert_eq!(
            result_for(&out, id).unwrap()["content"],
            format!("output of {id}"),
            "{id}"
        );
    }
    let mut opts = options();
    opts.ephemeral = false;
    assert_eq!(pruned(snapshot_transcript(), &opts), snapshot_transcript());
}

#[test]
fn a_rerun_that_produced_nothing_does_not_make_the_last_real_output_stale() {
    let mut t = snapshot_transcript();
    let last = t.len() - 1;
    // The newest `git status` (s3) was denied, d1 was interrupted.
    t[last - 2]["message"]["content"] = json!([tool_result(
        "s3",
        "Permission to use Bash has been denied",
        true
    )]);
    t[last]["message"]["content"] = json!([tool_result(
        "d1",
        "[Request interrupted by user for tool use]",
        true
    )]);
    let out = pruned(t, &options());
    assert_eq!(result_for(&out, "s1").unwrap()["content"], STALE_BODY);
    assert_eq!(result_for(&out, "s2").unwrap()["content"], "output of s2");
}

#[test]
fn snapshot_commands_are_a_documented_list() {
    assert_eq!(
        snapshot_command(" git   status ").as_deref(),
        Some("git status")
    );
    assert_eq!(
        snapshot_command("ls -la src").as_deref(),
        Some("ls -la src")
    );
    assert_eq!(snapshot_command("lsof"), None);
    assert_eq!(snapshot_command("git status | head"), None);
    assert_eq!(snapshot_command("git diff > patch"), None);
    assert_eq!(snapshot_command("git commit -m x"), None);
}

#[test]
fn the_denial_and_interruption_texts_are_recognized() {
    assert!(is_denial_text(
        "Permission to use Bash with command rm -rf / has been denied."
    ));
    assert!(is_denial_text(
        "Claude requested permissions to use Edit, but you haven't granted it yet."
    ));
    assert!(is_denial_text("This command needs approval"));
    assert!(is_denial_text("The user has been denied access"));
    assert!(!is_denial_text("No such file or directory"));
    assert!(is_interruption_text(
        "[Request interrupted by user for tool use]"
    ));
    assert!(is_interruption_text("[Request interrupted by user]"));
    assert!(!is_interruption_text(INTERRUPTED_BODY));
}

fn big(id: &str, n: usize) -> String {
    format!("{id}:{}", "0123456789".repeat(n / 10))
}

#[test]
fn trim_moves_old_large_results_to_files_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PruneOptions::new(dir.path().join("trimmed"));
    opts.trim = true;
    opts.trim_threshold_bytes = 1000;
    let input = vec![
        user_text("u0", None, "read"),
        assistant(
            "a1",
            Some("u0"),
            vec![
                tool_use("t1", "Read", json!({"file_path": "/big"})),
                bash("t2", "echo small"),
            ],
        ),
        user_blocks(
            "r1",
            Some("a1"),
            vec![
                json!({"type": "tool_result", "tool_use_id": "t1",
                       "content": [{"type": "text", "text": big("t1", 5000)}]}),
                tool_result("t2", "small", false),
            ],
        ),
        assistant(
            "a2",
            Some("r1"),
            vec![tool_use("t3", "Read", json!({"file_path": "/big2"}))],
        ),
        user_blocks(
            "r2",
            Some("a2"),
            vec![tool_result("t3", &big("t3", 3000), false)],
        ),
    ];
    let out = pruned(input.clone(), &opts);
    let pointer = result_for(&out, "t1").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pointer.starts_with(TRIM_POINTER_PREFIX), "{pointer}");
    let file = dir.path().join("trimmed/sess-t1.txt");
    assert!(
        pointer.contains(file.to_str().unwrap()),
        "names the file: {pointer}"
    );
    assert!(
        pointer.contains(&big("t1", 5000).len().to_string()),
        "names the size: {pointer}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), big("t1", 5000));
    assert_eq!(result_for(&out, "t2").unwrap()["content"], "small");
    assert_eq!(
        result_for(&out, "t3").unwrap()["content"],
        big("t3", 3000),
        "the newest turn stays whole"
    );
    // Pruning the stored transcript again writes nothing new.
    let written = std::fs::metadata(&file).unwrap().modified().unwrap();
    assert_eq!(pruned(input, &opts), out);
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        written
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("trimmed"))
            .unwrap()
            .count(),
        1
    );
}

#[test]
fn trim_moves_old_images_to_files_and_keeps_their_text() {
    // A 1×1 PNG, as an MCP tool returns it.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let image_result = |id: &str| {
        json!({"type": "tool_result", "tool_use_id": id, "is_error": false, "content": [
            {"type": "text", "text": "a picture:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ]})
    };
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PruneOptions::new(dir.path().join("trimmed"));
    opts.trim = true;
    let input = vec![
        user_text("u0", None, "look"),
        assistant(
            "a1",
            Some("u0"),
            vec![tool_use("t1", "mcp__s__shot", json!({}))],
        ),
        user_blocks("r1", Some("a1"), vec![image_result("t1")]),
        assistant(
            "a2",
            Some("r1"),
            vec![tool_use("t2", "mcp__s__shot", json!({}))],
        ),
        user_blocks("r2", Some("a2"), vec![image_result("t2")]),
    ];
    let out = pruned(input.clone(), &opts);
    let old = result_for(&out, "t1").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let file = dir.path().join("trimmed/sess-t1-1.png");
    assert!(old.starts_with("a picture:\n"), "{old}");
    assert!(
        old.contains(IMAGE_POINTER_PREFIX) && old.contains(file.to_str().unwrap()),
        "{old}"
    );
    let png = std::fs::read(&file).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "the image, decoded");
    assert!(old.contains(&format!("{} 字节", png.len())), "{old}");
    assert_eq!(
        result_for(&out, "t2").unwrap()["content"],
        image_result("t2")["content"],
        "the newest turn keeps its image"
    );
    assert_eq!(pruned(input, &opts), out);
}

#[test]
fn trim_moves_old_pdfs_to_files_like_images() {
    use base64::Engine as _;
    let pdf = crate::tools_read::pdf(1);
    let data = base64::engine::general_purpose::STANDARD.encode(&pdf);
    let pdf_result = |id: &str| {
        json!({"type": "tool_result", "tool_use_id": id, "is_error": false, "content": [
            {"type": "text", "text": "PDF spec.pdf."},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}},
        ]})
    };
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PruneOptions::new(dir.path().join("trimmed"));
    opts.trim = true;
    let read = || json!({"file_path": "spec.pdf"});
    let input = vec![
        user_text("u0", None, "look"),
        assistant("a1", Some("u0"), vec![tool_use("t1", "Read", read())]),
        user_blocks("r1", Some("a1"), vec![pdf_result("t1")]),
        assistant("a2", Some("r1"), vec![tool_use("t2", "Read", read())]),
        user_blocks("r2", Some("a2"), vec![pdf_result("t2")]),
    ];
    let out = pruned(input, &opts);
    let old = result_for(&out, "t1").unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let file = dir.path().join("trimmed/sess-t1-1.pdf");
    assert!(
        old.contains(flower::stores::prune::DOCUMENT_POINTER_PREFIX)
            && old.contains(file.to_str().unwrap()),
        "{old}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), pdf);
    assert_eq!(
        result_for(&out, "t2").unwrap()["content"],
        pdf_result("t2")["content"],
        "the newest turn keeps its PDF"
    );
}

#[test]
fn non_chain_lines_pass_through_and_chain_lines_are_relinked() {
    let input = vec![
        json!({"type": "summary", "summary": "earlier work", "leafUuid": "zz"}),
        user_text("u0", None, "go"),
        json!({"type": "file-history-snapshot", "messageId": "m1", "snapshot": {}}),
        assistant("a1", Some("u0"), vec![text("thinking about it")]),
        api_error("e1", Some("a1")),
        json!({"type": "system", "subtype": "api_retry", "uuid": "s1", "parentUuid": "e1", "content": "retry"}),
        user_text("u2", Some("s1"), "continue"),
        assistant("a2", Some("u2"), vec![text("done")]),
    ];
    let out = pruned(input.clone(), &options());
    assert_eq!(out.len(), 7);
    assert_eq!(out[0], input[0]);
    assert_eq!(out[2], input[2]);
    assert_eq!(find(&out, "s1")["parentUuid"], "a1");
    assert_eq!(find(&out, "u2")["parentUuid"], "s1");
}

#[test]
fn the_pruning_store_feeds_pruned_entries_and_keeps_the_stored_ones() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(SqliteSessionStore::open(&dir.path().join("sessions.db")).unwrap());
    let store = PruningSessionStore::new(inner.clone(), options());
    let key = SessionKey::main("p", "s");
    let input = denial_transcript();
    store.append(&key, &crate::support::typed(&input)).unwrap();
    let fed = store.load_json(&key).unwrap().unwrap();
    assert_eq!(fed, prune(input.clone(), &options()));
    assert_ne!(fed, input);
    assert_eq!(
        crate::support::load_raw_json(&store, &key)
            .unwrap()
            .unwrap(),
        input
    );
    assert_eq!(
        inner.load_json(&key).unwrap().unwrap(),
        input,
        "the database is never modified"
    );
    assert_eq!(
        store.load_json(&SessionKey::main("p", "none")).unwrap(),
        None
    );
    assert!(store.has_session("s").unwrap());
}

// ---- property test -------------------------------------------------------------

#[derive(Debug, Clone)]
enum Outcome {
    Ok,
    Big,
    Failed,
    Denied(usize),
    Interrupted,
    Missing,
    /// The result arrives one turn late (so it is a stray there).
    Late,
}

#[derive(Debug, Clone)]
struct Turn {
    prompt: bool,
    thinking: bool,
    text: bool,
    calls: Vec<(usize, Outcome)>,
    split_assistant: bool,
    split_results: bool,
    error_before: bool,
    error_after: bool,
    system_line: bool,
    summary_line: bool,
    stray: bool,
}

const COMMANDS: [&str; 5] = [
    "git status",
    "ls -la",
    "cargo build",
    "git diff",
    "git status && rm -rf x",
];
const DENIALS: [&str; 4] = [
    "Permission to use Bash with command x has been denied.",
    "Claude requested permissions to use Bash, but you haven't granted it yet.",
    "This command needs approval",
    "Permission to use Write was denied",
];

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Ok),
        1 => Just(Outcome::Big),
        1 => Just(Outcome::Failed),
        2 => (0..DENIALS.len()).prop_map(Outcome::Denied),
        1 => Just(Outcome::Interrupted),
        1 => Just(Outcome::Missing),
        1 => Just(Outcome::Late),
    ]
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        any::<[bool; 4]>(),
        prop::collection::vec((0..COMMANDS.len() + 1, outcome()), 0..4),
        any::<[bool; 6]>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(a, calls, b, stray)| Turn {
            prompt: a[0] && a[1],
            thinking: a[2],
            text: a[3],
            calls,
            split_assistant: b[0],
            split_results: b[1],
            error_before: b[2] && b[3],
            error_after: b[4] && b[5],
            system_line: b[2] && !b[3],
            summary_line: b[4] && !b[5],
            stray,
        })
}

/// Builds a linear transcript from the turns (uuids `e0`, `e1`, … each the child of
/// the previous chain entry).
fn build(turns: &[Turn]) -> Vec<Value> {
    let mut out: Vec<Value> = vec![user_text("x", None, "start")];
    let mut late: Vec<Value> = Vec::new();
    for (n, turn) in turns.iter().enumerate() {
        if turn.error_before {
            out.push(api_error("x", None));
        }
        if turn.prompt {
            out.push(user_text("x", None, &format!("prompt {n}")));
        }
        let mut blocks = Vec::new();
        if turn.thinking {
            blocks.push(json!({"type": "thinking", "thinking": "…", "signature": "sig"}));
        }
        if turn.text {
            blocks.push(text(&format!("turn {n}")));
        }
        let mut results = std::mem::take(&mut late);
        for (k, (tool, outcome)) in turn.calls.iter().enumerate() {
            let id = format!("toolu_{n}_{k}");
            blocks.push(match COMMANDS.get(*tool) {
                Some(command) => bash(&id, command),
                None => tool_use(&id, "Read", json!({"file_path": "/f"})),
            });
            match outcome {
                Outcome::Ok => results.push(tool_result(&id, &format!("out {id}"), false)),
                Outcome::Big => results.push(tool_result(&id, &"y".repeat(400), false)),
                Outcome::Failed => results.push(tool_result(&id, "exit 1", true)),
                Outcome::Denied(d) => results.push(tool_result(&id, DENIALS[*d], true)),
                Outcome::Interrupted => results.push(tool_result(
                    &id,
                    "[Request interrupted by user for tool use]",
                    true,
                )),
                Outcome::Missing => {}
                Outcome::Late => late.push(tool_result(&id, "late", false)),
            }
        }
        if turn.stray {
            results.push(tool_result(&format!("toolu_stray_{n}"), "stray", false));
        }
        if blocks.is_empty() {
            blocks.push(text("…"));
        }
        if turn.split_assistant {
            for b in blocks {
                out.push(assistant("x", None, vec![b]));
            }
        } else {
            out.push(assistant("x", None, blocks));
        }
        if turn.system_line {
            out.push(json!({"type": "system", "uuid": "x", "parentUuid": null, "content": "note"}));
        }
        if turn.summary_line {
            out.push(json!({"type": "summary", "summary": "s", "leafUuid": "nowhere"}));
        }
        if turn.split_results {
            for r in results {
                out.push(user_blocks("x", None, vec![r]));
            }
        } else if !results.is_empty() {
            out.push(user_blocks("x", None, results));
        }
        if turn.error_after {
            out.push(api_error("x", None));
        }
    }
    let mut previous: Option<String> = None;
    for (i, e) in out.iter_mut().enumerate() {
        if e.get("uuid").is_some() {
            let uuid = format!("e{i}");
            e["uuid"] = json!(uuid);
            e["parentUuid"] = json!(previous);
            previous = Some(uuid);
        }
    }
    out
}

fn count_denials(entries: &[Value]) -> usize {
    entries
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result" && b["is_error"] == true)
        .filter(|b| b["content"].as_str().is_some_and(is_denial_text))
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn pruning_keeps_the_chain_and_api_validity_and_is_idempotent(
        turns in prop::collection::vec(turn(), 0..8),
        keep_denials in 0usize..3,
        ephemeral in any::<bool>(),
        trim in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = PruneOptions::new(dir.path().join("trimmed"));
        opts.keep_denials = keep_denials;
        opts.ephemeral = ephemeral;
        opts.trim = trim;
        opts.trim_threshold_bytes = 300;
        let input = build(&turns);
        let out = prune(input.clone(), &opts);

        assert_single_chain(&out);
        assert_api_valid(&out);
        prop_assert_eq!(&prune(out.clone(), &opts), &out);
        prop_assert!(out.iter().all(|e| e["isApiErrorMessage"] != true));
        prop_assert!(count_denials(&out) <= keep_denials);
        // User prompts and non-chain lines are never lost.
        for e in &input {
            if e.get("uuid").is_none() {
                prop_assert!(out.contains(e), "lost {}", e);
            } else if e["type"] == "user" && e["message"]["content"].is_string() {
                let kept = out.iter().find(|o| o["uuid"] == e["uuid"]);
                prop_assert!(kept.is_some_and(|o| o["message"] == e["message"]), "lost {}", e);
            }
        }
    }
}

/// An entry id in one of the forms a transcript may hold: flower's canonical uuid,
/// the same uuid in capitals, braced, without hyphens, or any short name.
fn any_id_form() -> impl Strategy<Value = String> {
    (any::<u128>(), 0..5u8, "[a-zA-Z0-9-]{1,12}").prop_map(|(bits, form, name)| {
        let id = uuid::Uuid::from_u128(bits);
        match form {
            0 => id.hyphenated().to_string(),
            1 => id.hyphenated().to_string().to_uppercase(),
            2 => id.braced().to_string(),
            3 => id.simple().to_string(),
            _ => name,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever form its ids take, a transcript stored in SQLite comes back with each
    /// id as written, an entry appended twice is stored once, and a resume relinks
    /// past a removed entry to its parent's exact text.
    #[test]
    fn ids_of_any_form_round_trip_and_relink_exactly(
        ids in prop::collection::hash_set(any_id_form(), 4),
    ) {
        let ids: Vec<String> = ids.into_iter().collect();
        let (first, reply, error, next) = (&ids[0], &ids[1], &ids[2], &ids[3]);
        let entries = vec![
            user_text(first, None, "do it"),
            assistant(reply, Some(first), vec![text("ok")]),
            api_error(error, Some(reply)),
            user_text(next, Some(error), "继续"),
        ];
        let dir = tempfile::TempDir::new().unwrap();
        let store = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
        let key = SessionKey::main("p", "s");
        store.append(&key, &crate::support::typed(&entries)).unwrap();
        store.append(&key, &crate::support::typed(&entries)).unwrap();
        let stored = store.load_json(&key).unwrap().unwrap();
        prop_assert_eq!(&stored, &entries);
        let store = PruningSessionStore::new(Arc::new(store), options());
        let resumed = store.load_json(&key).unwrap().unwrap();
        prop_assert_eq!(uuids(&resumed), [first.as_str(), reply, next]);
        prop_assert_eq!(&find(&resumed, next)["parentUuid"], &json!(reply));
    }
}
