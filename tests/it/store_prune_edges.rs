//! Pruning's numbers and seams that the rule tests do not reach (issue #16: each was a
//! surviving mutant of `src/stores/prune.rs`): the default trim threshold and cache
//! lifetime, where trimmed results go, what counts as a synthesized result, and the
//! pruning store passing every call but `load` to the stored transcript.

use crate::store_support::{assistant, bash, text, tool_result, user_blocks, user_text};
use crate::support::LoadJson;

use crate::support::is_synthesized_json as is_synthesized_result;
use crate::support::prune_json as prune;
use chrono::{DateTime, Utc};
use flower::stores::prune::{
    CacheWindow, DEFAULT_TRIM_THRESHOLD_BYTES, INTERRUPTED_BODY, PruneOptions, TRIM_POINTER_PREFIX,
    default_trim_dir,
};
use flower::stores::{PruningSessionStore, SessionKey, SessionStore, SqliteSessionStore};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The `content` of the tool result answering `id`.
fn result_body(entries: &[Value], id: &str) -> Value {
    crate::store_prune::result_for(entries, id)
        .map(|b| b["content"].clone())
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// Two turns: an old result of `old_len` bytes, then a newer turn (never trimmed).
fn old_result_of(old_len: usize) -> Vec<Value> {
    vec![
        user_text("u0", None, "look"),
        assistant("a1", Some("u0"), vec![bash("t1", "cat big")]),
        user_blocks(
            "r1",
            Some("a1"),
            vec![tool_result("t1", &"x".repeat(old_len), false)],
        ),
        assistant("a2", Some("r1"), vec![bash("t2", "cat small")]),
        user_blocks("r2", Some("a2"), vec![tool_result("t2", "small", false)]),
    ]
}

#[test]
fn the_default_trim_threshold_is_16_kib_and_a_result_of_exactly_that_stays() {
    assert_eq!(DEFAULT_TRIM_THRESHOLD_BYTES, 16 * 1024);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PruneOptions::new(dir.path().join("trimmed"));
    opts.trim = true;
    assert_eq!(opts.trim_threshold_bytes, 16 * 1024, "PruneOptions::new");

    let at = prune(old_result_of(16 * 1024), &opts);
    assert_eq!(result_body(&at, "t1"), "x".repeat(16 * 1024));
    // 1,040 bytes (16 + 1024) or 0 would trim this one too.
    let small = prune(old_result_of(2000), &opts);
    assert_eq!(result_body(&small, "t1"), "x".repeat(2000));

    let over = prune(old_result_of(16 * 1024 + 1), &opts);
    let pointer = result_body(&over, "t1");
    assert!(
        pointer.as_str().unwrap().starts_with(TRIM_POINTER_PREFIX),
        "{pointer}"
    );
}

#[test]
fn trimmed_results_of_a_run_live_in_its_trimmed_folder() {
    assert_eq!(
        default_trim_dir(Path::new("/w/.flower/runs/r1")),
        Path::new("/w/.flower/runs/r1/trimmed")
    );
}

fn at(t: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc)
}

fn stamped(mut entry: Value, t: &str) -> Value {
    entry["timestamp"] = json!(t);
    entry
}

/// Two denied calls (default pruning drops the older pair), the last reply at 10:00.
fn two_denials() -> Vec<Value> {
    let denied = |id: &str| tool_result(id, "Permission to use Bash has been denied.", true);
    vec![
        stamped(user_text("u0", None, "go"), "2026-01-01T09:59:00Z"),
        stamped(
            assistant("a1", Some("u0"), vec![bash("t1", "rm a")]),
            "2026-01-01T09:59:10Z",
        ),
        stamped(
            user_blocks("r1", Some("a1"), vec![denied("t1")]),
            "2026-01-01T09:59:11Z",
        ),
        stamped(
            assistant("a2", Some("r1"), vec![bash("t2", "rm b")]),
            "2026-01-01T09:59:20Z",
        ),
        stamped(
            user_blocks("r2", Some("a2"), vec![denied("t2")]),
            "2026-01-01T09:59:21Z",
        ),
        stamped(
            assistant("a3", Some("r2"), vec![text("I may not.")]),
            "2026-01-01T10:00:00Z",
        ),
    ]
}

#[test]
fn the_default_cache_lifetime_is_five_minutes() {
    assert_eq!(CacheWindow::DEFAULT_TTL, Duration::from_secs(300));
    let load_at = |now: &str| {
        let mut opts = PruneOptions::new(std::env::temp_dir().join("flower-unused"));
        opts.cache = Some(CacheWindow {
            ttl: CacheWindow::DEFAULT_TTL,
            now: Some(at(now)),
        });
        prune(two_denials(), &opts)
    };
    // Four minutes after the last reply the cache is warm: sent as it was.
    assert_eq!(load_at("2026-01-01T10:04:00Z"), two_denials());
    // Six minutes after, it has gone cold: the older denial goes.
    assert_eq!(load_at("2026-01-01T10:06:00Z").len(), 4);
}

#[test]
fn only_a_lone_neutral_result_named_after_its_call_counts_as_synthesized() {
    // What prune writes for a call that never got a result.
    let out = prune(
        vec![
            user_text("u0", None, "go"),
            assistant("a1", Some("u0"), vec![bash("t1", "sleep 100")]),
        ],
        &PruneOptions::new(std::env::temp_dir().join("flower-unused")),
    );
    assert_eq!(out.len(), 3);
    let made = &out[2];
    assert!(is_synthesized_result(made), "{made}");

    let with = |f: &dyn Fn(&mut Value)| {
        let mut e = made.clone();
        f(&mut e);
        is_synthesized_result(&e)
    };
    assert!(
        !with(&|e| e["uuid"] = json!("someone-else")),
        "uuid of another call"
    );
    assert!(
        !with(&|e| {
            e.as_object_mut().unwrap().remove("uuid");
        }),
        "no uuid"
    );
    assert!(
        !with(&|e| e["message"]["content"][0]["content"] = json!("real output")),
        "a real body"
    );
    assert!(
        !with(&|e| e["message"]["content"][0]["type"] = json!("text")),
        "not a tool result"
    );
    assert!(
        !with(&|e| e["message"]["content"][0]["tool_use_id"] = json!("t2")),
        "answers another call"
    );
    assert!(
        !with(&|e| {
            let block = e["message"]["content"][0].clone();
            e["message"]["content"] = json!([block.clone(), block]);
        }),
        "two blocks"
    );
    // A neutral body alone is not enough: a real interrupted result has one too.
    let interrupted = user_blocks(
        "r1",
        Some("a1"),
        vec![tool_result("t1", INTERRUPTED_BODY, true)],
    );
    assert!(!is_synthesized_result(&interrupted));
}

#[test]
fn the_pruning_store_passes_every_other_call_to_the_stored_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(SqliteSessionStore::open(&dir.path().join("sessions.db")).unwrap());
    let store = PruningSessionStore::new(inner.clone(), PruneOptions::new(dir.path()));
    let key = SessionKey::main("p", "s");
    let sub = key.sub("subagents/agent-1").unwrap();
    let input = two_denials();
    store.append(&key, &crate::support::typed(&input)).unwrap();
    store
        .append(
            &sub,
            &crate::support::typed(&[user_text("x0", None, "sub task")]),
        )
        .unwrap();

    let sessions = store.list_sessions("p").unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions, inner.list_sessions("p").unwrap());
    assert_eq!(sessions[0].session_id, "s");
    let summaries = store.list_session_summaries("p").unwrap();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries, inner.list_session_summaries("p").unwrap());
    assert_eq!(store.list_subkeys(&key).unwrap(), vec!["subagents/agent-1"]);

    // Usage is a fact of what was stored.
    let mut reply = assistant("a4", Some("a3"), vec![text("ok")]);
    reply["message"]["usage"] = json!({"input_tokens": 7, "output_tokens": 3});
    store
        .append(&key, &crate::support::typed(&[reply]))
        .unwrap();
    let usage = store.last_usage_json(&key).unwrap().unwrap();
    assert_eq!(usage["input_tokens"], 7);

    // load_pruned prunes with the options given, not the store's.
    let mut keep_all = PruneOptions::new(dir.path());
    keep_all.keep_denials = 10;
    let loaded = store.load_pruned_json(&key, &keep_all).unwrap().unwrap();
    let raw = crate::support::load_raw_json(&store, &key)
        .unwrap()
        .unwrap();
    assert_eq!(loaded, prune(raw.clone(), &keep_all));
    assert_eq!(loaded.len(), raw.len(), "every denial kept");
    assert!(store.load_json(&key).unwrap().unwrap().len() < raw.len());

    let debug = format!("{store:?}");
    assert!(
        debug.contains("PruningSessionStore") && debug.contains("keep_denials"),
        "{debug}"
    );

    store.delete(&key).unwrap();
    assert!(!store.has_session("s").unwrap());
    assert_eq!(inner.load_json(&key).unwrap(), None);
}

/// The uuid of the result synthesized for a call that never got one (pruned alone).
fn synthesized_uuid(call_id: &str) -> String {
    let out = prune(
        vec![
            user_text("u0", None, "go"),
            assistant("a1", Some("u0"), vec![bash(call_id, "sleep 100")]),
        ],
        &PruneOptions::new(std::env::temp_dir().join("flower-unused")),
    );
    out[2]["uuid"].as_str().unwrap().to_string()
}

#[test]
fn a_synthesized_result_has_a_real_uuid_of_its_own_per_call() {
    let mut seen = std::collections::HashSet::new();
    for n in 0..200 {
        let id = format!("toolu_{n:024}");
        let text = synthesized_uuid(&id);
        let parsed = uuid::Uuid::parse_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(parsed.hyphenated().to_string(), text, "canonical form");
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122, "{text}");
        assert_eq!(parsed.get_version_num(), 8, "custom version: {text}");
        // Both halves come from the id: neither is a constant.
        let (hi, lo) = parsed.as_u64_pair();
        assert!(
            seen.insert(hi) && seen.insert(lo),
            "{id} repeats a half: {text}"
        );
        assert_eq!(synthesized_uuid(&id), text, "the same every time");
    }
}

/// An old result whose `content` is the given blocks, then a newer turn.
fn old_result_with(content: Value) -> Vec<Value> {
    let mut entries = old_result_of(1);
    entries[2]["message"]["content"][0]["content"] = content;
    entries
}

#[test]
fn a_result_of_several_text_blocks_is_measured_whole_and_one_without_text_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = PruneOptions::new(dir.path().join("trimmed"));
    opts.trim = true;
    opts.trim_threshold_bytes = 1000;
    // Two blocks of 600 bytes: 1,201 bytes of text joined, over the threshold.
    let two = json!([{"type": "text", "text": "a".repeat(600)},
                     {"type": "text", "text": "b".repeat(600)}]);
    let out = prune(old_result_with(two), &opts);
    let pointer = result_body(&out, "t1");
    assert!(
        pointer.as_str().unwrap().starts_with(TRIM_POINTER_PREFIX),
        "{pointer}"
    );
    let file = dir.path().join("trimmed/sess-t1.txt");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, format!("{}\n{}", "a".repeat(600), "b".repeat(600)));

    // No text at all (an image): the image goes to a file, a line names it (and the
    // line is short, so it stays).
    let image = json!([{"type": "image", "source": {"type": "base64",
                        "media_type": "image/png", "data": "iVBORw0KGgo="}}]);
    let out = prune(old_result_with(image), &opts);
    let line = result_body(&out, "t1");
    let file = dir.path().join("trimmed/sess-t1-0.png");
    assert!(
        line.as_str().unwrap().contains(file.to_str().unwrap()),
        "{line}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"\x89PNG\r\n\x1a\n");
}

/// Two sittings: denials of `rm a`/`rm b` until a reply at 09:01, an API error at
/// 09:58, a prompt at `second` (the next sitting), denials of `rm c`/`rm d`, and a
/// `sleep` that ran six minutes before its result, the last reply at 10:08.
fn two_sittings(second: &str) -> Vec<Value> {
    use crate::store_support::api_error;
    let denied = |id: &str| tool_result(id, "Permission to use Bash has been denied.", true);
    let turn = |n: &str, parent: &str, cmd: &str, call: &str, answer: &str| {
        vec![
            stamped(
                assistant(&format!("a{n}"), Some(parent), vec![bash(n, cmd)]),
                call,
            ),
            stamped(
                user_blocks(&format!("r{n}"), Some(&format!("a{n}")), vec![denied(n)]),
                answer,
            ),
        ]
    };
    let mut entries = vec![stamped(user_text("u0", None, "go"), "2026-01-01T09:00:00Z")];
    entries.extend(turn(
        "1",
        "u0",
        "rm a",
        "2026-01-01T09:00:10Z",
        "2026-01-01T09:00:11Z",
    ));
    entries.extend(turn(
        "2",
        "r1",
        "rm b",
        "2026-01-01T09:00:20Z",
        "2026-01-01T09:00:21Z",
    ));
    entries.push(stamped(
        assistant("a3", Some("r2"), vec![text("I may not.")]),
        "2026-01-01T09:01:00Z",
    ));
    entries.push(stamped(api_error("e3", Some("a3")), "2026-01-01T09:58:00Z"));
    entries.push(stamped(user_text("u4", Some("e3"), "try again"), second));
    entries.extend(turn(
        "5",
        "u4",
        "rm c",
        "2026-01-01T10:00:10Z",
        "2026-01-01T10:00:11Z",
    ));
    entries.extend(turn(
        "6",
        "r5",
        "rm d",
        "2026-01-01T10:00:20Z",
        "2026-01-01T10:00:21Z",
    ));
    entries.push(stamped(
        assistant("a7", Some("r6"), vec![bash("7", "sleep 360")]),
        "2026-01-01T10:01:00Z",
    ));
    entries.push(stamped(
        user_blocks("r7", Some("a7"), vec![tool_result("7", "", false)]),
        "2026-01-01T10:07:00Z",
    ));
    entries.push(stamped(
        assistant("a8", Some("r7"), vec![text("done")]),
        "2026-01-01T10:08:00Z",
    ));
    entries
}

/// The calls left after a warm load at 10:10 (two minutes after the last reply).
fn calls_after_warm_load(entries: Vec<Value>) -> Vec<String> {
    let mut opts = PruneOptions::new(std::env::temp_dir().join("flower-unused"));
    opts.cache = Some(CacheWindow {
        ttl: CacheWindow::DEFAULT_TTL,
        now: Some(at("2026-01-01T10:10:00Z")),
    });
    prune(entries, &opts)
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_warm_load_prunes_only_before_the_prompt_that_came_after_the_cache_went_cold() {
    // The prompt at 10:00 came 59 minutes after the last real reply (the API error at
    // 09:58 is no reply): that load was cold, so what came before it was pruned then
    // (the older denial goes) and what came after was sent verbatim (both denials
    // stay). A tool result six minutes after its call is no prompt: no new boundary.
    assert_eq!(
        calls_after_warm_load(two_sittings("2026-01-01T10:00:00Z")),
        ["2", "5", "6", "7"]
    );
    // A prompt exactly five minutes after the reply still found the cache warm: no
    // boundary, and the whole transcript is sent as it was.
    let mut warm_all_along = two_sittings("2026-01-01T09:06:00Z");
    warm_all_along.retain(|e| e["uuid"] != "e3");
    for e in &mut warm_all_along {
        if e["uuid"] == "u4" {
            e["parentUuid"] = json!("a3");
        }
    }
    assert_eq!(
        calls_after_warm_load(warm_all_along),
        ["1", "2", "5", "6", "7"]
    );
}

#[test]
fn a_transcript_whose_start_was_lost_is_repaired_however_deep_the_cascade() {
    // The first user entry is gone: twenty assistant calls, each answered by the next
    // user entry. Each repair step uncovers the next problem (a leading assistant
    // message goes, its results become strays, the emptied message goes, and the
    // next call leads), three steps per turn: repair must keep going to the end, and
    // not stop at a step that only deleted blocks.
    const TURNS: usize = 20;
    let mut input = Vec::new();
    let mut parent: Option<String> = None;
    for n in 0..TURNS {
        let (a, r) = (format!("a{n}"), format!("r{n}"));
        input.push(assistant(
            &a,
            parent.as_deref(),
            vec![bash(&format!("t{n}"), "ls")],
        ));
        input.push(user_blocks(
            &r,
            Some(&a),
            vec![tool_result(&format!("t{n}"), "files", false)],
        ));
        parent = Some(r);
    }
    input.push(user_text("u", parent.as_deref(), "go on"));
    input.push(assistant("a", Some("u"), vec![text("ok")]));

    let opts = PruneOptions::new(std::env::temp_dir().join("flower-unused"));
    let out = prune(input, &opts);
    let uuids: Vec<&str> = out.iter().map(|e| e["uuid"].as_str().unwrap()).collect();
    assert_eq!(uuids, ["u", "a"]);
    assert_eq!(out[0]["parentUuid"], Value::Null);
}

/// A turn: a prompt, a call of `id`, its result of `len` bytes.
fn read_turn(n: u32, parent: Option<&str>, id: &str, len: usize) -> Vec<Value> {
    let (u, a, r) = (format!("u{n}"), format!("a{n}"), format!("r{n}"));
    vec![
        user_text(&u, parent, "read it"),
        assistant(&a, Some(&u), vec![bash(id, "cat big")]),
        user_blocks(&r, Some(&a), vec![tool_result(id, &"x".repeat(len), false)]),
    ]
}

fn trimming(dir: &Path) -> PruneOptions {
    let mut opts = PruneOptions::new(dir.join("trimmed"));
    opts.trim = true;
    opts.trim_threshold_bytes = 1000;
    opts
}

#[test]
fn the_newest_turn_with_results_stays_whole_whatever_follows_it() {
    // After the newest results come a reply and a new prompt: neither is a turn with
    // results, so the newest results are the one turn kept whole.
    let dir = tempfile::tempdir().unwrap();
    let mut input = read_turn(0, None, "t0", 5000);
    input.extend(read_turn(1, Some("r0"), "t1", 5000));
    input.push(assistant("a2", Some("r1"), vec![text("both read")]));
    input.push(user_text("u3", Some("a2"), "thanks"));
    let out = prune(input, &trimming(dir.path()));
    let t0 = result_body(&out, "t0");
    assert!(
        t0.as_str().unwrap().starts_with(TRIM_POINTER_PREFIX),
        "{t0}"
    );
    assert_eq!(result_body(&out, "t1"), "x".repeat(5000));
}

#[test]
fn a_trimmed_result_file_is_named_after_session_and_call_in_safe_characters() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = read_turn(0, None, "toolu_01/../x", 5000);
    input.extend(read_turn(1, Some("r0"), "t1", 10));
    for e in &mut input {
        e["sessionId"] = json!("s-1.x");
    }
    let out = prune(input, &trimming(dir.path()));
    let file = dir.path().join("trimmed").join("s-1_x-toolu_01____x.txt");
    let pointer = result_body(&out, "toolu_01/../x");
    assert!(
        pointer.as_str().unwrap().contains(file.to_str().unwrap()),
        "{pointer}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x".repeat(5000));
    let names: Vec<_> = std::fs::read_dir(dir.path().join("trimmed"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [file.file_name().unwrap()]);
}
