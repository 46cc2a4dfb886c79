//! The web tools (WebSearch, WebFetch), which the API runs as server tools: who gets
//! them and with what limits, and what becomes of their blocks (stored, sent back,
//! trimmed when old and big, priced, shown), through the binary against the fake.

use crate::support;

use serde_json::{Value, json};
use support::pipeline::{
    Agent, Project, Refused, agent_of, flower_with_env as once, refused_before_any_request,
    simple_reply, text, turn_of,
};
use support::{FakeServer, Recorded, Reply};
use tempfile::TempDir;

/// The request's server tools (`tools` entries with a `type`), by name.
fn server_tool(request: &Recorded, name: &str) -> Option<Value> {
    request.body["tools"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name && t.get("type").is_some())
        .cloned()
}

/// Offered only when an allow rule names them; `WebFetch(domain:…)` rules become the
/// tool's allowed domains (a deny rule's domain leaves the list), the max uses come
/// from the settings, and web fetch brings its beta header.
#[test]
fn web_tools_follow_the_permission_rules_and_settings() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("好"),
        Reply::text("好"),
        Reply::text("好"),
    ]);
    let out = once(&server, &dir, &["once", "hi"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plain = &server.requests()[0];
    assert!(
        server_tool(plain, "web_search").is_none(),
        "not without a rule"
    );
    assert!(server_tool(plain, "web_fetch").is_none());
    assert_eq!(plain.header("anthropic-beta"), None);

    let out = once(
        &server,
        &dir,
        &[
            "once",
            "hi",
            "--allowed-tools",
            "Read",
            "WebSearch",
            "WebFetch(domain:docs.rs)",
            "WebFetch(domain:example.com)",
            "--disallowed-tools",
            "WebFetch(domain:example.com)",
        ],
        &[("FLOWER_WEB_SEARCH_MAX_USES", "3")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let request = &server.requests()[1];
    assert_eq!(
        server_tool(request, "web_search").unwrap(),
        json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 3})
    );
    let fetch = server_tool(request, "web_fetch").unwrap();
    assert_eq!(fetch["type"], "web_fetch_20250910");
    assert_eq!(fetch["allowed_domains"], json!(["docs.rs"]));
    assert_eq!(fetch["max_uses"], 5);
    assert!(
        fetch.get("blocked_domains").is_none(),
        "the API takes one list"
    );
    // The last tool before the server tools carries the cache breakpoint: agents
    // allowed other web tools share the rest in the cache.
    assert!(fetch.get("cache_control").is_none());
    let tools = request.body["tools"].as_array().unwrap();
    let marked: Vec<&Value> = tools
        .iter()
        .filter(|t| t.get("cache_control").is_some())
        .collect();
    assert_eq!(marked.len(), 1);
    assert!(marked[0].get("input_schema").is_some(), "{}", marked[0]);
    assert_eq!(tools[tools.len() - 3]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        request.header("anthropic-beta"),
        Some("web-fetch-2025-09-10")
    );

    // A whole-tool deny rule keeps it away; a domain deny rule blocks the domain.
    let out = once(
        &server,
        &dir,
        &[
            "once",
            "hi",
            "--allowed-tools",
            "WebSearch",
            "WebFetch",
            "--disallowed-tools",
            "WebSearch",
            "WebFetch(domain:evil.example)",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let request = &server.requests()[2];
    assert!(server_tool(request, "web_search").is_none());
    assert_eq!(
        server_tool(request, "web_fetch").unwrap()["blocked_domains"],
        json!(["evil.example"])
    );

    // FLOWER_WEB_TOOLS=off: nobody gets them (an organization without web search).
    let server = FakeServer::start(vec![Reply::text("好")]);
    let out = once(
        &server,
        &dir,
        &["once", "hi", "--allowed-tools", "WebSearch", "WebFetch"],
        &[("FLOWER_WEB_TOOLS", "off")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let request = &server.requests()[0];
    assert!(server_tool(request, "web_search").is_none());
    assert!(server_tool(request, "web_fetch").is_none());
    assert_eq!(request.header("anthropic-beta"), None);
}

#[test]
fn bad_web_tool_settings_exit_2_before_any_request() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该到这")]);
    let cases: Vec<Refused> = vec![
        (
            vec!["--allowed-tools", "WebFetch(example.com)"],
            vec![],
            "domain:example.com",
        ),
        (
            vec![],
            vec![("FLOWER_WEB_SEARCH_MAX_USES", "0")],
            "FLOWER_WEB_SEARCH_MAX_USES",
        ),
        (
            vec![],
            vec![("FLOWER_WEB_FETCH_MAX_USES", "many")],
            "FLOWER_WEB_FETCH_MAX_USES",
        ),
        (
            vec![],
            vec![("FLOWER_WEB_TOOLS", "maybe")],
            "FLOWER_WEB_TOOLS",
        ),
    ];
    refused_before_any_request(&server, &dir, &["once", "hi"], &cases);
}

/// A page of this many bytes is over the trim threshold (16 KiB).
const BIG_PAGE: usize = 20_000;

/// The pipeline, with the coordinator searching and fetching before it delegates.
fn searching_reply(req: &Recorded) -> Reply {
    match (agent_of(req), turn_of(req)) {
        (Agent::Coordinator, 0) => Reply::blocks(Vec::new())
            .then_web_search(
                "hello 脚本",
                &[
                    ("https://example.com/a", "A"),
                    ("https://example.com/b", "B"),
                ],
            )
            .then_web_fetch("https://example.com/a", &"页".repeat(BIG_PAGE / 3))
            .then_tool_use(
                "Task",
                json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
            ),
        _ => simple_reply(req),
    }
}

/// The pipeline's agents get the web tools as client tools, all alike (their side
/// requests: `web_tools.rs`), and no server tool; server tool blocks in a reply are
/// stored and sent back as they came (also after a wake), old big results become
/// pointers when pruned, and `flower show` and `report` show them.
#[test]
fn server_tool_blocks_are_stored_resumed_pruned_and_shown() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| searching_reply(req));
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requests = server.requests();
    let of = |agent: Agent| -> Vec<&Recorded> {
        requests.iter().filter(|r| agent_of(r) == agent).collect()
    };
    for agent in [Agent::Coordinator, Agent::Worker, Agent::Judge] {
        let r = of(agent);
        assert!(!r.is_empty(), "{agent:?}");
        for tool in ["web_search", "web_fetch"] {
            assert!(
                r.iter().all(|r| server_tool(r, tool).is_none()),
                "{agent:?}"
            );
        }
        for tool in ["WebSearch", "WebFetch"] {
            assert!(
                r.iter().all(|r| r.tool_names().iter().any(|n| n == tool)),
                "{agent:?}"
            );
        }
    }
    // The coordinator's next turn sends the blocks back as they came.
    let second = of(Agent::Coordinator)
        .into_iter()
        .find(|r| turn_of(r) == 1)
        .unwrap();
    let sent = &second.messages()[1]["content"];
    let kinds: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "server_tool_use",
            "web_search_tool_result",
            "server_tool_use",
            "web_fetch_tool_result",
            "tool_use"
        ]
    );
    assert_eq!(sent[1]["content"][0]["url"], "https://example.com/a");

    // Shown as calls the API ran, with what came back.
    let out = project.run(&server, &["show", "干活"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("⏺ WebSearch hello 脚本(API 端执行)"),
        "{shown}"
    );
    assert!(shown.contains("⎿ 2 条搜索结果"), "{shown}");
    assert!(
        shown.contains("⏺ WebFetch https://example.com/a(API 端执行)"),
        "{shown}"
    );
    // What a cold resume feeds: the old big page is a pointer to a file now.
    let out = project.run(&server, &["show", "干活", "--pruned", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pruned = doc["entries"].to_string();
    assert!(!pruned.contains("web_fetch_tool_result"), "{pruned}");
    assert!(pruned.contains("结果过大,已移出上下文"), "{pruned}");
    assert!(
        pruned.contains("web_search_tool_result"),
        "small results stay"
    );

    let out = project.run(&server, &["report", "-o", "r.html"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(project.dir.join("r.html")).unwrap();
    assert!(html.contains("网页搜索 1 次,网页抓取 1 次"), "{html}");

    // A wake resumes 干活 with the blocks as stored (the cache is warm: verbatim).
    let before = server.request_count();
    let out = project.run(&server, &["再检查一遍"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resumed = server.requests()[before..]
        .iter()
        .find(|r| agent_of(r) == Agent::Coordinator)
        .cloned()
        .unwrap();
    assert!(resumed.raw_body.contains("web_fetch_tool_result"));
    assert!(resumed.raw_body.contains("srvtoolu_fake_"));
}

/// A text block that cites a search result, streamed as the API does (`citations: []`
/// at its start, one `citations_delta` per citation), keeps its citations: in the
/// stored entry, in the next request of the run, and in the request of a resume (read
/// back from the store).
#[test]
fn citations_on_a_text_block_are_stored_and_sent_back() {
    let dir = TempDir::new().unwrap();
    let event = |name: &str, data: Value| (name.to_string(), data.to_string());
    let citation = json!({"type": "web_search_result_location", "cited_text": "甲乙丙",
        "url": "https://example.com/a", "title": "A", "encrypted_index": "enc-1"});
    let cited = Reply::events(vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": "claude-fake", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": "", "citations": []}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "citations_delta", "citation": citation}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "据说是甲乙丙。"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Glob", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"pattern\": \"*.txt\"}"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 5}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]);
    let server = FakeServer::start(vec![cited, Reply::text("好"), Reply::text("还好")]);
    let out = once(&server, &dir, &["once", "--json", "查一下"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = result["session_id"].as_str().unwrap().to_string();
    let out = once(
        &server,
        &dir,
        &["once", "--json", "--resume", &session, "再说"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for (which, request) in [("next turn", &requests[1]), ("resume", &requests[2])] {
        let reply = &request.messages()[1];
        assert_eq!(reply["role"], "assistant", "{which}");
        assert_eq!(
            reply["content"][0],
            json!({"type": "text", "text": "据说是甲乙丙。", "citations": [citation]}),
            "{which}: {}",
            request.raw_body
        );
    }
}
