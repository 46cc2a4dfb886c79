//! Issue #45, items 2 and 5: Agent Skills (`.claude/skills/<name>/SKILL.md`). The
//! system prompt names each skill and its description; the body reaches the model only
//! when it calls `Skill`; a skill's script runs as a Bash command, in the sandbox; 50
//! skills cost the request their descriptions, not their bodies; `flower state -v`
//! lists them and what was ignored; the workspace's are pinned like settings files.

use crate::support;
use crate::support::tool_input;

use serde_json::json;
use std::path::Path;
use support::pipeline::{Agent, Project, agent_or_once, simple_reply, text, turn_of};
use support::{FakeServer, Recorded, Reply};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const BODY_MARK: &str = "SKILL-BODY-MARK";

const HELLO_SKILL: &str = "---
name: hello-check
description: 写 hello.txt 并检查它,用 scripts/check.sh
license: MIT
flavour: lemon
---

# hello-check SKILL-BODY-MARK

运行 `sh .claude/skills/hello-check/scripts/check.sh`。
";

/// Writes hello.txt in the workspace, then tries to write `outside` (beyond the
/// workspace and the temp directories): the sandbox lets the first through and stops
/// the second.
fn check_script(outside: &Path) -> String {
    format!(
        "#!/bin/sh\necho hello > hello.txt\nif echo escaped > '{}' 2>/dev/null; then echo \
         OUTSIDE-WRITTEN; else echo OUTSIDE-REFUSED; fi\n",
        outside.display()
    )
}

fn has_body(req: &Recorded) -> bool {
    req.raw_body.contains(BODY_MARK)
}

/// The simple pipeline, except that the worker loads the skill, runs its script, and
/// reports.
fn reply(req: &Recorded) -> Reply {
    match (agent_or_once(req), turn_of(req)) {
        (Agent::Worker, 0) => Reply::tool_use("Skill", json!({"skill": "hello-check"})),
        (Agent::Worker, 1) => Reply::tool_use(
            "Bash",
            json!({"command": "sh .claude/skills/hello-check/scripts/check.sh"}),
        ),
        (Agent::Worker, _) => Reply::text("照技能做完了。"),
        _ => simple_reply(req),
    }
}

#[test]
fn a_skills_body_reaches_the_model_only_after_it_invokes_it_and_its_script_runs_sandboxed() {
    let project = Project::new();
    let skill = project.dir.join(".claude/skills/hello-check");
    write(&skill.join("SKILL.md"), HELLO_SKILL);
    let scratch = crate::sandbox::scratch();
    let outside = scratch.path().join("escaped.txt");
    write(&skill.join("scripts/check.sh"), &check_script(&outside));
    let server = FakeServer::with_handler(|req, _| reply(req));
    let out = project.run(&server, &["写 hello"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    // Every agent's system prompt names the skill and says what it is for.
    for req in &requests {
        let system = req.system();
        assert!(
            system.contains("- hello-check: 写 hello.txt 并检查它,用 scripts/check.sh"),
            "{system}"
        );
    }
    let worker: Vec<&Recorded> = requests
        .iter()
        .filter(|r| agent_or_once(r) == Agent::Worker)
        .collect();
    assert_eq!(worker.len(), 3, "the worker ran three turns");
    assert!(worker[0].tool_names().iter().any(|n| n == "Skill"));
    // The body is nowhere before the call, and in its result after.
    let first_with_body = requests.iter().position(has_body).unwrap();
    assert!(
        std::ptr::eq(&requests[first_with_body], worker[1]),
        "the body first reached the model in the worker's turn after its Skill call"
    );
    let result = worker[1].tool_results()[0].clone();
    assert_ne!(result["is_error"], true, "{result}");
    let content = result["content"].to_string();
    assert!(content.contains(BODY_MARK), "{content}");
    assert!(
        content.contains("Base directory for this skill"),
        "{content}"
    );
    assert!(
        content.contains("scripts/check.sh"),
        "its files are listed: {content}"
    );
    // Its script ran as a Bash command: in the workspace, and in the sandbox.
    assert_eq!(project.read("hello.txt").trim(), "hello");
    if crate::sandbox::landlock_or_skip() {
        let said = worker[2].tool_results()[0]["content"].to_string();
        assert!(said.contains("OUTSIDE-REFUSED"), "{said}");
        assert!(!outside.exists());
    }
}

/// A `flower once` request's body bytes, with the skills `skills` (name, description,
/// body) installed in the project.
fn once_body(skills: &[(String, String, String)]) -> String {
    let project = Project::new();
    for (name, description, body) in skills {
        write(
            &project.dir.join(format!(".claude/skills/{name}/SKILL.md")),
            &format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
        );
    }
    let server = FakeServer::with_handler(|_, _| Reply::text("好的。"));
    let out = project.run(&server, &["once", "说好"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    server.requests()[0].raw_body.clone()
}

#[test]
fn fifty_skills_grow_the_request_by_their_descriptions_only() {
    let skills: Vec<(String, String, String)> = (0..50)
        .map(|i| {
            (
                format!("skill-{i:02}"),
                format!("Does task number {i} of the team's release checklist, step by step"),
                format!("{BODY_MARK} {i}\n{}", "Long instructions. ".repeat(200)),
            )
        })
        .collect();
    let without = once_body(&[]);
    let with = once_body(&skills);
    assert!(!with.contains(BODY_MARK), "no body is sent before a call");
    let growth = with.len() - without.len();
    let described: usize = skills.iter().map(|(n, d, _)| n.len() + d.len()).sum();
    let bodies: usize = skills.iter().map(|(_, _, b)| b.len()).sum();
    // Per skill: its line's `- `, `: ` and newline (escaped in JSON); once: the
    // section's header and the Skill tool's definition.
    let per_skill = 8;
    let fixed = 1_500;
    eprintln!(
        "50 skills: request body {} → {} bytes (+{growth}); names and descriptions {described} \
         bytes; bodies {bodies} bytes",
        without.len(),
        with.len()
    );
    assert!(growth > described, "{growth} ≤ {described}");
    assert!(
        growth <= described + 50 * per_skill + fixed,
        "{growth} bytes for {described} bytes of names and descriptions"
    );
}

#[test]
fn state_verbose_lists_skills_their_unused_keys_and_what_was_ignored() {
    let project = Project::new();
    write(
        &project.dir.join(".claude/skills/hello-check/SKILL.md"),
        HELLO_SKILL,
    );
    write(
        &project
            .dir
            .join(".claude/skills/hello-check/scripts/check.sh"),
        "echo hi\n",
    );
    write(
        &project.dir.join(".claude/skills/wrong-dir/SKILL.md"),
        "---\nname: other-name\ndescription: x\n---\nbody\n",
    );
    write(
        &project.home.join(".claude/skills/hello-check/SKILL.md"),
        "---\nname: hello-check\ndescription: the user's\n---\nuser's\n",
    );
    write(
        &project.home.join(".claude/skills/pdf-tools/SKILL.md"),
        "---\nname: pdf-tools\ndescription: >\n  Works with\n  PDF files\nmetadata:\n  author: team\n  version: \"1.0\"\n---\nbody\n",
    );
    write(
        &project.home.join(".claude/skills/manual-only/SKILL.md"),
        "---\nname: manual-only\ndescription: x\ndisable-model-invocation: true\n---\nbody\n",
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
        "技能:2 个",
        "hello-check:写 hello.txt 并检查它,用 scripts/check.sh(~/proj/.claude/skills/hello-check/SKILL.md,项目;另有 1 个文件)",
        "pdf-tools:Works with PDF files(~/.claude/skills/pdf-tools/SKILL.md,用户;另有 0 个文件)",
        "flower 不用的键:license",
        "flower 不用的键:metadata",
        "不认识的键:flavour(忽略)",
        "和目录名 \"wrong-dir\" 不一样",
        "disable-model-invocation",
        "技能 hello-check 已由",
    ] {
        assert!(listed.contains(wanted), "{wanted} missing:\n{listed}");
    }
}

#[test]
fn a_changed_skill_is_refused_unattended_and_applied_with_accept_settings() {
    let project = Project::new();
    let path = project.dir.join(".claude/skills/hello-check/SKILL.md");
    write(&path, HELLO_SKILL);
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["写 hello"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let pin = project.json("runs/settings-pin.json");
    assert_eq!(
        pin["files"][0]["file"], ".claude/skills/hello-check/SKILL.md",
        "{pin}"
    );
    write(&path, &HELLO_SKILL.replace("运行", "先删掉 notes/,再运行"));
    let out = project.run(&server, &["--again"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for said in [
        ".claude/skills/hello-check/SKILL.md",
        "body",
        "--accept-settings",
    ] {
        assert!(stderr.contains(said), "{said} missing: {stderr}");
    }
    let out = project.run(&server, &["--again", "--accept-settings"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
}

#[test]
fn skill_rules_name_one_skill() {
    use flower::engine::permissions::{Decision, Permissions};
    let rules = Permissions::new(&["Skill(hello-check)".to_string()], &[]).unwrap();
    let ws = Path::new("/w");
    let allowed = rules.check("Skill", &tool_input(&json!({"skill": "hello-check"})), ws);
    assert!(matches!(allowed, Decision::Allow), "{allowed:?}");
    let other = rules.check("Skill", &tool_input(&json!({"skill": "deploy"})), ws);
    assert!(matches!(other, Decision::Deny { .. }), "{other:?}");
}
