//! One run, one process: the run lock (`runs/run.lock`) and the session locks
//! (`runs/locks/<id>.lock`), through the real binary and the library.
//!
//! A running `flower` is held mid-step at a [`Gate`] of the fake server, so that it
//! provably holds its locks while the other process starts; every wait is on an event
//! (a gate reached, a line on stderr, a process exit), never on a sleep.

use crate::support;
use crate::support::snapshot::{Snapshot, snapshot_all};

use flower::continuity::lock::{LOCKS_DIR, RunLocking};
use flower::continuity::resilience::Resilience;
use flower::continuity::runtime::{Held, RuntimeError, RuntimeOptions};
use flower::model::anthropic::AnthropicClient;
use flower::{AgentSpec, Runtime};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;
use support::pipeline::{Agent, Project, agent_of, agent_or_once, simple_reply, text};
use support::{FakeServer, Gate, Reply};

/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The documented exit status of a refused `flower`.
const EXIT_LOCKED: i32 = 3;

/// A server playing the whole pipeline ([`simple_reply`]) that holds `agent`'s first
/// request at `gate`.
fn held_at(agent: Agent, gate: &Gate) -> FakeServer {
    let gate = gate.clone();
    let held = AtomicUsize::new(0);
    FakeServer::with_handler(move |req, _| {
        if agent_or_once(req) == agent && held.fetch_add(1, Ordering::SeqCst) == 0 {
            return simple_reply(req).gate_before(&gate);
        }
        simple_reply(req)
    })
}

/// `runs/` and `notes/` of the project, byte for byte.
fn written(project: &Project) -> Snapshot {
    snapshot_all(&[&project.dir.join("runs"), &project.dir.join("notes")])
}

/// A child whose stderr lines arrive on a channel as they are written.
struct Watched {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watched {
    fn spawn(project: &Project, server: &FakeServer, args: &[&str]) -> Watched {
        let mut child = project
            .command(server, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flower");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watched {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Blocks until a stderr line contains `needle`; false when stderr closed first.
    fn wait_line(&mut self, needle: &str) -> bool {
        while let Ok(line) = self.lines.recv_timeout(TIMEOUT) {
            let found = line.contains(needle);
            self.seen.push(line);
            if found {
                return true;
            }
        }
        false
    }

    /// Waits for the exit; the output with every stderr line.
    fn finish(mut self) -> (Output, String) {
        let out = self.child.wait_with_output().unwrap();
        self.seen.extend(self.lines.iter());
        (out, self.seen.join("\n"))
    }
}

/// The refusal, one line naming the holder, how to wait and how to stop it.
fn assert_refused(out: &Output, holder: u32) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_LOCKED), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(&format!("另一个 flower 正在这里运行(pid {holder},"))
            && stderr.contains(" 起)")
            && stderr.contains("flower --wait")
            && stderr.contains(&format!("kill {holder}")),
        "{stderr}"
    );
    assert!(
        text(&out.stdout).is_empty(),
        "no banner: {}",
        text(&out.stdout)
    );
}

/// Two `flower` started together: exactly one runs (its requests are the only ones),
/// the other exits at once with status 3. `flower state` meanwhile reports the run and
/// its process without waiting for the lock, and writes nothing.
#[test]
fn two_flowers_started_together_exactly_one_runs() {
    let project = Project::new();
    let gate = Gate::new();
    let server = held_at(Agent::Clarifier, &gate);
    let (done, finished) = mpsc::channel();
    let pids: Vec<u32> = (0..2)
        .map(|i| {
            let child = project
                .command(&server, &["写个 hello 脚本"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            let done = done.clone();
            std::thread::spawn(move || done.send((i, child.wait_with_output().unwrap())));
            pid
        })
        .collect();
    // The winner cannot end before the gate opens: whoever ends first lost.
    let (loser, out) = finished.recv_timeout(TIMEOUT).expect("one process ends");
    let winner = 1 - loser;
    assert_refused(&out, pids[winner]);
    assert!(gate.wait_reached(TIMEOUT), "the winner is mid-step");
    assert_eq!(server.request_count(), 1, "only the winner asked the model");

    // state during the run: answers while the lock is held, names the holder.
    let before = written(&project);
    let state = project
        .command(&server, &["state", "--json"])
        .output()
        .unwrap();
    assert!(state.status.success(), "{}", text(&state.stderr));
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(state["running"]["pid"], pids[winner]);
    assert!(state["running"]["since"].is_string(), "{state}");
    let human = project.command(&server, &["state"]).output().unwrap();
    assert!(human.status.success());
    let line = format!("正在运行:是(pid {},", pids[winner]);
    assert!(
        text(&human.stdout).contains(&line),
        "{}",
        text(&human.stdout)
    );
    assert_eq!(written(&project), before, "state writes nothing");
    assert!(!gate.is_open(), "state did not wait for the run");

    gate.open();
    let (_, out) = finished.recv_timeout(TIMEOUT).expect("the winner ends");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let runs: BTreeSet<String> = project
        .manifest()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(runs.len(), 1, "one process ran");
    assert_eq!(project.json("runs/lineage.json")["woke"], 1);

    // Once it is gone, state says so; the lock file is still there, unchanged by state.
    let human = project.command(&server, &["state"]).output().unwrap();
    assert!(text(&human.stdout).contains("正在运行:否"));
    let state: Value = serde_json::from_slice(
        &project
            .command(&server, &["state", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(state.get("running").is_none(), "{state}");
}

/// While a run is mid-step, another `flower` (a wake, a new request, `--new`) touches
/// nothing: runs/ and notes/ stay byte for byte, the model is never asked.
#[test]
fn a_refused_flower_writes_nothing() {
    let project = Project::new();
    let gate = Gate::new();
    let server = held_at(Agent::Coordinator, &gate);
    let mut holder = Watched::spawn(&project, &server, &["写个 hello 脚本"]);
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    let requests = server.request_count();
    let before = written(&project);
    for args in [&[][..], &["顺便加一行注释"], &["--new", "另一件事"]] {
        let out = project.run(&server, args);
        assert_refused(&out, holder.pid());
        assert_eq!(written(&project), before, "{args:?} wrote something");
        assert_eq!(server.request_count(), requests, "{args:?} asked the model");
    }
    gate.open();
    let (out, stderr) = {
        let _ = holder.wait_line("判定通过");
        holder.finish()
    };
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(project.json("runs/lineage.json")["woke"], 1);
}

/// SIGKILL the holder mid-step: the kernel drops its lock, the next `flower` starts at
/// once (no stale lock, no pid check) and continues the same 干活 session.
#[test]
fn after_sigkill_the_next_flower_starts_at_once_and_continues() {
    let project = Project::new();
    let gate = Gate::new();
    let server = held_at(Agent::Coordinator, &gate);
    let mut child = project.spawn(&server, &["写个 hello 脚本"]);
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    let dead = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    let work = project.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();
    // The file still names the dead process; that means nothing.
    assert!(project.read("runs/run.lock").contains(&dead.to_string()));
    let human = project.command(&server, &["state"]).output().unwrap();
    assert!(text(&human.stdout).contains("正在运行:否"));

    let before = server.request_count();
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let resumed = &server.requests()[before];
    assert_eq!(agent_of(resumed), Agent::Coordinator);
    assert_eq!(
        project.json("runs/lineage.json")["steps"]["干活"],
        work.as_str()
    );
    assert_eq!(project.json("runs/lineage.json")["woke"], 2);
}

/// `--wait` says that it waits, asks nothing while it does, and proceeds as soon as the
/// holder exits: a wake of what the holder left.
#[test]
fn wait_proceeds_as_soon_as_the_holder_exits() {
    let project = Project::new();
    let gate = Gate::new();
    let server = held_at(Agent::Clarifier, &gate);
    let holder = Watched::spawn(&project, &server, &["写个 hello 脚本"]);
    assert!(gate.wait_reached(TIMEOUT), "the holder is mid-step");
    let mut waiter = Watched::spawn(&project, &server, &["--wait", "顺便加一行注释"]);
    assert!(
        waiter.wait_line(&format!("另一个 flower 正在这里运行(pid {},", holder.pid())),
        "no waiting line: {:?}",
        waiter.seen
    );
    assert!(waiter.seen.last().unwrap().contains("等它结束"));
    assert_eq!(server.request_count(), 1, "the waiter asks nothing yet");
    assert_eq!(project.json("runs/lineage.json")["woke"], 1);

    gate.open();
    let (out, stderr) = holder.finish();
    assert_eq!(out.status.code(), Some(0), "holder: {stderr}");
    let (out, stderr) = waiter.finish();
    assert_eq!(out.status.code(), Some(0), "waiter: {stderr}");
    assert!(
        text(&out.stdout).starts_with("<- 在 ~/proj 接上上次"),
        "the waiter woke the run: {}",
        text(&out.stdout)
    );
    assert_eq!(project.json("runs/lineage.json")["woke"], 2);
    assert!(project.read("notes/需求.md").contains("顺便加一行注释"));
}

/// `flower once --resume` (or `--fork`) of a session a running pipeline holds is
/// refused with status 3 before anything is opened; once the pipeline is gone it works,
/// and no session lock file is left behind.
#[test]
fn once_resume_of_a_session_a_pipeline_holds_is_refused() {
    let project = Project::new();
    let gate = Gate::new();
    let server = held_at(Agent::Coordinator, &gate);
    let mut holder = Watched::spawn(&project, &server, &["写个 hello 脚本"]);
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    let steps = project.json("runs/lineage.json")["steps"].clone();
    let requests = server.request_count();
    let before = written(&project);
    for step in ["确认需求", "干活"] {
        let id = steps[step].as_str().unwrap();
        for fork in [false, true] {
            let mut args = vec!["once", "接着说", "--resume", id];
            if fork {
                args.push("--fork");
            }
            let out = project.run(&server, &args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(EXIT_LOCKED), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "另一个 flower 正在用会话 {id}(pid {},",
                    holder.pid()
                )),
                "{stderr}"
            );
            assert_eq!(written(&project), before, "{args:?} wrote something");
        }
    }
    assert_eq!(server.request_count(), requests);
    // A `once` of its own is not blocked by the pipeline.
    let out = project.run(&server, &["once", "你好"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));

    gate.open();
    let _ = holder.wait_line("判定通过");
    let (out, stderr) = holder.finish();
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let id = steps["干活"].as_str().unwrap();
    let out = project.run(&server, &["once", "接着说", "--resume", id]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let locks: Vec<_> = std::fs::read_dir(project.dir.join("runs").join(LOCKS_DIR))
        .unwrap()
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}

/// The other way round: while `flower once --resume` appends to the 干活 session, the
/// pipeline does not start (status 3, nothing written).
#[test]
fn a_pipeline_does_not_start_on_a_session_once_is_appending_to() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let id = project.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();
    let gate = Gate::new();
    {
        let gate = gate.clone();
        server.set_handler(move |req, _| simple_reply(req).gate_before(&gate));
    }
    let once = Watched::spawn(&project, &server, &["once", "接着说", "--resume", &id]);
    assert!(gate.wait_reached(TIMEOUT), "once is mid-turn");
    let before = written(&project);
    let requests = server.request_count();
    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_LOCKED), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "另一个 flower 正在用会话 {id}(pid {},",
            once.pid()
        )),
        "{stderr}"
    );
    assert_eq!(server.request_count(), requests);
    assert_eq!(project.json("runs/lineage.json")["woke"], 1);
    assert!(
        text(&out.stdout).is_empty(),
        "no banner: {}",
        text(&out.stdout)
    );
    let but_the_run_lock = |s: Snapshot| -> Snapshot {
        s.into_iter()
            .filter(|(p, _)| !p.ends_with("run.lock"))
            .collect()
    };
    assert_eq!(
        but_the_run_lock(written(&project)),
        but_the_run_lock(before),
        "only the run lock's own file was written (it held it for a moment)"
    );
    gate.open();
    let (out, stderr) = once.finish();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

fn runtime(dir: &Path, server: &FakeServer, run_lock: RunLocking) -> Result<Runtime, RuntimeError> {
    let client =
        AnthropicClient::new(&server.url(), support::FAKE_API_KEY, "claude-fake").expect("client");
    let options = RuntimeOptions {
        resilience: Resilience {
            max_attempts: 1,
            ..Resilience::default()
        },
        run_lock,
        ..RuntimeOptions::new(Arc::new(client))
    };
    Runtime::with_options(dir, dir.join("runs"), options)
}

/// A second runtime on the same run directory, in the same process (another open of the
/// lock file), gets a typed error naming this process; an unlocked one (`flower once`)
/// is not refused; once the first is dropped the directory is free.
#[tokio::test]
async fn a_second_runtime_on_one_run_directory_is_refused() {
    let dir = tempfile::TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("好"), Reply::text("又好")]);
    let first = runtime(dir.path(), &server, RunLocking::Take).unwrap();
    let since = chrono::Local::now();
    let pid = format!("pid {}", std::process::id());
    match runtime(dir.path(), &server, RunLocking::Take) {
        Err(error @ RuntimeError::Held(Held::RunDir { .. })) => {
            // What the user reads names who holds it.
            assert!(error.to_string().contains(&pid), "{error}");
            let RuntimeError::Held(Held::RunDir { path, holder }) = error else {
                unreachable!()
            };
            assert_eq!(
                path,
                dir.path().canonicalize().unwrap().join("runs/run.lock")
            );
            let holder = holder.expect("the holder is named");
            assert_eq!(holder.pid, std::process::id());
            assert!(holder.since <= since, "{holder:?}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a second runtime on a locked run directory"),
    }
    let unlocked = runtime(dir.path(), &server, RunLocking::Unlocked).unwrap();

    // The first runtime's session is locked while it lives: resuming it elsewhere fails.
    let spec = AgentSpec::new("a", "回答极简。");
    let ran = first
        .run_agent("a", &spec, "hi", flower::engine::SessionStart::New)
        .await;
    assert!(ran.result.ok, "{:?}", ran.result.error);
    let id = ran.result.session_id.clone().unwrap();
    match unlocked.claim_session(&id) {
        Err(error @ RuntimeError::Held(Held::Session { .. })) => {
            assert!(error.to_string().contains(&pid), "{error}");
        }
        other => panic!("the session is held: {other:?}"),
    }
    let refused = unlocked
        .run_agent(
            "a",
            &spec,
            "hi",
            flower::engine::SessionStart::Resume(id.clone()),
        )
        .await;
    assert!(!refused.result.ok);
    assert_eq!(server.request_count(), 1, "refused before any request");

    drop(first);
    let again = runtime(dir.path(), &server, RunLocking::Take).unwrap();
    let resumed = again
        .run_agent("a", &spec, "hi", flower::engine::SessionStart::Resume(id))
        .await;
    assert!(resumed.result.ok, "{:?}", resumed.result.error);
}
