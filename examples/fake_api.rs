//! The tests' fake Messages API (`tests/it/support/fake.rs`) as a process, for test
//! suites that are not Rust: the Python package's pytest fixture starts it.
//!
//! ```sh
//! cargo run --example fake_api -- '{"answer": "向日葵", "tools": 1, "hold": [2]}'
//! ```
//!
//! It prints its base URL on the first line, then `request N` (1-based) as each request
//! arrives, before it is answered. It exits when its standard input closes, so it never
//! outlives the test run that started it.
//!
//! The model it plays: after each prompt it calls `Read` on `seed.txt` `tools` times
//! (default 1; with `"write": {"file_path": …, "content": …}` it calls `Write` with
//! that instead), then answers `answer` (default `向日葵`). Requests numbered in `hold` are
//! read and never answered (a test kills or cancels the run meanwhile). With `record`
//! (a file path), each request's body is appended to that file, one JSON line each.
#![allow(clippy::disallowed_macros)] // prints its URL
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../tests/it/support/fake.rs"]
mod fake;

use fake::{FakeServer, Recorded, Reply};
use serde_json::{Value, json};
use std::io::{Read, Write};

fn main() {
    let config: Value = std::env::args()
        .nth(1)
        .map(|text| serde_json::from_str(&text).expect("the argument is a JSON object"))
        .unwrap_or_else(|| json!({}));
    let answer = config["answer"].as_str().unwrap_or("向日葵").to_string();
    let tools = config["tools"].as_u64().unwrap_or(1) as usize;
    let hold: Vec<usize> = config["hold"]
        .as_array()
        .map(|held| {
            held.iter()
                .filter_map(|n| n.as_u64())
                .map(|n| n as usize)
                .collect()
        })
        .unwrap_or_default();
    let record = config["record"].as_str().map(str::to_string);
    let call = match config.get("write") {
        Some(write) => ("Write", write.clone()),
        None => ("Read", json!({"file_path": "seed.txt"})),
    };
    let server = FakeServer::with_handler(move |req, i| {
        let number = i + 1;
        if let Some(path) = &record {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("the record file opens");
            let _ = writeln!(file, "{}", req.body);
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "request {number}");
        let _ = out.flush();
        if hold.contains(&number) {
            Reply::hang()
        } else if calls_since_prompt(req) < tools {
            Reply::tool_use(call.0, call.1.clone())
        } else {
            Reply::text(answer.clone())
        }
    });
    println!("{}", server.url());
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// How many tool results the conversation has had since its last typed prompt.
fn calls_since_prompt(req: &Recorded) -> usize {
    let is_result = |m: &Value| {
        m["content"]
            .as_array()
            .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
    };
    req.messages()
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .take_while(|m| is_result(m))
        .count()
}
