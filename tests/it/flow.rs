//! The `flower` command end to end: clarify → set goal → work (with a sub-agent) →
//! judge, then wakes with and without an utterance, `--new`, and kills in each step.
//!
//! The fake model plays every agent, routed by the system prompt.

use crate::support;
use crate::support::LoadJson;

use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::pipeline::{Agent, BRIEF, GOAL, Project, agent_of, text};
use support::{FakeServer, Recorded, Reply};

/// Whether the newest user message answers a tool call (the agent's second turn).
fn after_tool(req: &Recorded) -> bool {
    req.messages()
        .last()
        .and_then(|m| m["content"].as_array())
        .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
}

/// A server playing `script`, except that the first request `hold` picks waits at the
/// returned gate before it is answered with `text` (a test kills the client there).
pub(crate) fn held_first(
    script: &Arc<Script>,
    hold: impl Fn(&Recorded) -> bool + Send + Sync + 'static,
    text: &'static str,
) -> (FakeServer, support::Gate) {
    let script = script.clone();
    let gate = support::Gate::new();
    let at = gate.clone();
    let held = AtomicUsize::new(0);
    let server = FakeServer::with_handler(move |req, _| {
        if hold(req) && held.fetch_add(1, Ordering::SeqCst) == 0 {
            return Reply::text(text).gate_before(&at);
        }
        script.reply(req)
    });
    (server, gate)
}

/// A scripted model for the whole pipeline. `judge_fails` verdicts fail before one passes.
pub(crate) struct Script {
    judge_fails: usize,
    judged: AtomicUsize,
    /// Requests per agent, in arrival order.
    seen: Mutex<Vec<Agent>>,
}

impl Script {
    pub(crate) fn new(judge_fails: usize) -> Arc<Script> {
        Arc::new(Script {
            judge_fails,
            judged: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn reply(&self, req: &Recorded) -> Reply {
        let agent = agent_of(req);
        self.seen.lock().unwrap().push(agent);
        if after_tool(req) {
            return match agent {
                Agent::Clarifier => Reply::text("确认好了。"),
                Agent::GoalSetter => Reply::text("清单写好了。"),
                // A known context size, so the banner can be checked verbatim.
                Agent::Coordinator => Reply::text("做完了。").usage(80_000, 200),
                Agent::Worker => Reply::text("写好了 hello.txt。"),
                Agent::Judge => unreachable!("the judge uses no tools here"),
                Agent::Once => unreachable!("agent_of never says Once"),
            };
        }
        match agent {
            Agent::Clarifier => Reply::tool_use(
                "Write",
                json!({"file_path": "notes/需求.md", "content": BRIEF}),
            ),
            Agent::GoalSetter => Reply::tool_use(
                "Write",
                json!({"file_path": "notes/目标.md", "content": GOAL}),
            ),
            Agent::Coordinator => Reply::tool_use(
                "Task",
                json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
            ),
            Agent::Worker => Reply::tool_use(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello"}),
            ),
            Agent::Judge => {
                let n = self.judged.fetch_add(1, Ordering::SeqCst);
                if n < self.judge_fails {
                    Reply::text("1. hello.txt 存在:是\n2. 内容:不对\n判定:未通过")
                } else {
                    Reply::text("1. hello.txt 存在:是\n2. 内容是 hello:是\n判定:通过")
                }
            }
            Agent::Once => unreachable!("agent_of never says Once"),
        }
    }

    fn count(&self, agent: Agent) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|a| **a == agent)
            .count()
    }
}

fn serve(script: &Arc<Script>) -> FakeServer {
    let script = script.clone();
    FakeServer::with_handler(move |req, _| script.reply(req))
}

fn lines(output: &Output) -> Vec<String> {
    text(&output.stdout).lines().map(str::to_string).collect()
}

#[test]
fn a_complete_run_then_two_wakes() {
    let project = Project::new();
    let script = Script::new(1);
    let server = serve(&script);

    // First run: every step, one failed verdict, one round back, then a pass.
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(project.read("notes/需求.md"), BRIEF);
    assert_eq!(project.read("notes/目标.md"), GOAL);
    assert_eq!(project.read("hello.txt"), "hello");
    assert_eq!(
        project.steps(),
        [
            "确认需求",
            "设定目标",
            "干活",
            "干活·判定#1",
            "干活#round2",
            "干活·判定#2"
        ]
    );
    let stdout = lines(&out);
    for header in [
        "== 确认需求 ==========================  1/3",
        "== 设定目标 ==========================  2/3",
        "== 干活 ==============================  3/3",
    ] {
        assert!(
            stdout.iter().any(|l| l == header),
            "missing {header:?} in {stdout:#?}"
        );
    }
    // The clarifier could not ask (stdin is not a terminal) and was told so.
    let clarify = &server.requests()[0];
    assert!(clarify.last_user_text().contains("写个 hello 脚本"));
    assert!(!clarify.tool_names().contains(&"AskUser".to_string()));
    assert!(clarify.last_user_text().contains("不是终端"));

    // Lineage has the three steps and nothing of the judge.
    let lineage = project.json("runs/lineage.json");
    let steps = lineage["steps"].as_object().unwrap();
    assert_eq!(
        steps.keys().collect::<Vec<_>>(),
        ["干活", "确认需求", "设定目标"]
    );
    assert_eq!(lineage["woke"], 1);
    let work_id = steps["干活"].as_str().unwrap().to_string();

    // The sub-agent's transcript lives under the work session's subpath.
    let store = SqliteSessionStore::open(&project.dir.join("runs/sessions.db")).unwrap();
    let key = SessionKey::main(project_key(&project.dir), &work_id);
    let subkeys = store.list_subkeys(&key).unwrap();
    assert_eq!(
        subkeys.len(),
        2,
        "one sub-agent per work round: {subkeys:?}"
    );
    assert!(
        subkeys.iter().all(|k| k.starts_with("subagents/agent-")),
        "{subkeys:?}"
    );
    let sub = store
        .load_json(&key.sub(&subkeys[0]).unwrap())
        .unwrap()
        .unwrap();
    assert!(sub.iter().all(|e| e["isSidechain"] == true));
    assert!(Value::Array(sub).to_string().contains("hello.txt"));
    drop(store);

    // Second wake, saying nothing: nothing appended, nothing re-derived, 干活 resumes.
    let requests_before = server.request_count();
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = lines(&out);
    assert_eq!(
        stdout[0],
        "<- 在 ~/proj 接上上次  需求已确认 · 目标 2 条 · 干活上下文 80.2K · 第 2 次唤醒"
    );
    assert!(
        stdout
            .iter()
            .any(|l| l == "== 干活 ==============================  3/3  <- 接上次 · 第 2 次唤醒"),
        "{stdout:#?}"
    );
    assert_eq!(project.read("notes/需求.md"), BRIEF, "nothing appended");
    assert_eq!(
        script.count(Agent::GoalSetter),
        2,
        "no goal-setting request"
    );
    let resumed = &server.requests()[requests_before];
    assert_eq!(agent_of(resumed), Agent::Coordinator);
    assert_eq!(
        resumed.last_user_text(),
        flower::workflow::flower::WORK_RESUME
    );
    assert!(
        resumed.messages().len() > 3,
        "the whole earlier conversation is there"
    );
    assert_eq!(
        project.json("runs/lineage.json")["steps"]["干活"],
        work_id.as_str()
    );

    // Third wake, saying something: appended, re-derived, and it is the work prompt.
    let requests_before = server.request_count();
    let out = project.run(&server, &["顺便支持代码块高亮"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = lines(&out);
    assert_eq!(
        stdout[0],
        "<- 在 ~/proj 接上上次  需求已确认 · 目标 2 条 · 干活上下文 80.2K · 第 3 次唤醒"
    );
    assert!(
        stdout
            .iter()
            .any(|l| l == "== 干活 ==============================  3/3  <- 接上次 · 第 3 次唤醒"),
        "{stdout:#?}"
    );
    // 设定目标 re-derives in its own session, resumed: its header says so too.
    assert!(
        stdout
            .iter()
            .any(|l| l == "== 设定目标 ==========================  2/3  <- 接上次 · 第 3 次唤醒"),
        "{stdout:#?}"
    );
    let brief = project.read("notes/需求.md");
    assert!(brief.starts_with(BRIEF));
    assert!(brief.contains("## 唤醒时追加"));
    assert!(brief.contains("顺便支持代码块高亮"));
    let later = &server.requests()[requests_before..];
    let goal_request = later
        .iter()
        .find(|r| agent_of(r) == Agent::GoalSetter)
        .expect("目标.md is re-derived");
    assert!(goal_request.last_user_text().contains("顺便支持代码块高亮"));
    let work_request = later
        .iter()
        .find(|r| agent_of(r) == Agent::Coordinator)
        .unwrap();
    assert_eq!(work_request.last_user_text(), "顺便支持代码块高亮");
    assert_eq!(project.json("runs/lineage.json")["woke"], 3);

    // No judge session was ever reused or remembered.
    let rows = project.json("runs/manifest.json");
    let judges: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["step"].as_str().unwrap().contains("·判定#"))
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(judges.len(), 4);
    let unique: std::collections::HashSet<_> = judges.iter().collect();
    assert_eq!(unique.len(), judges.len(), "every judge is a new session");
    let lineage = project.json("runs/lineage.json");
    for id in judges {
        assert!(
            !lineage["steps"]
                .as_object()
                .unwrap()
                .values()
                .any(|v| v == id)
        );
    }
}

#[test]
fn rounds_running_out_exits_1() {
    let project = Project::new();
    let script = Script::new(usize::MAX);
    let server = serve(&script);
    let out = project.run(&server, &["写个 hello 脚本", "--rounds", "2"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        project.steps(),
        [
            "确认需求",
            "设定目标",
            "干活",
            "干活·判定#1",
            "干活#round2",
            "干活·判定#2"
        ]
    );
    // --rounds starts afresh on the next wake.
    let out = project.run(&server, &["--rounds", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(script.count(Agent::Judge), 3);
}

#[test]
fn usage_errors_exit_2() {
    let project = Project::new();
    let server = FakeServer::start(vec![]);
    let out = project.run(&server, &["--again"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "fresh directory, no prompt, no terminal"
    );
    assert!(text(&out.stderr).contains("要做什么"));
    let out = project.run(&server, &["x", "--rounds", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(server.request_count(), 0);
}

#[test]
fn new_archives_lineage_brief_and_goal_together() {
    let project = Project::new();
    let script = Script::new(0);
    let server = serve(&script);
    assert!(project.run(&server, &["写个 hello 脚本"]).status.success());
    let old_lineage = project.read("runs/lineage.json");

    let out = project.run(&server, &["--new", "另一件事"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let archive: Vec<PathBuf> = std::fs::read_dir(project.dir.join("notes/archive"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(archive.len(), 1);
    let stamp = archive[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(stamp.len(), 15, "YYYYmmdd-HHMMSS: {stamp}");
    assert_eq!(
        std::fs::read_to_string(archive[0].join("lineage.json")).unwrap(),
        old_lineage
    );
    assert_eq!(
        std::fs::read_to_string(archive[0].join("需求.md")).unwrap(),
        BRIEF
    );
    assert_eq!(
        std::fs::read_to_string(archive[0].join("目标.md")).unwrap(),
        GOAL
    );
    // The new run started from scratch: woke 1, a new clarification of the new request.
    let lineage = project.json("runs/lineage.json");
    assert_eq!(lineage["woke"], 1);
    let clarify = server
        .requests()
        .into_iter()
        .filter(|r| agent_of(r) == Agent::Clarifier)
        .nth(2)
        .unwrap();
    assert!(clarify.last_user_text().contains("另一件事"));
    assert_eq!(clarify.messages().len(), 1);
    // sessions.db is the archive of transcripts: untouched by --new.
    let store = SqliteSessionStore::open(&project.dir.join("runs/sessions.db")).unwrap();
    assert!(
        store
            .list_sessions(&project_key(&project.dir))
            .unwrap()
            .len()
            >= 7
    );
}

/// What a wake after a kill inside one step saw.
struct Woken {
    project: Project,
    script: Arc<Script>,
    out: Output,
    /// The first request of the wake.
    resumed: Recorded,
}

/// Kills the first run while `agent` waits for its first reply, then wakes the
/// directory saying nothing. Checks what every such wake must hold: `step`'s session
/// was in lineage before the reply, the wake exits 0, its first request is `agent`'s,
/// and lineage still names the same session afterwards.
fn wake_after_kill_in(agent: Agent, step: &str) -> Woken {
    let project = Project::new();
    let script = Script::new(0);
    let (server, gate) = held_first(
        &script,
        move |req| agent_of(req) == agent,
        "never delivered",
    );
    let mut child = project.spawn(&server, &["写个 hello 脚本"]);
    assert!(
        gate.wait_reached(Duration::from_secs(60)),
        "{agent:?} was never asked"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    let id = project.json("runs/lineage.json")["steps"][step]
        .as_str()
        .expect("written before the reply")
        .to_string();
    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let resumed = server.requests()[before].clone();
    assert_eq!(agent_of(&resumed), agent);
    assert_eq!(
        project.json("runs/lineage.json")["steps"][step],
        id.as_str()
    );
    Woken {
        project,
        script,
        out,
        resumed,
    }
}

#[test]
fn killed_inside_clarify_resumes_the_clarification() {
    let woken = wake_after_kill_in(Agent::Clarifier, "确认需求");
    let (out, resumed) = (&woken.out, &woken.resumed);
    assert!(lines(out)[0].contains("需求确认到一半"), "{:?}", lines(out));
    // Killed before any reply: the resume prompt joins the unanswered request.
    assert!(
        resumed
            .last_user_text()
            .ends_with(flower::workflow::flower::CLARIFY_RESUME)
    );
    // The original request is in the history: nothing is asked again from scratch.
    assert!(
        resumed.messages()[0]
            .to_string()
            .contains("写个 hello 脚本")
    );
}

#[test]
fn killed_inside_set_goal_skips_clarify_and_resumes_the_goal() {
    let woken = wake_after_kill_in(Agent::GoalSetter, "设定目标");
    assert_eq!(
        woken.script.count(Agent::Clarifier),
        2,
        "确认需求 is frozen and skipped"
    );
    // The same session, sent the whole brief again (no resume_prompt for this step);
    // it joins the unanswered first prompt.
    let blocks = woken.resumed.messages()[0]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0]["text"], blocks[1]["text"]);
    assert!(woken.resumed.last_user_text().contains("## 验收"));
}

#[test]
fn killed_inside_work_resumes_the_work_session() {
    let woken = wake_after_kill_in(Agent::Coordinator, "干活");
    assert!(
        woken
            .resumed
            .last_user_text()
            .ends_with(flower::workflow::flower::WORK_RESUME)
    );
    assert_eq!(woken.project.read("hello.txt"), "hello");
}

/// `flower` trims old large tool results when it resumes (a file pointer instead of the
/// content, the content kept on disk); `--no-trim` feeds them back whole.
#[test]
fn waking_trims_old_large_results_unless_no_trim() {
    use support::pipeline::{simple_reply, turn_of};
    const MARK: &str = "大文件的一行内容";
    let project = Project::new();
    std::fs::write(
        project.dir.join("big.txt"),
        format!("{MARK}\n").repeat(2_000),
    )
    .unwrap();
    let server = FakeServer::with_handler(|req, _| match (agent_of(req), turn_of(req)) {
        // The coordinator reads the big file, then looks around, then is done.
        (Agent::Coordinator, 0) => Reply::tool_use("Read", json!({"file_path": "big.txt"})),
        (Agent::Coordinator, 1) => Reply::tool_use("Glob", json!({"pattern": "*.txt"})),
        (Agent::Coordinator, _) => Reply::text("做完了。"),
        _ => simple_reply(req),
    });
    assert!(project.run(&server, &["读大文件"]).status.success());
    let read_result = server
        .requests()
        .into_iter()
        .find(|r| agent_of(r) == Agent::Coordinator && turn_of(r) == 1)
        .unwrap();
    assert!(
        read_result.raw_body.contains(MARK),
        "the first run sees the content"
    );

    let resumed_coordinator = |server: &FakeServer, before: usize| {
        server.requests()[before..]
            .iter()
            .find(|r| agent_of(r) == Agent::Coordinator)
            .cloned()
            .expect("干活 resumed")
    };
    let before = server.request_count();
    // Trimming changes the prefix, so it waits until the prompt cache is cold:
    // FLOWER_CACHE_TTL=0 stands for a wake after the cache expired.
    let cold = |args: &[&str]| {
        project
            .command(&server, args)
            .env("FLOWER_CACHE_TTL", "0")
            .output()
            .unwrap()
    };
    assert!(cold(&["--again"]).status.success());
    let trimmed = resumed_coordinator(&server, before);
    assert!(
        !trimmed.raw_body.contains(MARK),
        "trimmed by default on waking"
    );
    assert!(
        trimmed
            .raw_body
            .contains(flower::stores::prune::TRIM_POINTER_PREFIX)
    );
    let kept: Vec<_> = std::fs::read_dir(project.dir.join("runs/trimmed"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        kept.iter().any(|t| t.contains(MARK)),
        "the content is kept on disk"
    );

    let before = server.request_count();
    assert!(cold(&["--no-trim", "--again"]).status.success());
    let whole = resumed_coordinator(&server, before);
    assert!(
        whole.raw_body.contains(MARK),
        "--no-trim feeds it back whole"
    );
}

/// A manifest.json that cannot be parsed is moved aside, never deleted, the user is
/// told, and the run goes on with a new manifest.
#[test]
fn a_corrupt_manifest_is_moved_aside_with_a_warning() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| support::pipeline::simple_reply(req));
    std::fs::create_dir_all(project.dir.join("runs")).unwrap();
    std::fs::write(project.dir.join("runs/manifest.json"), "[{\"step\": \"半截").unwrap();
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("manifest.json 无法解析"),
        "{}",
        text(&out.stderr)
    );
    let aside: Vec<PathBuf> = std::fs::read_dir(project.dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("manifest.json.corrupt"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read_to_string(&aside[0]).unwrap(),
        "[{\"step\": \"半截"
    );
    assert_eq!(project.steps()[0], "确认需求");
}

/// A database error while lineage is checked is an error the user sees, never a fresh
/// start: lineage, the notes and the conversation are all still there once the lock is
/// gone, and the next run continues the same 干活 session.
#[test]
fn a_locked_store_stops_the_run_and_forgets_nothing() {
    let project = Project::new();
    let script = Script::new(0);
    let server = serve(&script);
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let lineage_before = project.read("runs/lineage.json");
    let brief_before = project.read("notes/需求.md");
    let work_id = project.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();

    // Another program holds the database exclusively (WAL without shared memory).
    let holder = rusqlite::Connection::open(project.dir.join("runs/sessions.db")).unwrap();
    holder
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS held(x); INSERT INTO held VALUES (1);")
        .unwrap();
    let requests_before = server.request_count();
    let out = project
        .command(&server, &["顺便加一行注释"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.contains("sessions.db"), "stderr: {stderr}");
    // Says what is wrong, after how long: not SQLite's "database is locked" alone.
    assert!(
        stderr.contains("等了 10 秒,还被另一个进程锁着"),
        "stderr: {stderr}"
    );
    assert_eq!(project.read("runs/lineage.json"), lineage_before);
    assert_eq!(project.read("notes/需求.md"), brief_before);
    assert_eq!(server.request_count(), requests_before, "no model request");
    drop(holder);

    // The database opens, but asking it whether lineage's sessions exist fails.
    let db = rusqlite::Connection::open(project.dir.join("runs/sessions.db")).unwrap();
    db.execute_batch(
        "ALTER TABLE summaries RENAME TO summaries_saved; \
         CREATE VIEW summaries AS SELECT session_id FROM nowhere;",
    )
    .unwrap();
    let out = project.run(&server, &["顺便加一行注释"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("lineage.json") && stderr.contains("什么都没有改动"),
        "stderr: {stderr}"
    );
    assert_eq!(project.read("runs/lineage.json"), lineage_before);
    assert_eq!(project.read("notes/需求.md"), brief_before);
    assert_eq!(server.request_count(), requests_before, "no model request");
    db.execute_batch("DROP VIEW summaries; ALTER TABLE summaries_saved RENAME TO summaries;")
        .unwrap();
    drop(db);

    // The lock gone, the same conversation continues.
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        project.json("runs/lineage.json")["steps"]["干活"],
        work_id.as_str()
    );
    assert_eq!(project.json("runs/lineage.json")["woke"], 2);
}
