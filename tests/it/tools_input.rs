//! Every built-in tool turns malformed input into an error result naming the problem,
//! never a panic.

use flower::tools::{ToolContext, builtin};
use serde_json::{Value, json};
use std::fs;
use tokio_util::sync::CancellationToken;

fn ctx() -> (tempfile::TempDir, ToolContext) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = fs::canonicalize(tmp.path()).unwrap();
    let ctx = ToolContext {
        workspace: ws.clone(),
        run_dir: ws.join("runs"),
        cancel: CancellationToken::new(),
        processes: flower::tools::ProcessGroups::new(),
        sandbox: Default::default(),
        env: Default::default(),
    };
    (tmp, ctx)
}

#[test]
fn builtin_tools_have_claude_code_names_and_schemas() {
    let tools = builtin();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["Read", "Write", "Edit", "Glob", "Grep", "Bash"]);
    let required = |v: &Value| v["required"].clone();
    for t in &tools {
        let d = t.definition();
        let schema: Value = d.input_schema.parse().unwrap();
        assert!(
            d.description.len() > 100,
            "{} has a real description",
            d.name
        );
        assert_eq!(schema["type"], "object");
        let want = match d.name.as_str() {
            "Read" => json!(["file_path"]),
            "Write" => json!(["file_path", "content"]),
            "Edit" => json!(["file_path", "old_string", "new_string"]),
            "Glob" | "Grep" => json!(["pattern"]),
            "Bash" => json!(["command"]),
            other => panic!("unexpected tool {other}"),
        };
        assert_eq!(required(&schema), want, "{}", d.name);
        // Every required field is described.
        for f in want.as_array().unwrap() {
            let f = f.as_str().unwrap();
            assert!(schema["properties"][f]["description"].is_string());
        }
    }
    let grep = tools
        .iter()
        .find(|t| t.name() == "Grep")
        .unwrap()
        .input_schema()
        .parse::<Value>()
        .unwrap();
    for f in [
        "-i",
        "-n",
        "-A",
        "-B",
        "-C",
        "head_limit",
        "multiline",
        "glob",
        "type",
        "output_mode",
        "path",
    ] {
        assert!(grep["properties"][f].is_object(), "Grep has {f}");
    }
}

#[tokio::test]
async fn malformed_inputs_become_errors() {
    let (_tmp, ctx) = ctx();
    let bad: Vec<Value> = vec![
        json!(null),
        json!([]),
        json!(1),
        json!("Read"),
        json!({}),
        json!({"file_path": null, "pattern": null, "command": null}),
        json!({"file_path": 1, "pattern": 2, "command": 3, "content": 4}),
        json!({"file_path": [], "pattern": {}, "command": false}),
        json!({"file_path": "x", "pattern": "x", "command": ["x"], "offset": -5, "limit": "many",
               "old_string": 1, "new_string": 2, "replace_all": 3, "timeout": {}, "-A": "x",
               "head_limit": -1, "output_mode": 7, "content": null}),
    ];
    for tool in builtin() {
        for input in &bad {
            if tool.name() == "Glob" && input["pattern"] == "x" {
                continue; // a valid Glob input: the other fields are not Glob's
            }
            let out = tool
                .call(&flower::content::ToolInput::of_tree(input), &ctx)
                .await;
            assert!(
                out.is_error,
                "{} accepted {input}: {}",
                tool.name(),
                out.content
            );
            assert!(!out.content.is_empty());
        }
    }
}

/// Opening a FIFO blocks until someone opens the other end: the tools refuse
/// non-regular files instead of hanging.
#[tokio::test]
async fn fifos_are_refused_not_waited_on() {
    let (_tmp, ctx) = ctx();
    let fifo = ctx.workspace.join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let inputs = [
        ("Read", json!({"file_path": "pipe"})),
        ("Write", json!({"file_path": "pipe", "content": "x"})),
        (
            "Edit",
            json!({"file_path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
        ("Grep", json!({"pattern": "x", "path": "pipe"})),
    ];
    for tool in builtin() {
        for (name, input) in &inputs {
            if tool.name() == *name {
                let out = tool
                    .call(&flower::content::ToolInput::of_tree(input), &ctx)
                    .await;
                assert!(out.is_error, "{name}: {}", out.content);
                assert!(
                    out.content.contains("not a regular file"),
                    "{name}: {}",
                    out.content
                );
            }
        }
    }
    // A directory walk skips it.
    let grep = builtin().into_iter().find(|t| t.name() == "Grep").unwrap();
    let out = grep
        .call(
            &flower::content::ToolInput::of_tree(&json!({"pattern": "x"})),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
}
