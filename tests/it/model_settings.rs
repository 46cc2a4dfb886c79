//! Auth, headers, betas, models and thinking, through the binary against the fake
//! server: what goes over the wire, and what is refused (exit 2) before any request.

use crate::support;

use serde_json::{Value, json};
use std::process::Output;
use support::pipeline::{Refused, flower_with_env as flower, refused_before_any_request};
use support::{FAKE_API_KEY, FakeServer, Recorded, Reply};
use tempfile::TempDir;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}", stderr(out)))
}

/// `flower once hi ARGS` with `env` against a server that answers 好: the one request
/// it sent (the run must succeed).
fn one_request(args: &[&str], env: &[(&str, &str)]) -> Recorded {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = flower(&server, &dir, &[&["once", "hi"], args].concat(), env);
    assert!(out.status.success(), "{}", stderr(&out));
    server.requests().remove(0)
}

const TOKEN: &str = "gw-secret-token-123";

#[test]
fn auth_token_is_sent_as_bearer_and_wins_over_the_api_key() {
    let request = one_request(&[], &[("ANTHROPIC_AUTH_TOKEN", TOKEN)]);
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(
        request.header("x-api-key"),
        None,
        "only one credential is sent"
    );

    // The token alone suffices.
    let request = one_request(
        &[],
        &[("ANTHROPIC_AUTH_TOKEN", TOKEN), ("ANTHROPIC_API_KEY", "")],
    );
    assert_eq!(request.header("x-api-key"), None);

    // Without it, the API key as before.
    let request = one_request(&[], &[]);
    assert_eq!(request.header("x-api-key"), Some(FAKE_API_KEY));
    assert_eq!(request.header("authorization"), None);
}

#[test]
fn a_credential_never_appears_in_errors_or_json() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::error(
        401,
        "authentication_error",
        "invalid bearer token",
    )]);
    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--json"],
        &[("ANTHROPIC_AUTH_TOKEN", TOKEN)],
    );
    assert!(!out.status.success());
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains(TOKEN), "{all}");
    assert!(!all.contains(FAKE_API_KEY), "{all}");
    assert_eq!(json_of(&out)["is_error"], true);
}

#[test]
fn custom_headers_and_betas_are_sent() {
    let request = one_request(
        &["--model", "claude-sonnet-4-5[1m]"],
        &[
            (
                "ANTHROPIC_CUSTOM_HEADERS",
                "X-Team: flower\n\nX-Trace-Id:  abc 123 \n",
            ),
            ("ANTHROPIC_BETAS", "beta-one, beta-two,"),
        ],
    );
    assert_eq!(request.header("x-team"), Some("flower"));
    assert_eq!(request.header("x-trace-id"), Some("abc 123"));
    assert_eq!(
        request.header("anthropic-beta"),
        Some("beta-one,beta-two,context-1m-2025-08-07")
    );
    // The suffix asks for the window; the id goes out without it.
    assert_eq!(request.model(), "claude-sonnet-4-5");
}

#[test]
fn bad_settings_exit_2_before_any_request_without_quoting_secrets() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该到这")]);
    let cases: Vec<Refused> = vec![
        (
            vec![],
            vec![("ANTHROPIC_CUSTOM_HEADERS", "X-Ok: 1\nsecret-without-colon")],
            "ANTHROPIC_CUSTOM_HEADERS 第 2 行",
        ),
        (
            vec!["--model", "sonet"],
            vec![],
            "没有 \"sonet\" 这个模型别名",
        ),
        (vec!["--thinking=512"], vec![], "低于 API 的下限"),
        (
            vec!["--thinking=8000"],
            vec![("FLOWER_MAX_TOKENS", "4000")],
            "必须小于 max_tokens",
        ),
        (
            vec![],
            vec![("MAX_THINKING_TOKENS", "lots")],
            "MAX_THINKING_TOKENS",
        ),
        (vec![], vec![("FLOWER_CACHE_TTL", "2h")], "FLOWER_CACHE_TTL"),
    ];
    for said in refused_before_any_request(&server, &dir, &["once", "hi"], &cases) {
        assert!(!said.contains("secret-without-colon"), "{said}");
    }
    // The default command checks them too.
    let out = flower(&server, &dir, &["--model", "sonet", "做点事"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(server.request_count(), 0);
}

#[test]
fn aliases_resolve_and_unknown_models_work_unpriced_with_one_warning() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("好"),
        Reply::text("好"),
        Reply::text("好"),
    ]);
    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--json", "--model", "haiku"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[0].model(), "claude-haiku-5-5");
    assert!(json_of(&out)["total_cost_usd"].is_number());

    // The default model is the current Sonnet, and it has a price.
    let out = flower(&server, &dir, &["once", "hi", "--json"], &[]);
    assert_eq!(server.requests()[1].model(), "claude-sonnet-5-5");
    assert!(json_of(&out)["total_cost_usd"].is_number());

    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--json", "--model", "my-gateway/model-x"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[2].model(), "my-gateway/model-x");
    assert_eq!(json_of(&out)["total_cost_usd"], Value::Null);
    assert_eq!(
        stderr(&out).matches("不在价格表里").count(),
        1,
        "{}",
        stderr(&out)
    );
}

#[test]
fn thinking_sends_a_budget_with_the_interleaved_beta_and_max_tokens_above_it() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::thinking("先想想", "sig-1").then_tool_use("Glob", json!({"pattern": "*"})),
        Reply::text("好"),
    ]);
    let out = flower(
        &server,
        &dir,
        &[
            "once",
            "hi",
            "--thinking=2048",
            "--model",
            "claude-sonnet-4-5",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first = &server.requests()[0];
    assert_eq!(
        first.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(first.body["max_tokens"].as_u64().unwrap() > 2048);
    assert_eq!(
        first.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    // The thinking block goes back unchanged, signature and all.
    let second = &server.requests()[1];
    assert_eq!(
        second.messages()[1]["content"][0],
        json!({"type": "thinking", "thinking": "先想想", "signature": "sig-1"})
    );
    // Thinking is never mixed into the answer text.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("先想想"), "{stdout}");
    // Progress shows it as one marker line.
    assert_eq!(
        stderr(&out).matches("思考中").count(),
        1,
        "{}",
        stderr(&out)
    );

    // MAX_THINKING_TOKENS turns it on too; no tools, no interleaved beta.
    let request = one_request(
        &["--allowed-tools", "AskUser", "--model", "claude-sonnet-4-5"],
        &[("MAX_THINKING_TOKENS", "3000")],
    );
    assert_eq!(request.body["thinking"]["budget_tokens"], 3000);
    assert_eq!(request.header("anthropic-beta"), None);
}

/// `ANTHROPIC_CUSTOM_HEADERS` replaces flower's header of the same name (any case)
/// instead of sending it twice, and its `anthropic-beta` values join flower's in one
/// header, each name once.
#[test]
fn custom_headers_replace_flower_headers_and_betas_merge_once() {
    let request = one_request(
        &["--model", "claude-sonnet-4-5[1m]"],
        &[
            (
                "ANTHROPIC_CUSTOM_HEADERS",
                "Anthropic-Version: 2099-01-01\nanthropic-beta: beta-two, extra-beta\nX-Team: flower",
            ),
            ("ANTHROPIC_BETAS", "beta-one,beta-two"),
        ],
    );
    let count = |name: &str| request.headers.iter().filter(|(n, _)| n == name).count();
    assert_eq!(count("anthropic-version"), 1, "{:?}", request.headers);
    assert_eq!(request.header("anthropic-version"), Some("2099-01-01"));
    assert_eq!(count("anthropic-beta"), 1, "{:?}", request.headers);
    assert_eq!(
        request.header("anthropic-beta"),
        Some("beta-one,beta-two,extra-beta,context-1m-2025-08-07")
    );
    assert_eq!(request.header("x-team"), Some("flower"));
    assert_eq!(count("x-api-key"), 1);
    assert_eq!(count("content-type"), 1);
}

/// `--effort` (or Claude Code's `CLAUDE_CODE_EFFORT_LEVEL`) goes out as
/// `output_config.effort`; thinking on a 4.6+ model is adaptive, without the
/// interleaved beta even when tools are offered.
#[test]
fn effort_and_adaptive_thinking_follow_the_model_table() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("好"),
        Reply::text("好"),
        Reply::text("好"),
        Reply::text("好"),
    ]);
    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--effort", "low", "--thinking"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let first = &server.requests()[0];
    assert_eq!(first.body["output_config"], json!({"effort": "low"}));
    assert_eq!(first.body["thinking"], json!({"type": "adaptive"}));
    assert!(!first.tool_names().is_empty());
    assert_eq!(first.header("anthropic-beta"), None);

    // Claude Code's variable; the flag wins over it.
    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--model", "claude-opus-4-6"],
        &[("CLAUDE_CODE_EFFORT_LEVEL", "max")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[1].body["output_config"]["effort"], "max");
    let out = flower(
        &server,
        &dir,
        &["once", "hi", "--effort", "medium"],
        &[("CLAUDE_CODE_EFFORT_LEVEL", "max")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server.requests()[2].body["output_config"]["effort"],
        "medium"
    );

    // Without it, no output_config at all (the API's default).
    let out = flower(&server, &dir, &["once", "hi"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(server.requests()[3].body.get("output_config").is_none());

    // An unknown model gets the effort it was asked for.
    let request = one_request(&["--model", "my-gateway/x-1", "--effort", "high"], &[]);
    assert_eq!(request.body["output_config"]["effort"], "high");
}

/// Combinations the model table says the API refuses exit 2 before any request.
#[test]
fn bad_model_combinations_exit_2_before_any_request() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该到这")]);
    let cases: Vec<Refused> = vec![
        (vec!["--effort", "extreme"], vec![], "--effort"),
        (
            vec![],
            vec![("CLAUDE_CODE_EFFORT_LEVEL", "lots")],
            "CLAUDE_CODE_EFFORT_LEVEL",
        ),
        (
            vec!["--effort", "low", "--model", "claude-sonnet-4-5"],
            vec![],
            "不接受 effort",
        ),
        (
            vec!["--effort", "xhigh", "--model", "claude-opus-4-6"],
            vec![],
            "low、medium、high、max",
        ),
        (
            vec![],
            vec![("FLOWER_JUDGE_EFFORT", "extreme")],
            "FLOWER_JUDGE_EFFORT",
        ),
        (
            vec!["--thinking", "--model", "claude-3-5-haiku-20241022"],
            vec![],
            "没有扩展思考",
        ),
        (
            vec!["--model", "claude-sonnet-4-5"],
            vec![("FLOWER_MAX_TOKENS", "100000")],
            "最多写 64000",
        ),
    ];
    refused_before_any_request(&server, &dir, &["once", "hi"], &cases);
}

/// The judge is where effort pays: a run at `--effort low` judges at `high`; the
/// other agents get the run's effort; `FLOWER_JUDGE_EFFORT` sets the judge's own.
#[test]
fn the_judge_never_runs_below_high_effort_unless_told() {
    use support::pipeline::{Agent, Project, agent_of, simple_reply};
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["--effort", "low", "写个 hello 脚本"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let effort_of = |agent: Agent| -> Vec<Value> {
        server
            .requests()
            .iter()
            .filter(|r| agent_of(r) == agent)
            .map(|r| r.body["output_config"]["effort"].clone())
            .collect()
    };
    assert!(effort_of(Agent::Coordinator).iter().all(|e| e == "low"));
    assert!(effort_of(Agent::Worker).iter().all(|e| e == "low"));
    let judge = effort_of(Agent::Judge);
    assert!(
        !judge.is_empty() && judge.iter().all(|e| e == "high"),
        "{judge:?}"
    );

    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project
        .command(&server, &["写个 hello 脚本"])
        .env("FLOWER_JUDGE_EFFORT", "max")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let requests = server.requests();
    let judge: Vec<&support::Recorded> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Judge)
        .collect();
    assert!(!judge.is_empty());
    assert!(
        judge
            .iter()
            .all(|r| r.body["output_config"]["effort"] == "max")
    );
    assert!(
        requests
            .iter()
            .filter(|r| agent_of(r) != Agent::Judge)
            .all(|r| r.body.get("output_config").is_none())
    );
}

/// Claude Code's settings files' `effortLevel` is read too, below the variable.
#[test]
fn a_settings_file_effort_level_is_read_below_the_variable() {
    let dir = TempDir::new().unwrap();
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"effortLevel": "low"}"#,
    )
    .unwrap();
    let home = dir.path().display().to_string();
    let server = FakeServer::start(vec![Reply::text("好"), Reply::text("好")]);
    let out = flower(&server, &dir, &["once", "hi"], &[("HOME", &home)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[0].body["output_config"]["effort"], "low");
    let out = flower(
        &server,
        &dir,
        &["once", "hi"],
        &[
            ("HOME", home.as_str()),
            ("CLAUDE_CODE_EFFORT_LEVEL", "medium"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        server.requests()[1].body["output_config"]["effort"],
        "medium"
    );

    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"effortLevel": "extreme"}"#,
    )
    .unwrap();
    let out = flower(&server, &dir, &["once", "hi"], &[("HOME", &home)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("effortLevel"), "{}", stderr(&out));
    assert_eq!(server.request_count(), 2);
}
