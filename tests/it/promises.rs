//! Issue #16: promises that break silently. Each test here was seen to fail on the
//! breakage its doc comment names (made by hand in a worktree, then reverted), and
//! each goes through the public surface: the library API or the `flower` binary.

use crate::faults_support::tool_use_ids;
use crate::flow::Script;
use crate::store_support::{api_error, assistant, bash, text, tool_result, user_blocks, user_text};
use crate::support;
use crate::support::tool_input;

use crate::support::prune_json as prune;
use flower::continuity::resilience::{ErrorClass, Resilience, classify, classify_error};
use flower::engine::permissions::{Decision, Permissions};
use flower::model::ModelError;
use flower::stores::prune::PruneOptions;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};
use support::pipeline::{Agent, Project, agent_of, text as lossy};
use support::{FakeServer, Recorded, Reply};

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}", lossy(&out.stderr)))
}

/// The `tool_result` blocks of the newest message of a request.
pub(crate) fn last_results(req: &Recorded) -> Vec<Value> {
    req.messages()
        .last()
        .and_then(|m| m["content"].as_array())
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn perms(allow: &[&str], deny: &[&str]) -> Permissions {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Permissions::new(&owned(allow), &owned(deny)).expect("valid rules")
}

fn allowed(p: &Permissions, tool: &str, input: Value, ws: &Path) -> bool {
    matches!(p.check(tool, &tool_input(&input), ws), Decision::Allow)
}

// ---------------------------------------------------------------------------------
// keep_denials: the runtime's default keeps exactly one denial
// ---------------------------------------------------------------------------------

/// Breakage: `RuntimeOptions::default()` with `keep_denials: usize::MAX`. A cold resume
/// (`FLOWER_CACHE_TTL=0`, so pruning applies) of a session with two denied calls sends
/// only the newest one, its call and its result.
#[test]
fn a_resumed_session_sees_only_the_newest_denied_call() {
    let project = Project::new();
    std::fs::write(project.dir.join("a.txt"), "a").unwrap();
    std::fs::write(project.dir.join("b.txt"), "b").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Bash", json!({"command": "rm a.txt"})),
        Reply::tool_use("Bash", json!({"command": "rm b.txt"})),
        Reply::text("删不掉,算了"),
        Reply::text("好"),
    ]);
    let deny = ["--disallowed-tools", "Bash(rm:*)"];
    let mut args = vec!["once", "清理一下", "--json"];
    args.extend(deny);
    let out = project.run(&server, &args);
    assert!(out.status.success(), "{}", lossy(&out.stderr));
    let id = json_of(&out)["session_id"].as_str().unwrap().to_string();
    // Both calls were denied (the files are there) and the model saw both denials.
    assert!(project.dir.join("a.txt").exists() && project.dir.join("b.txt").exists());
    let third = &server.requests()[2];
    assert_eq!(
        tool_use_ids(third),
        ["toolu_fake_0000_0", "toolu_fake_0001_0"]
    );

    let mut args = vec!["once", "再试试", "--json", "--resume", &id];
    args.extend(deny);
    let out = project
        .command(&server, &args)
        .env("FLOWER_CACHE_TTL", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", lossy(&out.stderr));
    let resumed = &server.requests()[3];
    assert_eq!(
        tool_use_ids(resumed),
        ["toolu_fake_0001_0"],
        "only the newest denied call: {}",
        resumed.raw_body
    );
    assert!(!resumed.raw_body.contains("toolu_fake_0000_0"));
    assert!(resumed.raw_body.contains("rm b.txt"));
    assert!(!resumed.raw_body.contains("rm a.txt"));
}

// ---------------------------------------------------------------------------------
// FLOWER_BASE_DELAY changes the delay
// ---------------------------------------------------------------------------------

/// Breakage: `base_delay_for` computing from the default 4 s instead of
/// `self.base_delay`.
#[test]
fn a_non_default_base_delay_is_the_backoff_it_says() {
    let r = Resilience {
        base_delay: 0.5,
        max_delay: 100.0,
        ..Resilience::default()
    };
    let secs: Vec<f64> = (1..=4).map(|a| r.base_delay_for(a).as_secs_f64()).collect();
    assert_eq!(secs, [0.5, 1.0, 2.0, 4.0]);
    let (from_env, warnings) =
        Resilience::from_lookup(|name| (name == "FLOWER_BASE_DELAY").then(|| "0.05".to_string()));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(from_env.base_delay_for(1), Duration::from_millis(50));
    assert_eq!(from_env.base_delay_for(3), Duration::from_millis(200));
    let zero = Resilience {
        base_delay: 0.0,
        ..Resilience::default()
    };
    assert_eq!(zero.base_delay_for(5), Duration::ZERO);
    assert_eq!(zero.delay(5, None), Duration::ZERO);
}

/// The same breakage through the binary: with `FLOWER_BASE_DELAY=0.05` the retry line
/// announces a wait that rounds to 0 s (the default base would say 3–5 s), and two
/// retries are over long before even one default backoff could have passed.
#[test]
fn flower_base_delay_from_the_environment_sets_the_announced_backoff() {
    let project = Project::new();
    let server = FakeServer::start(vec![
        Reply::overloaded(),
        Reply::overloaded(),
        Reply::text("好了"),
    ]);
    let started = Instant::now();
    let out = project
        .command(&server, &["once", "你好"])
        .env("FLOWER_MAX_ATTEMPTS", "4")
        .env("FLOWER_BASE_DELAY", "0.05")
        .env("FLOWER_MAX_DELAY", "120")
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(server.request_count(), 3);
    let retries: Vec<&str> = stderr.lines().filter(|l| l.contains("↻")).collect();
    assert_eq!(retries.len(), 2, "{stderr}");
    for (line, attempt) in retries.iter().zip(2..) {
        assert!(
            line.contains(&format!("↻ 0s 后第 {attempt}/4 次尝试")),
            "{line}"
        );
    }
    // Generous: the default base would need at least 3 + 6 s.
    assert!(took < Duration::from_secs(9), "took {took:?}");
}

// ---------------------------------------------------------------------------------
// Jitter, second test: a non-default base
// ---------------------------------------------------------------------------------

/// Breakage: a jitter factor outside [0.75, 1.25] (e.g. `0.5 + fastrand::f64()`), or
/// none at all.
#[test]
fn jitter_of_a_small_base_stays_within_a_quarter_and_varies() {
    let r = Resilience {
        base_delay: 0.2,
        max_delay: 1.0,
        ..Resilience::default()
    };
    for attempt in [1, 2, 4] {
        let base = r.base_delay_for(attempt).as_secs_f64();
        let samples: Vec<f64> = (0..1000)
            .map(|_| r.delay(attempt, None).as_secs_f64())
            .collect();
        for s in &samples {
            assert!(
                *s >= 0.75 * base - 1e-9 && *s <= 1.25 * base + 1e-9,
                "attempt {attempt}: {s} outside ±25 % of {base}"
            );
        }
        let distinct: HashSet<u64> = samples.iter().map(|s| s.to_bits()).collect();
        assert!(distinct.len() > 100, "attempt {attempt}: the delay varies");
        let below = samples.iter().filter(|s| **s < base).count();
        assert!(
            (300..=700).contains(&below),
            "attempt {attempt}: {below}/1000 below the base"
        );
    }
    // At the cap (1.0 s for attempt 4) the jitter still applies around the cap.
    assert_eq!(r.base_delay_for(4), Duration::from_secs(1));
}

// ---------------------------------------------------------------------------------
// Fatal before transient
// ---------------------------------------------------------------------------------

/// Breakage: `classify` testing the transient phrases before the fatal ones.
#[test]
fn an_auth_failure_that_mentions_the_connection_is_fatal() {
    for text in [
        "401 Unauthorized: connection refused by the auth proxy",
        "authentication_error: invalid x-api-key, then connection reset by peer",
        "HTTP 403 forbidden; connection closed",
    ] {
        assert_eq!(classify(text), ErrorClass::Fatal, "{text}");
        // Each text says a transient thing too: without its auth words it is one.
        let rest = text
            .to_lowercase()
            .split(['.', ';', ','])
            .find(|part| part.contains("connection"))
            .map(|part| part.split(':').next_back().unwrap().to_string())
            .unwrap();
        assert_eq!(classify(&rest), ErrorClass::Transient, "{rest}");
    }
    // With no status and a kind of no meaning, the text decides, and fatal wins.
    let err = ModelError::Api {
        status: None,
        kind: "odd_error".into(),
        message: "401 Unauthorized: connection closed".into(),
        retry_after: None,
    };
    assert_eq!(classify_error(&err), ErrorClass::Fatal);
    // The control: the same words without the auth failure are transient.
    assert_eq!(
        classify("connection refused by the proxy"),
        ErrorClass::Transient
    );
}

// ---------------------------------------------------------------------------------
// Synthetic errors: each mark alone is enough
// ---------------------------------------------------------------------------------

fn around(error: Value) -> Vec<Value> {
    vec![
        user_text("u1", None, "do it"),
        assistant("a1", Some("u1"), vec![bash("t1", "cargo build")]),
        user_blocks("u2", Some("a1"), vec![tool_result("t1", "built", false)]),
        error,
        user_text("u3", Some("e1"), "接着做"),
        assistant("a2", Some("u3"), vec![text("done")]),
    ]
}

fn pruned_uuids(entries: Vec<Value>) -> Vec<String> {
    let opts = PruneOptions::new(std::env::temp_dir().join("flower-promises-unused"));
    prune(entries, &opts)
        .iter()
        .filter_map(|e| e["uuid"].as_str().map(str::to_string))
        .collect()
}

/// Breakage: `is_synthetic_error` looking only at `message.model`.
#[test]
fn an_entry_flagged_is_api_error_message_alone_is_pruned() {
    let mut flagged = api_error("e1", Some("u2"));
    flagged["message"]["model"] = json!("claude-sonnet-4-5");
    assert_eq!(
        pruned_uuids(around(flagged)),
        ["u1", "a1", "u2", "u3", "a2"]
    );
}

/// Breakage: `is_synthetic_error` looking only at the `isApiErrorMessage` flag.
#[test]
fn an_entry_of_the_synthetic_model_alone_is_pruned() {
    let mut synthetic = api_error("e1", Some("u2"));
    synthetic
        .as_object_mut()
        .unwrap()
        .remove("isApiErrorMessage");
    assert_eq!(
        pruned_uuids(around(synthetic)),
        ["u1", "a1", "u2", "u3", "a2"]
    );
    // The control: an ordinary reply in the same place is kept.
    let mut ordinary = api_error("e1", Some("u2"));
    ordinary
        .as_object_mut()
        .unwrap()
        .remove("isApiErrorMessage");
    ordinary["message"]["model"] = json!("claude-sonnet-4-5");
    assert!(pruned_uuids(around(ordinary)).contains(&"e1".to_string()));
}

// ---------------------------------------------------------------------------------
// Deny before allow
// ---------------------------------------------------------------------------------

/// Breakage: `Permissions::check` returning Allow for a whole-tool allow rule before
/// the deny rules are looked at.
#[test]
fn a_content_deny_beats_a_whole_tool_allow_for_every_kind_of_tool() {
    let ws = Path::new("/w");
    let p = perms(&["Bash"], &["Bash(rm:*)"]);
    assert!(!allowed(&p, "Bash", json!({"command": "rm -rf x"}), ws));
    assert!(allowed(&p, "Bash", json!({"command": "ls"}), ws));
    for tool in ["Read", "Edit", "Write"] {
        let p = perms(&[tool], &[&format!("{tool}(/w/secret/**)")]);
        assert!(
            !allowed(&p, tool, json!({"file_path": "/w/secret/key"}), ws),
            "{tool}"
        );
        assert!(
            allowed(&p, tool, json!({"file_path": "/w/open.txt"}), ws),
            "{tool}"
        );
    }
    let p = perms(&["Task"], &["Task(reviewer-admin)"]);
    assert!(!allowed(
        &p,
        "Task",
        json!({"subagent_type": "reviewer-admin", "prompt": "x"}),
        ws
    ));
    assert!(allowed(
        &p,
        "Task",
        json!({"subagent_type": "reviewer", "prompt": "x"}),
        ws
    ));
    let p = perms(&["Fetch"], &["Fetch(*evil*)"]);
    assert!(!allowed(&p, "Fetch", json!({"url": "https://evil/a"}), ws));
    assert!(allowed(&p, "Fetch", json!({"url": "https://good/a"}), ws));
}

/// Breakage: a matching content allow rule deciding before the deny rules (allow
/// `Bash(git:*)` must not let `git push` through a `Bash(git push:*)` deny), for
/// content rules of paths and of other tools too.
#[test]
fn a_content_deny_beats_a_matching_content_allow() {
    let ws = Path::new("/w");
    let p = perms(&["Bash(git:*)"], &["Bash(git push:*)"]);
    assert!(!allowed(&p, "Bash", json!({"command": "git push"}), ws));
    assert!(allowed(&p, "Bash", json!({"command": "git log"}), ws));
    let p = perms(&["Read(/w/**)"], &["Read(/w/.env)"]);
    assert!(!allowed(&p, "Read", json!({"file_path": "/w/.env"}), ws));
    assert!(allowed(&p, "Read", json!({"file_path": "/w/src/a.rs"}), ws));
    let p = perms(&["Task(review*)"], &["Task(reviewer-admin)"]);
    assert!(!allowed(
        &p,
        "Task",
        json!({"subagent_type": "reviewer-admin"}),
        ws
    ));
    // The same rule in both lists: deny.
    let p = perms(&["Read"], &["Read"]);
    assert!(!allowed(&p, "Read", json!({"file_path": "/w/a"}), ws));
}

/// A `flower once` whose model calls `calls` in turn (one per reply), then is done.
pub(crate) fn once_with_calls(
    project: &Project,
    calls: Vec<(&str, Value)>,
    rules: &[&str],
) -> (Output, FakeServer) {
    let n = calls.len();
    let mut replies: Vec<Reply> = calls
        .into_iter()
        .map(|(tool, input)| Reply::tool_use(tool, input))
        .collect();
    replies.push(Reply::text("完了"));
    let server = FakeServer::start(replies);
    let mut args = vec!["once", "按吩咐做", "--json"];
    args.extend(rules);
    let out = project.run(&server, &args);
    assert!(out.status.success(), "{}", lossy(&out.stderr));
    assert_eq!(server.request_count(), n + 1);
    (out, server)
}

/// The breakage of the two tests above, through the binary: `rm` is really not run.
#[test]
fn flower_with_bash_allowed_and_rm_denied_does_not_remove_the_file() {
    let project = Project::new();
    std::fs::write(project.dir.join("victim.txt"), "keep me").unwrap();
    let (_, server) = once_with_calls(
        &project,
        vec![
            ("Bash", json!({"command": "rm victim.txt"})),
            ("Bash", json!({"command": "echo ran > made.txt"})),
        ],
        // Write too: an agent without it gets a read-only workspace from the sandbox,
        // which would stop `rm` whatever the rules say.
        &[
            "--allowed-tools",
            "Bash",
            "Write",
            "--disallowed-tools",
            "Bash(rm:*)",
        ],
    );
    assert_eq!(project.read("victim.txt"), "keep me");
    let denied = &last_results(&server.requests()[1])[0];
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(result_text(denied).contains("Bash(rm:*)"), "{denied}");
    // The control: what the deny rule does not cover runs.
    assert_eq!(project.read("made.txt").trim(), "ran");
}

/// Read and Edit allowed as whole tools, one path denied: the denied file is neither
/// shown nor changed; the others are.
#[test]
fn flower_with_read_and_edit_allowed_and_a_path_denied_keeps_it_out() {
    let project = Project::new();
    std::fs::write(project.dir.join("secret.txt"), "hunter2\n").unwrap();
    std::fs::write(project.dir.join("open.txt"), "hello\n").unwrap();
    let edit = |file: &str| json!({"file_path": file, "old_string": "h", "new_string": "H"});
    let (_, server) = once_with_calls(
        &project,
        vec![
            ("Read", json!({"file_path": "secret.txt"})),
            ("Edit", edit("secret.txt")),
            ("Read", json!({"file_path": "open.txt"})),
            ("Edit", edit("open.txt")),
        ],
        &[
            "--allowed-tools",
            "Read",
            "Edit",
            "--disallowed-tools",
            "Read(secret.txt)",
            "Edit(secret.txt)",
        ],
    );
    let requests = server.requests();
    let read_secret = &last_results(&requests[1])[0];
    assert_eq!(read_secret["is_error"], true, "{read_secret}");
    assert!(!requests[1].raw_body.contains("hunter2"));
    let edit_secret = &last_results(&requests[2])[0];
    assert_eq!(edit_secret["is_error"], true, "{edit_secret}");
    assert_eq!(project.read("secret.txt"), "hunter2\n");
    // The controls: the other file is read and edited.
    assert!(result_text(&last_results(&requests[3])[0]).contains("hello"));
    assert_eq!(last_results(&requests[4])[0]["is_error"], false);
    assert_eq!(project.read("open.txt"), "Hello\n");
}

// ---------------------------------------------------------------------------------
// Every judge is a new session, across rounds and wakes
// ---------------------------------------------------------------------------------

/// Breakage: the judge of round N (or of a wake) resuming an earlier judge's session
/// instead of starting a new one. Seen on the wire: every judge request of a first turn
/// carries exactly one message, and the manifest gives every judge round its own
/// session, shared with no step.
#[test]
fn every_judge_starts_a_new_session_across_rounds_and_wakes() {
    let project = Project::new();
    // Two failed verdicts, then passes: three judges in the first run.
    let script = Script::new(2);
    let server = {
        let script = script.clone();
        FakeServer::with_handler(move |req, _| script.reply(req))
    };
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "{}", lossy(&out.stderr));
    let judged_first = project
        .steps()
        .iter()
        .filter(|s| s.contains("·判定#"))
        .count();
    assert_eq!(judged_first, 3, "{:?}", project.steps());
    // Two wakes, each judged again.
    for wake in [&["--again"][..], &["再加一句问候"][..]] {
        let out = project.run(&server, wake);
        assert_eq!(out.status.code(), Some(0), "{}", lossy(&out.stderr));
    }

    let judges: Vec<Recorded> = server
        .requests()
        .into_iter()
        .filter(|r| agent_of(r) == Agent::Judge)
        .collect();
    assert!(judges.len() >= 5, "{} judge requests", judges.len());
    for judge in &judges {
        assert_eq!(
            judge.messages().len(),
            1,
            "judge request {} continues an earlier conversation",
            judge.index
        );
    }
    let rows = project.manifest();
    let judge_ids: Vec<String> = rows
        .iter()
        .filter(|r| r["step"].as_str().unwrap().contains("·判定#"))
        .map(|r| r["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(judge_ids.len(), judges.len());
    let unique: HashSet<&String> = judge_ids.iter().collect();
    assert_eq!(unique.len(), judge_ids.len(), "{judge_ids:?}");
    let others: HashSet<String> = rows
        .iter()
        .filter(|r| !r["step"].as_str().unwrap().contains("·判定#"))
        .filter_map(|r| r["session_id"].as_str().map(str::to_string))
        .collect();
    assert!(
        judge_ids.iter().all(|id| !others.contains(id)),
        "a judge shares a step's session"
    );
}
