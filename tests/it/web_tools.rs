//! WebSearch and WebFetch as client tools of the pipeline's agents (#46 item 1): every
//! role is offered them alike; the coordinator's calls run as side requests to the
//! Messages API with the server tool (as Claude Code's WebSearch does) and come back as
//! tool results with their sources (a blip in a side request retried as any request
//! is); the judge's are refused by its rules and send nothing.

use crate::support;
use crate::support::tool_input;

use serde_json::{Value, json};
use support::pipeline::{
    Agent, Project, agent_or_once, simple_reply, text, turn_of, without_cache_marks,
};
use support::{FakeServer, Recorded, Reply};

/// A side request: only server tools, no client tool.
fn is_side(req: &Recorded) -> bool {
    req.body["tools"].as_array().is_some_and(|tools| {
        !tools.is_empty() && tools.iter().all(|t| t.get("input_schema").is_none())
    })
}

fn names(req: &Recorded) -> Vec<String> {
    req.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn web_calls_run_as_side_requests_and_the_judges_are_refused() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| match (agent_or_once(req), turn_of(req)) {
        (Agent::Coordinator, 0) => Reply::tool_use("WebSearch", json!({"query": "rust lifetimes"})),
        (Agent::Coordinator, 1) => Reply::tool_use(
            "WebFetch",
            json!({"url": "https://docs.rs/x", "prompt": "what does it say?"}),
        ),
        (Agent::Coordinator, 2) => Reply::tool_use(
            "Task",
            json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
        ),
        (Agent::Judge, 0) => Reply::tool_use("WebSearch", json!({"query": "the answer"})),
        _ => simple_reply(req),
    });
    // The search's first side request is answered 529 overloaded, and retried.
    server.overload_side_requests(1);
    let out = project
        .command(&server, &["写个 hello 脚本"])
        .env("FLOWER_BASE_DELAY", "0")
        .env("FLOWER_MAX_ATTEMPTS", "3")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();

    // Three side requests (the search twice), the coordinator's; the judge's call sent
    // none.
    let mut side: Vec<&Recorded> = requests.iter().filter(|r| is_side(r)).collect();
    let seq: Vec<String> = requests
        .iter()
        .map(|r| format!("{:?}/{}/{}", agent_or_once(r), turn_of(r), is_side(r)))
        .collect();
    assert_eq!(
        side.len(),
        3,
        "side requests: {seq:?} {}",
        text(&out.stderr)
    );
    assert_eq!(side[0].body, side[1].body, "the same request again");
    side.remove(0);
    assert_eq!(
        without_cache_marks(&side[0].body["tools"]),
        json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}])
    );
    assert_eq!(
        side[0].last_user_text(),
        "Perform a web search for the query: rust lifetimes"
    );
    assert_eq!(side[1].body["tools"][0]["type"], "web_fetch_20250910");
    assert_eq!(
        side[1].header("anthropic-beta"),
        Some("web-fetch-2025-09-10")
    );

    let after = |agent: Agent, turn: usize| -> Value {
        let req = requests
            .iter()
            .find(|r| !is_side(r) && agent_or_once(r) == agent && turn_of(r) == turn)
            .unwrap_or_else(|| panic!("{agent:?}'s request {turn}"));
        req.tool_results()[0].clone()
    };
    let search = after(Agent::Coordinator, 1);
    let said = search.to_string();
    assert_ne!(search["is_error"], Value::Bool(true), "{search}");
    for want in [
        "Web search results for query: \\\"rust lifetimes\\\"",
        "rust lifetimes is explained at example.com.",
        "https://example.com/rust-lifetimes",
        "https://example.org/more",
        "REMINDER: You MUST include the sources",
    ] {
        assert!(said.contains(want), "{want} not in {said}");
    }
    let fetch = after(Agent::Coordinator, 2).to_string();
    assert!(
        fetch.contains("It says hello (https://docs.rs/x)."),
        "{fetch}"
    );
    assert!(fetch.contains("https://docs.rs/x"), "{fetch}");

    let refused = after(Agent::Judge, 1);
    assert_eq!(refused["is_error"], Value::Bool(true), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("no allow rule names WebSearch"),
        "{refused}"
    );

    // Each side request is stored under the session like a sub-agent's exchange, so
    // the figures count it from the transcripts: the worker's and the two web calls'.
    let db = rusqlite::Connection::open(project.dir.join("runs/sessions.db")).unwrap();
    let subs: i64 = db
        .query_row(
            "SELECT count(*) FROM transcripts WHERE subpath LIKE 'subagents/agent-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(subs, 3, "sub-transcripts");

    // Every role is offered the same tools, the web tools among them.
    let first: Vec<Vec<String>> = [
        Agent::Clarifier,
        Agent::Coordinator,
        Agent::Worker,
        Agent::Judge,
    ]
    .into_iter()
    .map(|agent| {
        names(
            requests
                .iter()
                .find(|r| !is_side(r) && agent_or_once(r) == agent)
                .unwrap(),
        )
    })
    .collect();
    assert!(
        first[0].contains(&"WebSearch".to_string()),
        "{:?}",
        first[0]
    );
    assert!(first.iter().all(|n| *n == first[0]), "{first:?}");
}

/// A client WebFetch call is checked against domain rules by its URL's host (parsed):
/// a subdomain is within its domain, a look-alike host is not, a deny rule wins.
#[test]
fn a_client_web_fetch_is_checked_against_domain_rules_by_its_host() {
    use flower::engine::permissions::{Decision, Permissions};
    let rules = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let p = Permissions::new(
        &rules(&["WebFetch(domain:docs.rs)", "WebSearch"]),
        &rules(&["WebFetch(domain:evil.docs.rs)"]),
    )
    .unwrap();
    let fetch = |url: &str| {
        p.check(
            "WebFetch",
            &tool_input(&json!({"url": url, "prompt": "p"})),
            std::path::Path::new("/nonexistent-ws"),
        )
    };
    assert!(matches!(fetch("https://docs.rs/serde"), Decision::Allow));
    assert!(matches!(fetch("https://api.docs.rs/x"), Decision::Allow));
    assert!(matches!(
        fetch("https://docs.rs.evil.com/x"),
        Decision::Deny { .. }
    ));
    assert!(matches!(
        fetch("https://user@evil.com/docs.rs"),
        Decision::Deny { .. }
    ));
    assert!(matches!(
        fetch("https://evil.docs.rs/x"),
        Decision::Deny { .. }
    ));
    let search = p.check(
        "WebSearch",
        &tool_input(&json!({"query": "serde"})),
        std::path::Path::new("/nonexistent-ws"),
    );
    assert!(matches!(search, Decision::Allow));
}
