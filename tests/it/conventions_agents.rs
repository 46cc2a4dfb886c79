//! Issue #45, items 1 and 5: the team's own sub-agents (`.claude/agents/*.md`, Claude
//! Code's format) are offered to the coordinator through `Task`'s `subagent_type`;
//! their `tools` limit them within the worker's boundary; the workspace's agent files
//! are pinned like settings files; `flower state -v` lists them and what was ignored.

use crate::support;

use serde_json::Value;
use std::path::Path;
use support::pipeline::{Agent, Project, agent_or_once, simple_reply, text, turn_of};
use support::{FakeServer, Recorded, Reply};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const MARK: &str = "你是只读的审查员 REVIEWER-MARK";

const REVIEWER: &str = "---
name: reviewer
description: 只读地审查代码,报告问题
tools: Read, Grep
model: inherit
color: blue
favouriteFruit: apple
---

你是只读的审查员 REVIEWER-MARK。只看,不改。
";

fn is_reviewer(req: &Recorded) -> bool {
    req.system().contains(MARK)
}

/// The simple pipeline, except that the coordinator sends the reviewer, which tries
/// to write a file (its `tools` do not allow it) and then reports.
fn reply(req: &Recorded) -> Reply {
    if is_reviewer(req) {
        return match turn_of(req) {
            0 => Reply::tool_use(
                "Write",
                serde_json::json!({"file_path": "planted.txt", "content": "x"}),
            ),
            _ => Reply::text("审完了,没有问题。"),
        };
    }
    match (agent_or_once(req), turn_of(req)) {
        (Agent::Coordinator, 0) => Reply::tool_use(
            "Task",
            serde_json::json!({
                "description": "审查",
                "prompt": "审查工作区",
                "subagent_type": "reviewer"
            }),
        ),
        _ => simple_reply(req),
    }
}

fn task_tool(req: &Recorded) -> Value {
    req.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Task")
        .cloned()
        .unwrap_or_else(|| panic!("no Task tool: {:?}", req.tool_names()))
}

#[test]
fn the_coordinator_sends_a_project_agent_whose_tools_limit_it() {
    let project = Project::new();
    write(&project.dir.join(".claude/agents/reviewer.md"), REVIEWER);
    let server = FakeServer::with_handler(|req, _| reply(req));
    let out = project.run(&server, &["审查一下"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let coordinator = requests
        .iter()
        .find(|r| !is_reviewer(r) && agent_or_once(r) == Agent::Coordinator)
        .unwrap();
    let task = task_tool(coordinator);
    let names = &task["input_schema"]["properties"]["subagent_type"]["enum"];
    assert!(
        names.as_array().unwrap().iter().any(|n| n == "reviewer"),
        "{task}"
    );
    let description = task["description"].as_str().unwrap();
    assert!(
        description.contains("- reviewer: 只读地审查代码,报告问题"),
        "the coordinator sees it by name and description: {description}"
    );
    let reviewer: Vec<&Recorded> = requests.iter().filter(|r| is_reviewer(r)).collect();
    assert_eq!(reviewer.len(), 2, "the reviewer ran two turns");
    // Its body is its system prompt; its tools are its allow rules.
    assert!(
        reviewer[0].system().starts_with(MARK),
        "{}",
        reviewer[0].system()
    );
    assert_eq!(reviewer[0].tool_names(), ["Read", "Grep"]);
    // The call its tools do not allow was denied, and nothing was written.
    let results = reviewer[1].tool_results();
    assert_eq!(results[0]["is_error"], true, "{results:?}");
    assert!(
        results[0]["content"].to_string().contains("Write"),
        "{results:?}"
    );
    assert!(!project.dir.join("planted.txt").exists());
    // The default worker is still there, and the workers without subagent_type.
    assert!(
        names
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "general-purpose")
    );
}

#[test]
fn an_agent_never_gets_more_than_the_worker_role_allows() {
    use flower::AgentSpec;
    let role = AgentSpec::new("general-purpose", "w")
        .allowed_tools(["Read", "Write", "Bash(npm test)"])
        .disallowed_tools(["Bash(rm:*)"]);
    let custom = |tools: &[&str]| {
        AgentSpec::new("c", "c")
            .allowed_tools(tools.iter().copied())
            .within(&role)
    };
    // Within: kept; a whole tool the role allows only in part: the role's part;
    // outside: dropped.
    let spec = custom(&["Read", "Bash", "WebFetch", "Edit"]).unwrap();
    assert_eq!(spec.allowed_tools, ["Read", "Bash(npm test)"]);
    assert!(spec.disallowed_tools.iter().any(|r| r == "Bash(rm:*)"));
    assert!(spec.disallowed_tools.iter().any(|r| r == "Task"));
    // No tools: the role's.
    assert_eq!(custom(&[]).unwrap().allowed_tools, role.allowed_tools);
    // Nothing inside the role: not offered at all (an empty list would allow all).
    assert!(custom(&["WebFetch"]).is_none());
}

#[test]
fn state_verbose_lists_agents_their_unused_keys_and_what_was_ignored() {
    let project = Project::new();
    write(&project.dir.join(".claude/agents/reviewer.md"), REVIEWER);
    write(
        &project.dir.join(".claude/agents/broken.md"),
        "---\nname: broken\n---\nno description\n",
    );
    write(
        &project.home.join(".claude/agents/reviewer.md"),
        "---\nname: reviewer\ndescription: the user's\n---\nuser's reviewer\n",
    );
    write(
        &project.home.join(".claude/agents/helper.md"),
        "---\nname: helper\ndescription: >\n  helps with\n  anything\ntools:\n  - Read\n  - Bash(git diff:*)\n---\nhelp\n",
    );
    let out = support::Flower::bin()
        .command()
        .current_dir(&project.dir)
        .args(["state", "-v"])
        .env("HOME", &project.home)
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let listed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for wanted in [
        "自定义子代理:2 个",
        "reviewer:只读地审查代码,报告问题(~/proj/.claude/agents/reviewer.md,项目;tools:Read, Grep)",
        "helper:helps with anything(~/.claude/agents/helper.md,用户;tools:Read, Bash(git diff:*))",
        "flower 不用的键:color",
        "不认识的键:favouriteFruit(忽略)",
        "broken.md:缺少 description,忽略",
        "已由",
    ] {
        assert!(listed.contains(wanted), "{wanted} missing:\n{listed}");
    }
    let out = support::Flower::bin()
        .command()
        .current_dir(&project.dir)
        .args(["state", "--json", "-v"])
        .env("HOME", &project.home)
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let agents = &json["conventions"]["agents"];
    assert_eq!(agents[0]["name"], "reviewer");
    assert_eq!(agents[0]["scope"], "project");
    assert_eq!(agents[1]["tools"][1], "Bash(git diff:*)");
    assert_eq!(
        json["conventions"]["agents_ignored"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_changed_agent_file_is_refused_unattended_and_applied_with_accept_settings() {
    let project = Project::new();
    write(&project.dir.join(".claude/agents/reviewer.md"), REVIEWER);
    let server = FakeServer::with_handler(|req, _| reply(req));
    let out = project.run(&server, &["审查一下"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let pin = project.json("runs/settings-pin.json");
    assert_eq!(
        pin["files"][0]["file"], ".claude/agents/reviewer.md",
        "{pin}"
    );
    // Between runs the agent's tools widen (as a planted file would).
    write(
        &project.dir.join(".claude/agents/reviewer.md"),
        &REVIEWER.replace("tools: Read, Grep", "tools: Read, Grep, Write"),
    );
    let out = project.run(&server, &["--again"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for said in [
        ".claude/agents/reviewer.md",
        "front_matter.tools",
        "--accept-settings",
    ] {
        assert!(stderr.contains(said), "{said} missing: {stderr}");
    }
    let out = project.run(&server, &["--again", "--accept-settings"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
}
