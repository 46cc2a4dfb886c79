//! The typed transcript (`flower::transcript::Entry`, `Block`): a line of Claude Code's
//! JSONL read into types and written again is the same bytes, unknown fields and
//! unknown block types included, and the types read the facts the line holds.

use flower::transcript::{Block, Chain, Content, Entry, Kind, System};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::path::Path;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/fixtures/claude_code_2.1.332_session.jsonl"
);

/// Reads `line` as an entry and writes it again.
fn round_trip(line: &str) -> String {
    Entry::parse(line)
        .unwrap_or_else(|e| panic!("{e}: {line}"))
        .to_json()
        .unwrap()
}

#[test]
fn every_line_of_a_claude_code_transcript_goes_back_out_byte_for_byte() {
    let text = std::fs::read_to_string(FIXTURE).unwrap();
    for line in text.lines() {
        assert_eq!(round_trip(line), line);
    }
}

#[test]
fn the_types_read_what_a_claude_code_transcript_holds() {
    let text = std::fs::read_to_string(FIXTURE).unwrap();
    let entries: Vec<Entry> = text.lines().map(|l| Entry::parse(l).unwrap()).collect();
    let calls: Vec<&str> = entries
        .iter()
        .flat_map(Entry::tool_uses)
        .filter_map(|call| call.name.as_deref())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let results = entries
        .iter()
        .flat_map(Entry::blocks)
        .filter(|b| matches!(b, Block::ToolResult(r) if !r.text().is_empty()))
        .count();
    assert_eq!(results, 2);
    assert_eq!(entries.iter().filter(|e| e.is_synthetic_error()).count(), 1);
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.system() == Some(System::Other(Some("turn_duration"))))
            .count(),
        2
    );
    let first = entries.iter().find(|e| e.kind() == Kind::User).unwrap();
    assert_eq!(first.parent_uuid, Some(None));
    assert_eq!(
        first.content(),
        Some(&Content::Text("greet.sh 里的问候改成 hello".into()))
    );
    // Claude Code's fields flower does not read are kept, in place.
    assert!(first.rest.get("userType").is_some());
    assert!(first.rest.get("promptId").is_some());
    // Lines without a uuid (titles, snapshots) read too.
    assert_eq!(entries.iter().filter(|e| e.uuid().is_none()).count(), 7);
}

#[test]
fn what_flower_writes_goes_back_out_byte_for_byte() {
    let mut chain = Chain::new("s1", Path::new("/w"));
    let blocks = |v: serde_json::Value| serde_json::from_value::<Content>(v).unwrap();
    let mut lines = vec![
        chain.user_text("写个脚本"),
        chain.user(blocks(json!([{"type": "text", "text": "a"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]))),
        chain.tool_result("toolu_1", "out\n\u{1}", true),
        chain.tool_result_content("toolu_2", blocks(json!([{"type": "text", "text": "x"}])), false),
        chain.hook_context("hook said"),
        chain.continuation("go on"),
        chain.memory("m", &["CLAUDE.md".to_string()]),
        chain.mcp_tools(flower::transcript::Raw::of(&json!([{"name": "mcp__s__t"}])).unwrap(), flower::transcript::Raw::of(&json!([])).unwrap()),
        chain.api_error("API Error: 529"),
    ];
    let mut side = Chain::sidechain("s1", Path::new("/w"), "agent-1");
    lines.push(side.user_text("sub"));
    for entry in lines {
        let line = entry.to_json().unwrap();
        assert_eq!(round_trip(&line), line);
        assert_eq!(one_pass(&line), Entry::read_by_text(&line).unwrap());
    }
}

/// `line` read in one pass only (no hand-back to the read from text): a line as flower
/// writes it takes the fast path, not only reads right. (Claude Code writes a
/// `tool_result` block's `tool_use_id` before its `type`: such lines are read from
/// their text, the same entry a little slower.)
fn one_pass(line: &str) -> Entry {
    flower::content::object::one_pass::<Entry>(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The lines flower writes, spelled out: the fields in the order flower has always
/// written them (the header, the flags, then the message), so that a transcript
/// written by this flower is the bytes an older one wrote.
#[test]
fn what_flower_writes_is_the_format_it_always_wrote() {
    let mut chain = Chain::new("s1", Path::new("/w"));
    let first = chain.user_text("写个脚本");
    let header = |e: &Entry, kind: &str| {
        let mut m = serde_json::Map::new();
        m.insert("type".into(), json!(kind));
        m.insert("uuid".into(), json!(e.uuid()));
        m.insert("parentUuid".into(), json!(e.parent_uuid.clone().flatten()));
        m.insert("sessionId".into(), json!("s1"));
        m.insert("timestamp".into(), json!(e.timestamp));
        m.insert("cwd".into(), json!("/w"));
        m.insert("isSidechain".into(), json!(false));
        m
    };
    let same = |e: &Entry, expected: serde_json::Map<String, serde_json::Value>| {
        assert_eq!(
            e.to_json().unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    };
    let mut want = header(&first, "user");
    want.insert(
        "message".into(),
        json!({"role": "user", "content": "写个脚本"}),
    );
    same(&first, want);

    let result = chain.tool_result("toolu_1", "out", true);
    let mut want = header(&result, "user");
    want.insert("message".into(), json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "out", "is_error": true}]}));
    same(&result, want);

    let context = chain.hook_context("hook said");
    let mut want = header(&context, "user");
    want.insert("isHookContext".into(), json!(true));
    want.insert(
        "message".into(),
        json!({"role": "user", "content": [{"type": "text", "text": "hook said"}]}),
    );
    same(&context, want);

    let memory = chain.memory("m", &["CLAUDE.md".to_string()]);
    let mut want = header(&memory, "system");
    want.insert("subtype".into(), json!("memory"));
    want.insert("content".into(), json!("m"));
    want.insert("level".into(), json!("info"));
    want.insert("memoryFiles".into(), json!(["CLAUDE.md"]));
    same(&memory, want);

    let failed = chain.api_error("API Error: 529");
    let mut want = header(&failed, "assistant");
    want.insert("isApiErrorMessage".into(), json!(true));
    let id = failed.message.as_ref().unwrap().id.clone();
    want.insert("message".into(), json!({
        "id": id, "type": "message", "role": "assistant", "model": "<synthetic>",
        "content": [{"type": "text", "text": "API Error: 529"}],
        "stop_reason": "stop_sequence",
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }));
    same(&failed, want);

    let reply = flower::model::ModelReply {
        id: "msg_1".into(),
        model: "claude-sonnet-4-5".into(),
        content: vec![Block::text_block("done")],
        stop_reason: None,
        stop_details: Some(flower::transcript::Raw::of(&json!({"category": "x"})).unwrap()),
        usage: flower::model::Usage {
            input_tokens: 3,
            ..Default::default()
        },
    };
    let answer = chain.assistant(&reply);
    let mut want = header(&answer, "assistant");
    want.insert("message".into(), json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": null,
        "usage": {"input_tokens": 3, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        "stop_details": {"category": "x"},
    }));
    same(&answer, want);
    assert_eq!(answer.parent_uuid, Some(failed.uuid.clone()));

    let mut side = Chain::sidechain("s1", Path::new("/w"), "agent-1");
    let sub = side.user_text("sub");
    let mut want = header(&sub, "user");
    want.insert("isSidechain".into(), json!(true));
    want.insert("agentId".into(), json!("agent-1"));
    want.insert("message".into(), json!({"role": "user", "content": "sub"}));
    same(&sub, want);
}

#[test]
fn an_entry_built_in_memory_is_written_in_flowers_field_order() {
    let mut entry = Entry {
        message: Some(flower::transcript::Message {
            role: Some("user".into()),
            content: Some(Content::Blocks(vec![Block::text_block("hi")])),
            ..Default::default()
        }),
        kind: Some("user".into()),
        uuid: Some("u1".into()),
        parent_uuid: Some(None),
        ..Entry::default()
    };
    entry
        .rest
        .insert("version", flower::transcript::Raw::of("2.1").unwrap());
    assert_eq!(
        entry.to_json().unwrap(),
        r#"{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":[{"type":"text","text":"hi"}]},"version":"2.1"}"#
    );
}

#[test]
fn keys_written_with_escapes_read_as_the_keys_they_spell() {
    // A key is borrowed from the line unless it holds an escape: both read alike, at
    // every level (entry, message, block), and a kept one keeps its key.
    let line = r#"{"ty\u0070e":"user","uuid":"u1","message":{"r\u006fle":"user","content":[{"type":"tool_result","tool_u\u0073e_id":"t1","content":"ok"}]},"a\"b":1}"#;
    let entry = Entry::parse(line).unwrap();
    assert_eq!(entry.kind.as_deref(), Some("user"));
    let message = entry.message.as_ref().unwrap();
    assert_eq!(message.role.as_deref(), Some("user"));
    match entry.blocks() {
        [Block::ToolResult(result)] => {
            assert_eq!(result.tool_use_id.as_deref(), Some("t1"));
            assert_eq!(result.text(), "ok");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(entry.rest.get("a\"b").map(|v| v.get()), Some("1"));
    assert_eq!(
        entry.to_json().unwrap(),
        r#"{"type":"user","uuid":"u1","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"a\"b":1}"#
    );
}

#[test]
fn a_value_not_of_the_type_flower_reads_is_kept_as_written() {
    // A lone surrogate (JavaScript's JSON.stringify writes one; Rust's strings cannot
    // hold it), a number written as a float, a repeated key, an unknown block type.
    let lines = [
        r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"\ud83d"}]}}"#,
        r#"{"type":"assistant","message":{"usage":{"input_tokens":1.0,"output_tokens":2}}}"#,
        r#"{"type":"user","uuid":"a","uuid":"b"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"mcp_tool_use","id":"x","server_name":"s"},7,"s",{"text":"no type"}]}}"#,
        r#"{"type":"user","message":{"content":{"not":"a list"}}}"#,
        r#"{ "type" : "user" }"#,
    ];
    for line in lines {
        let entry = Entry::parse(line).unwrap();
        let out = entry.to_json().unwrap();
        if line.starts_with("{ ") {
            assert_eq!(out, r#"{"type":"user"}"#);
        } else {
            assert_eq!(out, line);
        }
    }
    let usage = Entry::parse(lines[1]).unwrap();
    let usage = usage.turn_usage().unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (None, Some(2)));
    // A repeated key reads as JSON.parse and serde_json read it: the last one.
    assert_eq!(Entry::parse(lines[2]).unwrap().uuid(), Some("b"));
    let unknown = Entry::parse(lines[3]).unwrap();
    assert!(
        unknown
            .blocks()
            .iter()
            .all(|b| matches!(b, Block::Unknown(_)))
    );
}

/// A content that is neither a string nor a list is no `Content`, and the error says
/// what one is (the entry keeps such a value as written, above).
#[test]
fn a_content_of_another_type_is_refused_saying_what_a_content_is() {
    for bad in ["5", "{}", "true", "null"] {
        let e = serde_json::from_str::<Content>(bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected a string or a list of blocks"),
            "{bad}: {e}"
        );
    }
    assert_eq!(
        serde_json::from_str::<Content>(r#""hi""#).unwrap(),
        Content::Text("hi".into())
    );
}

/// The constructors write the blocks the API reads, and the reader reads them back.
#[test]
fn a_block_built_by_its_constructor_is_the_block_the_api_writes() {
    let input = flower::content::ToolInput::of(&json!({"file_path": "/tmp/é.txt"})).unwrap();
    let call = Block::tool_use("toolu_01", "Read", input);
    let written = serde_json::to_string(&call).unwrap();
    assert_eq!(
        written,
        r#"{"type":"tool_use","id":"toolu_01","name":"Read","input":{"file_path":"/tmp/é.txt"}}"#
    );
    let read: Block = serde_json::from_str(&written).unwrap();
    let read = read.as_tool_use().unwrap();
    assert_eq!(
        (read.id.as_deref(), read.name.as_deref()),
        (Some("toolu_01"), Some("Read"))
    );
    let text = Block::text_block("hé");
    assert_eq!(
        serde_json::to_string(&text).unwrap(),
        r#"{"type":"text","text":"hé"}"#
    );
}

/// Every block names its `type`, one flower does not know included; a block without
/// one (or not an object) names none.
#[test]
fn a_block_names_its_type_known_or_not() {
    let line = r#"{"type":"assistant","message":{"content":[{"type":"mcp_tool_use","id":"x"},{"type":"text","text":"t"},7,{"text":"no type"},{"type":5}]}}"#;
    let entry = Entry::parse(line).unwrap();
    let names: Vec<Option<String>> = entry.blocks().iter().map(Block::type_name).collect();
    assert_eq!(
        names,
        [
            Some("mcp_tool_use".to_string()),
            Some("text".into()),
            None,
            None,
            None
        ]
    );
    let kinds: Vec<Option<&str>> = entry.blocks().iter().map(Block::kind).collect();
    assert_eq!(kinds, [None, Some("text"), None, None, None]);
}

/// Thinking, plain or redacted, is told from the rest (a reply cut while the model was
/// thinking holds nothing else).
#[test]
fn thinking_plain_or_redacted_is_told_from_the_rest() {
    let line = r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"},{"type":"text","text":"x"}]}}"#;
    let entry = Entry::parse(line).unwrap();
    let blocks = entry.blocks();
    let thinking: Vec<bool> = blocks.iter().map(Block::is_thinking).collect();
    assert_eq!(thinking, [true, true, false]);
    assert!(flower::content::is_thinking_only(&blocks[..2]));
    assert!(!flower::content::is_thinking_only(blocks));
}

/// A carried value (`Raw`) is the text it came as: read, compared, shown and made.
#[test]
fn a_carried_value_is_the_text_it_came_as() {
    use flower::transcript::Raw;
    let raw = Raw::from_text(r#"{"b":1, "a":[true]}"#.to_string()).unwrap();
    assert_eq!(raw.get(), r#"{"b":1, "a":[true]}"#);
    assert_eq!(format!("{raw:?}"), r#"{"b":1, "a":[true]}"#);
    assert_eq!(raw.parse::<Value>().unwrap(), json!({"a": [true], "b": 1}));
    assert!(Raw::from_text("{".to_string()).is_err());
    // Equal by their text, not by their meaning.
    let spaced = Raw::from_text(r#"{"b":1,"a":[true]}"#.to_string()).unwrap();
    assert_ne!(raw, spaced);
    assert_eq!(raw, raw.clone());
    assert_eq!(Raw::of(&json!({"k": "v"})).unwrap().get(), r#"{"k":"v"}"#);
    assert_eq!(Raw::of_tree(&[1, 2]).get(), "[1,2]");
    assert_eq!(Raw::null().get(), "null");
}

/// An object carried as written (`RawObject`): its fields in order, repeated keys
/// kept, the last one read; a key set again stays in its place.
#[test]
fn an_object_carried_as_written_keeps_its_fields_in_order() {
    use flower::content::RawObject;
    use flower::transcript::Raw;
    let text = r#"{"b":1,"a":{"x":2},"b":3}"#;
    let mut object: RawObject = serde_json::from_str(text).unwrap();
    assert_eq!(serde_json::to_string(&object).unwrap(), text);
    assert_eq!((object.len(), object.is_empty()), (3, false));
    assert_eq!(object.get("b").map(Raw::get), Some("3"));
    assert_eq!(object.get("a").map(Raw::get), Some(r#"{"x":2}"#));
    assert!(object.get("c").is_none());
    let keys: Vec<&str> = object.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["b", "a", "b"]);
    assert_eq!(
        object.at(1).map(|(k, v)| (k, v.get())),
        Some(("a", r#"{"x":2}"#))
    );
    assert!(object.at(3).is_none());
    object.insert("a", Raw::null());
    object.insert("c", Raw::of_tree(&true));
    // A repeated key: the one read is the one set.
    object.insert("b", Raw::of_tree(&4));
    assert_eq!(object.get("b").map(Raw::get), Some("4"));
    assert_eq!(
        serde_json::to_string(&object).unwrap(),
        r#"{"b":1,"a":null,"b":4,"c":true}"#
    );
    object.push("d".into(), Raw::null());
    let fields: Vec<(String, String)> = object
        .into_fields()
        .map(|(k, v)| (k, v.get().to_string()))
        .collect();
    assert_eq!(fields.len(), 5);
    assert_eq!(fields[4], ("d".to_string(), "null".to_string()));
    assert!(RawObject::default().is_empty());
    // The same object borrowed from its text.
    use flower::content::object::Fields;
    let borrowed = Fields::of_str(text).unwrap();
    assert_eq!((borrowed.len(), borrowed.is_empty()), (3, false));
    assert_eq!(borrowed.get("b").map(|v| v.get()), Some("3"));
    assert!(Fields::of_str("{}").unwrap().is_empty());
    let e = serde_json::from_str::<RawObject>("[1]")
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected a JSON object"), "{e}");
}

/// A line that is no JSON object is refused, saying so.
#[test]
fn a_line_that_is_no_object_is_refused_saying_so() {
    for line in ["[1]", "5", r#""text""#] {
        let e = Entry::parse(line).unwrap_err().to_string();
        assert!(e.contains("expected a JSON object"), "{line}: {e}");
    }
}

// ---- the property test ----

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        "[a-z]{0,8}",
        "[\\x00-\\x1f\"\\\\/é中😀\u{2028}\u{7f} a]{0,10}",
        any::<String>(),
    ]
    .boxed()
}

fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
    ]
    .boxed()
}

/// Any JSON value.
fn any_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..4)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
    .boxed()
}

/// What the generated lines are like.
#[derive(Clone, Copy)]
enum Shape {
    /// Anything: fields of other types, in any order, unknown block types.
    Loose,
    /// As the API, Claude Code and flower write them: each field of the type flower
    /// reads, a block's `type` first and one flower knows, unknown fields under names
    /// flower does not declare. What the one-pass read takes.
    Written,
}

/// A field's value: mostly of the type flower reads, sometimes anything.
fn typed(shape: Shape, strategy: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    match shape {
        Shape::Loose => prop_oneof![6 => strategy, 1 => any_json()].boxed(),
        Shape::Written => strategy,
    }
}

fn string() -> BoxedStrategy<Value> {
    text().prop_map(Value::String).boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    any::<bool>().prop_map(Value::Bool).boxed()
}

fn nullable_string() -> BoxedStrategy<Value> {
    prop_oneof![Just(Value::Null), string()].boxed()
}

/// An object of some of `known` (with values of their strategies) and some fields
/// flower does not know, in any order.
fn object(shape: Shape, known: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let known: Vec<_> = known
        .into_iter()
        .map(|(key, value)| {
            prop::option::weighted(0.7, value.prop_map(move |v| (key.to_string(), v)))
        })
        .collect();
    let unknown = prop::collection::vec((text(), any_json()), 0..3);
    (known, unknown)
        .prop_flat_map(move |(known, unknown)| {
            let unknown = unknown.into_iter().map(move |(key, value)| match shape {
                Shape::Loose => (key, value),
                Shape::Written => (format!("_{key}"), value),
            });
            let fields: Vec<(String, Value)> = known.into_iter().flatten().chain(unknown).collect();
            Just(fields).prop_shuffle()
        })
        .prop_map(move |mut fields| {
            if let (Shape::Written, Some(at)) =
                (shape, fields.iter().position(|(k, _)| k == "type"))
            {
                let tag = fields.remove(at);
                fields.insert(0, tag);
            }
            fields
        })
        .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>()))
        .boxed()
}

const BLOCK_TYPES: [&str; 14] = [
    "text",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "image",
    "document",
    "mcp_tool_use",
    "container_upload",
    "a_block_from_the_future",
    "",
];

fn block(shape: Shape, depth: u32) -> BoxedStrategy<Value> {
    let content = if depth == 0 {
        typed(shape, string())
    } else {
        typed(
            shape,
            prop_oneof![string(), blocks(shape, depth - 1)].boxed(),
        )
    };
    let types = match shape {
        Shape::Loose => &BLOCK_TYPES[..],
        Shape::Written => &BLOCK_TYPES[..10],
    };
    let typed = |strategy| typed(shape, strategy);
    object(
        shape,
        vec![
            (
                "type",
                typed(prop::sample::select(types).prop_map(Value::from).boxed()),
            ),
            ("text", typed(string())),
            ("thinking", typed(string())),
            ("signature", typed(string())),
            ("data", typed(string())),
            ("id", typed(string())),
            ("name", typed(string())),
            ("input", any_json()),
            ("tool_use_id", typed(string())),
            ("content", content),
            ("is_error", typed(boolean())),
            ("citations", any_json()),
            ("cache_control", any_json()),
            ("source", any_json()),
            ("title", typed(string())),
            ("context", typed(string())),
        ],
    )
}

fn blocks(shape: Shape, depth: u32) -> BoxedStrategy<Value> {
    prop::collection::vec(block(shape, depth), 0..4)
        .prop_map(Value::Array)
        .boxed()
}

fn usage(shape: Shape) -> BoxedStrategy<Value> {
    let tokens = || typed(shape, any::<u32>().prop_map(Value::from).boxed());
    object(
        shape,
        vec![
            ("input_tokens", tokens()),
            ("output_tokens", tokens()),
            ("cache_creation_input_tokens", tokens()),
            ("cache_read_input_tokens", tokens()),
            ("server_tool_use", any_json()),
        ],
    )
}

fn message(shape: Shape) -> BoxedStrategy<Value> {
    let typed = |strategy| typed(shape, strategy);
    object(
        shape,
        vec![
            ("id", typed(string())),
            ("type", typed(string())),
            (
                "role",
                typed(
                    prop::sample::select(vec!["user", "assistant"])
                        .prop_map(Value::from)
                        .boxed(),
                ),
            ),
            ("model", typed(string())),
            (
                "content",
                typed(prop_oneof![string(), blocks(shape, 1)].boxed()),
            ),
            ("stop_reason", typed(nullable_string())),
            ("stop_sequence", typed(nullable_string())),
            ("usage", typed(usage(shape))),
            ("stop_details", any_json()),
        ],
    )
}

fn entry(shape: Shape) -> BoxedStrategy<Value> {
    let typed = |strategy| typed(shape, strategy);
    let kinds = vec![
        "user",
        "assistant",
        "system",
        "attachment",
        "summary",
        "progress",
    ];
    object(
        shape,
        vec![
            (
                "type",
                typed(prop::sample::select(kinds).prop_map(Value::from).boxed()),
            ),
            ("uuid", typed(string())),
            ("parentUuid", typed(nullable_string())),
            ("sessionId", typed(string())),
            ("timestamp", typed(string())),
            ("cwd", typed(string())),
            ("isSidechain", typed(boolean())),
            ("agentId", typed(string())),
            (
                "subtype",
                typed(
                    prop::sample::select(vec!["memory", "mcp_tools", "hook", "api_error"])
                        .prop_map(Value::from)
                        .boxed(),
                ),
            ),
            ("content", typed(string())),
            ("level", typed(string())),
            (
                "memoryFiles",
                typed(
                    prop::collection::vec(string(), 0..3)
                        .prop_map(Value::Array)
                        .boxed(),
                ),
            ),
            ("mcpTools", any_json()),
            ("mcpFailures", any_json()),
            ("hookEvent", typed(string())),
            ("hookSubject", typed(string())),
            ("hookRuns", any_json()),
            ("isApiErrorMessage", typed(boolean())),
            ("isHookContext", typed(boolean())),
            ("isContinuation", typed(boolean())),
            ("message", typed(message(shape))),
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// A JSONL line (as Claude Code and flower write one: compact) read into the types
    /// and written again is the same bytes, whatever fields and blocks it holds; and
    /// the types read what it says.
    #[test]
    fn a_line_goes_back_out_byte_for_byte(value in entry(Shape::Loose)) {
        let line = serde_json::to_string(&value).unwrap();
        let entry = Entry::parse(&line).unwrap();
        prop_assert_eq!(entry.to_json().unwrap(), line);
        if let Some(kind) = value["type"].as_str() {
            prop_assert_eq!(entry.kind.as_deref(), Some(kind));
        }
        if let Some(list) = value["message"]["content"].as_array()
            && value["message"].is_object()
        {
            prop_assert_eq!(entry.blocks().len(), list.len());
            for (block, written) in entry.blocks().iter().zip(list) {
                if let Some(kind) = block.kind() {
                    prop_assert_eq!(Some(kind), written["type"].as_str());
                }
                if let (Some(text), Block::Text(_)) = (written["text"].as_str(), block) {
                    prop_assert_eq!(block.text(), Some(text));
                }
            }
        }
    }

    /// The one-pass read (what a resume and every view take for a line as written)
    /// reads the same entry as the read from each field's text, for lines as flower
    /// and the API write them (where it is taken) and for any line (where it gives
    /// the line back to the other read).
    #[test]
    fn the_one_pass_read_and_the_read_from_text_read_the_same_entry(
        value in prop_oneof![entry(Shape::Written), entry(Shape::Loose)]
    ) {
        let line = serde_json::to_string(&value).unwrap();
        let by_text = Entry::read_by_text(&line).unwrap();
        prop_assert_eq!(Entry::parse(&line).unwrap(), by_text.clone());
        prop_assert_eq!(Entry::from_json(line.as_bytes()).unwrap(), by_text);
    }

}

/// Every block type flower knows, as the API writes it (`type` first), is read in one
/// pass, and reads as what the text read reads.
#[test]
fn every_block_type_as_the_api_writes_it_is_read_in_one_pass() {
    let lines = [
        r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"},{"type":"text","text":"x","citations":[]},{"type":"tool_use","id":"toolu_1","name":"Read","input":{}},{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_2","content":{}}]}}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}}]}}"#,
    ];
    for line in lines {
        let entry = one_pass(line);
        assert_eq!(entry, Entry::read_by_text(line).unwrap());
        assert!(
            entry
                .blocks()
                .iter()
                .all(|b| !matches!(b, Block::Unknown(_))),
            "{line}"
        );
    }
}

/// The one pass takes a block only by a `type` written first: a block whose first
/// field merely holds a type's name is handed back to the read from text, which reads
/// its real `type`.
#[test]
fn a_block_whose_type_is_not_first_is_not_read_in_one_pass() {
    use flower::content::object::one_pass;
    let first = r#"{"type":"tool_use","name":"text","id":"x"}"#;
    assert!(one_pass::<Block>(first).unwrap().as_tool_use().is_some());
    for later in [
        r#"{"name":"text","type":"tool_use","id":"x"}"#,
        r#"{"id":"thinking","type":"text","text":"t"}"#,
        r#"{"name":"text","id":"x"}"#,
    ] {
        assert!(one_pass::<Block>(later).is_err(), "{later}");
        let read: Block = serde_json::from_str(later).unwrap();
        assert_eq!(
            read.kind(),
            serde_json::from_str::<Value>(later).unwrap()["type"].as_str()
        );
        assert_eq!(serde_json::to_string(&read).unwrap(), later);
    }
}
