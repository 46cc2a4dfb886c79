//! Continuation of the `flower` pipeline across real processes that die hard: SIGKILL
//! right after a model reply, `flower state` as a strictly read-only probe (also over
//! the `-wal`/`-shm` a killed writer leaves), and several `flower` processes at once in
//! one directory.
//!
//! The fake model plays every agent, routed by the system prompt; each agent's reply
//! depends only on how many turns its session already has, so a resumed session simply
//! goes on where it stopped.

use crate::support;
use crate::support::snapshot::{assert_same, snapshot};

use crate::support::Flower;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::pipeline::{
    Agent, BRIEF, GOAL, Project, agent_of, plain, simple_reply, text, turn_of,
};
use support::{FakeServer, Gate, Recorded, Reply};

/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Each agent's script, by turn: [`simple_reply`]'s, but the goal setter reads the
/// brief first, so that a kill after its first reply leaves 目标.md unwritten (the step
/// is not frozen, it resumes).
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

impl Project {
    /// `flower state [--json]`, which needs no server at all.
    fn state_command(&self, json: bool) -> Command {
        let mut cmd = Flower::bin().command();
        cmd.current_dir(&self.dir)
            .arg("state")
            .env("HOME", &self.home)
            .stdin(Stdio::null());
        if json {
            cmd.arg("--json");
        }
        cmd
    }

    /// `flower state [--json]` without an API key, run to the end.
    fn state_output(&self, json: bool) -> Output {
        self.state_command(json)
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .expect("run flower state")
    }

    fn all_rows(&self) -> Vec<Value> {
        match self.json("runs/manifest.json") {
            Value::Array(rows) => rows,
            other => panic!("manifest.json is not an array: {other}"),
        }
    }
}

/// `flower state --json`, checked to write nothing, parsed.
fn probe(project: &Project) -> Value {
    let before = snapshot(&project.dir);
    let out = project.state_output(true);
    assert_same(&before, &snapshot(&project.dir), "flower state --json");
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let state: Value = serde_json::from_slice(&out.stdout).expect("state is JSON");
    let keys: BTreeSet<&str> = support::object_keys(&state).into_iter().collect();
    assert_eq!(
        keys,
        BTreeSet::from(["waking", "brief", "goal", "checks", "woke", "steps"]),
        "exactly the spec's fields"
    );
    // The human form reads the same and writes nothing either.
    let before = snapshot(&project.dir);
    let human = project.state_output(false);
    assert_same(&before, &snapshot(&project.dir), "flower state");
    assert!(human.status.success());
    let human = text(&human.stdout);
    assert!(
        human.contains(&format!("已唤醒:{} 次", state["woke"])),
        "{human}"
    );
    state
}

/// What a run in `kill_after_goal_setters_first_reply` left.
struct Killed {
    project: Project,
    server: FakeServer,
    /// The goal setter's request that was held when the process died.
    held: Recorded,
}

/// Runs `flower "写个 hello 脚本"` until 设定目标's first reply (a Read of the brief) was
/// handled and the next request is on its way, then SIGKILLs it. 确认需求 is done by
/// then (its manifest row written); 设定目标 is in the middle of its session.
fn kill_after_goal_setters_first_reply() -> Killed {
    let project = Project::new();
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
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let held = server
        .requests()
        .into_iter()
        .rfind(|r| agent_of(r) == Agent::GoalSetter)
        .unwrap();
    Killed {
        project,
        server,
        held,
    }
}

#[test]
fn killed_after_a_reply_the_next_run_resumes_that_session_and_keeps_the_rows() {
    let Killed {
        project,
        server,
        held,
    } = kill_after_goal_setters_first_reply();

    // What the killed process left: lineage with both steps, 确认需求's row only.
    let lineage = project.json("runs/lineage.json");
    assert_eq!(lineage["woke"], 1);
    let clarify_id = lineage["steps"]["确认需求"].as_str().unwrap().to_string();
    let goal_id = lineage["steps"]["设定目标"]
        .as_str()
        .expect("设定目标's session was on disk")
        .to_string();
    let rows = project.all_rows();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let first_row = rows[0].clone();
    assert_eq!(first_row["step"], "确认需求");
    assert_eq!(first_row["ok"], true);
    assert_eq!(first_row["session_id"], clarify_id.as_str());
    let first_run = first_row["run"].as_str().unwrap().to_string();
    assert!(!project.dir.join("notes/目标.md").exists());

    // Wake, saying nothing.
    let before = server.request_count();
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("== 设定目标 ") && l.ends_with("2/3  <- 接上次 · 第 2 次唤醒")),
        "{stdout}"
    );

    // The very next request is the goal setter's, in the same session: everything the
    // killed request carried (its prompt, the Read call and its result) is there.
    let requests = server.requests();
    let resumed = &requests[before];
    assert_eq!(agent_of(resumed), Agent::GoalSetter, "确认需求 is frozen");
    assert_eq!(
        plain(&resumed.messages()[..2]),
        plain(&held.messages()[..2]),
        "the earlier history"
    );
    let last = resumed.messages().last().unwrap().to_string();
    assert!(
        last.contains("tool_result") && last.contains("## 验收"),
        "the Read result survived the kill: {last}"
    );
    assert_eq!(project.read("notes/目标.md"), GOAL);

    let lineage = project.json("runs/lineage.json");
    assert_eq!(lineage["woke"], 2);
    assert_eq!(lineage["steps"]["设定目标"], goal_id.as_str());
    assert_eq!(lineage["steps"]["确认需求"], clarify_id.as_str());

    // The killed process's row is still there, untouched; this process added its own.
    let rows = project.all_rows();
    assert_eq!(rows[0], first_row);
    let steps: Vec<&str> = rows.iter().map(|r| r["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["确认需求", "设定目标", "干活", "干活·判定#1"]);
    let second_run = rows[1]["run"].as_str().unwrap();
    assert_ne!(second_run, first_run);
    assert!(rows[1..].iter().all(|r| r["run"] == second_run));
    assert_eq!(rows[1]["session_id"], goal_id.as_str());
    assert_eq!(rows[1]["resumed"], true);
}

#[test]
fn state_is_read_only_and_reports_the_spec_fields() {
    // A fresh directory: nothing there, nothing created.
    let project = Project::new();
    let state = probe(&project);
    assert_eq!(
        state,
        json!({"waking": false, "brief": null, "goal": null, "checks": 0, "woke": 0, "steps": {}})
    );
    assert!(!project.dir.join("runs").exists());

    // After a writer was SIGKILLed: its WAL and shared-memory index are still there,
    // holding commits the probe must see without touching either file.
    let Killed {
        project, server, ..
    } = kill_after_goal_setters_first_reply();
    let runs = project.dir.join("runs");
    let wal = std::fs::metadata(runs.join("sessions.db-wal")).expect("the killed writer's WAL");
    assert!(wal.len() > 0);
    assert!(runs.join("sessions.db-shm").exists());
    let lineage = project.json("runs/lineage.json");
    for _ in 0..3 {
        let state = probe(&project);
        assert_eq!(
            state,
            json!({
                "waking": true,
                "brief": BRIEF,
                "goal": null,
                "checks": 0,
                "woke": 1,
                "steps": lineage["steps"],
            })
        );
        assert_eq!(state["steps"].as_object().unwrap().len(), 2);
    }

    // After a complete wake.
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let lineage = project.json("runs/lineage.json");
    let state = probe(&project);
    assert_eq!(
        state,
        json!({
            "waking": true,
            "brief": BRIEF,
            "goal": GOAL,
            "checks": 2,
            "woke": 2,
            "steps": lineage["steps"],
        })
    );
    assert_eq!(
        state["steps"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["干活", "确认需求", "设定目标"]
    );
}

/// 同一个目录并行跑多个 flower 是安全的: three `flower --wait` processes at once in one
/// directory and run dir. One holds the run directory (it is held at its first request
/// until the other two say that they wait); the others wait their turn and each wakes
/// what the one before left. Afterwards manifest.json holds every process's rows, their
/// runs never overlap, and sessions.db holds every session and is sound. (Without
/// `--wait` the others are refused: `run_lock::two_flowers_started_together_…`.)
#[test]
fn several_flowers_at_once_in_one_directory() {
    const PROCESSES: usize = 3;
    let project = Project::new();
    let gate = Gate::new();
    let holding = gate.clone();
    let server = FakeServer::with_handler(move |req, _| {
        let first = reply(req);
        if agent_of(req) == Agent::Clarifier && turn_of(req) == 0 {
            return first.gate_before(&holding);
        }
        first
    });
    let (said, lines) = std::sync::mpsc::channel();
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            let mut child = project
                .command(&server, &["--wait", "写个 hello 脚本"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn flower");
            let stderr = child.stderr.take().unwrap();
            let said = said.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                let lines: Vec<String> = std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                    .inspect(|line| {
                        let _ = said.send(line.clone());
                    })
                    .collect();
                lines.join("\n")
            });
            child
        })
        .collect();
    assert!(gate.wait_reached(TIMEOUT), "nobody reached a first request");
    let mut waiting = 0;
    while waiting < PROCESSES - 1 {
        let line = lines
            .recv_timeout(TIMEOUT)
            .expect("the others say that they wait");
        if line.contains("等它结束") {
            waiting += 1;
        }
    }
    assert_eq!(gate.reached(), 1, "one process at a time");
    gate.open();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "stdout: {}", text(&out.stdout),);
    }

    // Every process's rows, each under its own run id, none lost.
    let rows = project.all_rows();
    let mut by_run: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut spans: BTreeMap<String, (String, String)> = BTreeMap::new();
    for row in &rows {
        let run = row["run"].as_str().unwrap().to_string();
        by_run
            .entry(run.clone())
            .or_default()
            .push(row["step"].as_str().unwrap());
        let (started, ended) = (
            row["started_at"].as_str().unwrap().to_string(),
            row["ended_at"].as_str().unwrap().to_string(),
        );
        let span = spans.entry(run).or_insert((started.clone(), ended.clone()));
        span.0 = span.0.clone().min(started);
        span.1 = span.1.clone().max(ended);
        assert_eq!(row["ok"], true, "{row}");
    }
    assert_eq!(by_run.len(), PROCESSES, "{rows:#?}");
    // The first run clarifies; each later one wakes it (its words re-derive the goal).
    let firsts: Vec<&Vec<&str>> = by_run
        .values()
        .filter(|steps| steps.contains(&"确认需求"))
        .collect();
    assert_eq!(firsts.len(), 1, "{by_run:?}");
    assert_eq!(
        firsts[0].as_slice(),
        ["确认需求", "设定目标", "干活", "干活·判定#1"]
    );
    for (run, steps) in &by_run {
        assert!(
            steps.as_slice() == ["确认需求", "设定目标", "干活", "干活·判定#1"]
                || steps.as_slice() == ["设定目标", "干活", "干活·判定#1"],
            "{run}: {steps:?}"
        );
    }
    // One after the other: no run began before the one before it had ended.
    let mut spans: Vec<(String, String)> = spans.into_values().collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "runs overlap: {spans:?}");
    }
    assert_eq!(project.json("runs/lineage.json")["woke"], PROCESSES);
    let runs = project.dir.join("runs");
    let leftovers: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp") || n.contains("corrupt"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // sessions.db: every session of every row is listed by `flower store sessions`.
    let key = flower::stores::project_key(&project.dir);
    let out = Flower::bin()
        .command()
        .current_dir(&project.dir)
        .args(["store", "sessions", &key])
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: BTreeSet<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    let used: BTreeSet<&str> = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert!(used.is_subset(&listed), "used {used:?}, listed {listed:?}");
    let judges = rows.iter().filter(|r| r["step"] == "干活·判定#1").count();
    assert_eq!(judges, PROCESSES);
    // And the file is sound.
    let db = rusqlite::Connection::open_with_flags(
        runs.join("sessions.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// A reader that went away (`flower state | head -0`) is not a crash: no panic, exit 0,
/// whether the pipe closed before the first byte or not.
#[test]
fn state_into_a_closed_pipe_is_not_a_crash() {
    let project = Project::new();
    std::fs::create_dir(project.dir.join("notes")).unwrap();
    std::fs::write(project.dir.join("notes/需求.md"), BRIEF).unwrap();
    for json in [true, false] {
        let mut fds = [0; 2];
        // SAFETY: pipe() fills two fresh descriptors; each is owned by exactly one File.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (read, write) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        drop(read); // every write into the pipe now fails with EPIPE
        let out = project
            .state_command(json)
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "json={json}: stderr: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("panicked"),
            "{}",
            text(&out.stderr)
        );
    }
}
