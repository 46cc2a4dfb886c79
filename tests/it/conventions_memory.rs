//! Project memory (`CLAUDE.md`, `AGENTS.md`, `~/.claude/CLAUDE.md` and their `@imports`)
//! in every agent's system prompt, read once per session: a session killed and woken
//! sends the prompt it began with byte for byte, even after the files changed; new
//! sessions (the judge, a sub-agent, the next step) read the files again.

use crate::support;

use flower::engine::memory::{MAX_IMPORT_DEPTH, MAX_MEMORY_BYTES, MemoryKind, MemorySource};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::pipeline::{Agent, GOAL, Project, agent_of, simple_reply, text, turn_of};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The goal setter reads the brief first, so a kill after its first reply leaves its
/// session half done (as in continuation_crash).
fn reply(req: &Recorded) -> Reply {
    match (agent_of(req), turn_of(req)) {
        (Agent::GoalSetter, 0) => Reply::tool_use("Read", json!({"file_path": "notes/需求.md"})),
        (Agent::GoalSetter, 1) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/目标.md", "content": GOAL}),
        ),
        (Agent::GoalSetter, _) => Reply::text("清单写好了。"),
        _ => simple_reply(req),
    }
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn memory_is_in_every_agents_system_prompt_and_a_woken_session_sends_what_it_began_with() {
    let project = Project::new();
    write(
        &project.home.join(".claude/CLAUDE.md"),
        "用户约定:回答要短。",
    );
    write(
        &project.dir.join("CLAUDE.md"),
        "项目约定:缩进用两个空格。详见 @docs/style.md\n",
    );
    write(
        &project.dir.join("docs/style.md"),
        "风格:函数不超过 40 行。",
    );

    // Run 1: killed while the goal setter's second request is held.
    let gate = Gate::new();
    let holding = gate.clone();
    let held_once = Arc::new(AtomicBool::new(false));
    let server = FakeServer::with_handler(move |req, _| {
        if agent_of(req) == Agent::GoalSetter
            && turn_of(req) == 1
            && !held_once.swap(true, Ordering::SeqCst)
        {
            return Reply::text("never delivered").gate_before(&holding);
        }
        reply(req)
    });
    let mut child = project.spawn(&server, &["写个 hello 脚本"]);
    assert!(
        gate.wait_reached(TIMEOUT),
        "设定目标 never sent its second request"
    );
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let first = server.requests();
    for req in &first {
        let system = req.system();
        for wanted in [
            "用户约定:回答要短。",
            "项目约定:缩进用两个空格。",
            "风格:函数不超过 40 行。",
        ] {
            assert!(system.contains(wanted), "{wanted} missing from {system}");
        }
        // The memory comes first, in a block of its own with the cache mark, the same
        // for every role; the role's instructions after it.
        let blocks = req.body["system"].as_array().expect("system blocks");
        assert_eq!(blocks.len(), 2, "{system}");
        assert!(
            blocks[0]["text"]
                .as_str()
                .unwrap()
                .starts_with("# Project memory")
        );
        assert_eq!(blocks[0]["cache_control"]["type"], "ephemeral");
        assert_eq!(
            blocks[0], first[0].body["system"][0],
            "shared by every role"
        );
        assert!(blocks[1].get("cache_control").is_none());
        assert_eq!(req.body["tools"], first[0].body["tools"], "one tool list");
    }
    let held = first
        .iter()
        .rfind(|r| agent_of(r) == Agent::GoalSetter)
        .unwrap()
        .clone();

    // The files change while nothing runs.
    write(
        &project.dir.join("CLAUDE.md"),
        "项目约定:改成四个空格了。\n",
    );

    // Run 2: the goal setter's session resumes with the memory it began with; every
    // session begun after the change reads the new file.
    let server = FakeServer::with_handler(|req, _| reply(req));
    let out = project.run(&server, &[]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let resumed = requests
        .iter()
        .find(|r| agent_of(r) == Agent::GoalSetter)
        .expect("the goal setter resumed");
    assert_eq!(
        resumed.body["system"], held.body["system"],
        "the woken session's system prompt is byte-identical"
    );
    assert!(!resumed.system().contains("四个空格"));
    for agent in [Agent::Coordinator, Agent::Worker, Agent::Judge] {
        let req = requests.iter().find(|r| agent_of(r) == agent).unwrap();
        assert!(
            req.system().contains("项目约定:改成四个空格了。"),
            "{agent:?} began after the edit: {}",
            req.system()
        );
        assert!(req.system().contains("用户约定:回答要短。"));
    }
    // The pin is in the transcript and `flower show` says so.
    let sessions = project.json("runs/lineage.json")["steps"].clone();
    let goal_session = sessions["设定目标"].as_str().unwrap();
    let show = project.run(&server, &["show", goal_session]);
    let shown = text(&show.stdout);
    assert!(shown.contains("[项目记忆] 3 个文件"), "{shown}");
}

#[test]
fn no_memory_flag_and_setting_leave_memory_out() {
    let project = Project::new();
    write(&project.dir.join("AGENTS.md"), "AGENTS 约定:先写测试。");
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["once", "--no-memory", "你好"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(!server.requests()[0].system().contains("先写测试"));

    // In a settings file's env block.
    write(
        &project.dir.join(".claude/settings.json"),
        r#"{"env": {"FLOWER_MEMORY": "off"}}"#,
    );
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["once", "你好"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(!server.requests()[0].system().contains("先写测试"));

    // On by default: AGENTS.md is read when there is no CLAUDE.md.
    std::fs::remove_file(project.dir.join(".claude/settings.json")).unwrap();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["once", "你好"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        server.requests()[0]
            .system()
            .contains("AGENTS 约定:先写测试。")
    );

    // With a CLAUDE.md beside it, AGENTS.md is not read (it is usually imported).
    write(&project.dir.join("CLAUDE.md"), "CLAUDE 约定。");
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    project.run(&server, &["once", "你好"]);
    let system = server.requests()[0].system();
    assert!(
        system.contains("CLAUDE 约定。") && !system.contains("先写测试"),
        "{system}"
    );
}

#[test]
fn files_are_read_from_the_repository_root_down_to_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("repo/.git")).unwrap();
    write(&root.join("CLAUDE.md"), "outside the repository");
    write(&root.join("repo/CLAUDE.md"), "repo root");
    write(&root.join("repo/pkg/CLAUDE.local.md"), "local notes");
    write(&root.join("repo/pkg/app/.claude/CLAUDE.md"), "app");
    write(&root.join("home/.claude/CLAUDE.md"), "user");
    let memory = MemorySource {
        workspace: root.join("repo/pkg/app"),
        home: Some(root.join("home")),
        kinds: None,
    }
    .load();
    let files: Vec<(String, MemoryKind)> = memory
        .files
        .iter()
        .map(|f| {
            (
                f.path.strip_prefix(&root).unwrap().display().to_string(),
                f.kind,
            )
        })
        .collect();
    assert_eq!(
        files,
        vec![
            ("home/.claude/CLAUDE.md".into(), MemoryKind::User),
            ("repo/CLAUDE.md".into(), MemoryKind::Project),
            ("repo/pkg/CLAUDE.local.md".into(), MemoryKind::Local),
            ("repo/pkg/app/.claude/CLAUDE.md".into(), MemoryKind::Project),
        ]
    );
    assert!(!memory.text.contains("outside the repository"));
}

#[test]
fn imports_are_depth_limited_cycles_refused_and_code_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    // A chain one longer than the limit: CLAUDE.md → d1 → … → d6.
    write(
        &ws.join("CLAUDE.md"),
        "top @d1.md and `@code.md` and mail@x.md",
    );
    for i in 1..=MAX_IMPORT_DEPTH + 1 {
        write(
            &ws.join(format!("d{i}.md")),
            &format!("level {i} @d{}.md", i + 1),
        );
    }
    write(&ws.join("code.md"), "must not be imported");
    write(&ws.join("x.md"), "must not be imported either");
    let memory = MemorySource {
        workspace: ws.clone(),
        home: None,
        kinds: None,
    }
    .load();
    for i in 1..=MAX_IMPORT_DEPTH {
        assert!(memory.text.contains(&format!("level {i} ")), "level {i}");
    }
    assert!(
        !memory
            .text
            .contains(&format!("level {}", MAX_IMPORT_DEPTH + 1))
    );
    assert!(!memory.text.contains("must not be imported"));
    assert!(
        memory
            .warnings
            .iter()
            .any(|w| w.contains(&format!("超过了 {MAX_IMPORT_DEPTH} 层"))),
        "{:?}",
        memory.warnings
    );

    // A cycle: a → b → a is refused with a warning, each file read once.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws.join("CLAUDE.md"), "root @a.md");
    write(&ws.join("a.md"), "file a @b.md");
    write(&ws.join("b.md"), "file b @a.md\n```\n@never.md\n```");
    write(&ws.join("never.md"), "inside a code block");
    let memory = MemorySource {
        workspace: ws,
        home: None,
        kinds: None,
    }
    .load();
    assert_eq!(memory.files.len(), 3);
    assert_eq!(memory.text.matches("file a").count(), 1);
    assert!(!memory.text.contains("inside a code block"));
    assert!(
        memory.warnings.iter().any(|w| w.contains("是个环")),
        "{:?}",
        memory.warnings
    );
}

#[test]
fn memory_over_the_cap_is_cut_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws.join("CLAUDE.md"), &"规".repeat(MAX_MEMORY_BYTES)); // 3 bytes a char
    write(&ws.join("CLAUDE.local.md"), "left out");
    let memory = MemorySource {
        workspace: ws,
        home: None,
        kinds: None,
    }
    .load();
    assert!(memory.text.len() < MAX_MEMORY_BYTES + 1000);
    assert!(!memory.text.contains("left out"));
    assert_eq!(memory.warnings.len(), 2, "{:?}", memory.warnings);
    assert_eq!(memory.files.len(), 1);
}
