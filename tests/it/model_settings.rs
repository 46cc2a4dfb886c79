//! Auth, headers, betas, models and thinking, through the binary against the fake
//! server: what goes over the wire, and what is refused (exit 2) before any request.

use crate::support;
use crate::support::Flower;

use serde_json::{Value, json};
use std::process::Output;
use support::{FAKE_API_KEY, FakeServer, Reply};
use tempfile::TempDir;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}", stderr(out)))
}

const TOKEN: &str = "gw-secret-token-123";

#[test]
fn auth_token_is_sent_as_bearer_and_wins_over_the_api_key() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = Flower::new(&["once", "hi"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .envs([("ANTHROPIC_AUTH_TOKEN", TOKEN)])
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    let request = &server.requests()[0];
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
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = Flower::new(&["once", "hi"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .envs([("ANTHROPIC_AUTH_TOKEN", TOKEN), ("ANTHROPIC_API_KEY", "")])
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[0].header("x-api-key"), None);

    // Without it, the API key as before.
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = Flower::new(&["once", "hi"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .output();
    assert!(out.status.success());
    assert_eq!(server.requests()[0].header("x-api-key"), Some(FAKE_API_KEY));
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[test]
fn a_credential_never_appears_in_errors_or_json() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::error(
        401,
        "authentication_error",
        "invalid bearer token",
    )]);
    let out = Flower::new(&["once", "hi", "--json"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .envs([("ANTHROPIC_AUTH_TOKEN", TOKEN)])
        .output();
    assert!(!out.status.success());
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains(TOKEN), "{all}");
    assert!(!all.contains(FAKE_API_KEY), "{all}");
    assert_eq!(json_of(&out)["is_error"], true);
}

#[test]
fn custom_headers_and_betas_are_sent() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = Flower::new(&["once", "hi", "--model", "claude-sonnet-4-5[1m]"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .envs([
            (
                "ANTHROPIC_CUSTOM_HEADERS",
                "X-Team: flower\n\nX-Trace-Id:  abc 123 \n",
            ),
            ("ANTHROPIC_BETAS", "beta-one, beta-two,"),
        ])
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    let request = &server.requests()[0];
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
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![],
            vec![("ANTHROPIC_CUSTOM_HEADERS", "X-Ok: 1\nsecret-without-colon")],
            "ANTHROPIC_CUSTOM_HEADERS line 2",
        ),
        (vec!["--model", "sonet"], vec![], "unknown model alias"),
        (vec!["--thinking=512"], vec![], "below the API minimum"),
        (
            vec!["--thinking=8000"],
            vec![("FLOWER_MAX_TOKENS", "4000")],
            "must be below max_tokens",
        ),
        (
            vec![],
            vec![("MAX_THINKING_TOKENS", "lots")],
            "MAX_THINKING_TOKENS",
        ),
        (vec![], vec![("FLOWER_CACHE_TTL", "2h")], "FLOWER_CACHE_TTL"),
    ];
    for (flags, env, says) in cases {
        let mut args = vec!["once", "hi"];
        args.extend(flags.iter());
        let out = Flower::new(&args)
            .server(&server)
            .dir(&dir)
            .attempts(1)
            .envs(env.iter().copied())
            .output();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} {env:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
        assert!(!stderr(&out).contains("secret-without-colon"));
    }
    // The default command checks them too.
    let out = Flower::new(&["--model", "sonet", "做点事"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .output();
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
    let out = Flower::new(&["once", "hi", "--json", "--model", "haiku"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[0].model(), "claude-haiku-5-5");
    assert!(json_of(&out)["total_cost_usd"].is_number());

    // The default model is the current Sonnet, and it has a price.
    let out = Flower::new(&["once", "hi", "--json"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .output();
    assert_eq!(server.requests()[1].model(), "claude-sonnet-5-5");
    assert!(json_of(&out)["total_cost_usd"].is_number());

    let out = Flower::new(&["once", "hi", "--json", "--model", "my-gateway/model-x"])
        .server(&server)
        .dir(&dir)
        .attempts(1)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests()[2].model(), "my-gateway/model-x");
    assert_eq!(json_of(&out)["total_cost_usd"], Value::Null);
    assert_eq!(
        stderr(&out).matches("no price").count(),
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
    let out = Flower::new(&[
        "once",
        "hi",
        "--thinking=2048",
        "--model",
        "claude-sonnet-4-5",
    ])
    .server(&server)
    .dir(&dir)
    .attempts(1)
    .output();
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
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = Flower::new(&[
        "once",
        "hi",
        "--allowed-tools",
        "AskUser",
        "--model",
        "claude-sonnet-4-5",
    ])
    .server(&server)
    .dir(&dir)
    .attempts(1)
    .envs([("MAX_THINKING_TOKENS", "3000")])
    .output();
    assert!(out.status.success(), "{}", stderr(&out));
    let request = &server.requests()[0];
    assert_eq!(request.body["thinking"]["budget_tokens"], 3000);
    assert_eq!(request.header("anthropic-beta"), None);
}
