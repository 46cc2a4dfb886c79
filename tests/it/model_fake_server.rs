//! The fake Messages API server itself: every later integration test stands on it, so
//! its HTTP framing, recording, scripting, gates and outages are checked here, partly
//! at the byte level with a plain TCP client.

use crate::support;

use flower::model::anthropic::AnthropicClient;
use flower::model::{MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::{FAKE_API_KEY, FakeServer, Gate, Reply};

const WAIT: Duration = Duration::from_secs(10);

fn request(system: &str, user: &str) -> MessagesRequest {
    MessagesRequest {
        system_shared: String::new(),
        model: "claude-haiku-4-5".into(),
        max_tokens: 100,
        system: system.into(),
        messages: crate::support::history(vec![json!({"role": "user", "content": user})]),
        tools: Vec::new(),
        thinking: None,
        ..MessagesRequest::default()
    }
}

/// One request through the real client, from a sync test.
fn ask(server: &FakeServer, request: &MessagesRequest) -> Result<ModelReply, ModelError> {
    let client = AnthropicClient::new(&server.url(), FAKE_API_KEY, "m")
        .unwrap()
        .with_idle_timeout(WAIT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut ignore = |_: StreamDelta<'_>| {};
    runtime.block_on(client.stream(request, &mut ignore))
}

fn text_of(reply: &ModelReply) -> &str {
    reply.content[0].text().unwrap()
}

/// Sends one raw HTTP request and reads one response (chunked or content-length).
fn exchange(stream: &mut TcpStream, method: &str, path: &str, body: &str) -> (String, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "connection closed in head"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        while !body.ends_with(b"\r\n0\r\n\r\n") && body != b"0\r\n\r\n" {
            assert_eq!(
                stream.read(&mut byte).unwrap(),
                1,
                "connection closed in body"
            );
            body.push(byte[0]);
        }
    } else {
        let length: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        body.resize(length, 0);
        stream.read_exact(&mut body).unwrap();
    }
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn streams_chunked_sse_like_the_api_and_keeps_the_connection_alive() {
    let server = FakeServer::start(vec![Reply::text("hello"), Reply::text("again")]);
    let mut stream = TcpStream::connect(server.url().trim_start_matches("http://")).unwrap();
    let body = r#"{"model":"claude-x","messages":[]}"#;
    let (head, chunked) = exchange(&mut stream, "POST", "/v1/messages", body);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("content-type: text/event-stream"), "{head}");
    assert!(lower.contains("transfer-encoding: chunked"), "{head}");
    // Each chunk is one whole event, the first being message_start.
    let first_line_end = chunked.find("\r\n").unwrap();
    let size = usize::from_str_radix(&chunked[..first_line_end], 16).unwrap();
    let first = &chunked[first_line_end + 2..first_line_end + 2 + size];
    assert!(
        first.starts_with("event: message_start\ndata: {"),
        "{first}"
    );
    assert!(first.ends_with("\n\n"));
    let start: Value = serde_json::from_str(
        first
            .lines()
            .nth(1)
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(start["message"]["model"], json!("claude-x"));
    assert!(chunked.contains("event: message_stop\n"));
    assert!(chunked.ends_with("0\r\n\r\n"));

    // Same connection, next request.
    let (head, chunked) = exchange(&mut stream, "POST", "/v1/messages", body);
    assert!(head.starts_with("HTTP/1.1 200 OK"));
    assert!(chunked.contains(r#""text":"again""#), "{chunked}");
    assert_eq!(server.connections(), 1);
    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].raw_body, body);
    assert_eq!(recorded[1].body["model"], json!("claude-x"));
    assert_eq!(recorded[1].header("Content-Type"), Some("application/json"));
}

#[test]
fn error_replies_carry_the_api_error_body_and_headers() {
    let server = FakeServer::start(vec![Reply::rate_limited(30)]);
    let mut stream = TcpStream::connect(server.url().trim_start_matches("http://")).unwrap();
    let (head, body) = exchange(&mut stream, "POST", "/v1/messages", "{}");
    assert!(
        head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 30\r\n"),
        "{head}"
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["type"], json!("error"));
    assert_eq!(body["error"]["type"], json!("rate_limit_error"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rate limit")
    );
}

#[test]
fn an_exhausted_script_and_unknown_routes_fail_loudly() {
    let server = FakeServer::start(vec![Reply::text("only one")]);
    assert_eq!(
        text_of(&ask(&server, &request("", "a")).unwrap()),
        "only one"
    );
    match ask(&server, &request("", "b")) {
        Err(ModelError::Api {
            status: Some(500),
            kind,
            message,
            ..
        }) => {
            assert_eq!(kind, "api_error");
            assert!(message.contains("fake server: script exhausted"));
        }
        other => panic!("{other:?}"),
    }
    let mut stream = TcpStream::connect(server.url().trim_start_matches("http://")).unwrap();
    let (head, body) = exchange(&mut stream, "GET", "/v1/models", "");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert!(body.contains("not_found_error"));
    // Every request is recorded, answered or not.
    assert_eq!(server.request_count(), 3);
    assert_eq!(server.requests()[2].method, "GET");
}

#[test]
fn a_handler_routes_by_system_prompt_and_last_user_message() {
    let server = FakeServer::with_handler(|req, index| {
        if req.system().contains("reviewer") {
            Reply::text(format!("review #{index}"))
        } else if req.last_user_text().contains("seed") {
            Reply::text("banana")
        } else {
            Reply::error(400, "invalid_request_error", "unexpected")
        }
    });
    assert_eq!(
        text_of(&ask(&server, &request("You are a reviewer.", "x")).unwrap()),
        "review #0"
    );
    assert_eq!(
        text_of(&ask(&server, &request("Coder.", "read seed.txt")).unwrap()),
        "banana"
    );
    assert!(ask(&server, &request("Coder.", "other")).is_err());
    // Switching the script at runtime.
    server.set_handler(|_, _| Reply::text("switched"));
    assert_eq!(
        text_of(&ask(&server, &request("", "x")).unwrap()),
        "switched"
    );
}

#[test]
fn recorded_request_helpers() {
    let server = FakeServer::start(vec![Reply::text("ok")]);
    let mut req = request("sys prompt", "unused");
    req.tools = vec![flower::model::ToolDef {
        name: "Read".into(),
        description: "d".into(),
        input_schema: flower::content::Raw::of_tree(&json!({"type": "object"})),
    }];
    req.messages = crate::support::history(vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "1\tbanana"},
            {"type": "text", "text": "what is it?"}
        ]}),
    ]);
    ask(&server, &req).unwrap();
    let recorded = &server.requests()[0];
    assert_eq!(recorded.system(), "sys prompt");
    assert_eq!(recorded.model(), "claude-haiku-4-5");
    assert_eq!(recorded.messages().len(), 3);
    assert_eq!(recorded.last_user_text(), "1\tbanana\nwhat is it?");
    assert_eq!(recorded.tool_names(), ["Read"]);
    assert_eq!(recorded.tool_results()[0]["tool_use_id"], json!("t1"));
}

#[test]
fn requests_are_recorded_before_they_are_answered_and_gates_hold_replies() {
    let before = Gate::new();
    let during = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("held").gate_before(&before),
        Reply::text("held mid-stream").gate_after(Reply::FIRST_DELTA, &during),
    ]);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| ask(&server, &request("", "1")));
        assert!(server.wait_for_requests(1, WAIT));
        assert!(before.wait_reached(WAIT));
        // Recorded, still unanswered.
        assert!(!first.is_finished());
        before.open();
        assert_eq!(text_of(&first.join().unwrap().unwrap()), "held");

        let second = scope.spawn(|| ask(&server, &request("", "2")));
        assert!(during.wait_reached(WAIT));
        assert!(!second.is_finished());
        during.open();
        assert_eq!(text_of(&second.join().unwrap().unwrap()), "held mid-stream");
    });
}

#[test]
fn waiting_for_requests_that_never_come_times_out() {
    let server = FakeServer::start(Vec::new());
    let started = Instant::now();
    assert!(!server.wait_for_requests(1, Duration::from_millis(50)));
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(server.wait_for_requests(0, Duration::ZERO));
}

#[test]
fn stop_accepting_refuses_connections_and_closes_idle_ones_until_resumed() {
    let server = FakeServer::start(vec![Reply::text("one"), Reply::text("two")]);
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut idle = TcpStream::connect(&addr).unwrap();
    exchange(&mut idle, "POST", "/v1/messages", "{}");

    server.stop_accepting();
    let refused = TcpStream::connect(&addr).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // The kept-alive connection is closed too: the outage is total.
    idle.set_read_timeout(Some(WAIT)).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(idle.read(&mut byte).unwrap(), 0);

    server.resume_accepting();
    assert_eq!(
        server.port(),
        addr.rsplit(':').next().unwrap().parse::<u16>().unwrap()
    );
    assert_eq!(text_of(&ask(&server, &request("", "x")).unwrap()), "two");
    assert_eq!(server.connections(), 2);
}

#[test]
fn dropping_the_server_releases_held_and_hanging_connections() {
    let gate = Gate::new();
    let server = FakeServer::start(vec![Reply::text("never").gate_before(&gate), Reply::hang()]);
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut held = TcpStream::connect(&addr).unwrap();
    let mut hung = TcpStream::connect(&addr).unwrap();
    for s in [&mut held, &mut hung] {
        s.write_all(b"POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    assert!(server.wait_for_requests(2, WAIT));
    drop(server);
    let mut byte = [0u8; 1];
    assert_eq!(held.read(&mut byte).unwrap(), 0);
    assert_eq!(hung.read(&mut byte).unwrap(), 0);
}

#[test]
fn configure_points_a_command_at_the_server() {
    let server = FakeServer::start(Vec::new());
    let mut cmd = std::process::Command::new("env");
    server.configure(&mut cmd);
    let envs: Vec<(String, Option<String>)> = cmd
        .get_envs()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.map(|v| v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    assert!(envs.contains(&("ANTHROPIC_BASE_URL".into(), Some(server.url()))));
    assert!(envs.contains(&("ANTHROPIC_API_KEY".into(), Some(FAKE_API_KEY.into()))));
    assert!(envs.contains(&("ANTHROPIC_MODEL".into(), None)));
}

#[tokio::test]
async fn async_tests_wait_without_blocking_their_runtime() {
    let gate = Gate::new();
    let server = FakeServer::start(vec![Reply::text("released").gate_before(&gate)]);
    let client = AnthropicClient::new(&server.url(), FAKE_API_KEY, "m").unwrap();
    let req = request("", "x");
    let mut ignore = |_: StreamDelta<'_>| {};
    // The client runs on this test's single-threaded runtime, next to the waits.
    let (reply, ()) = tokio::join!(client.stream(&req, &mut ignore), async {
        assert!(server.wait_for_requests_async(1, WAIT).await);
        assert!(gate.wait_reached_async(WAIT).await);
        gate.open();
    });
    assert_eq!(text_of(&reply.unwrap()), "released");
    assert!(
        !server
            .wait_for_requests_async(2, Duration::from_millis(20))
            .await
    );
}
