//! The prompt cache survives retries, wakes and interrupts: within its lifetime each
//! request repeats the previous one's prefix byte for byte, and the fake server's cache
//! model counts it as read.

use crate::support;
use crate::support::Flower;

use crate::support::prune_json as prune;
use flower::continuity::resilience::RESUME_PROMPT;
use flower::stores::prune::{CacheWindow, INTERRUPTED_BODY, PruneOptions, STALE_BODY};
use serde_json::{Value, json};
use std::process::Output;
use support::{FakeServer, Recorded, Reply};
use tempfile::TempDir;

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The body without its cache marks (they move; the prefix is what is cached).
pub(crate) fn unmarked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), unmarked(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(unmarked).collect()),
        other => other.clone(),
    }
}

/// `later` sends everything `earlier` sent, in the same order and the same bytes:
/// tools, system, every message, and the blocks of `earlier`'s last message first.
pub(crate) fn assert_extends(earlier: &Recorded, later: &Recorded) {
    let (a, b) = (unmarked(&earlier.body), unmarked(&later.body));
    assert_eq!(a["model"], b["model"]);
    assert_eq!(a["tools"], b["tools"]);
    assert_eq!(a["system"], b["system"]);
    let (a, b) = (
        a["messages"].as_array().unwrap(),
        b["messages"].as_array().unwrap(),
    );
    assert!(b.len() >= a.len(), "{} < {} messages", b.len(), a.len());
    let last = a.len() - 1;
    assert_eq!(a[..last], b[..last], "an earlier message changed");
    let (x, y) = (
        a[last]["content"].as_array().unwrap(),
        b[last]["content"].as_array().unwrap(),
    );
    assert_eq!(a[last]["role"], b[last]["role"]);
    assert_eq!(x[..], y[..x.len()], "the last message's blocks changed");
}

pub(crate) fn read_share(request: &Recorded) -> f64 {
    let cache = request.cache.expect("simulated");
    cache.read as f64 / cache.prompt() as f64
}

#[test]
fn a_retry_resends_the_failed_prefix_with_one_resume_prompt() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.txt"), "甲乙丙").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "a.txt"})),
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::text("读完了"),
    ]);
    server.simulate_cache();
    let out = Flower::new(&["once", "读 a.txt", "--json"])
        .server(&server)
        .dir(&dir)
        .attempts(4)
        .no_delay()
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&out)["result"], "读完了");
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // The first retry adds the resume prompt after what failed; the second sends the
    // very same bytes again instead of stacking another.
    assert_extends(&requests[1], &requests[2]);
    assert_eq!(requests[2].raw_body, requests[3].raw_body);
    assert_eq!(requests[3].raw_body.matches(RESUME_PROMPT).count(), 1);
    for retry in &requests[2..] {
        let share = read_share(retry);
        assert!(share >= 0.9, "cache read share {share}");
    }
}

#[test]
fn a_wake_within_the_cache_lifetime_keeps_the_prefix_and_a_cold_one_prunes() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Bash", json!({"command": "ls"})),
        Reply::tool_use("Bash", json!({"command": "ls"})),
        Reply::text("看完了"),
        Reply::text("接着看"),
        Reply::text("冷了再看"),
    ]);
    server.simulate_cache();
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let out = Flower::new(&["once", "看看目录", "--json"])
        .server(&server)
        .dir(&dir)
        .attempts(4)
        .no_delay()
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = json_of(&out)["session_id"].as_str().unwrap().to_string();

    let out = Flower::new(&["once", "再看看", "--json", "--resume", &id])
        .server(&server)
        .dir(&dir)
        .attempts(4)
        .no_delay()
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    // The earlier `ls` result is not turned stale while the cache holds it.
    assert!(!requests[3].raw_body.contains(STALE_BODY));
    assert_extends(&requests[2], &requests[3]);
    assert!(
        read_share(&requests[3]) >= 0.9,
        "{}",
        read_share(&requests[3])
    );

    // Once the cache is cold (FLOWER_CACHE_TTL=0 stands for that), pruning applies.
    let out = Flower::new(&["once", "冷了", "--json", "--resume", &id])
        .server(&server)
        .dir(&dir)
        .attempts(4)
        .no_delay()
        .envs([("FLOWER_CACHE_TTL", "0")])
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.requests()[4].raw_body.contains(STALE_BODY));
}

/// A turn with many parallel tool calls still reads the previous turn from the cache:
/// the end of the previous turn carries a breakpoint of its own.
#[test]
fn many_parallel_tool_calls_still_hit_the_cache() {
    let dir = TempDir::new().unwrap();
    for i in 0..15 {
        std::fs::write(dir.path().join(format!("f{i}.txt")), format!("{i}")).unwrap();
    }
    let mut many = Reply::tool_use("Read", json!({"file_path": "f0.txt"}));
    for i in 1..15 {
        many = many.then_tool_use("Read", json!({"file_path": format!("f{i}.txt")}));
    }
    let server = FakeServer::start(vec![
        Reply::tool_use("Glob", json!({"pattern": "*.txt"})),
        many,
        Reply::text("都读了"),
    ]);
    server.simulate_cache();
    let out = Flower::new(&["once", "读所有文件", "--json"])
        .server(&server)
        .dir(&dir)
        .attempts(4)
        .no_delay()
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = &server.requests()[2];
    // Everything the previous request sent is read back (bytes/4 rounding aside), not
    // just the tools and system prompt the lookback from the newest mark would reach.
    let previous = server.requests()[1].cache.unwrap();
    let read = last.cache.unwrap().read;
    assert!(read + 2 >= previous.prompt(), "read {read} of {previous:?}");
}

/// An interrupted tool call's result keeps its words while the cache is warm (the
/// model already read them); only a cold load rewrites it.
#[test]
fn an_interruption_is_neutralized_only_when_the_cache_is_cold() {
    let now = chrono::Utc::now();
    let at = |ago_s: i64| {
        (now - chrono::Duration::seconds(ago_s))
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    let entry = |uuid: &str, parent: Option<&str>, kind: &str, content: Value, ago: i64| {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s",
            "timestamp": at(ago), "message": {"role": kind, "content": content}})
    };
    let interrupted = "[Request interrupted by user for tool use]";
    let entries = vec![
        entry("u1", None, "user", json!("跑测试"), 120),
        entry(
            "a1",
            Some("u1"),
            "assistant",
            json!([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cargo test"}}]),
            100,
        ),
        entry(
            "u2",
            Some("a1"),
            "user",
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": interrupted, "is_error": true}]),
            90,
        ),
        entry("u3", Some("u2"), "user", json!("继续。"), 80),
        entry(
            "a2",
            Some("u3"),
            "assistant",
            json!([{"type": "text", "text": "好"}]),
            60,
        ),
    ];
    let mut options = PruneOptions::new(std::env::temp_dir());
    options.cache = Some(CacheWindow::new(CacheWindow::DEFAULT_TTL));
    let warm = prune(entries.clone(), &options);
    assert_eq!(warm, entries, "warm: fed exactly as sent");
    options.cache = Some(CacheWindow {
        ttl: CacheWindow::DEFAULT_TTL,
        now: Some(now + chrono::Duration::minutes(10)),
    });
    let cold = prune(entries, &options);
    assert!(
        cold[2].to_string().contains(INTERRUPTED_BODY),
        "{}",
        cold[2]
    );
}
