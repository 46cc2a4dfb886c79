//! What counting before sending (`count_tokens`, issue #28 item 5) adds per turn.
//! Prints figures; asserts none. Run with `cargo bench --bench count`.
//!
//! 1. The bookkeeping on every recorded entry (`engine::count::content_bytes`, the bytes
//!    it adds to the prompt): nanoseconds per turn over a 200-turn session.
//! 2. How often the policy counts (`engine::count::Measure`): counts per turn over the
//!    same session, in which a few tool results are huge (a 90 KB file read now and then)
//!    and the rest are small, plus the one count of a resume.
//! 3. What one count costs: a `count_tokens` round trip through the real client for the
//!    whole 200-turn prompt against the fake server on loopback (the body is built and
//!    sent, the fake parses and records it, then answers): median and p95; and the
//!    client's own share, building that body.
//!
//! Per turn, counting adds (1) + (2) × (3).
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use flower::engine::count::{Measure, content_bytes};
use flower::model::anthropic::AnthropicClient;
use flower::model::{MessagesRequest, ModelClient};
use flower::transcript::Entry;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::{FAKE_API_KEY, FakeServer};

const TURNS: usize = 200;
/// Every this many turns, a tool result is a 90 KB file.
const HUGE_EVERY: usize = 50;
const COUNT_RUNS: usize = 50;

/// The entries of a session: a prompt, then per turn an assistant tool call and a user
/// tool result (2 KB, or 90 KB every [`HUGE_EVERY`] turns).
fn session() -> Vec<Value> {
    let mut entries = vec![
        json!({"type": "user", "message": {"role": "user", "content": "读一下这些文件,然后改 bug"}}),
    ];
    for turn in 0..TURNS {
        let id = format!("toolu_{turn:04}");
        entries.push(json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "看一下下一个文件。"},
            {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": format!("src/f{turn}.rs")}}
        ]}}));
        let size = if turn % HUGE_EVERY == HUGE_EVERY - 1 {
            90_000
        } else {
            2_000
        };
        entries.push(json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "x".repeat(size), "is_error": false}
        ]}}));
    }
    entries
}

fn main() {
    let values = session();
    let entries: Vec<Entry> = values
        .iter()
        .map(|v| Entry::deserialize(v).unwrap())
        .collect();

    // 1. Bookkeeping.
    let rounds = 20;
    let started = Instant::now();
    let mut total = 0u64;
    for _ in 0..rounds {
        for entry in &entries {
            total = total.wrapping_add(content_bytes(std::hint::black_box(entry)));
        }
    }
    let per_turn_ns = started.elapsed().as_nanos() as f64 / (rounds * TURNS) as f64;
    println!(
        "count: bookkeeping {per_turn_ns:.0} ns per turn ({} bytes of content per pass)",
        total / rounds as u64
    );

    // 2. How often: replay the session through the policy. A reply's context is the
    // prompt so far (bytes / 4) plus its own output.
    let mut measure = Measure {
        count_next: true,
        ..Measure::default()
    };
    let mut prompt_bytes = 0u64;
    let mut counts = 0usize;
    for entry in &entries {
        let bytes = content_bytes(entry);
        prompt_bytes += bytes;
        if entry.kind.as_deref() == Some("assistant") {
            measure.measured(prompt_bytes / 4);
            continue;
        }
        measure.pending_bytes += bytes;
        if measure.wants_count() {
            counts += 1;
            measure.count_next = false;
            measure.measured(prompt_bytes / 4);
        }
    }
    let per_turn = counts as f64 / TURNS as f64;
    println!(
        "count: {counts} counts over {TURNS} turns ({per_turn:.3} per turn; one for the resume, the rest for the {} huge results)",
        TURNS / HUGE_EVERY
    );

    // 3. One count of the whole prompt, through the client.
    let server = FakeServer::start(Vec::new());
    let client = AnthropicClient::new(&server.url(), FAKE_API_KEY, "claude-sonnet-5-5").unwrap();
    let request = MessagesRequest {
        system_shared: String::new(),
        model: "claude-sonnet-5-5".into(),
        max_tokens: 16_384,
        system: "You are a careful engineer.".into(),
        messages: values
            .iter()
            .map(|e| serde_json::from_str(&e["message"].to_string()).unwrap())
            .collect(),
        ..MessagesRequest::default()
    };
    // The client's own share of a count: building the body of the whole prompt.
    let mut builds: Vec<Duration> = (0..COUNT_RUNS)
        .map(|_| {
            let started = Instant::now();
            let body = flower::model::body::count_body(&request, "claude-sonnet-5-5");
            std::hint::black_box(body);
            started.elapsed()
        })
        .collect();
    builds.sort();
    let build_median = builds[builds.len() / 2];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut samples: Vec<Duration> = (0..COUNT_RUNS)
        .map(|_| {
            let started = Instant::now();
            let n = runtime.block_on(client.count_tokens(&request)).unwrap();
            assert!(n > 0);
            started.elapsed()
        })
        .collect();
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "count: one count of the {TURNS}-turn prompt ({} KB): median {:.2} ms, p95 {:.2} ms (fake server on loopback; the API adds its own latency)",
        entries.iter().map(content_bytes).sum::<u64>() / 1024,
        ms(median),
        ms(p95)
    );
    println!(
        "count: building that count's body (flower's share of it): median {:.2} ms",
        ms(build_median)
    );
    println!(
        "count: added per turn ≈ {:.3} ms (bookkeeping + counts per turn × one count)",
        per_turn_ns / 1e6 + per_turn * ms(median)
    );
}
