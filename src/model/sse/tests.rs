//! The SSE parser and the message assembler, on recorded and made-up streams.

use super::*;
use serde_json::{Value, json};

/// Blocks as JSON.
fn json_of(blocks: &[Block]) -> Value {
    serde_json::from_str(&serde_json::to_string(blocks).unwrap()).unwrap()
}

/// A stream recorded from the API's documented shape, with CRLF line ends, a
/// comment, a multi-line `data:`, an unknown event and non-ASCII text (so that
/// splits fall inside multi-byte characters).
const RECORDED: &str = concat!(
    ": a comment line\r\n",
    "event: message_start\r\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":7,\"cache_read_input_tokens\":11,\"output_tokens\":1}}}\r\n",
    "\r\n",
    "event: ping\r\n",
    "data: {\"type\": \"ping\"}\r\n",
    "\r\n",
    "event: content_block_start\r\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"思考 ✓\"}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYUs=\"}}\r\n",
    "\r\n",
    "event: content_block_stop\r\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\r\n",
    "\r\n",
    "event: content_block_start\r\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hé 🌸\"}}\r\n",
    "\r\n",
    "event: some_future_event\r\n",
    "data: not even json\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\r\n",
    "data: \"delta\":{\"type\":\"text_delta\",\"text\":\" là\"}}\r\n",
    "\r\n",
    "event: content_block_stop\r\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\r\n",
    "\r\n",
    "event: content_block_start\r\n",
    "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"Read\",\"input\":{}}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/tmp/\"}}\r\n",
    "\r\n",
    "event: content_block_delta\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"é.txt\\\", \\\"limit\\\": 5}\"}}\r\n",
    "\r\n",
    "event: content_block_stop\r\n",
    "data: {\"type\":\"content_block_stop\",\"index\":2}\r\n",
    "\r\n",
    "event: message_delta\r\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":42}}\r\n",
    "\r\n",
    "event: message_stop\r\n",
    "data: {\"type\":\"message_stop\"}\r\n",
    "\r\n",
);

#[derive(Debug, PartialEq)]
enum Seen {
    Text(String),
    Thinking(String),
    Tool(String, String),
}

fn run(chunks: &[&[u8]]) -> (Result<ModelReply, ModelError>, Vec<Seen>) {
    let mut parser = SseParser::new();
    let mut asm = MessageAssembler::new();
    let mut seen = Vec::new();
    let mut on_delta = |d: StreamDelta<'_>| {
        seen.push(match d {
            StreamDelta::Text(t) => Seen::Text(t.to_string()),
            StreamDelta::Thinking(t) => Seen::Thinking(t.to_string()),
            StreamDelta::ToolUseStart { id, name } => Seen::Tool(id.into(), name.into()),
        })
    };
    for chunk in chunks {
        for event in parser.feed(chunk) {
            if let Err(e) = asm.handle(&event, &mut on_delta) {
                return (Err(e), seen);
            }
        }
    }
    (asm.finish("stream ended"), seen)
}

fn expected_reply() -> ModelReply {
    ModelReply {
        id: "msg_01".into(),
        model: "claude-sonnet-4-5-20250929".into(),
        content: vec![
            Block::Thinking(ThinkingBlock {
                kind: Some("thinking".into()),
                thinking: Some("思考 ✓".into()),
                signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYUs=".into()),
                ..ThinkingBlock::default()
            }),
            Block::text_block("Hé 🌸 là"),
            Block::tool_use(
                "toolu_01",
                "Read",
                crate::content::ToolInput::of(&json!({"file_path": "/tmp/é.txt", "limit": 5}))
                    .unwrap(),
            ),
        ],
        stop_reason: Some("tool_use".into()),
        stop_details: None,
        usage: Usage {
            input_tokens: 25,
            output_tokens: 42,
            cache_creation_input_tokens: 7,
            cache_read_input_tokens: 11,
            ..Usage::default()
        },
    }
}

fn expected_deltas() -> Vec<Seen> {
    vec![
        Seen::Thinking("思考 ✓".into()),
        Seen::Text("Hé 🌸".into()),
        Seen::Text(" là".into()),
        Seen::Tool("toolu_01".into(), "Read".into()),
    ]
}

#[test]
fn whole_stream_in_one_chunk() {
    let (reply, seen) = run(&[RECORDED.as_bytes()]);
    assert_eq!(reply.unwrap(), expected_reply());
    assert_eq!(seen, expected_deltas());
}

#[test]
fn every_split_point_gives_the_same_reply() {
    let bytes = RECORDED.as_bytes();
    for i in 0..=bytes.len() {
        let (reply, seen) = run(&[&bytes[..i], &bytes[i..]]);
        assert_eq!(reply.as_ref().ok(), Some(&expected_reply()), "split at {i}");
        // Text arrives in the same pieces whatever the byte split.
        assert_eq!(seen, expected_deltas(), "split at {i}");
    }
}

#[test]
fn byte_by_byte_and_every_pair_of_splits_in_a_window() {
    let bytes = RECORDED.as_bytes();
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(run(&singles).0.unwrap(), expected_reply());
    // Three chunks: every pair of cut points around the multi-byte text and around
    // the multi-line data event (the full quadratic space is needlessly slow).
    for anchor in ["Hé 🌸", "index\":1,\r\ndata"] {
        let start = RECORDED.find(anchor).unwrap() - 8;
        let end = start + anchor.len() + 16;
        for i in start..end {
            for j in i..end {
                let (reply, _) = run(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(reply.unwrap(), expected_reply(), "splits at {i},{j}");
            }
        }
    }
}

#[test]
fn line_ends_lf_cr_and_crlf_are_equivalent() {
    let lf = RECORDED.replace("\r\n", "\n");
    let cr = RECORDED.replace("\r\n", "\r");
    for variant in [lf, cr] {
        let bytes = variant.as_bytes();
        for i in 0..=bytes.len() {
            let (reply, _) = run(&[&bytes[..i], &bytes[i..]]);
            assert_eq!(reply.unwrap(), expected_reply(), "split at {i}");
        }
    }
}

#[test]
fn parser_fields_comments_and_multiline_data() {
    let mut p = SseParser::new();
    let events = p.feed(
        b"\xEF\xBB\xBFdata: a\ndata:b\ndata\n: comment\nid: 7\nretry: 10\n\nevent: x\n\n\nevent: y\ndata:  two spaces\n\n",
    );
    assert_eq!(
        events,
        vec![
            SseEvent {
                event: "message".into(),
                data: "a\nb\n".into()
            },
            SseEvent {
                event: "y".into(),
                data: " two spaces".into()
            },
        ]
    );
    // An event without its blank line is not dispatched.
    assert!(p.feed(b"data: partial").is_empty());
    assert!(p.feed(b"\r").is_empty());
    // The `\n` after a chunk-final `\r` ends the same line: it is not a blank line.
    assert!(p.feed(b"").is_empty());
    assert!(p.feed(b"\n").is_empty());
    assert_eq!(p.feed(b"\r\n")[0].data, "partial");
    // A lone `\r` ends a line too.
    assert_eq!(p.feed(b"data: z\r\r")[0].data, "z");
}

#[test]
fn stream_cut_before_message_stop_is_incomplete() {
    let cut = RECORDED.find("event: message_stop").unwrap();
    let (reply, _) = run(&[&RECORDED.as_bytes()[..cut]]);
    match reply {
        Err(ModelError::Incomplete { why, .. }) => {
            assert!(why.contains("stream ended"), "{why}")
        }
        other => panic!("expected Incomplete, got {other:?}"),
    }
    let (reply, _) = run(&[b""]);
    assert!(
        matches!(reply, Err(ModelError::Incomplete { why: w, .. }) if w.contains("before message_start"))
    );
}

fn events(list: &[(&str, Value)]) -> Vec<u8> {
    let mut out = String::new();
    for (name, data) in list {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    out.into_bytes()
}

fn start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":3,"output_tokens":1}}}),
    )
}

#[test]
fn error_event_is_an_api_error_without_status() {
    let bytes = events(&[
        start(),
        (
            "error",
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ),
    ]);
    let (reply, _) = run(&[&bytes]);
    assert_eq!(
        reply.unwrap_err(),
        ModelError::Api {
            status: None,
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
            retry_after: None
        }
    );
}

#[test]
fn tool_input_empty_is_an_empty_object_and_invalid_is_marked() {
    let tool = |json_pieces: &[&str]| {
        let mut list = vec![
            start(),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"Glob","input":{}}}),
            ),
        ];
        for p in json_pieces {
            list.push((
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":p}}),
            ));
        }
        list.push((
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ));
        list.push(("message_stop", json!({"type":"message_stop"})));
        run(&[&events(&list)]).0
    };
    let reply = tool(&[]).unwrap();
    assert_eq!(
        json_of(&reply.content),
        json!([{"type":"tool_use","id":"t","name":"Glob","input":{}}])
    );
    assert_eq!(
        json_of(&tool(&[""]).unwrap().content)[0]["input"],
        json!({})
    );
    let broken = json_of(&tool(&["{\"pattern\": ", "\"*.rs\""]).unwrap().content);
    let marker = &broken[0]["input"][crate::model::types::INVALID_TOOL_INPUT];
    assert!(marker.as_str().unwrap().contains("*.rs"), "{marker}");
    let not_object = json_of(&tool(&["[1]"]).unwrap().content);
    assert!(not_object[0]["input"][crate::model::types::INVALID_TOOL_INPUT].is_string());
}

#[test]
fn redacted_thinking_kept_verbatim_and_usage_fields_merged() {
    let redacted = json!({"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"});
    let bytes = events(&[
        start(),
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block": redacted}),
        ),
        (
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
        (
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9,"cache_read_input_tokens":null}}),
        ),
        (
            "message_delta",
            json!({"type":"message_delta","delta":{},"usage":{"output_tokens":12,"input_tokens":30}}),
        ),
        ("message_stop", json!({"type":"message_stop"})),
    ]);
    let reply = run(&[&bytes]).0.unwrap();
    assert_eq!(json_of(&reply.content), json!([redacted]));
    assert_eq!(reply.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 30,
            output_tokens: 12,
            ..Usage::default()
        }
    );
}

#[test]
fn malformed_known_event_is_protocol_error_unknown_is_ignored() {
    let mut asm = MessageAssembler::new();
    let mut sink = |_: StreamDelta<'_>| {};
    let bad = SseEvent {
        event: "message_delta".into(),
        data: "{oops".into(),
    };
    assert!(matches!(
        asm.handle(&bad, &mut sink),
        Err(ModelError::Protocol { .. })
    ));
    let unknown = SseEvent {
        event: "brand_new".into(),
        data: "{oops".into(),
    };
    assert!(asm.handle(&unknown, &mut sink).is_ok());
    let orphan = SseEvent {
        event: "content_block_delta".into(),
        data:
            json!({"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}})
                .to_string(),
    };
    assert!(matches!(
        asm.handle(&orphan, &mut sink),
        Err(ModelError::Protocol { .. })
    ));
}
