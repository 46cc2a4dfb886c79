//! `flower show`'s renderers on made-up entries.
#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::{Value, json};

/// Rows rendered from their text (fast path or fallback) and as parsed entries.
fn both(rows: &[String]) -> (String, String) {
    let mut fast = String::new();
    let mut r = Renderer::default();
    for row in rows {
        r.row(&mut fast, row.as_bytes()).unwrap();
    }
    let entries: Vec<Entry> = rows.iter().map(|r| Entry::parse(r).unwrap()).collect();
    let mut slow = String::new();
    render(&mut slow, &entries);
    (fast, slow)
}

fn texts(values: &[Value]) -> Vec<String> {
    values.iter().map(Value::to_string).collect()
}

#[test]
fn the_usual_entries_take_the_fast_path_and_render_as_values_do() {
    let rows = texts(&[
        json!({"type": "user", "timestamp": "2026-06-01T10:00:00.000Z",
               "message": {"role": "user", "content": "照这份需求做\n"}}),
        json!({"type": "assistant", "timestamp": "2026-06-01T10:00:01.000Z", "message": {
            "model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, "output_tokens": 120,
            "cache_creation_input_tokens": 400, "cache_read_input_tokens": 20000,
            "server_tool_use": {"web_search_requests": 0}},
            "content": [{"type": "text", "text": "看一下"},
                        {"type": "tool_use", "id": "t1", "name": "Bash",
                         "input": {"command": "cargo test\necho \"done\""}}]}}),
        json!({"type": "user", "message": {"content": [{"type": "tool_result",
            "tool_use_id": "t1", "content": "a\nb\r\nc\nd\ne\n\"f\"\n", "is_error": false}]}}),
        json!({"type": "assistant", "isApiErrorMessage": true, "message": {
            "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529"}]}}),
    ]);
    let mut r = Renderer::default();
    for row in &rows {
        assert!(r.raw(&mut String::new(), row.as_bytes()).is_ok(), "{row}");
    }
    let (fast, slow) = both(&rows);
    assert_eq!(fast, slow);
    assert!(fast.contains("⏺ Bash cargo test⏎echo \"done\""), "{fast}");
    assert!(fast.contains("… 还有 2 行"), "{fast}");
}

#[test]
fn odd_entries_render_exactly_as_values_do() {
    let mut rows = texts(&[
        json!({"type": "assistant", "message": {"content": [
            {"type": "thinking", "thinking": "想 \"x\"", "signature": "s"},
            {"type": "redacted_thinking", "data": "QUJD"},
            {"type": "tool_use", "id": "t1", "name": "Mystery", "input": {"z": 1, "a": [true]}},
            {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": 42}},
            {"type": "tool_use", "id": "t3", "name": "Bash"},
            {"type": "tool_use", "name": "NoId", "input": "str"},
            {"type": "server_tool_use"}, {"text": "no type"}],
            "usage": {"input_tokens": 1.5, "output_tokens": -2, "cache_read_input_tokens": "9"}}}),
        json!({"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "a\nb"}, {"type": "image"}, "bare", {"text": 5}]},
            {"type": "tool_result", "tool_use_id": "t2",
             "content": "Permission to use Bash has been denied.\nwhy", "is_error": true},
            {"type": "tool_result", "tool_use_id": "t3", "content": markers::INTERRUPTED_BODY},
            {"type": "tool_result", "tool_use_id": "t3", "content": markers::STALE_BODY},
            {"type": "tool_result", "content": {"k": 1}, "is_error": "true"},
            {"type": "tool_result", "tool_use_id": 5},
            {"type": "text", "text": "[Request interrupted by user]"},
            {"type": "image"}, {"type": "document"}, 7]}}),
        json!({"type": "assistant", "message": {"model": "<synthetic>", "content": "x"}}),
        json!({"type": "assistant", "isApiErrorMessage": "true", "message": {"content": []}}),
        json!({"type": "assistant", "message": [1, null, null]}),
        json!({"type": "assistant", "message": {"usage": [1, 2, 3, 4], "content": 3}}),
        json!({"type": "user", "message": {"content": null}}),
        json!({"type": "user", "message": "str"}),
        json!({"type": "user"}),
        json!({"type": 7}),
        json!({"type": ""}),
        json!({"type": "system", "message": {"content": 1}}),
        json!({"type": "user", "timestamp": 12, "message": {"content": "数字时间戳"}}),
        json!({"type": "user", "timestamp": "bad", "message": {"content": "坏时间戳"}}),
    ]);
    // What `Value::to_string` never writes: duplicate keys, escaped keys and text.
    rows.push(
        r#"{"type":"assistant","message":{"usage":{"input_tokens":1,"input_tokens":2},"content":[{"type":"text","text":"x","text":"\u4e2d\/"}]}}"#
            .into(),
    );
    rows.push(r#"{"t\u0079pe":"user","message":{"content":"first","content":"second"}}"#.into());
    rows.push(
        r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t9","name":"Bash","input":{"command":5,"command":"ls"}}]}}"#
            .into(),
    );
    rows.push(
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":5},{"type":"text","text":"y"}]}}"#
            .into(),
    );
    let (fast, slow) = both(&rows);
    assert_eq!(fast, slow);
    assert!(fast.contains("(思考,"), "{fast}");
    assert!(fast.contains("⏺ Bash ls"), "{fast}");
}
