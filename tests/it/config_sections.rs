//! The hooks and MCP sections of a settings file and a hook's answer, read through their
//! serde types (`HooksSection`, `McpServersSection`, `HookAnswer`): each malformed value
//! is an error naming its key, each lenient reading stays what it was.

use flower::engine::hooks::{
    Ended, HookAnswer, HookEvent, HookOutcome, HookRun, HookSet, HooksSection,
};
use flower::tools::mcp::Transport;
use flower::tools::mcp::config::{self, McpServersSection};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn hooks(value: Value) -> Result<HookSet, (String, String)> {
    let section: HooksSection = serde_json::from_value(value).unwrap();
    let mut set = HookSet::default();
    set.add_from(&section, Path::new("s.json"))
        .map_err(|e| (e.key, e.message))?;
    Ok(set)
}

fn hook_error(value: Value) -> (String, String) {
    hooks(value).expect_err("a malformed hooks section")
}

#[test]
fn a_malformed_hooks_entry_is_an_error_naming_its_key() {
    let cmd = |extra: Value| {
        let mut hook = json!({"type": "command", "command": "true"});
        for (k, v) in extra.as_object().unwrap() {
            hook[k] = v.clone();
        }
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]})
    };
    let at = "hooks.PreToolUse[0]";
    let cases: Vec<(Value, String, &str)> = vec![
        (json!([]), "hooks".into(), "按事件分的对象"),
        (json!({"Stop": {}}), "hooks.Stop".into(), "的数组"),
        // An array of a group's fields is not a group (a derived struct would take it).
        (
            json!({"PreToolUse": [["Bash", []]]}),
            at.into(),
            "要一个对象",
        ),
        (
            json!({"PreToolUse": [{"matcher": 1, "hooks": []}]}),
            format!("{at}.matcher"),
            "要一个字符串",
        ),
        (
            json!({"PreToolUse": [{"matcher": "(", "hooks": []}]}),
            format!("{at}.matcher"),
            "正则表达式",
        ),
        (
            json!({"PreToolUse": [{"matcher": "x"}]}),
            format!("{at}.hooks"),
            "的数组",
        ),
        (
            json!({"PreToolUse": [{"hooks": {}}]}),
            format!("{at}.hooks"),
            "的数组",
        ),
        (
            json!({"PreToolUse": [{"hooks": ["true"]}]}),
            format!("{at}.hooks[0]"),
            "要一个对象",
        ),
        (
            cmd(json!({"type": null})),
            format!("{at}.hooks[0].type"),
            "command",
        ),
        (
            cmd(json!({"type": 7})),
            format!("{at}.hooks[0].type"),
            "command",
        ),
        (
            cmd(json!({"command": "  "})),
            format!("{at}.hooks[0].command"),
            "非空",
        ),
        (
            cmd(json!({"command": ["ls"]})),
            format!("{at}.hooks[0].command"),
            "非空",
        ),
        (
            cmd(json!({"timeout": 0})),
            format!("{at}.hooks[0].timeout"),
            "秒数",
        ),
        (
            cmd(json!({"timeout": 86_401})),
            format!("{at}.hooks[0].timeout"),
            "秒数",
        ),
        (
            cmd(json!({"timeout": "30"})),
            format!("{at}.hooks[0].timeout"),
            "秒数",
        ),
    ];
    for (value, key, words) in cases {
        let (got_key, message) = hook_error(value.clone());
        assert_eq!(got_key, key, "{value}");
        assert!(message.contains(words), "{value}: {message}");
    }
}

#[test]
fn hooks_read_leniently_where_claude_code_does() {
    let set = hooks(json!({
        "Notification": "anything",
        "PreToolUse": [
            {"matcher": null, "hooks": [
                {"type": "command", "command": "a.sh", "timeout": null, "async": true},
                {"type": "prompt", "prompt": "judge it"},
                {"type": "command", "command": "b.sh", "timeout": 1.5},
            ], "description": "kept out"},
            {"matcher": "Write|Edit", "hooks": [{"type": "http", "url": "x"}]},
        ],
        "Stop": [{"matcher": "ignored by Stop", "hooks": [
            {"type": "command", "command": "c.sh", "timeout": 86400}
        ]}],
    }))
    .unwrap();
    assert_eq!(
        set.listing(),
        [
            "PreToolUse *: a.sh (60 s, s.json)",
            "PreToolUse *: b.sh (1.5 s, s.json)",
            "Stop: c.sh (86400 s, s.json)",
        ]
    );
    assert_eq!(
        set.ignored,
        [
            "s.json: hooks.Notification:flower 没有这个事件,忽略",
            "s.json: hooks.PreToolUse[0].hooks[1]:flower 不支持 \"prompt\" 类型的钩子,忽略",
            "s.json: hooks.PreToolUse[1].hooks[0]:flower 不支持 \"http\" 类型的钩子,忽略",
        ]
    );
    // A group whose every hook was left out is no group.
    assert_eq!(set.groups(HookEvent::PreToolUse).len(), 1);
}

fn mcp(text: &str) -> Result<config::Parsed, (String, String)> {
    let section: McpServersSection = serde_json::from_str(text).unwrap();
    let lookup = |name: &str| (name == "HOME_DIR").then(|| "/h".to_string());
    config::parse(&section, Path::new(".mcp.json"), &lookup).map_err(|e| (e.key, e.message))
}

#[test]
fn a_malformed_mcp_server_is_an_error_naming_its_key() {
    let cases = [
        (r#"[]"#, "mcpServers", "按名字"),
        (r#"{" ": {"command": "x"}}"#, "mcpServers. ", "名字"),
        (r#"{"a": ["x"]}"#, "mcpServers.a", "要一个对象"),
        (
            r#"{"a": {"type": 1, "command": "x"}}"#,
            "mcpServers.a.type",
            "stdio",
        ),
        (
            r#"{"a": {"type": "ws", "command": "x"}}"#,
            "mcpServers.a.type",
            r#""ws""#,
        ),
        (r#"{"a": {"command": " "}}"#, "mcpServers.a.command", "命令"),
        // A `url` key, even null, without a `command` key is an HTTP server.
        (r#"{"a": {"url": null}}"#, "mcpServers.a.url", "URL"),
        (
            r#"{"a": {"url": "ftp://x"}}"#,
            "mcpServers.a.url",
            r#""ftp://x""#,
        ),
        // A `command` key, even null, makes it stdio.
        (
            r#"{"a": {"url": "http://x", "command": null}}"#,
            "mcpServers.a.command",
            "命令",
        ),
        (
            r#"{"a": {"command": "x", "args": "-y"}}"#,
            "mcpServers.a.args",
            "字符串数组",
        ),
        (
            r#"{"a": {"command": "x", "args": ["-y", 2]}}"#,
            "mcpServers.a.args[1]",
            "要一个字符串",
        ),
        (
            r#"{"a": {"command": "x", "args": ["${NOPE}"]}}"#,
            "mcpServers.a.args[0]",
            "NOPE",
        ),
        (
            r#"{"a": {"command": "x", "env": ["A=1"]}}"#,
            "mcpServers.a.env",
            "对象",
        ),
        (
            r#"{"a": {"command": "x", "env": {"A": null}}}"#,
            "mcpServers.a.env.A",
            "要一个字符串",
        ),
        (
            r#"{"a": {"url": "http://x", "headers": {"A": {}}}}"#,
            "mcpServers.a.headers.A",
            "要一个字符串",
        ),
        (
            r#"{"a": {"url": "http://x", "headers": {"A B": "1"}}}"#,
            "mcpServers.a.headers.A B",
            "HTTP 头",
        ),
    ];
    for (text, key, words) in cases {
        let (got_key, message) = mcp(text).expect_err(text);
        assert_eq!(got_key, key, "{text}");
        assert!(message.contains(words), "{text}: {message}");
    }
}

#[test]
fn mcp_servers_keep_the_files_order_and_take_numbers_and_booleans_as_text() {
    let parsed = mcp(r#"{
        "z": {"command": "${HOME_DIR}/srv", "args": ["${HOME_DIR}", "-v"], "env": {"N": 3, "B": true, "S": "${NOPE:-d}"}, "timeout": 5},
        "old": {"type": "sse", "url": 7},
        "a": {"type": "streamable-http", "url": "https://x/${HOME_DIR}", "headers": {"K": 1.5}},
        "z": {"command": "srv2", "args": null, "env": null}
    }"#)
    .unwrap();
    let names: Vec<&str> = parsed.servers.iter().map(|s| s.name.as_str()).collect();
    // A name written twice keeps its first place and its last entry.
    assert_eq!(names, ["z", "a"]);
    assert_eq!(
        parsed.servers[0].transport,
        Transport::Stdio {
            command: "srv2".into(),
            args: vec![],
            env: vec![]
        }
    );
    assert_eq!(
        parsed.servers[1].transport,
        Transport::Http {
            url: "https://x//h".into(),
            headers: vec![("K".into(), "1.5".into())]
        }
    );
    assert_eq!(
        parsed.servers[1].describe(),
        "a (http): https://x/${HOME_DIR}"
    );
    assert_eq!(parsed.ignored.len(), 1, "{:?}", parsed.ignored);
    assert!(parsed.ignored[0].contains("mcpServers.old"));

    let first = mcp(r#"{"z": {"command": "${HOME_DIR}/srv", "args": ["${HOME_DIR}", "-v"], "env": {"N": 3, "B": true, "S": "${NOPE:-d}"}}}"#)
        .unwrap();
    assert_eq!(
        first.servers[0].transport,
        Transport::Stdio {
            command: "/h/srv".into(),
            args: vec!["/h".into(), "-v".into()],
            env: vec![
                ("N".into(), "3".into()),
                ("B".into(), "true".into()),
                ("S".into(), "d".into())
            ],
        }
    );
    assert_eq!(
        first.servers[0].describe(),
        "z (stdio): ${HOME_DIR}/srv ${HOME_DIR} -v"
    );
}

fn ran(stdout: &str) -> HookRun {
    HookRun {
        command: "h.sh".into(),
        ended: Ended::Exit(0),
        stdout: stdout.into(),
        stderr: String::new(),
        duration: Duration::ZERO,
    }
}

fn outcome(event: HookEvent, stdouts: &[&str]) -> HookOutcome {
    HookOutcome {
        event,
        subject: String::new(),
        runs: stdouts.iter().map(|s| ran(s)).collect(),
    }
}

#[test]
fn a_hook_answer_of_the_wrong_shape_is_read_as_before() {
    // A key written twice: the last counts.
    let stop = outcome(
        HookEvent::Stop,
        &[r#"{"continue": true, "continue": false, "stopReason": "done"}"#],
    );
    assert_eq!(stop.stop().as_deref(), Some("done"));
    // A mistyped field is as if absent; the others still count.
    let mistyped = outcome(
        HookEvent::Stop,
        &[r#"{"continue": "no", "decision": ["block"], "systemMessage": "hi", "reason": 1}"#],
    );
    assert_eq!(mistyped.stop(), None);
    assert_eq!(mistyped.block_reason(), None);
    assert_eq!(mistyped.notices(), ["Stop hook:hi"]);
    let stop_default = outcome(
        HookEvent::Stop,
        &[r#"{"continue": false, "stopReason": 3}"#],
    );
    assert_eq!(
        stop_default.stop().as_deref(),
        Some("a hook said not to continue")
    );
    // Not an object: plain text, which is context for SessionStart.
    assert_eq!(HookAnswer::parse(" [1] "), None);
    assert_eq!(HookAnswer::parse("{not json"), None);
    let start = outcome(
        HookEvent::SessionStart,
        &["{not json", r#"{"hookSpecificOutput": []}"#],
    );
    assert_eq!(start.contexts(), ["{not json"]);
    // A deny's reason: the specific one, else the top-level one, else a default.
    let deny = |answer: &str| outcome(HookEvent::PreToolUse, &[answer]).block_reason();
    assert_eq!(
        deny(r#"{"reason": "r", "hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "s"}}"#).as_deref(),
        Some("s")
    );
    assert_eq!(
        deny(r#"{"reason": "r", "hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": 5}}"#).as_deref(),
        Some("r")
    );
    assert_eq!(
        deny(r#"{"hookSpecificOutput": {"permissionDecision": "deny"}}"#).as_deref(),
        Some("a hook blocked it (no reason given)")
    );
    // Only PreToolUse reads a permission decision.
    let post = outcome(
        HookEvent::PostToolUse,
        &[r#"{"hookSpecificOutput": {"permissionDecision": "deny"}}"#],
    );
    assert_eq!(post.block_reason(), None);
}
