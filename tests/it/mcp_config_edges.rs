//! `tools::mcp::config` through the library, beside `config_sections`: what a `${…}`
//! that names no variable says, which header values an HTTP server may be given, how
//! a server's name becomes its tools' names, and how files' servers merge.

use flower::tools::mcp::config::{self, ExpandError, McpConfig, McpServersSection};
use flower::tools::mcp::{McpServer, Transport};
use std::path::Path;

fn parse(text: &str) -> Result<config::Parsed, (String, String)> {
    let section: McpServersSection = serde_json::from_str(text).unwrap();
    let unset = |_: &str| -> Option<String> { None };
    config::parse(&section, Path::new(".mcp.json"), &unset).map_err(|e| (e.key, e.message))
}

#[test]
fn a_reference_without_a_name_is_not_a_variable_and_says_so() {
    let none = |_: &str| -> Option<String> { None };
    for text in ["${}", "a ${} b", "${:-fallback}"] {
        let inner = text.split_once("${").unwrap().1.split_once('}').unwrap().0;
        assert_eq!(
            config::expand(text, &none),
            Err(ExpandError::NotAVariable(inner.to_string())),
            "{text}"
        );
    }
    let (key, message) = parse(r#"{"a": {"command": "x", "args": ["${}"]}}"#).unwrap_err();
    assert_eq!(key, "mcpServers.a.args[0]");
    assert!(message.contains("不是变量引用"), "{message}");
}

#[test]
fn a_header_value_may_hold_tabs_and_non_ascii_text_and_no_control_characters() {
    let server = |value: &str| {
        let text = serde_json::json!({"a": {"url": "https://x", "headers": {"X-Note": value}}});
        parse(&text.to_string())
    };
    for fine in ["a\tb", "Grüße 你好", " ~!"] {
        let parsed = server(fine).unwrap_or_else(|e| panic!("{fine:?}: {e:?}"));
        assert_eq!(
            parsed.servers[0].transport,
            Transport::Http {
                url: "https://x".into(),
                headers: vec![("X-Note".into(), fine.into())]
            }
        );
    }
    for bad in ["a\nb", "a\rb", "\u{0}", "a\u{1b}[0m", "\u{7f}"] {
        let (key, message) = server(bad).expect_err(bad);
        assert_eq!(key, "mcpServers.a.headers.X-Note", "{bad:?}");
        assert!(message.contains("HTTP 头"), "{bad:?}: {message}");
    }
}

#[test]
fn a_servers_name_keeps_letters_digits_underscores_and_hyphens_in_tool_names() {
    let parsed = parse(r#"{"my-files_2.0 beta": {"command": "srv"}}"#).unwrap();
    let server: &McpServer = &parsed.servers[0];
    assert_eq!(server.prefix_name(), "my-files_2_0_beta");
    assert_eq!(server.rule(), "mcp__my-files_2_0_beta");
    assert_eq!(
        server.tool_name("read.file-v2"),
        "mcp__my-files_2_0_beta__read_file-v2"
    );
}

#[test]
fn servers_of_a_later_file_replace_those_of_the_same_name_and_add_the_rest() {
    let mut all = McpConfig::default();
    assert!(all.is_empty());
    all.add(
        parse(r#"{"a": {"command": "one"}, "b": {"command": "two"}}"#)
            .unwrap()
            .servers,
    );
    assert!(!all.is_empty());
    all.add(
        parse(r#"{"b": {"command": "three"}, "c": {"url": "http://c"}}"#)
            .unwrap()
            .servers,
    );
    let seen: Vec<String> = all.servers.iter().map(McpServer::describe).collect();
    assert_eq!(
        seen,
        ["a (stdio): one", "b (stdio): three", "c (http): http://c"]
    );
}
