//! 换代 (generation handoff) through the real `flower` binary against the fake API: a
//! 干活 session whose context passes the threshold writes `notes/交接/干活-1.md` and a
//! successor takes over; the gate asks again, then falls back to a mechanical document;
//! a window hit anyway (a 400 "prompt is too long", or a wake into an over-long session)
//! never asks the over-long session anything; bad settings stop before any request; and
//! SIGKILL at every phase of a handoff leaves a run the next `flower` continues.
//!
//! The fake plays every agent by its system prompt. The coordinator's first session
//! reports a context of 130.1K (over 60 % of 200K) on its first turn; its successor is
//! told apart by its first prompt.

use crate::support;

use crate::support::Flower;
use flower::continuity::handoff::{MECHANICAL_MARK, SECTIONS};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::pipeline::{Agent, Project, agent_of, simple_reply, text, turn_of};
use support::{FakeServer, Gate, Recorded, Reply};

/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The first coordinator session's context after its first turn: 130,000 + 100.
const FULL_INPUT: u64 = 130_000;
const DOC: &str = "notes/交接/干活-1.md";

/// A complete handoff document, as the model writes it.
pub(crate) fn model_doc() -> String {
    let mut doc = String::from("# 交接书\n\n");
    for section in SECTIONS {
        doc.push_str(&format!("## {section}\n模型写的「{section}」。\n\n"));
    }
    doc
}

pub(crate) fn is_successor(req: &Recorded) -> bool {
    agent_of(req) == Agent::Coordinator && req.first_prompt().contains("你接手这一步")
}

/// A request that carries the handoff prompt (the retiring session is being asked).
fn asks_for_handoff(req: &Recorded) -> bool {
    req.messages()
        .iter()
        .any(|m| m["role"] == "user" && m["content"].to_string().contains("这一步要换代"))
}

/// The pipeline with a 干活 that fills up: the first coordinator session sends a worker
/// (who writes hello.txt) at 130.1K context; asked to hand off, it writes `doc`; the
/// successor reads the checklist, then is done; the judge passes.
pub(crate) fn script(req: &Recorded, doc: &str) -> Reply {
    match agent_of(req) {
        Agent::Coordinator if is_successor(req) => match turn_of(req) {
            0 => Reply::tool_use("Read", json!({"file_path": "notes/目标.md"})).usage(4_000, 100),
            _ => Reply::text("接手后做完了。").usage(5_000, 100),
        },
        Agent::Coordinator if asks_for_handoff(req) => {
            if req.last_user_text().contains("这一步要换代")
                || req.last_user_text().contains("还不完整")
            {
                Reply::tool_use("Write", json!({"file_path": DOC, "content": doc}))
                    .usage(FULL_INPUT + 2_000, 100)
            } else {
                Reply::text("交接书写好了。").usage(FULL_INPUT + 3_000, 100)
            }
        }
        Agent::Coordinator => match turn_of(req) {
            0 => Reply::tool_use(
                "Task",
                json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
            )
            .usage(FULL_INPUT, 100),
            _ => Reply::text("做完了。").usage(FULL_INPUT + 1_000, 100),
        },
        _ => simple_reply(req),
    }
}

/// `out`'s stdout, once it is known that flower exited 0.
pub(crate) fn succeeded(out: &std::process::Output) -> String {
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    stdout
}

/// The `== <step> 换代 → …` lines flower printed.
fn handoff_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.contains("换代 →")).collect()
}

fn coordinator_requests(server: &FakeServer) -> Vec<Recorded> {
    server
        .requests()
        .into_iter()
        .filter(|r| agent_of(r) == Agent::Coordinator)
        .collect()
}

impl Project {
    fn work_row(&self) -> Value {
        self.manifest()
            .into_iter()
            .rfind(|r| r["step"] == "干活")
            .expect("a 干活 row")
    }

    fn work_session(&self) -> String {
        self.json("runs/lineage.json")["steps"]["干活"]
            .as_str()
            .expect("干活 in lineage")
            .to_string()
    }

    /// Session ids listed in sessions.db.
    fn stored_sessions(&self) -> Vec<String> {
        let key = flower::stores::project_key(&self.dir);
        let out = Flower::bin()
            .command()
            .current_dir(&self.dir)
            .args(["store", "sessions", &key])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_string())
            .collect()
    }
}

#[test]
fn a_full_session_hands_off_to_a_successor_that_finishes_the_step() {
    let project = Project::new();
    let doc = model_doc();
    let server = {
        let doc = doc.clone();
        FakeServer::with_handler(move |req, _| script(req, &doc))
    };
    let out = project.run(&server, &["写个 hello 脚本"]);
    let stdout = succeeded(&out);
    assert!(
        stdout
            .lines()
            .any(|l| l == "== 干活 换代 → 第 2 代 (上下文 130.1K) =="),
        "{stdout}"
    );

    // The document is the model's, gated once; the successor got it in full.
    assert_eq!(project.read(DOC), doc);
    let coordinator = coordinator_requests(&server);
    let asked = coordinator
        .iter()
        .filter(|r| r.last_user_text().contains("这一步要换代"))
        .count();
    assert_eq!(asked, 1);
    let successor = coordinator.iter().find(|r| is_successor(r)).unwrap();
    let prompt = successor.first_prompt();
    assert!(prompt.contains("第 2 代"), "{prompt}");
    assert!(prompt.contains(doc.trim_end()), "{prompt}");
    assert!(prompt.contains("notes/需求.md") && prompt.contains("notes/目标.md"));
    assert!(prompt.contains("先检查工作区"), "{prompt}");
    // The successor starts clean: nothing of the first session's history.
    assert_eq!(successor.messages().len(), 1);

    // The worker's file is there; lineage names the successor; the row lists the
    // retired session, which stays in sessions.db; the row's context is the successor's.
    assert_eq!(project.read("hello.txt"), "hello");
    let row = project.work_row();
    let successor_id = project.work_session();
    assert_eq!(row["session_id"], successor_id.as_str());
    assert_eq!(row["ok"], true);
    let retired: Vec<String> = serde_json::from_value(row["retired"].clone()).unwrap();
    assert_eq!(retired.len(), 1);
    assert_ne!(retired[0], successor_id);
    assert_eq!(row["context"], 5_100);
    // Every turn of the step counts: the first session's, its handoff's and the
    // successor's, one per request.
    assert_eq!(row["num_turns"], coordinator.len(), "{row}");
    let stored = project.stored_sessions();
    assert!(stored.contains(&retired[0]) && stored.contains(&successor_id));

    // The next wake reports the successor's figure and generation, and continues the
    // successor: never the retired session.
    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    let stdout = succeeded(&out);
    let banner = stdout.lines().next().unwrap();
    assert!(
        banner.contains("干活上下文 5.1K · 第 2 代 · 第 2 次唤醒"),
        "{banner}"
    );
    let resumed = first_coordinator_request(&server, before);
    assert!(is_successor(&resumed), "woke into the retired session");
    assert_eq!(project.work_session(), successor_id);

    // `flower state` shows the current generation's figure.
    let state = Flower::bin()
        .command()
        .current_dir(&project.dir)
        .arg("state")
        .output()
        .unwrap();
    let state = text(&state.stdout);
    assert!(state.contains("干活上下文:5.1K · 第 2 代"), "{state}");

    // `flower --new` archives the handoff documents with the other notes.
    let out = project.run(&server, &["--new", "另一件事"]);
    assert!(out.status.code().is_some(), "{}", text(&out.stderr));
    let archive = project.dir.join("notes/archive");
    let archived: Vec<_> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap().path().join("交接/干活-1.md"))
        .collect();
    assert!(archived.iter().any(|p| p.exists()), "{archived:?}");
}

#[test]
fn an_incomplete_document_is_asked_for_twice_more_then_written_mechanically() {
    let project = Project::new();
    let server =
        FakeServer::with_handler(|req, _| script(req, "## 目标与完成标准\n写 hello\n## 死路\n"));
    let out = project.run(&server, &["写个 hello 脚本"]);
    succeeded(&out);
    let coordinator = coordinator_requests(&server);
    let first = coordinator
        .iter()
        .filter(|r| r.last_user_text().contains("这一步要换代"))
        .count();
    let again = coordinator
        .iter()
        .filter(|r| r.last_user_text().contains("还不完整"))
        .count();
    assert_eq!(
        (first, again),
        (1, 2),
        "asked once, then at most twice more"
    );
    let doc = project.read(DOC);
    assert!(doc.contains(MECHANICAL_MARK), "{doc}");
    for section in SECTIONS {
        assert!(doc.contains(&format!("## {section}\n")), "{section}: {doc}");
    }
    // What flower had without a model: the brief, the last words, the files touched.
    assert!(doc.contains("## 目标\n写一个 hello 脚本"), "{doc}");
    assert!(doc.contains("hello.txt"), "{doc}");
    let successor = coordinator.iter().find(|r| is_successor(r)).unwrap();
    assert!(successor.first_prompt().contains(doc.trim_end()));
    assert_eq!(project.work_row()["ok"], true);
}

/// A way the window is hit, and what the error says.
type WindowHit = (fn() -> Reply, &'static str);

/// The API's answer to a request over the window.
fn prompt_too_long() -> Reply {
    Reply::error(
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
    )
}

/// A reply cut because the window is full.
fn cut_by_the_window() -> Reply {
    Reply::text("写到一半")
        .stop_reason("model_context_window_exceeded")
        .usage(FULL_INPUT, 100)
}

#[test]
fn a_prompt_too_long_answer_hands_off_mechanically_without_asking() {
    hands_off_mechanically_when_the_window_is_hit(prompt_too_long, "prompt is too long");
}

#[test]
fn a_reply_cut_by_the_full_window_hands_off_mechanically_without_asking() {
    hands_off_mechanically_when_the_window_is_hit(
        cut_by_the_window,
        "model_context_window_exceeded",
    );
}

/// A session that hits the window while writing its handoff document is not asked
/// again: the document is mechanical at once, and the row says why.
#[test]
fn a_window_hit_while_writing_the_document_stops_the_asking() {
    let hits: [WindowHit; 2] = [
        (prompt_too_long, "prompt is too long"),
        (cut_by_the_window, "model_context_window_exceeded"),
    ];
    for (window_hit, error) in hits {
        let project = Project::new();
        let server = FakeServer::with_handler(move |req, _| {
            if agent_of(req) == Agent::Coordinator && asks_for_handoff(req) {
                return window_hit();
            }
            script(req, &model_doc())
        });
        let out = project.run(&server, &["写个 hello 脚本"]);
        succeeded(&out);
        let asks = server
            .requests()
            .into_iter()
            .filter(asks_for_handoff)
            .count();
        assert_eq!(asks, 1, "{error}: asked again after the window was hit");
        let doc = project.read(DOC);
        assert!(doc.contains(MECHANICAL_MARK), "{doc}");
        assert!(doc.contains("写交接书时上下文撞到了窗口"), "{doc}");
        let row = project.work_row();
        assert!(row["errors"].to_string().contains(error), "{row}");
        assert_successor_is_second_generation(&server);
    }
}

/// The first session's second request answered by `window_hit` (under a threshold the
/// session never reaches by itself): a mechanical document, the session not asked, a
/// successor that finishes, and the row's errors naming `error`.
fn hands_off_mechanically_when_the_window_is_hit(window_hit: fn() -> Reply, error: &str) {
    let project = Project::new();
    let server = FakeServer::with_handler(move |req, _| {
        if agent_of(req) == Agent::Coordinator && !is_successor(req) && turn_of(req) == 1 {
            return window_hit();
        }
        script(req, &model_doc())
    });
    let out = project.run(&server, &["写个 hello 脚本", "--handoff-at", "99%"]);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("== 干活 换代 → 第 2 代 (上下文 130.1K) =="),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("机械"), "{}", text(&out.stderr));
    assert!(
        !server.requests().iter().any(asks_for_handoff),
        "the over-long session was asked"
    );
    let doc = project.read(DOC);
    assert!(doc.contains(MECHANICAL_MARK));
    // It says why, in the words of the way the window was hit.
    assert!(doc.contains(error), "{doc}");
    // The files its sub-agents touched are listed too (the worker wrote hello.txt).
    assert!(doc.contains("- hello.txt(Write)"), "{doc}");
    assert_successor_is_second_generation(&server);
    let row = project.work_row();
    assert_eq!(row["ok"], true);
    assert_eq!(row["retired"].as_array().unwrap().len(), 1);
    assert!(row["errors"].to_string().contains(error), "{row}");
}

#[test]
fn a_wake_into_a_session_over_the_threshold_hands_off_before_any_request() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| script(req, &model_doc()));
    // First run: a threshold above the session's context, so no handoff.
    let out = project.run(&server, &["写个 hello 脚本", "--handoff-at", "150K"]);
    succeeded(&out);
    assert!(!project.dir.join(DOC).exists());
    let first = project.work_session();

    // Waking with the default threshold (120K): the session is over it.
    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("== 干活 换代 → 第 2 代 (上下文 131.1K) =="),
        "{stdout}"
    );
    let next = first_coordinator_request(&server, before);
    assert!(is_successor(&next), "the over-long session got a request");
    assert!(!server.requests().iter().any(asks_for_handoff));
    assert!(project.read(DOC).contains(MECHANICAL_MARK));
    let row = project.work_row();
    assert_eq!(row["retired"], json!([first]));
    assert_ne!(project.work_session(), first);
}

/// A woken session under the threshold whose first request is refused as too long
/// (the window is smaller than the stored context suggested) hands off mechanically;
/// the run got no reply, so the context the document and the line give is the stored
/// session's last.
#[test]
fn a_woken_session_refused_as_too_long_hands_off_with_its_stored_context() {
    let project = Project::new();
    let waking = Arc::new(AtomicBool::new(false));
    let server = {
        let waking = waking.clone();
        FakeServer::with_handler(move |req, _| {
            if waking.load(Ordering::SeqCst)
                && agent_of(req) == Agent::Coordinator
                && !is_successor(req)
            {
                return prompt_too_long();
            }
            script(req, &model_doc())
        })
    };
    let out = project.run(&server, &["写个 hello 脚本", "--handoff-at", "150K"]);
    succeeded(&out);
    let first = project.work_session();

    waking.store(true, Ordering::SeqCst);
    let out = project.run(&server, &["--handoff-at", "150K", "--again"]);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("== 干活 换代 → 第 2 代 (上下文 131.1K) =="),
        "{stdout}"
    );
    assert!(!server.requests().iter().any(asks_for_handoff));
    assert!(project.read(DOC).contains(MECHANICAL_MARK));
    assert_eq!(project.work_row()["retired"], json!([first]));
}

/// Flags, one environment variable, and what the error must say.
type BadCase = (
    &'static [&'static str],
    Option<(&'static str, &'static str)>,
    &'static str,
);

#[test]
fn bad_handoff_settings_stop_before_any_request() {
    let project = Project::new();
    let server = FakeServer::start(vec![]);
    let cases: [BadCase; 6] = [
        (&["--handoff-at", "0"], None, "要大于 0"),
        (&["--handoff-at", "150%"], None, "100%"),
        (&["--handoff-at", "abc"], None, "既不是 token 数"),
        (&[], Some(("FLOWER_HANDOFF_AT", "abc")), "FLOWER_HANDOFF_AT"),
        (
            &["--handoff-at", "120000"],
            Some(("FLOWER_CONTEXT_WINDOW", "100000")),
            "比换代阈值(120000 token)还小",
        ),
        (
            &[],
            Some(("FLOWER_CONTEXT_WINDOW", "lots")),
            "FLOWER_CONTEXT_WINDOW",
        ),
    ];
    for (flags, env, says) in cases {
        let mut args = vec!["写个 hello 脚本"];
        args.extend_from_slice(flags);
        let mut cmd = project.command(&server, &args);
        if let Some((name, value)) = env {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} {env:?}: {stderr}");
    }
    assert_eq!(server.request_count(), 0);
    assert!(!project.dir.join("runs").exists());
}

/// Runs `flower "写个 hello 脚本"` with the handoff script until `hold` matches a
/// request (the first one only), then SIGKILLs it there.
fn kill_at(hold: fn(&Recorded) -> bool) -> (Project, FakeServer) {
    kill_scripted_at(script, hold)
}

/// [`kill_at`] with another script.
fn kill_scripted_at(
    script: fn(&Recorded, &str) -> Reply,
    hold: fn(&Recorded) -> bool,
) -> (Project, FakeServer) {
    let project = Project::new();
    let gate = Gate::new();
    let holding = gate.clone();
    let held = Arc::new(AtomicBool::new(false));
    let server = FakeServer::with_handler(move |req, _| {
        if hold(req) && !held.swap(true, Ordering::SeqCst) {
            return Reply::text("never delivered").gate_before(&holding);
        }
        script(req, &model_doc())
    });
    let mut child = project.spawn(&server, &["写个 hello 脚本"]);
    assert!(gate.wait_reached(TIMEOUT), "the held request never came");
    child.kill().unwrap();
    child.wait().unwrap();
    (project, server)
}

/// The next `flower` after a kill: exit 0, the work done, one handoff in all, 干活
/// finished by a second-generation session that lineage names.
fn wake_and_check(project: &Project, server: &FakeServer) -> String {
    let out = project.run(server, &["--again"]);
    let stdout = succeeded(&out);
    assert_eq!(project.read("hello.txt"), "hello", "lost work");
    let successor = project.work_session();
    let rows = project.manifest();
    let retired: Vec<&Value> = rows
        .iter()
        .filter(|r| r["step"] == "干活")
        .flat_map(|r| r["retired"].as_array().unwrap().iter())
        .collect();
    assert_eq!(retired.len(), 1, "one handoff: {rows:#?}");
    assert_ne!(retired[0], successor.as_str());
    assert!(project.stored_sessions().contains(&successor));
    let doc = project.read(DOC);
    assert!(SECTIONS.iter().all(|s| doc.contains(&format!("## {s}"))));
    assert_successor_is_second_generation(server);
    stdout
}

/// The successor's first prompt names its generation (2) and its predecessor's (1).
fn assert_successor_is_second_generation(server: &FakeServer) {
    let successor = coordinator_requests(server)
        .into_iter()
        .find(is_successor)
        .expect("a successor");
    let prompt = successor.first_prompt();
    assert!(prompt.contains("是第 2 代:第 1 代的上下文"), "{prompt}");
}

#[test]
fn killed_before_the_document_the_wake_hands_off_mechanically() {
    let (project, server) = kill_at(|r| r.last_user_text().contains("这一步要换代"));
    assert!(!project.dir.join(DOC).exists());
    let asked = server
        .requests()
        .iter()
        .filter(|r| asks_for_handoff(r))
        .count();
    wake_and_check(&project, &server);
    // The over-long session was not asked again.
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| asks_for_handoff(r))
            .count(),
        asked
    );
    assert!(project.read(DOC).contains(MECHANICAL_MARK));
}

/// A complete document left from before the session began (a copy put back, a
/// previous run's) is not taken for this session's: the session is asked to write its
/// own.
#[test]
fn a_document_older_than_the_session_is_not_reused() {
    let project = Project::new();
    let stale = model_doc().replace("模型写的", "旧的");
    let path = project.dir.join(DOC);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &stale).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    let server = FakeServer::with_handler(move |req, _| script(req, &model_doc()));
    let out = project.run(&server, &["写个 hello 脚本"]);
    succeeded(&out);
    assert!(
        server.requests().iter().any(asks_for_handoff),
        "the session was not asked"
    );
    assert_eq!(project.read(DOC), model_doc());
    let successor = coordinator_requests(&server)
        .into_iter()
        .find(is_successor)
        .expect("a successor");
    assert!(!successor.first_prompt().contains("旧的"));
}

#[test]
fn killed_after_the_document_the_wake_reuses_it() {
    // Held: the request after the Write of the document (its result is stored).
    let (project, server) =
        kill_at(|r| asks_for_handoff(r) && !r.last_user_text().contains("这一步要换代"));
    assert_eq!(
        project.read(DOC),
        model_doc(),
        "the model's document is there"
    );
    wake_and_check(&project, &server);
    assert_eq!(project.read(DOC), model_doc(), "reused, not rewritten");
    let successor = server.requests().into_iter().find(is_successor).unwrap();
    assert!(successor.first_prompt().contains(model_doc().trim_end()));
}

#[test]
fn killed_after_the_successors_first_prompt_the_wake_continues_the_successor() {
    let (project, server) = kill_at(|r| is_successor(r) && turn_of(r) == 0);
    // Lineage names the successor already, and the row says whom it retired.
    let successor = project.work_session();
    let row = project.work_row();
    assert_eq!(row["session_id"], successor.as_str());
    assert_eq!(row["retired"].as_array().unwrap().len(), 1);
    let before = server.request_count();
    let stdout = wake_and_check(&project, &server);
    assert!(
        stdout.lines().next().unwrap().contains("第 2 代"),
        "{stdout}"
    );
    assert!(!stdout.contains("换代"), "handed off twice: {stdout}");
    let next = first_coordinator_request(&server, before);
    assert!(is_successor(&next), "woke into the retired session");
    assert_eq!(project.work_session(), successor);
}

#[test]
fn killed_during_the_successors_first_turn_the_wake_continues_the_successor() {
    let (project, server) = kill_at(|r| is_successor(r) && turn_of(r) == 1);
    let successor = project.work_session();
    let before = server.request_count();
    let stdout = wake_and_check(&project, &server);
    assert!(!stdout.contains("换代"), "handed off twice: {stdout}");
    let next = first_coordinator_request(&server, before);
    assert!(is_successor(&next));
    // Its Read of the checklist survived the kill.
    assert!(
        next.messages()
            .iter()
            .any(|m| m.to_string().contains("tool_result"))
    );
    assert_eq!(project.work_session(), successor);
}

#[test]
fn a_full_sub_agent_is_asked_to_report_now_and_the_judge_fails_clearly() {
    let project = Project::new();
    let judged = Arc::new(AtomicBool::new(false));
    let server = FakeServer::with_handler(move |req, _| match (agent_of(req), turn_of(req)) {
        // The worker fills up while writing; it does not hand off.
        (Agent::Worker, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "hello.txt", "content": "hello"}),
        )
        .usage(FULL_INPUT, 100),
        // The judge's first round does not fit the window; the second passes.
        (Agent::Judge, 0) if !judged.swap(true, Ordering::SeqCst) => Reply::error(
            400,
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        ),
        _ => simple_reply(req),
    });
    let out = project.run(&server, &["写个 hello 脚本"]);
    succeeded(&out);
    let requests = server.requests();
    let worker_next = requests
        .iter()
        .find(|r| agent_of(r) == Agent::Worker && turn_of(r) == 1)
        .unwrap();
    assert!(
        worker_next
            .last_user_text()
            .contains(flower::engine::SUBAGENT_FINISH_NOW),
        "{}",
        worker_next.last_user_text()
    );
    assert!(
        !text(&out.stdout).contains("换代"),
        "only main sessions hand off"
    );
    // The judge's overflow came back to 干活 as a clear failed verdict.
    let round2 = requests.iter().find(|r| {
        agent_of(r) == Agent::Coordinator
            && r.last_user_text().contains("判定者的上下文超出了模型窗口")
    });
    assert!(round2.is_some(), "no clear verdict reached 干活");
    let steps = project.steps();
    assert!(steps.contains(&"干活#round2".to_string()), "{steps:?}");
}

/// The coordinator's first request since request number `since`.
fn first_coordinator_request(server: &FakeServer, since: usize) -> Recorded {
    server.requests()[since..]
        .iter()
        .find(|r| agent_of(r) == Agent::Coordinator)
        .cloned()
        .expect("the coordinator was asked")
}

/// The pipeline of [`script`] where the successor fills up too: the second generation
/// reads the checklist (at 4K, then at 130.1K), writes `干活-2.md` when asked, and a third finishes.
fn script_of_three(req: &Recorded, doc: &str) -> Reply {
    let generation =
        |n: u32| is_successor(req) && req.first_prompt().contains(&format!("是第 {n} 代"));
    match agent_of(req) {
        Agent::Coordinator if asks_for_handoff(req) && generation(2) => {
            if req.last_user_text().contains("这一步要换代")
                || req.last_user_text().contains("还不完整")
            {
                let path = "notes/交接/干活-2.md";
                Reply::tool_use("Write", json!({"file_path": path, "content": doc}))
                    .usage(FULL_INPUT + 2_000, 100)
            } else {
                Reply::text("交接书写好了。").usage(FULL_INPUT + 3_000, 100)
            }
        }
        // Its first turn is small: a successor full at once goes on without a threshold.
        Agent::Coordinator if generation(2) => {
            let input = if turn_of(req) == 0 { 4_000 } else { FULL_INPUT };
            Reply::tool_use("Read", json!({"file_path": "notes/目标.md"})).usage(input, 100)
        }
        _ => script(req, doc),
    }
}

#[test]
fn a_successor_that_fills_up_hands_off_to_a_third_generation() {
    let project = Project::new();
    let doc = model_doc();
    let server = {
        let doc = doc.clone();
        FakeServer::with_handler(move |req, _| script_of_three(req, &doc))
    };
    let out = project.run(&server, &["写个 hello 脚本"]);
    let stdout = succeeded(&out);
    let handoffs = handoff_lines(&stdout);
    assert_eq!(
        handoffs,
        [
            "== 干活 换代 → 第 2 代 (上下文 130.1K) ==",
            "== 干活 换代 → 第 3 代 (上下文 130.1K) =="
        ],
        "{stdout}"
    );
    assert_eq!(project.read(DOC), doc);
    assert_eq!(project.read("notes/交接/干活-2.md"), doc);
    let third = coordinator_requests(&server)
        .into_iter()
        .find(|r| is_successor(r) && r.first_prompt().contains("是第 3 代"))
        .expect("a third-generation session");
    assert_eq!(third.messages().len(), 1, "the third starts clean");
    let row = project.work_row();
    assert_eq!(row["ok"], true);
    let retired: Vec<String> = serde_json::from_value(row["retired"].clone()).unwrap();
    assert_eq!(retired.len(), 2, "{row}");
    let successor_id = project.work_session();
    assert_eq!(row["session_id"], successor_id.as_str());
    assert!(!retired.contains(&successor_id));

    // The row's cost adds up every generation's: more than the same step with one
    // handoff fewer.
    let cost = |row: &Value| row["cost_usd"].as_f64().unwrap_or_else(|| panic!("{row}"));
    let two = Project::new();
    let server = FakeServer::with_handler(move |req, _| script(req, &model_doc()));
    assert!(two.run(&server, &["写个 hello 脚本"]).status.success());
    assert!(cost(&two.work_row()) > 0.0, "{}", two.work_row());
    assert!(cost(&row) > cost(&two.work_row()), "{row}");
}

/// A successor already over the threshold after its first turn (the document alone
/// fills it: a threshold too low for this step) would hand off forever: it goes on
/// without a threshold instead, told only to continue, and no third generation starts.
#[test]
fn a_successor_full_at_its_first_turn_goes_on_without_handing_off_again() {
    let project = Project::new();
    let server = FakeServer::with_handler(move |req, _| {
        let second = is_successor(req) && req.first_prompt().contains("是第 2 代");
        match agent_of(req) {
            Agent::Coordinator if second && turn_of(req) == 0 => {
                Reply::tool_use("Read", json!({"file_path": "notes/目标.md"}))
                    .usage(FULL_INPUT, 100)
            }
            Agent::Coordinator if second => {
                Reply::text("接着做完了。").usage(FULL_INPUT + 1_000, 100)
            }
            _ => script(req, &model_doc()),
        }
    });
    let out = project.run(&server, &["写个 hello 脚本"]);
    let stdout = succeeded(&out);
    let handoffs = handoff_lines(&stdout);
    assert_eq!(
        handoffs,
        ["== 干活 换代 → 第 2 代 (上下文 130.1K) =="],
        "{stdout}"
    );
    assert!(!project.dir.join("notes/交接/干活-2.md").exists());
    let second: Vec<Recorded> = coordinator_requests(&server)
        .into_iter()
        .filter(is_successor)
        .collect();
    assert_eq!(second.len(), 2, "the successor's two turns");
    // After the Read's result, in the same user message: only a word to go on.
    assert!(
        second[1].last_user_text().ends_with(&format!(
            "\n\n{}",
            flower::continuity::runtime::CONTINUE_WITHOUT_HANDOFF
        )),
        "{}",
        second[1].last_user_text()
    );
    assert!(!asks_for_handoff(&second[1]), "not asked to hand off");
    assert_eq!(project.work_row()["retired"].as_array().unwrap().len(), 1);
}

#[test]
fn a_woken_successor_that_fills_up_hands_off_as_the_next_generation() {
    // The generation survives the kill: counted from the manifest's `retired[]`, the
    // woken second generation writes 干活-2.md and hands off to a third, leaving the
    // first generation's document alone.
    let (project, server) = kill_scripted_at(script_of_three, |r| {
        is_successor(r) && r.first_prompt().contains("是第 2 代") && turn_of(r) == 1
    });
    let first_doc = project.read(DOC);
    let out = project.run(&server, &["--again"]);
    let stdout = succeeded(&out);
    let handoffs = handoff_lines(&stdout);
    assert_eq!(
        handoffs,
        ["== 干活 换代 → 第 3 代 (上下文 130.1K) =="],
        "{stdout}"
    );
    assert_eq!(project.read(DOC), first_doc, "the first document was kept");
    assert_eq!(project.read("notes/交接/干活-2.md"), model_doc());
    let rows = project.manifest();
    let retired = rows
        .iter()
        .filter(|r| r["step"] == "干活")
        .flat_map(|r| r["retired"].as_array().unwrap().iter())
        .count();
    assert_eq!(retired, 2, "{rows:#?}");
}

/// A spec whose own model has a smaller window than the default model's falls back to
/// the default share (60 %) of its own window when the absolute threshold, checked for
/// the default model, does not fit it. Library API: a spec's model is not a CLI knob.
#[tokio::test]
async fn a_spec_model_with_a_smaller_window_hands_off_at_the_default_share_of_it() {
    use flower::continuity::handoff::{HandoffOptions, Threshold};
    use flower::continuity::resilience::Resilience;
    use flower::continuity::runtime::RuntimeOptions;
    use flower::engine::SessionStart;
    use flower::model::anthropic::AnthropicClient;
    use flower::{AgentSpec, Runtime};

    // Under 120K (60 % of 200K), then over it; both far under the 300K threshold.
    let server = FakeServer::with_handler(move |req, _| {
        if req.first_prompt().contains("你接手这一步") {
            return Reply::text("接手后做完了。").usage(4_000, 100);
        }
        if asks_for_handoff(req) {
            return if req.last_user_text().contains("这一步要换代") {
                Reply::tool_use(
                    "Write",
                    json!({"file_path": "notes/交接/干活-1.md", "content": model_doc()}),
                )
                .usage(126_000, 100)
            } else {
                Reply::text("交接书写好了。").usage(127_000, 100)
            };
        }
        match turn_of(req) {
            0 => Reply::tool_use("Glob", json!({"pattern": "*"})).usage(110_000, 100),
            1 => Reply::tool_use("Glob", json!({"pattern": "*"})).usage(125_000, 100),
            _ => Reply::text("做完了。").usage(130_000, 100),
        }
    });
    let dir = tempfile::TempDir::new().unwrap();
    let client = AnthropicClient::new(&server.url(), support::FAKE_API_KEY, "claude-opus-5[1m]")
        .expect("client");
    let options = RuntimeOptions {
        resilience: Resilience {
            max_attempts: 1,
            ..Resilience::default()
        },
        handoff: HandoffOptions {
            at: Threshold::Tokens(300_000),
            ..HandoffOptions::default()
        },
        ..RuntimeOptions::new(Arc::new(client))
    };
    let rt = Runtime::with_options(dir.path(), dir.path().join("runs"), options).expect("runtime");
    let spec = AgentSpec::new("worker", "干活的。")
        .allowed_tools(["Glob", "Write"])
        .max_turns(10)
        .model("claude-opus-5");
    let result = rt
        .run_step_handing_off("干活", "干活", &spec, "干吧。", SessionStart::New)
        .await;
    rt.close();
    assert!(result.error.is_none(), "{result:?}");

    let requests = server.requests();
    assert!(requests.iter().all(|r| r.model() == "claude-opus-5"));
    // Asked to hand off only after the turn that reported 125.1K, never after 110.1K.
    let first_ask = requests
        .iter()
        .position(asks_for_handoff)
        .expect("the session is asked to hand off");
    assert_eq!(first_ask, 2, "asked after turn {first_ask}");
    assert!(
        dir.path().join("notes/交接/干活-1.md").is_file(),
        "the handoff document is written"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.first_prompt().contains("你接手这一步")),
        "a successor takes over"
    );
    // The step's cost is every request's: the first session's two turns, the two of
    // its handoff document, the successor's one.
    let inputs = [110_000, 125_000, 126_000, 127_000, 4_000];
    assert_eq!(requests.len(), inputs.len());
    let cost: f64 = inputs
        .iter()
        .map(|&input_tokens| {
            let usage = flower::model::Usage {
                input_tokens,
                output_tokens: 100,
                ..Default::default()
            };
            flower::model::prices::request_cost_usd("claude-opus-5", &usage).unwrap()
        })
        .sum();
    let recorded = result.cost_usd.expect("a known model has a cost");
    assert!((recorded - cost).abs() < 1e-9, "{recorded} != {cost}");
}
