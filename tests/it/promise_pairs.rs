//! Issue #16, second half: every promise of 接续.md that a crash, an outage or an
//! attacker could break is pinned twice, once through the library API and once through
//! the real `flower` binary (the table is `docs/promises.md`). This file holds the half
//! of each pair that was missing; each doc comment names its promise, and the breakage
//! it was seen to fail on where one was made by hand.
//!
//! Every wait is on an event (a gate reached, a request arrived, an event reported, a
//! line on a child's stdout); timeouts are only reached when something is broken.

use crate::faults_support::{PATIENCE, last_texts, tool_use_ids};
use crate::promises::{last_results, once_with_calls, result_text};
use crate::support;
use crate::workflow::{seed_workflow, terse};

use flower::continuity::lineage::Lineage;
use flower::continuity::lock::RunLocking;
use flower::continuity::resilience::{RESUME_PROMPT, Resilience};
use flower::continuity::runtime::{FrontEnd, Held, RuntimeError, RuntimeOptions};
use flower::engine::SessionStart;
use flower::events::Event;
use flower::model::anthropic::AnthropicClient;
use flower::workflow::flower::{
    CLARIFY, CLARIFY_RESUME, FlowerOptions, SET_GOAL, WORK, WORK_RESUME, flower_workflow, worker,
};
use flower::{AgentSpec, Runtime, Step, Workflow};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use support::pipeline::{
    Agent, BRIEF, GOAL, Project, REQUEST, agent_of, simple_reply, text, turn_of,
};
use support::{FakeServer, Gate, Recorded, Reply};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// A runtime on `dir` (run dir `dir/runs`) against `server`, one attempt per step and
/// no backoff unless `tweak` says otherwise. Each runtime stands for one process.
fn runtime_with(
    dir: &Path,
    server: &FakeServer,
    tweak: impl FnOnce(&mut RuntimeOptions),
) -> Runtime {
    open_runtime(dir, server, tweak, FrontEnd::default()).expect("runtime")
}

/// [`runtime_with`], the opening's error kept (a held run directory is one).
fn open_runtime(
    dir: &Path,
    server: &FakeServer,
    tweak: impl FnOnce(&mut RuntimeOptions),
    front: FrontEnd,
) -> Result<Runtime, RuntimeError> {
    let client =
        AnthropicClient::new(&server.url(), support::FAKE_API_KEY, "claude-fake").expect("client");
    let mut options = RuntimeOptions {
        resilience: Resilience {
            max_attempts: 1,
            base_delay: 0.0,
            ..Resilience::default()
        },
        subagents: vec![worker()],
        ..RuntimeOptions::new(Arc::new(client))
    };
    tweak(&mut options);
    Runtime::with_front_end(dir, dir.join("runs"), options, front)
}

fn runtime(dir: &Path, server: &FakeServer) -> Runtime {
    runtime_with(dir, server, |_| {})
}

fn read_json(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn rows_of(dir: &Path) -> Vec<Value> {
    read_json(&dir.join("runs/manifest.json"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn lineage_of(dir: &Path) -> Value {
    read_json(&dir.join("runs/lineage.json"))
}

/// A complete 需求.md and 目标.md in `dir/notes`: 确认需求 and 定目标 are frozen.
fn freeze_notes(dir: &Path) {
    std::fs::create_dir_all(dir.join("notes")).unwrap();
    std::fs::write(dir.join("notes/需求.md"), BRIEF).unwrap();
    std::fs::write(dir.join("notes/目标.md"), GOAL).unwrap();
}

/// The first request of `agent` at or after index `from`.
fn first_of(server: &FakeServer, agent: Agent, from: usize) -> Recorded {
    server.requests()[from..]
        .iter()
        .find(|r| agent_of(r) == agent)
        .cloned()
        .unwrap_or_else(|| panic!("no {agent:?} request after {from}"))
}

/// A complete pipeline run in `project` (every agent answering as
/// [`simple_reply`]); returns the server and the 干活 session.
fn completed_run(project: &Project) -> (FakeServer, String) {
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(project.read("hello.txt"), "hello");
    let work = project.json("runs/lineage.json")["steps"][WORK]
        .as_str()
        .expect("干活 in lineage")
        .to_string();
    (server, work)
}

/// A wake (`flower`, saying nothing) that must start 干活 afresh in silence: exit 0,
/// nothing said about lineage, the coordinator's first request a one-message history,
/// and a sound lineage.json naming the new session. Returns the new 干活 session.
fn wake_starts_work_afresh(
    project: &Project,
    dir: &Path,
    server: &FakeServer,
    old: &str,
) -> String {
    let before = server.request_count();
    let out = project
        .command(server, &["--again"])
        .current_dir(dir)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for word in ["lineage", "血缘", "panicked", "error"] {
        assert!(!stderr.contains(word), "said {word:?}: {stderr}");
    }
    let work = first_of(server, Agent::Coordinator, before);
    assert_eq!(
        work.messages().len(),
        1,
        "a fresh history: {}",
        work.raw_body
    );
    assert!(
        work.first_prompt().starts_with("照这份需求做"),
        "{}",
        work.first_prompt()
    );
    assert!(
        server.requests()[before..]
            .iter()
            .all(|r| agent_of(r) != Agent::Clarifier),
        "确认需求 is frozen in notes/"
    );
    let lineage = read_json(&dir.join("runs/lineage.json"));
    let new = lineage["steps"][WORK]
        .as_str()
        .expect("a sound lineage.json naming 干活")
        .to_string();
    assert_ne!(new, old, "the old session was not resumed");
    new
}

// ---------------------------------------------------------------------------------
// Crash: SIGTERM / SIGHUP rescue (library)
// ---------------------------------------------------------------------------------

/// 进程被杀 (`SIGTERM` / `SIGHUP`): the handler's `rescue()` writes the in-flight step
/// into manifest.json with `error="killed-by-signal"`. Through the library: while the
/// step's request is unanswered there is no row; `Runtime::rescue` writes it, marked,
/// with the step's session. Breakage tried: `Rescuer::rescue` returning at once.
#[tokio::test]
async fn rescue_writes_the_in_flight_step_as_killed_by_signal() {
    let dir = TempDir::new().unwrap();
    let gate = Gate::new();
    let server = FakeServer::start(vec![Reply::text("向日葵").gate_before(&gate)]);
    let rt = runtime(dir.path(), &server);
    let wf = seed_workflow();
    let running = wf.run(&rt);
    let check = async {
        assert!(gate.wait_reached_async(PATIENCE).await);
        assert!(rows_of(dir.path()).is_empty(), "no row while in flight");
        rt.rescue();
        let rows = rows_of(dir.path());
        gate.open();
        rows
    };
    let (ctx, rows) = tokio::join!(running, check);
    let ctx = ctx.expect("the run itself goes on");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(row["step"], "取词");
    assert_eq!(row["error"], "killed-by-signal");
    assert_eq!(row["ok"], false);
    assert_eq!(row["session_id"], ctx.sessions["取词"].as_str());
    assert!(row["ended_at"].as_str().is_some_and(|t| !t.is_empty()));
    // The runtime went on (no signal really came): its own record replaces the rescue.
    let rows = rows_of(dir.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["ok"], true);
}

// ---------------------------------------------------------------------------------
// Crash: Ctrl-C twice / SIGKILL, the run abandoned mid-step (library)
// ---------------------------------------------------------------------------------

/// 进程被杀 (`Ctrl-C` 两次 / `SIGKILL`): nothing is finished off, so the in-flight step
/// is not in manifest.json, but lineage already names its session and the next process
/// resumes it. Through the library: a workflow future dropped while its first request
/// is unanswered; a new runtime continues the same session with the opening kept.
/// Breakage tried: lineage written at the step's end instead of by the on-session hook
/// (issue #6).
#[tokio::test]
async fn a_run_dropped_mid_step_leaves_no_row_and_the_next_runtime_resumes_it() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "向日葵").unwrap();
    let gate = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("never delivered").gate_before(&gate),
        Reply::text("向日葵"),
    ]);
    let wf = seed_workflow();
    {
        let rt = runtime(dir.path(), &server);
        tokio::select! {
            _ = wf.run(&rt) => panic!("the held request was answered"),
            reached = gate.wait_reached_async(PATIENCE) => assert!(reached),
        }
        // The future is gone: no finally, no record.
    }
    gate.open();
    assert!(
        rows_of(dir.path()).iter().all(|r| r["step"] != "取词"),
        "{:#?}",
        rows_of(dir.path())
    );
    let id = lineage_of(dir.path())["steps"]["取词"]
        .as_str()
        .expect("lineage names the in-flight step")
        .to_string();

    let rt = runtime(dir.path(), &server);
    let ctx = wf.run(&rt).await.expect("the next process");
    assert_eq!(ctx.woke, 2);
    assert_eq!(ctx.sessions["取词"], id, "the same session continued");
    let resumed = &server.requests()[1];
    assert!(
        resumed.first_prompt().contains("读 seed.txt"),
        "{}",
        resumed.raw_body
    );
    let rows = rows_of(dir.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["session_id"], id.as_str());
    assert_eq!(rows[0]["resumed"], true);
}

// ---------------------------------------------------------------------------------
// Crash: SIGKILL leaves no stale run lock (library, in a child process)
// ---------------------------------------------------------------------------------

const HOLD_DIR: &str = "FLOWER_PROMISE_PAIRS_HOLD_DIR";
const HOLDING: &str = "@@promise-pairs@@ holding";

/// Not a test: the body of the child process of
/// [`a_sigkilled_holders_run_lock_is_free_for_the_next_runtime`]. It opens a runtime
/// (taking the run lock), says so, and waits. Does nothing in a normal test run.
#[tokio::test]
async fn child_process_entry_point() {
    let Ok(dir) = std::env::var(HOLD_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let client =
        AnthropicClient::new("http://127.0.0.1:9", support::FAKE_API_KEY, "claude-fake").unwrap();
    let options = RuntimeOptions {
        run_lock: RunLocking::Take,
        ..RuntimeOptions::new(Arc::new(client))
    };
    let _rt = Runtime::with_options(dir, dir.join("runs"), options).expect("child runtime");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{HOLDING}").unwrap();
        out.flush().unwrap();
    }
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// 进程被杀 (`SIGKILL`): "一样接得上". A process SIGKILLed while it holds the run
/// directory leaves nothing that stops the next one: while it lives a second runtime is
/// refused (so the lock was really held), once it is killed a runtime opens at once.
#[tokio::test]
async fn a_sigkilled_holders_run_lock_is_free_for_the_next_runtime() {
    let dir = TempDir::new().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "promise_pairs::child_process_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLD_DIR, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended before it held the lock"
        );
        if line.contains(HOLDING) {
            break;
        }
    }
    let server = FakeServer::start(vec![Reply::text("好")]);
    let open = || {
        open_runtime(
            dir.path(),
            &server,
            |o| o.run_lock = RunLocking::Take,
            FrontEnd::default(),
        )
    };
    assert!(
        matches!(open(), Err(RuntimeError::Held(Held::RunDir { .. }))),
        "the child holds the run directory"
    );
    child.kill().unwrap(); // SIGKILL: no destructor, no unlock.
    child.wait().unwrap();
    let rt = open().expect("a SIGKILLed holder leaves no stale lock");
    let spec = AgentSpec::new("a", "回答极简。");
    let ran = rt.run_step("a", &spec, "hi", SessionStart::New).await;
    assert!(ran.ok, "{:?}", ran.error);
}

// ---------------------------------------------------------------------------------
// Crash inside 确认需求, and frozen steps (library, the default pipeline)
// ---------------------------------------------------------------------------------

/// The pipeline's replies, except that the clarifier's first request is held at `gate`.
fn pipeline_holding_clarifier(gate: &Gate) -> FakeServer {
    let gate = gate.clone();
    let held = AtomicBool::new(false);
    FakeServer::with_handler(move |req, _| {
        if agent_of(req) == Agent::Clarifier && !held.swap(true, Ordering::SeqCst) {
            return Reply::text("never delivered").gate_before(&gate);
        }
        simple_reply(req)
    })
}

/// 崩在第一步(确认需求)之内也能接上: a run that dies inside 确认需求, before 需求.md
/// is frozen, resumes the clarification with `CLARIFY_RESUME` ("接着刚才那次没问完的需求
/// 确认继续"), the original request still in its history, instead of sending the
/// request again as a new task. Through the library's default pipeline. Breakage tried:
/// 确认需求 without its `resume_prompt`.
#[tokio::test]
async fn a_clarification_cut_short_resumes_with_clarify_resume() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let gate = Gate::new();
    let server = pipeline_holding_clarifier(&gate);
    let first = FlowerOptions {
        request: Some(REQUEST.to_string()),
        ..FlowerOptions::default()
    };
    {
        let rt = runtime(&ws, &server);
        let wf = flower_workflow(&ws, &first);
        tokio::select! {
            _ = wf.run(&rt) => panic!("the held request was answered"),
            reached = gate.wait_reached_async(PATIENCE) => assert!(reached),
        }
    }
    gate.open();
    let id = lineage_of(&ws)["steps"][CLARIFY]
        .as_str()
        .expect("确认需求's session is on disk")
        .to_string();
    assert!(!ws.join("notes/需求.md").exists());

    let before = server.request_count();
    let rt = runtime(&ws, &server);
    let ctx = flower_workflow(&ws, &FlowerOptions::default())
        .run(&rt)
        .await
        .expect("the wake");
    let resumed = &server.requests()[before];
    assert_eq!(agent_of(resumed), Agent::Clarifier);
    assert!(
        last_texts(resumed)
            .last()
            .is_some_and(|t| t == CLARIFY_RESUME),
        "{:#?}",
        resumed.messages().last()
    );
    assert!(
        resumed.first_prompt().contains(REQUEST),
        "{}",
        resumed.first_prompt()
    );
    assert_eq!(ctx.sessions[CLARIFY], id);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/需求.md")).unwrap(),
        BRIEF
    );
}

/// 崩在第一步之内 — 反过来: frozen steps are skipped whole. With a complete 需求.md and
/// a checklist in 目标.md, the default pipeline asks neither the clarifier nor the goal
/// setter anything (their contents still reach the context) and goes straight to 干活.
/// Breakage tried: 确认需求's `skip_when` never skipping.
#[tokio::test]
async fn frozen_notes_skip_clarify_and_set_goal_in_the_library_pipeline() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    freeze_notes(&ws);
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let rt = runtime(&ws, &server);
    let ctx = flower_workflow(&ws, &FlowerOptions::default())
        .run(&rt)
        .await
        .expect("the run");
    let agents: Vec<Agent> = server.requests().iter().map(agent_of).collect();
    assert_eq!(agents[0], Agent::Coordinator, "{agents:?}");
    assert!(
        !agents.contains(&Agent::Clarifier) && !agents.contains(&Agent::GoalSetter),
        "{agents:?}"
    );
    assert_eq!(ctx.get(CLARIFY), Some(BRIEF));
    assert_eq!(ctx.get(SET_GOAL), Some(GOAL));
    assert!(server.requests()[0].first_prompt().contains("## 验收"));
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hello"
    );
}

// ---------------------------------------------------------------------------------
// Crash during a handoff: the wake continues the successor (library)
// ---------------------------------------------------------------------------------

/// 接续不是换代 — 两者自动咬合: lineage always names the session that took the step
/// over last, so a wake continues the successor. Through the library: a session whose
/// request no longer fits the window hands off (mechanically); the run is dropped while
/// the successor's first request is unanswered; lineage already names the successor,
/// and the next runtime resumes it (its opening is the handoff, not the step's prompt).
/// Breakage tried: lineage written at the step's end instead of by the on-session hook.
#[tokio::test]
async fn a_handoff_cut_short_wakes_the_successor_not_the_retired_session() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("seed.txt"), "向日葵").unwrap();
    let gate = Gate::new();
    let is_successor = |req: &Recorded| req.first_prompt().contains("你接手这一步");
    let server = {
        let gate = gate.clone();
        let held = AtomicBool::new(false);
        FakeServer::with_handler(move |req, _| {
            if is_successor(req) {
                if !held.swap(true, Ordering::SeqCst) {
                    return Reply::text("never delivered").gate_before(&gate);
                }
                return Reply::text("接手后做完了。");
            }
            match turn_of(req) {
                0 => Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
                _ => Reply::error(
                    400,
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum",
                ),
            }
        })
    };
    let wf = Workflow::new(vec![Step::new(
        WORK,
        AgentSpec::new("worker", "干活的").allowed_tools(["Read"]),
        "做事:读 seed.txt",
    )]);
    let retired;
    {
        let rt = runtime(&ws, &server);
        tokio::select! {
            _ = wf.run(&rt) => panic!("the successor's request was answered"),
            reached = gate.wait_reached_async(PATIENCE) => assert!(reached),
        }
        retired = rt
            .lineage()
            .session(WORK)
            .map(str::to_string)
            .expect("lineage names a session");
        let first = &server.requests()[0];
        let on_disk = lineage_of(&ws)["steps"][WORK].as_str().unwrap().to_string();
        assert_eq!(on_disk, retired);
        assert!(!is_successor(first));
    }
    gate.open();
    let rows = rows_of(&ws);
    let row = rows
        .iter()
        .find(|r| r["step"] == WORK)
        .expect("the row of the handoff");
    assert_eq!(
        row["session_id"],
        retired.as_str(),
        "the successor is on disk"
    );
    assert_eq!(row["retired"].as_array().unwrap().len(), 1, "{row:#}");
    assert_ne!(row["retired"][0], retired.as_str());

    let before = server.request_count();
    let rt = runtime(&ws, &server);
    let ctx = wf.run(&rt).await.expect("the wake");
    let woken = &server.requests()[before];
    assert!(
        is_successor(woken),
        "woke into the retired session: {}",
        woken.raw_body
    );
    assert_eq!(ctx.sessions[WORK], retired);
}

// ---------------------------------------------------------------------------------
// Outage: waited out without spending attempts, then resumed (library)
// ---------------------------------------------------------------------------------

/// 韧性 二: while the endpoint is unreachable flower waits (probing) instead of spending
/// attempts, and a retry of a session with an id resumes it with exactly
/// `Resilience.resume_prompt`, its history kept; the step's row then says HT001's
/// `attempts=2 / resumed=True / ok=True`. Through the library, with two attempts in all
/// and an outage of several probes. Breakage tried: `wait_for_endpoint` not waiting.
#[tokio::test]
async fn an_outage_is_waited_out_without_spending_attempts_and_the_session_resumed() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "向日葵").unwrap();
    let gate = Gate::new();
    let outage = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, outage) = (gate.clone(), outage.clone());
        FakeServer::with_handler(move |_, index| {
            if outage.load(Ordering::SeqCst) {
                // A request that slipped onto a kept-alive connection fails like the
                // network would.
                return Reply::text("lost").cut_after(0);
            }
            match index {
                0 => Reply::tool_use("Read", json!({"file_path": "seed.txt"})).gate_before(&gate),
                _ => Reply::text("向日葵"),
            }
        })
    };
    let (offline_tx, mut offline_rx) = tokio::sync::mpsc::unbounded_channel();
    let front = FrontEnd {
        events: Arc::new(move |e: &Event| {
            if let Event::Offline { database, .. } = e {
                let _ = offline_tx.send(*database);
            }
        }),
        ..FrontEnd::default()
    };
    let tweak = |o: &mut RuntimeOptions| {
        o.resilience = Resilience {
            max_attempts: 2,
            base_delay: 0.0,
            probe_interval: 0.05,
            probe_timeout: 0.5,
            max_offline_wait: 30.0,
            ..Resilience::default()
        };
    };
    let rt = open_runtime(dir.path(), &server, tweak, front).expect("runtime");
    let spec = terse();
    let running = rt.run_step("取词", &spec, "读 seed.txt", SessionStart::New);
    let outage_then_back = async {
        assert!(gate.wait_reached_async(PATIENCE).await);
        server.stop_accepting();
        outage.store(true, Ordering::SeqCst);
        gate.open();
        for _ in 0..5 {
            let probe = tokio::time::timeout(PATIENCE, offline_rx.recv()).await;
            assert_eq!(
                probe.ok().flatten(),
                Some(false),
                "the model's endpoint is away"
            );
        }
        outage.store(false, Ordering::SeqCst);
        server.resume_accepting();
    };
    let (result, ()) = tokio::join!(running, outage_then_back);
    assert!(result.ok, "{:?} {:?}", result.error, result.errors);
    assert_eq!(result.attempts, 2, "{result:?}");
    assert!(result.resumed);
    assert_eq!(result.errors.len(), 1, "{:?}", result.errors);

    let requests = server.requests();
    let retry = requests.last().unwrap();
    assert_eq!(
        last_texts(retry).last().map(String::as_str),
        Some(RESUME_PROMPT),
        "{:#?}",
        retry.messages().last()
    );
    assert_eq!(
        retry.first_prompt(),
        requests[0].first_prompt(),
        "the same session"
    );
    assert_eq!(
        tool_use_ids(retry),
        ["toolu_fake_0000_0"],
        "the Read turn is kept"
    );
    assert!(!retry.raw_body.contains("API Error"), "{}", retry.raw_body);
    let rows = rows_of(dir.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["attempts"], 2);
    assert_eq!(rows[0]["resumed"], true);
    assert_eq!(rows[0]["ok"], true);
}

// ---------------------------------------------------------------------------------
// Outage: a database error is not "the session is gone" (library)
// ---------------------------------------------------------------------------------

/// 两条不变式 二, its limit: "对不上就当没有" is for a session that really is gone. A
/// store that cannot answer whether the remembered sessions exist (the database down,
/// locked, unreadable) makes loading lineage an error, never an empty lineage, and the
/// file is left as it was. Breakage tried: a store error read as "gone"
/// (`is_alive(id).unwrap_or(false)`).
#[test]
fn a_store_error_while_lineage_is_checked_is_an_error_not_a_fresh_start() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run_dir = ws.join("runs");
    let mut l = Lineage::load(&run_dir, &ws, |_| true);
    l.wake();
    assert!(l.remember(WORK, "s1"));
    let before = std::fs::read(run_dir.join("lineage.json")).unwrap();

    let asked = AtomicUsize::new(0);
    let loaded = Lineage::try_load(&run_dir, &ws, |_| {
        asked.fetch_add(1, Ordering::SeqCst);
        Err::<bool, _>("database is locked")
    });
    assert_eq!(loaded.err(), Some("database is locked"));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(std::fs::read(run_dir.join("lineage.json")).unwrap(), before);
    // The control: once the store answers, the same file is the same lineage.
    let again = Lineage::try_load(&run_dir, &ws, |_| Ok::<_, ()>(true)).unwrap();
    assert_eq!(again.session(WORK), Some("s1"));
    assert_eq!(again.woke(), 1);
}

// ---------------------------------------------------------------------------------
// Outage and denials: trim off still prunes (library and binary)
// ---------------------------------------------------------------------------------

/// 韧性 最后一条: `Runtime(trim=False)` is not "clean nothing". A cold resume through a
/// runtime with `trim: false` still leaves out the synthetic API error of an outage and
/// every denied call but the newest. Breakage tried: a runtime with trim off keeping
/// every denial.
#[tokio::test]
async fn a_resume_with_trim_off_still_drops_errors_and_old_denials() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a").unwrap();
    std::fs::write(dir.path().join("b.txt"), "b").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Bash", json!({"command": "rm a.txt"})),
        Reply::tool_use("Bash", json!({"command": "rm b.txt"})),
        Reply::overloaded(),
        Reply::text("删不掉,算了"),
        Reply::text("好"),
    ]);
    let spec = AgentSpec::new("cleaner", "清理工作区。")
        .allowed_tools(["Bash"])
        .disallowed_tools(["Bash(rm:*)"]);
    let trim_off = |o: &mut RuntimeOptions| {
        o.trim = false;
        o.cache_ttl = None;
        o.resilience = Resilience {
            max_attempts: 2,
            base_delay: 0.0,
            ..Resilience::default()
        };
    };
    let id = {
        let rt = runtime_with(dir.path(), &server, trim_off);
        let first = rt
            .run_step("清理", &spec, "清理一下", SessionStart::New)
            .await;
        assert!(first.ok, "{:?}", first.error);
        assert_eq!(first.attempts, 2, "the 529 was retried");
        first.session_id.unwrap()
    };
    assert!(dir.path().join("a.txt").exists() && dir.path().join("b.txt").exists());
    // The first run saw both denials (its retry, a cold load, saw only the newest).
    assert_eq!(
        tool_use_ids(&server.requests()[2]),
        ["toolu_fake_0000_0", "toolu_fake_0001_0"]
    );

    let rt = runtime_with(dir.path(), &server, trim_off);
    let again = rt
        .run_step("清理", &spec, "再试试", SessionStart::Resume(id))
        .await;
    assert!(again.ok, "{:?}", again.error);
    let resumed = &server.requests()[4];
    assert_eq!(
        tool_use_ids(resumed),
        ["toolu_fake_0001_0"],
        "only the newest denied call: {}",
        resumed.raw_body
    );
    assert!(!resumed.raw_body.contains("rm a.txt"));
    assert!(
        !resumed.raw_body.contains("API Error"),
        "{}",
        resumed.raw_body
    );
}

/// The same promise through the binary: `flower --no-trim`, waking cold
/// (`FLOWER_CACHE_TTL=0`) into a 干活 session that met a 529 and two denied commands,
/// sends neither the synthetic error nor the older denial. Breakage tried: as above.
#[test]
fn a_no_trim_wake_still_drops_errors_and_old_denials() {
    let project = Project::with("proj", crate::faults_support::RESILIENT);
    std::fs::write(project.dir.join("a.txt"), "a").unwrap();
    std::fs::write(project.dir.join("b.txt"), "b").unwrap();
    freeze_notes(&project.dir);
    let overloaded = AtomicBool::new(false);
    let server = FakeServer::with_handler(move |req, _| match (agent_of(req), turn_of(req)) {
        // The coordinator may only run read-only git: both `rm` are denied.
        (Agent::Coordinator, 0) => Reply::tool_use("Bash", json!({"command": "rm a.txt"})),
        (Agent::Coordinator, 1) => Reply::tool_use("Bash", json!({"command": "rm b.txt"})),
        (Agent::Coordinator, 2) if !overloaded.swap(true, Ordering::SeqCst) => Reply::overloaded(),
        (Agent::Coordinator, _) => Reply::text("做完了。"),
        _ => simple_reply(req),
    });
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(project.dir.join("a.txt").exists() && project.dir.join("b.txt").exists());
    let work = project.json("runs/lineage.json")["steps"][WORK]
        .as_str()
        .unwrap()
        .to_string();
    let rows = project.manifest();
    let row = rows.iter().find(|r| r["step"] == WORK).unwrap();
    assert_eq!(row["attempts"], 2, "{row:#}");
    assert!(server.requests().iter().any(|r| {
        agent_of(r) == Agent::Coordinator
            && tool_use_ids(r) == ["toolu_fake_0000_0", "toolu_fake_0001_0"]
    }));

    let before = server.request_count();
    let out = project
        .command(&server, &["--no-trim", "--again"])
        .env("FLOWER_CACHE_TTL", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let resumed = first_of(&server, Agent::Coordinator, before);
    assert!(
        last_texts(&resumed)
            .last()
            .is_some_and(|t| t == WORK_RESUME),
        "the 干活 session was resumed"
    );
    assert_eq!(
        project.json("runs/lineage.json")["steps"][WORK],
        work.as_str()
    );
    let ids = tool_use_ids(&resumed);
    assert_eq!(ids, ["toolu_fake_0001_0"], "{}", resumed.raw_body);
    assert!(!resumed.raw_body.contains("rm a.txt"));
    assert!(
        !resumed.raw_body.contains("API Error"),
        "{}",
        resumed.raw_body
    );
}

// ---------------------------------------------------------------------------------
// Crash: lineage.json is replaced atomically; a failed write is swallowed (binary)
// ---------------------------------------------------------------------------------

/// 两条不变式 一: lineage is written to `.tmp` first and then atomically renamed over
/// lineage.json, so a process killed mid-write never leaves half a file. Through the
/// binary: a second name (hard link) of the old lineage.json keeps the old content
/// after a wake (an in-place write would change both names), the half-written `.tmp` a
/// killed writer left is neither read nor left behind, and the wake continues 干活.
/// Breakage tried: `Lineage::save` writing lineage.json in place.
#[test]
fn lineage_json_is_replaced_by_rename_never_written_in_place() {
    let project = Project::new();
    let (server, work) = completed_run(&project);
    let runs = project.dir.join("runs");
    let before = std::fs::read_to_string(runs.join("lineage.json")).unwrap();
    std::fs::hard_link(runs.join("lineage.json"), runs.join("lineage.before")).unwrap();
    let inode = std::fs::metadata(runs.join("lineage.json")).unwrap().ino();
    std::fs::write(
        runs.join("lineage.json.tmp"),
        b"{\"workspace\": \"/x\", \"wo",
    )
    .unwrap();

    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(runs.join("lineage.before")).unwrap(),
        before,
        "the old file was written in place"
    );
    assert_ne!(
        std::fs::metadata(runs.join("lineage.json")).unwrap().ino(),
        inode
    );
    assert!(
        !runs.join("lineage.json.tmp").exists(),
        "the .tmp is renamed, not left"
    );
    let lineage = project.json("runs/lineage.json");
    assert_eq!(lineage["woke"], 2);
    assert_eq!(lineage["steps"][WORK], work.as_str());
}

/// 两条不变式 一: "落盘失败(OSError)被静默吞掉,不带走这次运行". Through the binary:
/// with `runs/lineage.json.tmp` a directory, no lineage write can succeed, yet the
/// whole pipeline runs to the end and exits 0. Breakage tried: `Lineage::remember`
/// panicking on a failed save.
#[test]
fn a_lineage_write_that_fails_does_not_stop_the_run() {
    let project = Project::new();
    std::fs::create_dir_all(project.dir.join("runs/lineage.json.tmp/held")).unwrap();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !project.dir.join("runs/lineage.json").exists(),
        "the write really failed"
    );
    assert_eq!(project.read("hello.txt"), "hello");
    let rows = project.manifest();
    assert!(
        rows.iter().any(|r| r["step"] == WORK && r["ok"] == true),
        "{rows:#?}"
    );
}

// ---------------------------------------------------------------------------------
// Crash during the judge: lineage keeps 干活's session (binary)
// ---------------------------------------------------------------------------------

/// 两条不变式 一 (the hook covers only `runtime.run`) and 判定者永远是新会话: a kill
/// while the judge is running leaves lineage naming 干活's own session, never the
/// judge's; the wake resumes 干活 and judges with a new session. Breakage tried: the
/// workflow leaving the on-session hook set during the gate.
#[test]
fn killed_while_the_judge_runs_the_wake_resumes_work_not_the_judge() {
    let project = Project::new();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        let held = AtomicBool::new(false);
        FakeServer::with_handler(move |req, _| {
            if agent_of(req) == Agent::Judge && !held.swap(true, Ordering::SeqCst) {
                return Reply::text("never delivered").gate_before(&gate);
            }
            simple_reply(req)
        })
    };
    let mut child = project.spawn(&server, &[REQUEST]);
    assert!(gate.wait_reached(PATIENCE), "the judge was never asked");
    child.kill().unwrap();
    child.wait().unwrap();
    gate.open();

    let rows = project.manifest();
    let work_row = rows.iter().find(|r| r["step"] == WORK).expect("干活's row");
    let work = work_row["session_id"].as_str().unwrap().to_string();
    let lineage = project.json("runs/lineage.json");
    let steps = lineage["steps"].as_object().unwrap();
    assert_eq!(steps.keys().collect::<Vec<_>>(), [WORK, CLARIFY, SET_GOAL]);
    assert_eq!(
        steps[WORK],
        work.as_str(),
        "lineage names the judge: {lineage}"
    );

    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let resumed = first_of(&server, Agent::Coordinator, before);
    assert!(resumed.messages().len() > 1, "{}", resumed.raw_body);
    assert!(
        last_texts(&resumed)
            .last()
            .is_some_and(|t| t == WORK_RESUME)
    );
    let judge = first_of(&server, Agent::Judge, before);
    assert_eq!(judge.messages().len(), 1, "the judge is a new session");
    assert_eq!(
        project.json("runs/lineage.json")["steps"][WORK],
        work.as_str()
    );
}

// ---------------------------------------------------------------------------------
// Outage: fatal before transient, and at most six attempts (binary)
// ---------------------------------------------------------------------------------

/// 韧性 二: `classify` decides fatal before transient — "401 之类的文本常带
/// "connection" 字样,顺序反了会死等". Through the binary: an `event: error` of no
/// known type inside a 200 stream (so no status decides, only the text) saying "401
/// Unauthorized: connection closed" is not retried; the same words without the 401 are.
/// Breakage tried: `classify` testing the transient phrases first.
#[test]
fn an_auth_failure_that_mentions_the_connection_is_not_retried() {
    let failing = |message: &'static str| {
        let project = Project::with("proj", crate::faults_support::RESILIENT);
        let server = FakeServer::with_handler(move |_, _| {
            Reply::text("半句话").error_after(Reply::FIRST_DELTA, "odd_error", message)
        });
        let out = project
            .command(&server, &["once", "hi"])
            .env("FLOWER_MAX_ATTEMPTS", "3")
            .output()
            .unwrap();
        (out, server.request_count())
    };
    let (out, requests) = failing("401 Unauthorized: connection closed by the auth proxy");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(requests, 1, "a fatal error is not retried: {stderr}");
    assert!(
        !stderr.contains("次尝试") && !stderr.contains("网络不通"),
        "{stderr}"
    );
    // The control: without the auth failure the same words are transient.
    let (out, requests) = failing("connection closed by the proxy");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(requests, 3, "{}", text(&out.stderr));
}

/// 韧性 二: `max_attempts=6` (含首次). Through the binary with the default: a model that
/// is overloaded every time is asked exactly six times, each retry announced out of
/// six, and then the command fails. Breakage tried: a default of seven attempts.
#[test]
fn overloaded_every_time_gives_up_after_six_attempts() {
    let project = Project::with("proj", crate::faults_support::RESILIENT);
    let server = FakeServer::with_handler(|_, _| Reply::overloaded());
    let out = project.run(&server, &["once", "hi"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(server.request_count(), 6, "{stderr}");
    for n in 2..=6 {
        assert!(stderr.contains(&format!("第 {n}/6 次尝试")), "{stderr}");
    }
    assert!(!stderr.contains("第 7/"), "{stderr}");
}

// ---------------------------------------------------------------------------------
// Malformed or foreign lineage: silently a fresh start (binary)
// ---------------------------------------------------------------------------------

/// 两条不变式 二: "工作区路径变了(目录被拷走)… 路径对不上就当没有". Through the binary:
/// the whole project copied elsewhere (notes, runs/ with its sessions.db, whose
/// sessions are still listed there) starts 干活 afresh at woke 1, silently; the
/// original still continues its own session. Breakage tried: the workspace guard off
/// (the copy then tries to resume the old session and fails).
#[test]
fn a_copied_project_starts_fresh_and_the_original_continues() {
    let project = Project::new();
    let (server, work) = completed_run(&project);
    let copy = project.home.join("copy");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&project.dir)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());

    wake_starts_work_afresh(&project, &copy, &server, &work);
    let lineage = read_json(&copy.join("runs/lineage.json"));
    assert_eq!(
        lineage["woke"], 1,
        "the copy's lineage is not this workspace's"
    );
    assert_eq!(lineage["workspace"], copy.to_str().unwrap());

    let before = server.request_count();
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        project.json("runs/lineage.json")["steps"][WORK],
        work.as_str()
    );
    assert_eq!(project.json("runs/lineage.json")["woke"], 2);
    let resumed = first_of(&server, Agent::Coordinator, before);
    assert!(
        last_texts(&resumed)
            .last()
            .is_some_and(|t| t == WORK_RESUME)
    );
}

/// 两条不变式 二: "session 已经不在库里(删过 sessions.db)… 静默退回从头开始". Through the
/// binary: sessions.db deleted after a run; the wake starts 干活 afresh without a word
/// (the wake count goes on, the lineage file being sound). Breakage tried: remembered
/// sessions kept without asking the store.
#[test]
fn a_deleted_sessions_db_starts_work_afresh_silently() {
    let project = Project::new();
    let (server, work) = completed_run(&project);
    for f in ["sessions.db", "sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(project.dir.join("runs").join(f));
    }
    wake_starts_work_afresh(&project, &project.dir, &server, &work);
    assert_eq!(project.json("runs/lineage.json")["woke"], 2);
}

/// 两条不变式 二: "血缘文件坏了… 静默退回从头开始". Through the binary: a lineage.json
/// cut in half, or binary garbage, or of the wrong shape; each wake starts 干活 afresh
/// at woke 1, silently, and leaves a sound lineage.json behind. Breakage tried: an
/// unparsable lineage.json panicking instead of loading as empty.
#[test]
fn a_corrupt_lineage_starts_fresh_silently() {
    type Break = fn(&Path);
    let cases: [(&str, Break); 3] = [
        ("truncated", |p| {
            let text = std::fs::read_to_string(p).unwrap();
            std::fs::write(p, &text[..text.len() / 2]).unwrap();
        }),
        ("binary garbage", |p| {
            std::fs::write(p, [0u8, 159, 146, 150, 255, b'{']).unwrap()
        }),
        ("wrong types", |p| {
            std::fs::write(p, r#"{"workspace": 3, "woke": "x", "steps": []}"#).unwrap()
        }),
    ];
    for (what, break_it) in cases {
        let project = Project::new();
        let (server, work) = completed_run(&project);
        break_it(&project.dir.join("runs/lineage.json"));
        wake_starts_work_afresh(&project, &project.dir, &server, &work);
        assert_eq!(project.json("runs/lineage.json")["woke"], 1, "{what}");
    }
}

// ---------------------------------------------------------------------------------
// Attacker: denied calls never run, however they are spelled (binary)
// ---------------------------------------------------------------------------------

/// 韧性 三 ("被拒调用从没执行过"): a denied call is never executed. Through the binary,
/// with Bash allowed and `Bash(rm:*)` denied: `rm` hidden in a compound command, a
/// substitution, `bash -c`, an absolute path, `env` or `find -exec` is refused and the
/// file stays; what the rule does not cover runs (the control: the setup would let a
/// command through).
#[test]
fn flower_never_runs_a_denied_command_hidden_in_another() {
    let project = Project::new();
    std::fs::write(project.dir.join("victim.txt"), "keep me").unwrap();
    let hidden = [
        "echo ok && rm victim.txt",
        "echo $(rm victim.txt)",
        "bash -c 'rm victim.txt'",
        "/bin/rm victim.txt",
        "env X=1 rm victim.txt",
        "find . -name victim.txt -exec rm {} \\;",
    ];
    let mut calls: Vec<(&str, Value)> = hidden
        .iter()
        .map(|c| ("Bash", json!({"command": c})))
        .collect();
    calls.push(("Bash", json!({"command": "echo ran > made.txt"})));
    let (_, server) = once_with_calls(
        &project,
        calls,
        // Write too: without it the sandbox would make the workspace read-only, which
        // would stop `rm` whatever the rules say.
        &[
            "--allowed-tools",
            "Bash",
            "Write",
            "--disallowed-tools",
            "Bash(rm:*)",
        ],
    );
    let requests = server.requests();
    for (i, command) in hidden.iter().enumerate() {
        let result = &last_results(&requests[i + 1])[0];
        assert_eq!(result["is_error"], true, "{command}: {result}");
        assert!(
            result_text(result).contains("has been denied"),
            "{command}: {result}"
        );
        assert_eq!(project.read("victim.txt"), "keep me", "{command} ran");
    }
    assert_eq!(project.read("made.txt").trim(), "ran");
}

/// 韧性 三 ("被拒调用从没执行过"), for paths: a denied file is neither shown nor changed
/// when the model spells it another way (`./`, `sub/../`, the absolute path, a symlink
/// to it). Through the binary; the other file is read.
#[test]
fn flower_keeps_a_denied_path_out_through_dots_and_links() {
    let project = Project::new();
    std::fs::write(project.dir.join("secret.txt"), "hunter2\n").unwrap();
    std::fs::write(project.dir.join("open.txt"), "hello\n").unwrap();
    std::fs::create_dir(project.dir.join("sub")).unwrap();
    std::os::unix::fs::symlink("secret.txt", project.dir.join("link.txt")).unwrap();
    let absolute = project.dir.join("secret.txt");
    let spellings = [
        json!("./secret.txt"),
        json!("sub/../secret.txt"),
        json!(absolute),
        json!("link.txt"),
    ];
    let mut calls: Vec<(&str, Value)> = Vec::new();
    for path in &spellings {
        calls.push(("Read", json!({"file_path": path})));
        calls.push((
            "Edit",
            json!({"file_path": path, "old_string": "h", "new_string": "H"}),
        ));
    }
    calls.push(("Read", json!({"file_path": "open.txt"})));
    let n = calls.len();
    let (_, server) = once_with_calls(
        &project,
        calls,
        &[
            "--allowed-tools",
            "Read",
            "Edit",
            "--disallowed-tools",
            "Read(secret.txt)",
            "Edit(secret.txt)",
        ],
    );
    let requests = server.requests();
    for (i, req) in requests.iter().enumerate().skip(1).take(n - 1) {
        let result = &last_results(req)[0];
        assert_eq!(result["is_error"], true, "call {i}: {result}");
        assert!(
            result_text(result).contains("(secret.txt)"),
            "call {i}: {result}"
        );
        assert!(
            !req.raw_body.contains("hunter2"),
            "call {i} showed the secret"
        );
    }
    assert_eq!(project.read("secret.txt"), "hunter2\n");
    assert!(result_text(&last_results(&requests[n])[0]).contains("hello"));
}

/// Attacker, a path outside the workspace (DESIGN §2: the tools are confined to the
/// workspace): with Write and Edit allowed as whole tools, the model's writes to `../`,
/// to an absolute path outside, or through a symlinked directory are refused and leave
/// nothing outside; a write inside works.
#[test]
fn flower_refuses_writes_outside_the_workspace() {
    let project = Project::new();
    let outside = project.home.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, project.dir.join("escape")).unwrap();
    let write = |path: Value| ("Write", json!({"file_path": path, "content": "x"}));
    let (_, server) = once_with_calls(
        &project,
        vec![
            write(json!("../outside/a.txt")),
            write(json!(outside.join("b.txt"))),
            write(json!("escape/c.txt")),
            (
                "Edit",
                json!({"file_path": "../outside/d.txt", "old_string": "", "new_string": "x"}),
            ),
            write(json!("inside.txt")),
        ],
        &["--allowed-tools", "Write", "Edit"],
    );
    let requests = server.requests();
    for (i, req) in requests.iter().enumerate().skip(1).take(4) {
        let result = &last_results(req)[0];
        assert_eq!(result["is_error"], true, "call {i}: {result}");
        assert!(
            result_text(result).contains("outside the workspace"),
            "call {i}: {result}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside"
    );
    assert_eq!(last_results(&requests[5])[0]["is_error"], false);
    assert_eq!(project.read("inside.txt"), "x");
}
