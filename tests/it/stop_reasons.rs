//! Every stop reason of the Messages API, through the real binary against the fake
//! server. (A tool call cut by `max_tokens` keeps its error result: see
//! `once::a_tool_call_with_broken_json_input_gets_an_error_result`.)

use crate::support;
use crate::support::LoadJson;

use crate::support::Flower;
use flower::stores::{SessionKey, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::process::Output;
use support::pipeline::flower_in as flower;
use support::{FakeServer, Reply};
use tempfile::TempDir;

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn once_json(server: &FakeServer, dir: &TempDir, extra: &[&str]) -> (Output, Value) {
    let mut args = vec!["once", "写一首诗", "--json"];
    args.extend_from_slice(extra);
    let out = flower(server, dir.path(), &args);
    let v = json_of(&out);
    (out, v)
}

/// The last message of a request, as (role, its text blocks joined).
fn last_message(request: &support::Recorded) -> (String, String) {
    let last = request.messages().last().cloned().unwrap_or(Value::Null);
    let text = last["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default();
    (last["role"].as_str().unwrap_or("").to_string(), text)
}

#[test]
fn end_turn_tool_use_and_stop_sequence_end_as_today() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.txt"), "甲").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "a.txt"})),
        Reply::text("读完了").stop_reason("stop_sequence"),
    ]);
    let (out, v) = once_json(&server, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["result"], "读完了");
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["num_turns"], 2);

    let server = FakeServer::start(vec![Reply::text("好")]);
    let (_, v) = once_json(&server, &dir, &[]);
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["is_error"], false);
}

/// On a model that allows a prefill (Sonnet 4.5) and without thinking, a text reply cut
/// by max_tokens is sent back as the start of the assistant turn and the model asked
/// for the rest; each part is its own turn; the result is the whole.
#[test]
fn max_tokens_on_text_continues_the_reply_by_prefill_where_allowed() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("床前明月光,").stop_reason("max_tokens"),
        // Trailing whitespace: the API refuses a final assistant block ending in it.
        Reply::text("疑是地上霜。 \n").stop_reason("max_tokens"),
        Reply::text("举头望明月。"),
    ]);
    let (out, v) = once_json(&server, &dir, &["--model", "claude-sonnet-4-5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["result"], "床前明月光,疑是地上霜。举头望明月。");
    assert_eq!(v["num_turns"], 3);
    assert_eq!(v["stop_reason"], "end_turn");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        last_message(&requests[1]),
        ("assistant".to_string(), "床前明月光,".to_string())
    );
    // The partial turn goes back whole, both parts, whitespace trimmed at the end.
    assert_eq!(
        last_message(&requests[2]),
        (
            "assistant".to_string(),
            "床前明月光,疑是地上霜。".to_string()
        )
    );
    // No user message was added between the parts.
    assert_eq!(requests[2].messages().len(), 2);
}

/// The default model (5.x) refuses a prefill with a 400, as every model from 4.6 on
/// does: the cut reply is continued with a user turn, and the run goes on.
#[test]
fn max_tokens_on_the_default_model_continues_with_a_user_turn() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("床前明月光,").stop_reason("max_tokens"),
        Reply::text("疑是地上霜。 ").stop_reason("max_tokens"),
        Reply::text("举头望明月。"),
    ]);
    let (out, v) = once_json(&server, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["result"], "床前明月光,疑是地上霜。 举头望明月。");
    assert_eq!(v["num_turns"], 3);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for (i, request) in requests.iter().enumerate().skip(1) {
        let (role, text) = last_message(request);
        assert_eq!(role, "user", "request {i} must end with a user turn");
        assert_eq!(text, flower::engine::CONTINUE_AFTER_MAX_TOKENS);
    }
    // Every part stays its own assistant turn, as the model sent it.
    let roles: Vec<&str> = requests[2]
        .messages()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
}

/// With extended thinking on, no model takes a prefill: a user turn continues even
/// where a prefill would otherwise be allowed.
#[test]
fn max_tokens_with_thinking_continues_with_a_user_turn_on_any_model() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::thinking("想一想", "sig-1")
            .then_text("第一段")
            .stop_reason("max_tokens"),
        Reply::thinking("接着想", "sig-2").then_text("第二段"),
    ]);
    let (out, v) = once_json(
        &server,
        &dir,
        &["--model", "claude-sonnet-4-5", "--thinking"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["result"], "第一段第二段");
    let second = &server.requests()[1];
    assert_eq!(second.body["thinking"]["type"], "enabled");
    assert_eq!(last_message(second).0, "user");
}

/// A reply cut by max_tokens while the model was still thinking holds thinking blocks
/// only (signed or not). The API refuses an assistant message that ends with a thinking
/// block, so that reply is kept in the transcript but left out of what is sent: the
/// user turn that asks for the answer follows the prompt, on a model that refuses a
/// prefill and on one that takes it alike, and a resume sends it the same way.
#[test]
fn a_reply_of_thinking_only_cut_by_max_tokens_is_not_sent_back() {
    for model in ["claude-opus-4-6", "claude-sonnet-4-5"] {
        for signature in ["sig-1", ""] {
            let dir = TempDir::new().unwrap();
            let server = FakeServer::start(vec![
                Reply::thinking("想了很久", signature).stop_reason("max_tokens"),
                Reply::thinking("这次短一点", "sig-2").then_text("答案"),
                Reply::thinking("再答", "sig-3").then_text("又一个答案"),
            ]);
            let (out, v) = once_json(&server, &dir, &["--model", model, "--thinking"]);
            let case = format!("{model}, signature {signature:?}");
            assert!(out.status.success(), "{case}: {}", stderr(&out));
            assert_eq!(v["is_error"], false, "{case}: {v}");
            assert_eq!(v["result"], "答案", "{case}");
            assert_eq!(v["num_turns"], 2, "{case}");
            let requests = server.requests();
            assert_eq!(requests.len(), 2, "{case}");
            let second = &requests[1];
            let roles: Vec<&str> = second
                .messages()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            assert_eq!(roles, ["user", "user"], "{case}: {}", second.raw_body);
            assert!(!second.raw_body.contains("想了很久"), "{case}");
            assert_eq!(
                last_message(second),
                (
                    "user".to_string(),
                    flower::engine::CONTINUE_AFTER_THINKING_CUT.to_string()
                ),
                "{case}"
            );
            // The transcript keeps the cut reply; a resume still leaves it out.
            let id = v["session_id"].as_str().unwrap();
            let workspace = dir.path().canonicalize().unwrap();
            let key = SessionKey::main(project_key(&workspace), id);
            let store = SqliteSessionStore::open(&dir.path().join("runs/sessions.db")).unwrap();
            let stored = serde_json::to_string(&store.load_json(&key).unwrap()).unwrap();
            assert!(stored.contains("想了很久"), "{case}: {stored}");
            let args = ["once", "再来", "--json", "--model", model, "--thinking"];
            let out = flower(
                &server,
                dir.path(),
                &[&args[..], &["--resume", id]].concat(),
            );
            assert!(out.status.success(), "{case}: {}", stderr(&out));
            let resumed = &server.requests()[2];
            assert!(!resumed.raw_body.contains("想了很久"), "{case}");
            assert!(resumed.raw_body.contains("这次短一点"), "{case}");
            assert_eq!(json_of(&out)["result"], "又一个答案", "{case}");
        }
    }
}

/// A reply cut by max_tokens inside a tool call never runs it, even when the input
/// that arrived happens to parse; the call gets an error result and the model goes on.
#[test]
fn a_tool_call_cut_by_max_tokens_is_not_run() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("先写文件")
            .then_tool_use("Write", json!({"file_path": "a.txt", "content": "半"}))
            .stop_reason("max_tokens"),
        Reply::text("重来"),
    ]);
    let (out, v) = once_json(&server, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["result"], "重来");
    assert!(!dir.path().join("a.txt").exists(), "the cut call ran");
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], true);
    let body = results[0]["content"].to_string();
    assert!(body.contains("max_tokens"), "{body}");
}

/// A continuation instruction the model never answered (the request after it failed)
/// is dropped when the session is resumed: the resume's own prompt follows the cut
/// reply instead.
#[test]
fn an_unanswered_continuation_is_pruned_on_resume() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("写到一半").stop_reason("max_tokens"),
        Reply::error(400, "invalid_request_error", "fake: this one fails"),
        Reply::text("接上了"),
    ]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(dir.path())
        .args(["once", "写一首诗", "--json"])
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(v["is_error"], true, "{v}");
    let id = v["session_id"].as_str().unwrap().to_string();
    let out = flower(
        &server,
        dir.path(),
        &["once", "接着写", "--json", "--resume", &id],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let resumed = &server.requests()[2];
    assert_eq!(
        last_message(resumed),
        ("user".to_string(), "接着写".to_string())
    );
    assert!(
        !resumed
            .raw_body
            .contains(flower::engine::CONTINUE_AFTER_MAX_TOKENS),
        "{}",
        resumed.raw_body
    );
}

#[test]
fn max_tokens_continuations_are_bounded() {
    let dir = TempDir::new().unwrap();
    let cut = || Reply::text("又一段").stop_reason("max_tokens");
    let server = FakeServer::start(vec![cut(), cut(), cut(), cut(), Reply::text("不该到这")]);
    let (out, v) = once_json(&server, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The first reply and three continuations, then the run ends with what it has.
    assert_eq!(server.request_count(), 4);
    assert_eq!(v["stop_reason"], "max_tokens");
    assert_eq!(v["result"], "又一段又一段又一段又一段");
    assert_eq!(v["is_error"], false);
}

#[test]
fn refusal_fails_quoting_stop_details_is_not_retried_and_not_replayed() {
    let dir = TempDir::new().unwrap();
    let details = json!({"type": "refusal", "category": "cyber", "explanation": "policy 7"});
    let server = FakeServer::start(vec![
        Reply::text("我不能")
            .stop_reason("refusal")
            .stop_details(details),
        Reply::text("续上了"),
    ]);
    let mut cmd = Flower::bin().server(&server).command();
    // Retries allowed: a refusal must still not be retried.
    let out = cmd
        .current_dir(dir.path())
        .args(["once", "写一首诗", "--json"])
        .env("FLOWER_MAX_ATTEMPTS", "3")
        .env("FLOWER_BASE_DELAY", "0")
        .output()
        .unwrap();
    let v = json_of(&out);
    assert!(!out.status.success());
    assert_eq!(v["is_error"], true);
    assert_eq!(v["stop_reason"], "refusal");
    let message = v["result"].as_str().unwrap();
    assert!(message.contains("refus"), "{message}");
    assert!(message.contains("policy 7"), "{message}");
    assert_eq!(server.request_count(), 1, "a refusal is not retried");

    // A resume does not feed the refusal back.
    let id = v["session_id"].as_str().unwrap().to_string();
    let out = flower(
        &server,
        dir.path(),
        &["once", "换个话题", "--json", "--resume", &id],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let resumed = &server.requests()[1];
    let body = resumed.raw_body.clone();
    assert!(!body.contains("我不能"), "refusal replayed: {body}");
    assert!(resumed.messages().iter().all(|m| m["role"] == "user"));
}

#[test]
fn context_window_exceeded_is_a_clear_error_naming_new() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("").stop_reason("model_context_window_exceeded"),
    ]);
    let out = flower(&server, dir.path(), &["once", "继续"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("上下文窗口满了"), "{err}");
    assert!(err.contains("--new"), "{err}");
    assert_eq!(server.request_count(), 1);
}

#[test]
fn pause_turn_sends_the_turn_back_to_continue() {
    let dir = TempDir::new().unwrap();
    // A long server-tool turn pauses with its call pending; sent back as it is, the
    // API continues it (on every model: this is not a prefill).
    let server = FakeServer::start(vec![
        Reply::text("先查一下")
            .then_server_tool_use("web_search", json!({"query": "flower"}))
            .stop_reason("pause_turn"),
        Reply::text("查完了"),
    ]);
    let (out, v) = once_json(&server, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.request_count(), 2);
    assert_eq!(
        last_message(&server.requests()[1]),
        ("assistant".to_string(), "先查一下".to_string())
    );
    assert_eq!(v["result"], "先查一下查完了");
    assert_eq!(v["num_turns"], 2);
}

#[test]
fn an_unknown_stop_reason_ends_the_turn_with_one_warning() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好了").stop_reason("brand_new_reason")]);
    let out = flower(&server, dir.path(), &["once", "hi"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("brand_new_reason").count(), 1, "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "好了");
}

/// Every row of the model table, spelled out here rather than read from it (a row's
/// prefill flag flipped must fail this test): the models from 4.6 on, and a model the
/// table does not know, refuse a prefill with a 400, so a reply cut by max_tokens goes
/// on with a user turn there as on the default model; the older ones take the prefill.
#[test]
fn every_model_row_continues_a_cut_reply_the_way_that_model_takes() {
    let refusing = [
        "claude-mythos-1",
        "claude-fable-1",
        "claude-opus-5",
        "claude-sonnet-5",
        "claude-haiku-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "gateway-own-model",
    ];
    let taking = [
        "claude-opus-4-5",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-opus-4-1",
        "claude-sonnet-4-0",
        "claude-3-7-sonnet-latest",
        "claude-3-5-haiku-latest",
        "claude-3-opus-latest",
        "claude-3-haiku-20240307",
    ];
    // Each row of the table is one of the models above.
    for row in flower::model::models::MODELS {
        assert!(
            refusing
                .iter()
                .chain(&taking)
                .any(|m| flower::model::models::info(m).prefix == row.prefix),
            "no model of row {:?} in this test",
            row.prefix
        );
    }
    let dir = TempDir::new().unwrap();
    for (model, prefill) in refusing
        .iter()
        .map(|m| (m, false))
        .chain(taking.iter().map(|m| (m, true)))
    {
        let server = FakeServer::start(vec![
            Reply::text("床前明月光,").stop_reason("max_tokens"),
            Reply::text("疑是地上霜。"),
        ]);
        let (out, v) = once_json(&server, &dir, &["--model", model]);
        assert!(out.status.success(), "{model}: {}", stderr(&out));
        assert_eq!(v["is_error"], false, "{model}: {v}");
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{model}");
        let expected = if prefill {
            ("assistant".to_string(), "床前明月光,".to_string())
        } else {
            (
                "user".to_string(),
                flower::engine::CONTINUE_AFTER_MAX_TOKENS.to_string(),
            )
        };
        assert_eq!(last_message(&requests[1]), expected, "{model}");
    }
}
