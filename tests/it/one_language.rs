//! One language per audience (issue #41.13): the person reads Chinese (a numeric flag
//! that does not parse, not clap's English), the model reads English (a sub-agent's
//! failure in its tool result).

use crate::support;

use serde_json::json;
use support::pipeline::{Project, text};
use support::{FakeServer, Reply};

fn has_chinese(text: &str) -> bool {
    text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

/// What clap would say in English (`invalid digit found in string`, `is not in`) is
/// said in Chinese.
#[test]
fn a_numeric_flag_that_does_not_parse_is_said_in_chinese() {
    let project = Project::new();
    let server = FakeServer::start(vec![]);
    for (args, says) in [
        (vec!["--rounds", "abc", "x"], "要一个不带小数点的非负整数"),
        (vec!["--rounds", "0", "x"], "要在 1..=4294967295 之间"),
        (
            vec!["once", "--max-turns", "1.5", "x"],
            "要一个不带小数点的非负整数",
        ),
        (
            vec!["once", "--max-turns", "99999999999", "x"],
            "要在 0..=4294967295 之间",
        ),
    ] {
        let out = project.run(&server, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        for english in ["invalid digit", "is not in", "invalid float"] {
            assert!(!stderr.contains(english), "{args:?}: {stderr}");
        }
    }
    assert_eq!(server.request_count(), 0);
}

/// A sub-agent the model refuses to answer: the caller's tool result says so in
/// English, not in the person's Chinese.
#[test]
fn a_failed_sub_agent_is_told_to_the_model_in_english() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| {
        if req.system().contains("sub-agent of a coding harness") {
            return Reply::text("").stop_reason("refusal");
        }
        match req.tool_results().is_empty() {
            true => Reply::tool_use(
                "Task",
                json!({"description": "看看", "prompt": "看看工作区"}),
            ),
            false => Reply::text("好的。"),
        }
    });
    let out = project.run(&server, &["once", "派个子代理"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requests = server.requests();
    let result = requests
        .iter()
        .flat_map(|r| r.tool_results())
        .next()
        .expect("the Task's result");
    let said = result["content"].to_string();
    assert_eq!(result["is_error"], true, "{result}");
    assert!(said.contains("sub-agent failed"), "{said}");
    assert!(said.contains("refused"), "{said}");
    assert!(!has_chinese(&said), "{said}");
}

/// The README's Python section works as written on a fresh clone: `maturin develop`
/// refuses to run outside a virtual environment, so the section makes one first.
#[test]
fn the_readmes_python_section_creates_the_venv_maturin_needs() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Python"))
        .expect("a Python section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block");
    let venv = block.find("python3 -m venv").expect("a venv made");
    let activate = block.find("/bin/activate").expect("and activated");
    let maturin = block.find("maturin develop").expect("maturin develop");
    assert!(venv < activate && activate < maturin, "{block}");
}
