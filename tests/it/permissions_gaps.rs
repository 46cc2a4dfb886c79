//! The last gaps of issue 40 through the real binary, each verified by its effect:
//! under a bare `Bash` rule the command really does what the rule should stop, under
//! the rule it does not.
//! - `env -S`: env reads its split string as its own command line again (options,
//!   `-u NAME`, `-C DIR`, `\_`, a nested `-S`), so the program behind them is seen by
//!   deny rules.
//! - An escaped blank at the start of a line (`git status\n\ ./x`): the grammar skips
//!   it and the newline before it, bash runs ` ./x`; it is not plain.

use crate::support::{FakeServer, Flower, Reply};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

/// Runs `commands` as the Bash calls of one turn in `ws` (rules alone, no sandbox);
/// returns the tool results.
fn replay(ws: &Path, commands: &[String], rules: &[&str]) -> Vec<Value> {
    let mut reply = Reply::blocks(vec![]);
    for c in commands {
        reply = reply.then_tool_use("Bash", json!({ "command": c }));
    }
    let server = FakeServer::start(vec![reply.stop_reason("tool_use"), Reply::text("done")]);
    let out = Flower::new(&["once", "run them", "--json", "--no-sandbox"])
        .server(&server)
        .dir(ws)
        .attempts(1)
        .command()
        .args(rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = server.requests()[1].tool_results();
    assert_eq!(results.len(), commands.len());
    results
}

/// The forms of `env -S` that deleted the file under `Bash(rm:*)` before.
const ENV_FORMS: [&str; 8] = [
    "env -S'-v rm VICTIM'",
    "env -S'-i rm VICTIM'",
    "env -S'-u X rm VICTIM'",
    "env -S'-C . rm VICTIM'",
    "env -S'-v\\_rm\\_VICTIM'",
    "env -S'-S\"-i rm VICTIM\"'",
    "env --split='-v rm VICTIM'",
    "env -vS'A=1 rm' VICTIM",
];

#[test]
fn env_split_strings_are_read_as_envs_own_command_line() {
    let ws = tempfile::tempdir().unwrap();
    let commands: Vec<String> = (0..ENV_FORMS.len())
        .map(|i| ENV_FORMS[i].replace("VICTIM", &format!("v{i}")))
        .collect();
    let plant = || {
        for i in 0..ENV_FORMS.len() {
            fs::write(ws.path().join(format!("v{i}")), "x").unwrap();
        }
    };
    // The control: each form really deletes its victim.
    plant();
    replay(ws.path(), &commands, &["--allowed-tools", "Bash"]);
    for (i, c) in commands.iter().enumerate() {
        assert!(
            !ws.path().join(format!("v{i}")).exists(),
            "{c:?} did not delete its victim under a bare Bash rule"
        );
    }
    plant();
    let results = replay(
        ws.path(),
        &commands,
        &[
            "--allowed-tools",
            "Bash",
            "--disallowed-tools",
            "Bash(rm:*)",
        ],
    );
    for (i, c) in commands.iter().enumerate() {
        assert!(
            ws.path().join(format!("v{i}")).exists(),
            "{c:?} deleted its victim under Bash(rm:*): {}",
            results[i]["content"]
        );
        assert_eq!(results[i]["is_error"], json!(true), "{c:?}");
    }
}

#[test]
fn an_escaped_blank_at_a_line_start_is_not_plain() {
    let ws = tempfile::tempdir().unwrap();
    let init = std::process::Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(ws.path())
        .status()
        .unwrap();
    assert!(init.success());
    // A directory named ` .` holding a program `x`: what bash runs for `\ ./x`.
    let dir = ws.path().join(" .");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("x"), "#!/bin/sh\ntouch ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(dir.join("x"), fs::Permissions::from_mode(0o755)).unwrap();
    let commands = vec!["git status\n\\ ./x".to_string()];
    replay(ws.path(), &commands, &["--allowed-tools", "Bash"]);
    assert!(
        ws.path().join("ran").exists(),
        "the control: bash runs ` ./x`"
    );
    fs::remove_file(ws.path().join("ran")).unwrap();
    let results = replay(
        ws.path(),
        &commands,
        &["--allowed-tools", "Bash(git status:*)"],
    );
    assert!(
        !ws.path().join("ran").exists(),
        "` ./x` ran under Bash(git status:*): {}",
        results[0]["content"]
    );
    assert_eq!(results[0]["is_error"], json!(true));
}
