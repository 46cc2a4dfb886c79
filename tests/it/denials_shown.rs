//! A call that is not run is shown while the run goes, with the call and what stopped
//! it (issue #41.10): a `PreToolUse` hook's block (and what the hook said), a
//! permission rule (which one).

use crate::support;

use serde_json::json;
use support::pipeline::{Project, text};
use support::{FakeServer, Reply};

#[test]
fn a_hook_blocked_call_is_shown_while_running_with_the_hooks_words() {
    let project = Project::new();
    std::fs::create_dir_all(project.dir.join(".claude")).unwrap();
    std::fs::write(
        project.dir.join(".claude/guard.sh"),
        "#!/bin/bash\necho 'forbidden files are off limits' >&2\nexit 2\n",
    )
    .unwrap();
    let settings = json!({"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [
        {"type": "command", "command": "bash \"$CLAUDE_PROJECT_DIR/.claude/guard.sh\""}
    ]}]}});
    std::fs::write(
        project.dir.join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use(
            "Write",
            json!({"file_path": "forbidden.txt", "content": "x"}),
        ),
        Reply::text("好的,不写了。"),
    ]);
    let out = project.run(&server, &["once", "写 forbidden.txt"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!project.dir.join("forbidden.txt").exists());
    let line = stderr
        .lines()
        .find(|l| l.contains("✗"))
        .unwrap_or_else(|| panic!("no line for the blocked call: {stderr}"));
    assert!(line.contains("Write"), "{line}");
    assert!(line.contains("forbidden.txt"), "{line}");
    assert!(line.contains("被 PreToolUse hook 拦下"), "{line}");
    assert!(line.contains("(forbidden files are off limits)"), "{line}");
}

#[test]
fn a_permission_denial_names_the_command_and_the_rule() {
    let project = Project::new();
    std::fs::write(project.dir.join("victim.txt"), "keep me").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Bash", json!({"command": "rm victim.txt"})),
        Reply::tool_use("Write", json!({"file_path": "x.txt", "content": "x"})),
        Reply::text("好的。"),
    ]);
    let out = project.run(
        &server,
        &[
            "once",
            "删掉它",
            "--allowed-tools",
            "Bash",
            "--disallowed-tools",
            "Bash(rm:*)",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(project.read("victim.txt"), "keep me");
    let denied: Vec<&str> = stderr.lines().filter(|l| l.contains("✗")).collect();
    assert_eq!(denied.len(), 2, "{stderr}");
    assert!(denied[0].contains("rm victim.txt"), "{}", denied[0]);
    assert!(denied[0].contains("权限规则 Bash(rm:*)"), "{}", denied[0]);
    assert!(denied[1].contains("x.txt"), "{}", denied[1]);
    assert!(denied[1].contains("没有允许它的权限规则"), "{}", denied[1]);
}
