//! Signals, with the real binary: SIGTERM and SIGHUP mid-step write the in-flight step's
//! row (`killed-by-signal`) and kill the process by that very signal; SIGKILL at random
//! moments, fifty times over, never costs the conversation nor breaks its transcript.
//! (Ctrl-C through a pseudo-terminal is tested elsewhere.)
//!
//! Kill points are events: a reply held at a gate, the n-th request arriving, a tool's
//! process having started; a random delay is only ever added after such an event.

use crate::faults_support;
use crate::support;

use faults_support::*;
use flower::continuity::lock::{Probe, probe_run};
use flower::workflow::flower::WORK_RESUME;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{FakeServer, Gate, Recorded, Reply};

/// The first coordinator request of a list.
fn first_coordinator(requests: &[Recorded]) -> Option<&Recorded> {
    requests.iter().find(|r| agent_of(r) == Agent::Coordinator)
}

fn first_text(req: &Recorded) -> String {
    req.messages()[0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Sends `sig` while the coordinator's first reply (or, with `in_tool`, the worker's
/// Bash command) is in flight; the process must die by that signal after writing the
/// step's row, and the next run must continue the same 干活 session to the end.
fn killed_mid_step_by(sig: i32, in_tool: bool) {
    let project = Project::resilient();
    let pid_file = project.dir.join("tool.pid");
    let gate = Gate::new();
    let held = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, held) = (gate.clone(), held.clone());
        FakeServer::with_handler(move |req, _| {
            let agent = agent_of(req);
            if in_tool
                && agent == Agent::Worker
                && turn_of(req) == 0
                && !held.swap(true, Ordering::SeqCst)
            {
                return Reply::tool_use(
                    "Bash",
                    json!({"command": "echo $$ > tool.pid.tmp && mv tool.pid.tmp tool.pid && exec sleep 30"}),
                );
            }
            if !in_tool && agent == Agent::Coordinator && !held.swap(true, Ordering::SeqCst) {
                return simple_reply(req).gate_before(&gate);
            }
            simple_reply(req)
        })
    };
    let (mut child, stderr) = project.spawn_watched(&server, &[REQUEST]);
    if in_tool {
        wait_for_file(&pid_file, &mut child, &stderr);
    } else {
        assert!(gate.wait_reached(PATIENCE), "{}", stderr.all());
    }
    let work_id = project
        .lineage_step("干活")
        .expect("lineage has 干活 at once");
    // Found while the command runs (from outside, see `read_pid`).
    let tool_group = in_tool.then(|| read_pid(&pid_file));
    signal(&child, sig);
    let status = wait_exit(&mut child, PATIENCE);
    gate.open();
    assert_eq!(
        status.signal(),
        Some(sig),
        "dies by the signal: {status:?}\n{}",
        stderr.all()
    );
    assert_eq!(status.code(), None);

    let rows = project.rows("干活");
    assert_eq!(rows.len(), 1, "{:#?}", project.manifest());
    assert_eq!(rows[0]["error"], "killed-by-signal");
    assert_eq!(rows[0]["ok"], false);
    assert_eq!(rows[0]["session_id"], work_id.as_str());
    assert!(rows[0]["ended_at"].as_str().is_some_and(|t| !t.is_empty()));
    // The finished steps' rows are there too, untouched.
    for step in ["确认需求", "设定目标"] {
        let rows = project.rows(step);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["ok"], true);
    }
    if let Some(group) = tool_group {
        assert!(gone(group), "the tool's command outlived flower");
        kill_group(group);
    }

    // The next run continues the same session and finishes.
    let before = server.request_count();
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_valid(&requests);
    let original = first_coordinator(&requests).unwrap();
    let resumed = first_coordinator(&requests[before..]).expect("干活 ran again");
    assert_eq!(first_text(resumed), first_text(original));
    assert!(
        last_texts(resumed).last().is_some_and(|t| t == WORK_RESUME),
        "{:#?}",
        resumed.messages().last()
    );
    assert_eq!(
        project.lineage_step("干活").as_deref(),
        Some(work_id.as_str())
    );
    let rows = project.rows("干活");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["ok"], true);
    assert_eq!(rows[1]["resumed"], true);
    assert_eq!(rows[1]["session_id"], work_id.as_str());
    if !in_tool {
        assert_eq!(project.read("hello.txt"), "hello");
    }
}

/// Waits until nobody holds the run lock of `run_dir`. The kernel releases a killed
/// run's lock when the last copy of its descriptor closes: a command the run was
/// forking when it died holds one until it execs, which on a loaded machine can come
/// after the kill was reaped.
fn wait_lock_free(run_dir: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while let Probe::Held(holder) = probe_run(run_dir) {
        assert!(
            Instant::now() < deadline,
            "the run lock is still held: {holder:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn wait_for_file(path: &Path, child: &mut std::process::Child, stderr: &StderrWatch) {
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared: {}",
            path.display(),
            stderr.all()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "flower ended early: {}",
            stderr.all()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The group of the command that wrote `path` (its `exec sleep`), found from outside:
/// the `$$` it wrote is a PID namespace's own number.
fn read_pid(path: &Path) -> i32 {
    crate::support::command_group(path.parent().unwrap_or(Path::new("/")), "sleep")
}

/// Whether a process is running (a zombie, waiting to be reaped, is not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits (a little) for a killed process to be gone; true if it is.
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn kill_group(group: i32) {
    // kill(-1) would signal every process of the machine.
    assert!(group > 1, "not a command's process group: {group}");
    // SAFETY: SIGKILL to the process group of a command the test itself had run.
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

#[test]
fn sigterm_mid_step_writes_the_row_dies_by_it_and_resumes() {
    killed_mid_step_by(libc::SIGTERM, false);
}

#[test]
fn sighup_mid_step_writes_the_row_dies_by_it_and_resumes() {
    killed_mid_step_by(libc::SIGHUP, false);
}

#[test]
fn sigterm_while_a_tool_runs() {
    killed_mid_step_by(libc::SIGTERM, true);
}

// ---------------------------------------------------------------------------------
// The SIGKILL loop
// ---------------------------------------------------------------------------------

/// Where a run is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillAt {
    /// The reply to request `k` of the run is held before its status line.
    ReplyHeld(usize),
    /// The reply to request `k` is held after `n` of its events.
    MidStream(usize, usize),
    /// A sub-agent's Bash command is running.
    InTool,
    /// `ms` milliseconds after request `k` arrived: wherever the process is then.
    After(usize, u64),
}

/// What the scripted model does this run.
struct Plan {
    /// This run's number ([`RUN_HEADER`]).
    run: usize,
    /// The request of this run (0 for its first) whose reply is held, and how.
    hold: Option<(usize, Option<usize>)>,
    gate: Gate,
    slow_tool: bool,
    finish: bool,
    /// Requests seen so far of this run.
    seen: usize,
}

/// The header each run's requests carry (through `ANTHROPIC_CUSTOM_HEADERS`): which
/// run sent a request. A request that a killed run had written just before the kill
/// may be read by the server after the next run has begun; order alone would count it
/// as the next run's.
const RUN_HEADER: &str = "x-test-run";

/// The run that sent `req`.
fn run_of(req: &Recorded) -> Option<usize> {
    req.header(RUN_HEADER).and_then(|n| n.parse().ok())
}

/// The coordinator never finishes until told to: it cycles through a sub-agent, a
/// Read, two calls in one message, and a Write of its notes.
fn endless_reply(req: &Recorded, plan: &Plan) -> Reply {
    let turn = turn_of(req);
    match agent_of(req) {
        Agent::Coordinator if plan.finish => Reply::text("做完了。"),
        Agent::Coordinator => match turn % 4 {
            0 => Reply::tool_use(
                "Task",
                json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
            ),
            1 => Reply::text("先看一眼确认书。")
                .then_tool_use("Read", json!({"file_path": "notes/需求.md"})),
            2 => Reply::tool_use("Glob", json!({"pattern": "*"}))
                .then_tool_use("Grep", json!({"pattern": "hello"})),
            _ => Reply::tool_use(
                "Write",
                json!({"file_path": "notes/进度.md", "content": format!("第 {turn} 轮\n")}),
            ),
        },
        Agent::Worker => match turn {
            0 if plan.slow_tool => Reply::tool_use(
                "Bash",
                json!({"command": "echo $$ > tool.pid.tmp && mv tool.pid.tmp tool.pid && exec sleep 30"}),
            ),
            0 => Reply::tool_use("Bash", json!({"command": "echo hi"})),
            1 => Reply::tool_use(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello"}),
            ),
            _ => Reply::text("写好了 hello.txt。"),
        },
        // The notes are written until a Write of them has worked: a kill between the
        // reply that asks for it and the tool's run leaves an interrupted call, after
        // which a model writes again (a step whose notes never appear is redone on
        // every wake, and the kills would stop landing in 干活).
        Agent::Clarifier | Agent::GoalSetter => {
            let written = req.tool_results().iter().any(|r| r["is_error"] != true);
            if written {
                simple_reply(req)
            } else {
                let (file, content) = match agent_of(req) {
                    Agent::Clarifier => ("notes/需求.md", BRIEF),
                    _ => ("notes/目标.md", GOAL),
                };
                Reply::tool_use("Write", json!({"file_path": file, "content": content}))
            }
        }
        _ => simple_reply(req),
    }
}

/// Fifty runs of the pipeline, each SIGKILLed at a random point (mostly inside 干活's
/// tool turns); after each, the next run resumes the same 干活 session with a transcript
/// the API accepts, and nothing of the history that was sent before is lost. A last run
/// finishes the work.
#[test]
fn sigkill_at_random_moments_fifty_times_never_loses_the_session() {
    const RUNS: usize = 50;
    let seed = std::env::var("FLOWER_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("FLOWER_KILL_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);

    let project = Project::resilient();
    let pid_file = project.dir.join("tool.pid");
    let plan = Arc::new(Mutex::new(Plan {
        run: 0,
        hold: None,
        gate: Gate::new(),
        slow_tool: false,
        finish: false,
        seen: 0,
    }));
    let server = {
        let plan = plan.clone();
        FakeServer::with_handler(move |req, _| {
            let mut plan = plan.lock().unwrap();
            let reply = endless_reply(req, &plan);
            // A late request of a killed run is answered, never held.
            if run_of(req) != Some(plan.run) {
                return reply;
            }
            let index = plan.seen;
            plan.seen += 1;
            match plan.hold {
                Some((at, None)) if at == index => reply.gate_before(&plan.gate),
                Some((at, Some(events))) if at == index => {
                    let n = 1 + events % reply.render_events(req).len().max(1);
                    reply.gate_after(n, &plan.gate)
                }
                _ => reply,
            }
        })
    };
    let of_run = |run: usize| move |req: &&Recorded| run_of(req) == Some(run);

    let started = Instant::now();
    let mut work_id: Option<String> = None;
    // Every tool_use id the coordinator's history has ever carried.
    let mut history_ids: Vec<String> = Vec::new();
    let mut original_prompt: Option<String> = None;
    let mut kills: BTreeMap<&str, usize> = BTreeMap::new();
    let mut resumed_work = 0;

    for run in 0..=RUNS {
        let last = run == RUNS;
        let kill = if last {
            None
        } else {
            let k = rng.usize(0..5);
            Some(match rng.u8(0..4) {
                0 => KillAt::ReplyHeld(k),
                1 => KillAt::MidStream(k, rng.usize(0..64)),
                2 => KillAt::InTool,
                _ => KillAt::After(k, rng.u64(0..40)),
            })
        };
        {
            let mut plan = plan.lock().unwrap();
            plan.run = run;
            plan.seen = 0;
            plan.gate = Gate::new();
            plan.finish = last;
            plan.slow_tool = kill == Some(KillAt::InTool);
            plan.hold = match kill {
                Some(KillAt::ReplyHeld(k)) => Some((k, None)),
                Some(KillAt::MidStream(k, n)) => Some((k, Some(n))),
                _ => None,
            };
        }
        let _ = std::fs::remove_file(&pid_file);
        wait_lock_free(&project.dir.join("runs"));
        // A directory that has nothing to wake is asked for the task again.
        let state = project.state();
        let fresh = !state.waking && state.steps.is_empty();
        let args: &[&str] = if fresh { &[REQUEST] } else { &[] };
        let context = format!("run {run} (seed {seed}, kill {kill:?})");

        let mut command = project.command(&server, args);
        command.env("ANTHROPIC_CUSTOM_HEADERS", format!("{RUN_HEADER}: {run}"));
        let (mut child, stderr) = spawn_watched(command);
        match kill {
            None => {
                let status = wait_exit(&mut child, PATIENCE);
                assert!(stderr.wait_closed(PATIENCE));
                assert_eq!(status.code(), Some(0), "{context}: {}", stderr.all());
            }
            Some(at) => {
                let gate = plan.lock().unwrap().gate.clone();
                match at {
                    KillAt::ReplyHeld(_) | KillAt::MidStream(..) => {
                        assert!(gate.wait_reached(PATIENCE), "{context}: {}", stderr.all());
                    }
                    KillAt::InTool => wait_for_file(&pid_file, &mut child, &stderr),
                    KillAt::After(k, ms) => {
                        let arrived = |all: &[Recorded]| all.iter().filter(of_run(run)).count() > k;
                        assert!(
                            server.wait_for(arrived, PATIENCE),
                            "{context}: {}",
                            stderr.all()
                        );
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                }
                child.kill().unwrap();
                let status = child.wait().unwrap();
                gate.open();
                assert_eq!(
                    status.signal(),
                    Some(libc::SIGKILL),
                    "{context}: flower ended by itself: {}",
                    stderr.all()
                );
                if at == KillAt::InTool {
                    kill_group(read_pid(&pid_file));
                }
                *kills
                    .entry(match at {
                        KillAt::ReplyHeld(_) => "reply held",
                        KillAt::MidStream(..) => "mid-stream",
                        KillAt::InTool => "in a tool",
                        KillAt::After(..) => "random delay",
                    })
                    .or_default() += 1;
            }
        }

        // Every request of this run is one the API accepts.
        let requests = server.requests();
        let this_run: Vec<Recorded> = requests.iter().filter(of_run(run)).cloned().collect();
        for req in &this_run {
            if let Err(why) = check_messages(req) {
                panic!(
                    "{context}: request {} ({:?}) is invalid: {why}\n{}",
                    req.index,
                    agent_of(req),
                    serde_json::to_string_pretty(req.messages()).unwrap()
                );
            }
        }
        // The 干活 session, once it exists, continues: same id, same opening, all the
        // history that was ever sent, and the resume prompt.
        if let (Some(_), Some(resumed)) = (&work_id, first_coordinator(&this_run)) {
            resumed_work += 1;
            // A run can die after the 干活 session was stored but before its first
            // request went out; then this resume is the first time its opening is seen.
            let opening = original_prompt.get_or_insert_with(|| first_text(resumed));
            assert_eq!(
                &first_text(resumed),
                opening,
                "{context}: another conversation"
            );
            assert!(
                last_texts(resumed).last().is_some_and(|t| t == WORK_RESUME),
                "{context}: {:#?}",
                resumed.messages().last()
            );
            let ids = tool_use_ids(resumed);
            for id in &history_ids {
                assert!(
                    ids.contains(id),
                    "{context}: {id} was lost from the history"
                );
            }
        }
        // What the coordinator was sent by every run so far (a killed run's last
        // request may arrive late: the run after the next one checks it).
        for req in requests
            .iter()
            .filter(|r| run_of(r).is_some_and(|n| n <= run) && agent_of(r) == Agent::Coordinator)
        {
            original_prompt.get_or_insert_with(|| first_text(req));
            for id in tool_use_ids(req) {
                if !history_ids.contains(&id) {
                    history_ids.push(id);
                }
            }
        }
        let state = project.state();
        let now = state.steps.get("干活").cloned();
        match (&work_id, now) {
            (Some(was), Some(now)) => assert_eq!(was, &now, "{context}: 干活 changed session"),
            (Some(was), None) => panic!("{context}: 干活 {was} was forgotten: {state:#?}"),
            (None, now) => work_id = now,
        }
    }

    let elapsed = started.elapsed();
    let requests = server.request_count();
    eprintln!(
        "{RUNS} kills ({kills:?}), 干活 resumed {resumed_work} times, {requests} requests, {} tool calls in 干活's history, {elapsed:.1?}",
        history_ids.len()
    );
    assert!(work_id.is_some());
    assert!(resumed_work >= RUNS / 2, "most kills land inside 干活");
    let rows = project.rows("干活");
    assert!(rows.last().is_some_and(|r: &Value| r["ok"] == true));
}

/// `flower once` has no manifest row to write, but dies by SIGTERM all the same, and
/// does not leave its running command behind.
#[test]
fn sigterm_in_once_dies_by_it_and_stops_the_command() {
    let project = Project::resilient();
    let pid_file = project.dir.join("tool.pid");
    let server = FakeServer::with_handler(|_, _| {
        Reply::tool_use(
            "Bash",
            json!({"command": "echo $$ > tool.pid.tmp && mv tool.pid.tmp tool.pid && exec sleep 30"}),
        )
    });
    let (mut child, stderr) = project.spawn_watched(&server, &["once", "睡一会"]);
    wait_for_file(&pid_file, &mut child, &stderr);
    let group = read_pid(&pid_file);
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, PATIENCE);
    let stopped = gone(group);
    kill_group(group);
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "{status:?}: {}",
        stderr.all()
    );
    assert!(stopped, "the command outlived flower");
    assert!(!project.dir.join("runs/manifest.json").exists());
}
