//! Issue #11, the interrupt case: a Ctrl-C on a terminal while a reply streams, then
//! Enter, continues with a request whose prefix is byte for byte the interrupted one's
//! (tools, system, every message, the blocks of its last message; cache marks aside, as
//! `prompt_cache.rs` defines it), so the prompt cache is read, not rewritten.

use crate::prompt_cache::{assert_extends, read_share, unmarked};
use crate::support;
use crate::terminal::{AFTER_INTERRUPT, Pty, TURN_INTERRUPTED, exited};

use serde_json::{Value, json};
use std::time::Duration;
use support::pipeline::{Env, Project};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Retries stay enabled and fast, so that an interrupt taken for a failure would show
/// as an extra request with a resume prompt.
const ENV: Env = &[
    ("TERM", Some("xterm")),
    ("FLOWER_BASE_DELAY", Some("0.05")),
    ("FLOWER_MAX_DELAY", Some("0.2")),
    ("FLOWER_PROBE_INTERVAL", Some("0.05")),
    ("FLOWER_PROBE_TIMEOUT", Some("0.5")),
    ("FLOWER_CACHE_TTL", None),
];

/// The serialized pieces of a request's prefix, in the API's order, without cache
/// marks: model, tools, system, then one piece per message but the last, then one per
/// block of the last message.
fn prefix_pieces(req: &Recorded) -> Vec<String> {
    let body = unmarked(&req.body);
    let mut pieces = vec![
        body["model"].to_string(),
        body["tools"].to_string(),
        body["system"].to_string(),
    ];
    let messages = body["messages"].as_array().unwrap();
    let (last, earlier) = messages.split_last().unwrap();
    pieces.extend(earlier.iter().map(Value::to_string));
    pieces.push(last["role"].to_string());
    pieces.extend(
        last["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string),
    );
    pieces
}

#[test]
fn a_ctrl_c_mid_reply_keeps_the_cached_prefix_byte_identical() {
    let project = Project::with("proj", ENV);
    std::fs::write(project.dir.join("a.txt"), "甲乙丙").unwrap();
    let hold = Gate::new();
    let held = "我读到了甲乙丙,接下来我要仔细想一想该怎么总结它。";
    let server = {
        let hold = hold.clone();
        FakeServer::with_handler(move |_, i| match i {
            0 => Reply::tool_use("Read", json!({"file_path": "a.txt"})),
            1 => Reply::text(held)
                .chunk_chars(4)
                .gate_after(Reply::FIRST_DELTA + 2, &hold),
            _ => Reply::text("总结好了"),
        })
    };
    server.simulate_cache();
    let mut pty = Pty::spawn(project.flower(&server, &["once", "读 a.txt 然后总结"]));

    // Ctrl-C while the second reply streams (its first pieces are on the screen).
    assert!(hold.wait_reached(TIMEOUT), "{}", pty.output());
    pty.expect(&held.chars().take(8).collect::<String>());
    pty.ctrl_c();
    pty.expect(&format!("{AFTER_INTERRUPT}\r\n> "));
    assert_eq!(server.request_count(), 2, "nothing sent before the answer");
    pty.line("");
    assert!(server.wait_for_requests(3, TIMEOUT), "{}", pty.output());
    pty.expect("总结好了");
    assert_eq!(exited(pty.wait()), Some(0), "{}", pty.output());
    hold.open();

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "no retry: {}", pty.output());
    let (interrupted, after) = (&requests[1], &requests[2]);
    // Value by value (prompt_cache.rs's definition of the prefix) ...
    assert_extends(interrupted, after);
    // ... and byte for byte: the same pieces serialize to the same text.
    let (a, b) = (prefix_pieces(interrupted), prefix_pieces(after));
    assert!(b.len() >= a.len(), "{} < {} pieces", b.len(), a.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "prefix piece {i} changed");
    }
    // What follows is the interruption and the empty answer's "继续。", nothing else:
    // the half-streamed reply is not sent back.
    let tail: Vec<Value> = after.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .skip(
            interrupted.messages().last().unwrap()["content"]
                .as_array()
                .unwrap()
                .len(),
        )
        .map(unmarked)
        .collect();
    assert_eq!(
        tail,
        [
            json!({"type": "text", "text": TURN_INTERRUPTED}),
            json!({"type": "text", "text": "继续。"}),
        ],
        "{}",
        after.raw_body
    );
    assert!(!after.raw_body.contains("仔细想一想"));
    // The fake's cache model agrees: the continuation reads what the interrupted
    // request wrote.
    let share = read_share(after);
    assert!(share >= 0.9, "cache read share {share}");
}
