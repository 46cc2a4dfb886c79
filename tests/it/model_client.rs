//! The Anthropic client against the fake Messages API server: replies, streaming,
//! the request it sends, and every way a request can fail.

use crate::support;

use flower::model::anthropic::{AnthropicClient, MAX_CACHE_BREAKPOINTS, request_body};
use flower::model::{
    MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta, ToolDef, Usage,
};
use serde_json::{Value, json};
use std::time::Duration;
use support::{FAKE_API_KEY, FakeServer, Gate, Reply};

/// A reply's blocks as JSON.
fn blocks(reply: &flower::model::ModelReply) -> Vec<Value> {
    reply
        .content
        .iter()
        .map(|b| serde_json::from_str(&serde_json::to_string(b).unwrap()).unwrap())
        .collect()
}

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq)]
enum Delta {
    Text(String),
    Thinking(String),
    Tool { id: String, name: String },
}

fn own(d: StreamDelta<'_>) -> Delta {
    match d {
        StreamDelta::Text(t) => Delta::Text(t.into()),
        StreamDelta::Thinking(t) => Delta::Thinking(t.into()),
        StreamDelta::ToolUseStart { id, name } => Delta::Tool {
            id: id.into(),
            name: name.into(),
        },
    }
}

fn tool(name: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: flower::content::Raw::of_tree(
            &json!({"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}),
        ),
    }
}

fn request() -> MessagesRequest {
    MessagesRequest {
        system_shared: String::new(),
        model: "claude-sonnet-4-5".into(),
        max_tokens: 2048,
        system: "You are a careful engineer.".into(),
        messages: support::history(vec![
            json!({"role": "user", "content": "Read seed.txt and tell me the word."}),
        ]),
        tools: vec![tool("Read"), tool("Glob")],
        thinking: None,
        ..MessagesRequest::default()
    }
}

fn client(server: &FakeServer) -> AnthropicClient {
    AnthropicClient::new(&server.url(), FAKE_API_KEY, "claude-default-test")
        .expect("client")
        .with_idle_timeout(WAIT)
}

async fn call(
    client: &AnthropicClient,
    request: &MessagesRequest,
) -> (Result<ModelReply, ModelError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let mut on_delta = |d: StreamDelta<'_>| deltas.push(own(d));
    let result = client.stream(request, &mut on_delta).await;
    (result, deltas)
}

fn api_error(status: Option<u16>, kind: &str, message: &str, retry: Option<u64>) -> ModelError {
    ModelError::Api {
        status,
        kind: kind.into(),
        message: message.into(),
        retry_after: retry.map(Duration::from_secs),
    }
}

#[tokio::test]
async fn text_reply_streams_in_pieces_and_assembles() {
    let text = "The word is « banana » 🍌, read from seed.txt.";
    let server = FakeServer::start(vec![Reply::text(text).chunk_chars(5)]);
    let (reply, deltas) = call(&client(&server), &request()).await;
    let reply = reply.unwrap();
    assert_eq!(blocks(&reply), vec![json!({"type": "text", "text": text})]);
    assert_eq!(reply.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(reply.id, "msg_fake_0000");
    // The fake echoes the request's model, as the API does.
    assert_eq!(reply.model, "claude-sonnet-4-5");
    assert!(deltas.len() > 5, "text should arrive in pieces: {deltas:?}");
    let streamed: String = deltas
        .iter()
        .map(|d| match d {
            Delta::Text(t) => t.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(streamed, text);
}

#[tokio::test]
async fn tool_use_input_is_assembled_from_json_deltas() {
    let input =
        json!({"file_path": "/work/dir/seed.txt", "offset": 10, "limit": 200, "note": "ünïcödé ✓"});
    let server = FakeServer::start(vec![Reply::tool_use("Read", input.clone()).chunk_chars(3)]);
    let (reply, deltas) = call(&client(&server), &request()).await;
    let reply = reply.unwrap();
    assert_eq!(
        blocks(&reply),
        vec![
            json!({"type": "tool_use", "id": "toolu_fake_0000_0", "name": "Read", "input": input})
        ]
    );
    assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        deltas,
        vec![Delta::Tool {
            id: "toolu_fake_0000_0".into(),
            name: "Read".into()
        }]
    );
}

#[tokio::test]
async fn thinking_text_and_tool_calls_in_one_message_come_back_verbatim() {
    let signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYUs+/==";
    let server = FakeServer::start(vec![
        Reply::thinking("Let me look at\nthe file first.", signature)
            .then_redacted_thinking("EmwKAhgBEgy3va3pzix/LafPsn4a")
            .then_text("I'll read both.")
            .then_tool_use("Read", json!({"file_path": "a.txt"}))
            .then_tool_use_with_id("toolu_custom", "Glob", json!({"pattern": "**/*.rs"})),
    ]);
    let (reply, deltas) = call(&client(&server), &request()).await;
    let reply = reply.unwrap();
    assert_eq!(
        blocks(&reply),
        vec![
            json!({"type": "thinking", "thinking": "Let me look at\nthe file first.", "signature": signature}),
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
            json!({"type": "text", "text": "I'll read both."}),
            json!({"type": "tool_use", "id": "toolu_fake_0000_3", "name": "Read", "input": {"file_path": "a.txt"}}),
            json!({"type": "tool_use", "id": "toolu_custom", "name": "Glob", "input": {"pattern": "**/*.rs"}}),
        ]
    );
    let thinking: String = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Thinking(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Let me look at\nthe file first.");
    let tools: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Tool { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(tools, ["Read", "Glob"]);
    // Deltas arrive in stream order: thinking, then text, then the tool calls.
    let first_text = deltas.iter().position(|d| matches!(d, Delta::Text(_)));
    let last_thinking = deltas.iter().rposition(|d| matches!(d, Delta::Thinking(_)));
    assert!(last_thinking < first_text);
}

#[tokio::test]
async fn usage_from_message_start_and_cumulative_message_delta() {
    let server = FakeServer::start(vec![
        Reply::text("a").usage(1200, 345).cache_usage(50, 900),
        Reply::text("b")
            .usage(10, 20)
            .cache_usage(3, 4)
            .full_usage_in_delta(),
        Reply::text("c"),
    ]);
    let client = client(&server);
    let (first, _) = call(&client, &request()).await;
    assert_eq!(
        first.unwrap().usage,
        Usage {
            input_tokens: 1200,
            output_tokens: 345,
            cache_creation_input_tokens: 50,
            cache_read_input_tokens: 900,
            ..Usage::default()
        }
    );
    let (second, _) = call(&client, &request()).await;
    assert_eq!(
        second.unwrap().usage,
        Usage {
            input_tokens: 10,
            output_tokens: 20,
            cache_creation_input_tokens: 3,
            cache_read_input_tokens: 4,
            ..Usage::default()
        }
    );
    // Without numbers the fake derives input tokens from the body size.
    let (third, _) = call(&client, &request()).await;
    let usage = third.unwrap().usage;
    let body_len = server.requests()[2].raw_body.len() as u64;
    assert_eq!(usage.input_tokens, body_len / 4);
    assert_eq!(usage.output_tokens, 1);
}

#[tokio::test]
async fn sends_the_documented_headers_and_body() {
    let server = FakeServer::start(vec![Reply::text("ok")]);
    let client = client(&server);
    call(&client, &request()).await.0.unwrap();
    let recorded = &server.requests()[0];
    assert_eq!(recorded.method, "POST");
    assert_eq!(recorded.path, "/v1/messages");
    assert_eq!(recorded.header("x-api-key"), Some(FAKE_API_KEY));
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded.header("content-type"), Some("application/json"));
    let body = &recorded.body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["model"], json!("claude-sonnet-4-5"));
    assert_eq!(body["max_tokens"], json!(2048));
    assert_eq!(
        support::object_keys(body),
        [
            "model",
            "max_tokens",
            "system",
            "messages",
            "tools",
            "stream"
        ]
    );
    assert_eq!(recorded.raw_body.as_bytes(), request_body(&request()));
}

#[tokio::test]
async fn empty_model_uses_the_default_and_empty_system_and_tools_are_omitted() {
    let server = FakeServer::start(vec![Reply::text("ok")]);
    let mut req = request();
    req.model.clear();
    req.system.clear();
    req.tools.clear();
    call(&client(&server), &req).await.0.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["model"], json!("claude-default-test"));
    assert!(body.get("system").is_none());
    assert!(body.get("tools").is_none());
}

fn breakpoints(body: &Value) -> Vec<String> {
    fn walk(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    if k == "cache_control" {
                        assert_eq!(child, &json!({"type": "ephemeral"}));
                        out.push(path.clone());
                    } else {
                        walk(child, format!("{path}/{k}"), out);
                    }
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    walk(child, format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    out
}

#[test]
fn cache_breakpoints_on_last_tool_system_and_newest_message() {
    let mut req = request();
    req.messages = support::history(vec![
        json!({"role": "user", "content": "first"}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "x"}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "data"},
            {"type": "text", "text": "and now?"}
        ]}),
    ]);
    let before = req.clone();
    let bytes = request_body(&req);
    assert_eq!(req, before, "the caller's request must not change");
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        breakpoints(&body),
        ["/system/0", "/messages/2/content/1", "/tools/1"]
    );
    // The history before the newest message is sent as it was.
    let sent = support::history_json(&req.messages);
    assert_eq!(body["messages"][0], sent[0]);
    assert_eq!(body["messages"][1], sent[1]);

    // A string content becomes one text block that carries the breakpoint.
    req.messages = support::history(vec![json!({"role": "user", "content": "hello"})]);
    let body: Value = serde_json::from_slice(&request_body(&req)).unwrap();
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}])
    );

    // Thinking blocks and empty text cannot carry a breakpoint: the last block that can.
    req.messages = support::history(vec![json!({"role": "assistant", "content": [
        {"type": "text", "text": "visible"},
        {"type": "text", "text": ""},
        {"type": "thinking", "thinking": "t", "signature": "s"}
    ]})]);
    let body: Value = serde_json::from_slice(&request_body(&req)).unwrap();
    assert_eq!(
        breakpoints(&body),
        ["/system/0", "/messages/0/content/0", "/tools/1"]
    );
}

#[test]
fn breakpoints_already_in_the_history_are_capped_at_four_oldest_dropped() {
    let marked =
        |text: &str| json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}});
    let mut req = request();
    req.messages = support::history(vec![
        json!({"role": "user", "content": [marked("m0")]}),
        json!({"role": "assistant", "content": [marked("m1")]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [marked("m2")]}
        ]}),
        json!({"role": "assistant", "content": [marked("m3")]}),
        json!({"role": "user", "content": [marked("m4")]}),
    ]);
    let before = req.clone();
    let body: Value = serde_json::from_slice(&request_body(&req)).unwrap();
    assert_eq!(req, before);
    let found = breakpoints(&body);
    assert_eq!(found.len(), MAX_CACHE_BREAKPOINTS, "{found:?}");
    // Ours (system, last tool, newest message) plus the newest one of the caller's.
    assert_eq!(
        found,
        [
            "/system/0",
            "/messages/3/content/0",
            "/messages/4/content/0",
            "/tools/1"
        ]
    );

    // Without system and tools there is room for more of the caller's.
    req.system.clear();
    req.tools.clear();
    let body: Value = serde_json::from_slice(&request_body(&req)).unwrap();
    assert_eq!(
        breakpoints(&body),
        [
            "/messages/1/content/0",
            "/messages/2/content/0/content/0",
            "/messages/3/content/0",
            "/messages/4/content/0"
        ]
    );
}

/// The history holds typed messages: values carried as written (a tool's input) go
/// out as serializing their parsed value writes them (the bytes a resumed session
/// sends, so the prompt cache holds), and blocks of a type flower does not know carry
/// and lose cache marks like the others.
#[test]
fn typed_history_writes_kept_values_canonically_and_marks_unknown_blocks() {
    let parse = |text: &str| serde_json::from_str::<flower::model::RequestMessage>(text).unwrap();
    let mark = r#""cache_control":{"type":"ephemeral"}"#;
    let mut req = request();
    req.system.clear();
    req.tools.clear();
    req.messages = vec![
        parse(&format!(r#"{{"role":"user","content":[{{"type":"search_result","title":"a",{mark}}}]}}"#)),
        parse(r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"b": 1, "a": "\u00e9\/", "f": 1.50}}]}"#),
        parse(&format!(r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"text","text":"n",{mark}}}]}}]}}"#)),
        parse(&format!(r#"{{"role":"assistant","content":[{{"type":"text","text":"m3",{mark}}}]}}"#)),
        parse(&format!(r#"{{"role":"user","content":[{{"type":"text","text":"m4",{mark}}}]}}"#)),
        parse(r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"future_block","x": 2}]}"#),
    ]
    .into();
    let bytes = request_body(&req);
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.contains(r#""input":{"b":1,"a":"é/","f":1.5}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"{"role":"user","content":[{"type":"search_result","title":"a"}]}"#),
        "the oldest mark goes past the budget of four: {text}"
    );
    assert!(
        text.contains(r#"{"type":"future_block","x":2,"cache_control":{"type":"ephemeral"}}"#),
        "{text}"
    );
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        breakpoints(&body),
        [
            "/messages/2/content/0/content/0",
            "/messages/3/content/0",
            "/messages/4/content/0",
            "/messages/5/content/1"
        ]
    );
}

#[test]
fn request_body_is_deterministic() {
    let mut req = request();
    let mut messages = support::history_json(&req.messages);
    messages.push(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"z": 1, "a": [1.5, 2e10, "x"], "m": {"k": null}}}
    ]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    ]}));
    req.messages = support::history(messages.clone());
    let first = request_body(&req);
    // A copy that went through a JSON round trip (as a transcript loaded from the
    // store does) gives the same bytes.
    let reloaded: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::from_str(&m.to_string()).unwrap())
        .collect();
    let again = MessagesRequest {
        messages: support::history(reloaded),
        ..req.clone()
    };
    assert_eq!(first, request_body(&again));
    assert_eq!(first, request_body(&req));
    // Key order is the insertion order of the history, not sorted.
    let text = String::from_utf8(first).unwrap();
    assert!(
        text.contains(r#"{"z":1,"a":[1.5,20000000000.0,"x"],"m":{"k":null}}"#),
        "{text}"
    );
}

#[tokio::test]
async fn error_statuses_are_typed_with_status_kind_message_and_retry_after() {
    let cases: Vec<(u16, &str, &str, Option<u64>)> = vec![
        (
            400,
            "invalid_request_error",
            "messages: text content blocks must be non-empty",
            None,
        ),
        (401, "authentication_error", "invalid x-api-key", None),
        (
            403,
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
            None,
        ),
        (404, "not_found_error", "model: claude-nope", None),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
            None,
        ),
        (
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            Some(17),
        ),
        (500, "api_error", "Internal server error", None),
        (529, "overloaded_error", "Overloaded", Some(3)),
    ];
    let replies = cases
        .iter()
        .map(|&(status, kind, message, retry)| {
            let reply = Reply::error(status, kind, message);
            match retry {
                Some(secs) => reply.retry_after(secs),
                None => reply,
            }
        })
        .collect();
    let server = FakeServer::start(replies);
    let client = client(&server);
    for (status, kind, message, retry) in cases {
        let (result, deltas) = call(&client, &request()).await;
        let error = result.unwrap_err();
        assert_eq!(error, api_error(Some(status), kind, message, retry));
        assert_eq!(error.status(), Some(status));
        assert_eq!(error.retry_after(), retry.map(Duration::from_secs));
        assert!(error.to_string().contains(message), "{error}");
        assert!(deltas.is_empty());
    }
    // Error answers keep the connection alive, as the real API's do.
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn an_error_body_that_is_not_json_still_gives_a_useful_message() {
    let server = FakeServer::start(vec![
        Reply::raw(
            502,
            "text/html",
            "<html><body>502 Bad Gateway (nginx)</body></html>",
        ),
        Reply::raw(503, "text/plain", ""),
        Reply::raw(529, "text/plain", "try later").retry_after(2),
    ]);
    let client = client(&server);
    match call(&client, &request()).await.0.unwrap_err() {
        ModelError::Api {
            status: Some(502),
            kind,
            message,
            retry_after: None,
        } => {
            assert_eq!(kind, "http_error");
            assert!(message.contains("502 Bad Gateway (nginx)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        call(&client, &request()).await.0.unwrap_err(),
        api_error(Some(503), "http_error", "Service Unavailable", None)
    );
    // A documented status keeps its documented type even without a JSON body.
    assert_eq!(
        call(&client, &request()).await.0.unwrap_err(),
        api_error(Some(529), "overloaded_error", "try later", Some(2))
    );
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_incomplete_not_a_reply() {
    let server = FakeServer::start(vec![
        Reply::text("this answer will be cut").cut_after(Reply::FIRST_DELTA + 1),
        Reply::text("complete").cut_after(0),
    ]);
    let client = client(&server);
    let (result, deltas) = call(&client, &request()).await;
    match result {
        Err(ModelError::Incomplete { why, .. }) => assert!(why.contains("5 events"), "{why}"),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    // What streamed before the cut was shown.
    assert_eq!(
        deltas,
        [
            Delta::Text("this ans".into()),
            Delta::Text("wer will".into())
        ]
    );
    // Cut right after the headers.
    let (result, _) = call(&client, &request()).await;
    assert!(
        matches!(result, Err(ModelError::Incomplete { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_error_event_inside_a_200_stream_is_an_api_error_without_status() {
    let server = FakeServer::start(vec![Reply::text("partial answer").error_after(
        Reply::FIRST_DELTA,
        "overloaded_error",
        "Overloaded",
    )]);
    let (result, deltas) = call(&client(&server), &request()).await;
    assert_eq!(
        result.unwrap_err(),
        api_error(None, "overloaded_error", "Overloaded", None)
    );
    assert_eq!(deltas, [Delta::Text("partial ".into())]);
}

#[tokio::test]
async fn a_refused_port_is_a_connection_error_and_service_resumes_on_the_same_port() {
    let server = FakeServer::start(vec![Reply::text("back")]);
    let client = client(&server);
    server.stop_accepting();
    match call(&client, &request()).await.0 {
        Err(error @ ModelError::Connection(_)) => {
            assert!(
                error.to_string().to_lowercase().contains("connect"),
                "{error}"
            );
            // The HTTP client's error is kept as the typed source, not only as text.
            let source = std::error::Error::source(&error).expect("a source");
            assert!(source.is::<reqwest::Error>(), "{source:?}");
        }
        other => panic!("expected Connection, got {other:?}"),
    }
    assert_eq!(server.request_count(), 0);
    server.resume_accepting();
    let reply = call(&client, &request()).await.0.unwrap();
    assert_eq!(blocks(&reply), [json!({"type": "text", "text": "back"})]);
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_as_a_connection_error() {
    let server = FakeServer::start(vec![
        Reply::hang(),
        Reply::text("stalls mid-stream").hang_after(Reply::FIRST_DELTA),
    ]);
    let client = client(&server).with_idle_timeout(Duration::from_millis(300));
    for _ in 0..2 {
        match call(&client, &request()).await.0 {
            Err(error @ ModelError::Connection(_)) => {
                assert!(error.to_string().contains("timed out"), "{error}");
                let source = std::error::Error::source(&error)
                    .and_then(|s| s.downcast_ref::<std::io::Error>())
                    .map(std::io::Error::kind);
                assert_eq!(source, Some(std::io::ErrorKind::TimedOut), "{error}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn slow_but_steady_streams_do_not_time_out() {
    // Each gap is below the idle timeout, the whole stream is well above it.
    let server = FakeServer::start(vec![
        Reply::text("slow and steady")
            .chunk_chars(2)
            .delay(Duration::from_millis(100))
            .event_delay(Duration::from_millis(60)),
    ]);
    let client = client(&server).with_idle_timeout(Duration::from_millis(400));
    let reply = call(&client, &request()).await.0.unwrap();
    assert_eq!(
        blocks(&reply),
        [json!({"type": "text", "text": "slow and steady"})]
    );
}

#[tokio::test]
async fn unknown_events_and_comments_are_ignored() {
    let stream = concat!(
        ": keep-alive comment\r\n\r\n",
        "event: message_start\r\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_x\",\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n",
        "event: brand_new_event\r\ndata: {\"type\":\"brand_new_event\",\"stuff\":[1,2]}\r\n\r\n",
        "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"future_delta\",\"x\":1}}\r\n\r\n",
        "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\r\n\r\n",
        "event: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\n",
        "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n",
        "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\r\n\r\n",
        "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n",
    );
    let server = FakeServer::start(vec![Reply::raw_sse(stream)]);
    let reply = call(&client(&server), &request()).await.0.unwrap();
    assert_eq!(reply.id, "msg_x");
    assert_eq!(blocks(&reply), [json!({"type": "text", "text": "hi"})]);
    assert_eq!(reply.usage.output_tokens, 2);
}

#[tokio::test]
async fn invalid_tool_input_json_is_kept_as_a_marked_call() {
    let server = FakeServer::start(vec![Reply::events(vec![
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"m","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"Bash","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"ls"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ])]);
    // The stream itself was fine: the reply comes back, the broken input marked so the
    // engine can answer the call with an error result.
    let reply = call(&client(&server), &request()).await.0.expect("a reply");
    let block = &blocks(&reply)[0];
    assert_eq!(block["name"], "Bash");
    let why = block["input"][flower::model::types::INVALID_TOOL_INPUT]
        .as_str()
        .expect("marked input");
    assert!(why.contains("ls"), "{why}");
}

#[tokio::test]
async fn deltas_are_reported_while_the_stream_is_still_open() {
    let gate = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("first then rest").gate_after(Reply::FIRST_DELTA, &gate),
    ]);
    let client = client(&server);
    let req = request();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut on_delta = move |d: StreamDelta<'_>| {
        let _ = tx.send(own(d));
    };
    let streaming = client.stream(&req, &mut on_delta);
    let watcher = async {
        let first = rx.recv().await;
        // The server is still holding the rest of the stream.
        assert!(!gate.is_open());
        assert_eq!(gate.reached(), 1);
        gate.open();
        first
    };
    let (reply, first) = tokio::join!(streaming, watcher);
    assert_eq!(first, Some(Delta::Text("first th".into())));
    assert_eq!(
        blocks(&reply.unwrap()),
        [json!({"type": "text", "text": "first then rest"})]
    );
}

#[tokio::test]
async fn keep_alive_serves_a_conversation_on_one_connection() {
    let server = FakeServer::start((0..5).map(|i| Reply::text(format!("turn {i}"))).collect());
    let client = client(&server);
    for i in 0..5 {
        let reply = call(&client, &request()).await.0.unwrap();
        assert_eq!(blocks(&reply)[0]["text"], json!(format!("turn {i}")));
    }
    assert_eq!(server.connections(), 1);
}

#[test]
fn the_api_key_is_not_in_debug_output() {
    let client = AnthropicClient::new("http://127.0.0.1:9", "sk-ant-secret", "m").unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains("sk-ant-secret"), "{shown}");
    assert_eq!(client.base_url(), "http://127.0.0.1:9");
}
