//! What a person says on a wake is never lost (issue #41.1; spec 接续.md, "唤醒时说的那句话,
//! 要落到三个地方"): a wake cut short anywhere between appending the utterance to
//! 需求.md and the first 干活 request (SIGKILL, SIGTERM, a reader that went away) leaves
//! it recorded, and the next plain `flower` re-derives 目标.md from it, works it and
//! judges it.
//!
//! Kill points are events: the n-th request of an agent held at a gate.

use crate::faults_support::{PATIENCE, signal, wait_exit};
use crate::support;

use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use support::pipeline::{Agent, GOAL, Project, REQUEST, agent_of, simple_reply, text};
use support::{FakeServer, Gate, Recorded, Reply};

/// How the line a wake with nothing to do prints begins.
const PASSED_ALREADY_START: &str = "== 上次判定已经通过";

const SAID: &str = "再加一个要求:hello.txt 末尾要有换行";

/// Where the wake is cut: the held request, as (agent, its n-th request in the wake).
const POINTS: [(Agent, usize); 3] = [
    // 设定目标 asked, nothing answered.
    (Agent::GoalSetter, 1),
    // 目标.md rewritten by the goal setter, its step not finished.
    (Agent::GoalSetter, 2),
    // 设定目标 done: the first 干活 request.
    (Agent::Coordinator, 1),
];

/// The pipeline of [`simple_reply`], except that the goal setter writes the checklist
/// whenever it is asked (not only in its first turn: a wake resumes its session).
fn reply(req: &Recorded) -> Reply {
    let answered_tool = req
        .messages()
        .last()
        .is_some_and(|m| m.to_string().contains("tool_result"));
    match agent_of(req) {
        Agent::GoalSetter if !answered_tool => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/目标.md", "content": format!("{GOAL}- [ ] 末尾有换行\n")}),
        ),
        _ => simple_reply(req),
    }
}

/// A server playing [`reply`] that holds the request at `point` once `armed` is set,
/// counting from then on.
fn held_at(point: (Agent, usize), gate: &Gate, armed: &Arc<AtomicBool>) -> FakeServer {
    let (gate, armed) = (gate.clone(), armed.clone());
    let seen = AtomicUsize::new(0);
    FakeServer::with_handler(move |req, _| {
        if armed.load(Ordering::SeqCst)
            && agent_of(req) == point.0
            && seen.fetch_add(1, Ordering::SeqCst) + 1 == point.1
        {
            return reply(req).gate_before(&gate);
        }
        reply(req)
    })
}

/// A finished run, then a wake saying [`SAID`] killed by `sig` while the request at
/// `point` is held; then the next plain `flower` must finish what was said.
fn wake_cut_at(point: (Agent, usize), sig: i32) {
    let project = Project::new();
    let gate = Gate::new();
    let holding = Arc::new(AtomicBool::new(false));
    let server = held_at(point, &gate, &holding);
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    holding.store(true, Ordering::SeqCst);
    let before = server.request_count();
    let output = || match sig {
        libc::SIGPIPE => Stdio::piped(),
        _ => Stdio::null(),
    };
    let mut child = project
        .command(&server, &[SAID])
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(PATIENCE), "{point:?} was never asked");
    assert!(project.read("notes/需求.md").contains(SAID));
    // The reader goes away (`flower "…" 2>&1 | head -1`): the next line written kills
    // the run by SIGPIPE, once the held reply lets it go on.
    drop((child.stdout.take(), child.stderr.take()));
    // A signal is sent while the reply is held, so the process dies right there.
    if sig != libc::SIGPIPE {
        signal(&child, sig);
    }
    let status = match sig {
        libc::SIGPIPE => {
            gate.open();
            wait_exit(&mut child, PATIENCE)
        }
        _ => {
            let status = wait_exit(&mut child, PATIENCE);
            gate.open();
            status
        }
    };
    assert_eq!(status.signal(), Some(sig), "{point:?}: {status:?}");
    let cut = server.request_count();
    assert!(
        server.requests()[before..]
            .iter()
            .all(|r| agent_of(r) != Agent::Judge),
        "{point:?}: the cut wake was not meant to reach the judge"
    );

    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{point:?} {sig}: {stderr}");
    assert!(
        !stderr.contains(PASSED_ALREADY_START),
        "{point:?} {sig}: {stderr}"
    );
    let next: Vec<Recorded> = server.requests()[cut..].to_vec();
    let agents: Vec<Agent> = next.iter().map(agent_of).collect();
    // Derives, unless the cut wake had derived already (then the checklist holds it).
    if point.0 == Agent::GoalSetter {
        let goal = next
            .iter()
            .find(|r| agent_of(r) == Agent::GoalSetter)
            .unwrap_or_else(|| panic!("{point:?} {sig}: no 设定目标: {agents:?}"));
        assert!(
            goal.last_user_text().contains(SAID),
            "{point:?} {sig}: 设定目标 without the new line: {}",
            goal.last_user_text()
        );
    } else {
        assert!(!agents.contains(&Agent::GoalSetter), "{agents:?}");
    }
    // Works it: the coordinator is told, and then the judge judges.
    let work = next
        .iter()
        .position(|r| agent_of(r) == Agent::Coordinator)
        .unwrap_or_else(|| panic!("{point:?} {sig}: no 干活: {agents:?}"));
    let told = next[work]
        .messages()
        .iter()
        .any(|m| m["role"] == "user" && m.to_string().contains(SAID));
    assert!(told, "{point:?} {sig}: 干活 never heard it");
    assert!(
        agents[work..].contains(&Agent::Judge),
        "{point:?} {sig}: {agents:?}"
    );
    assert_eq!(project.read("notes/需求.md").matches(SAID).count(), 1);

    // Finished with: a plain wake now has nothing to do.
    let after = server.request_count();
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains(PASSED_ALREADY_START));
    assert_eq!(server.request_count(), after);
}

#[test]
fn a_wake_killed_by_sigkill_before_work_is_finished_by_the_next_plain_run() {
    for point in POINTS {
        wake_cut_at(point, libc::SIGKILL);
    }
}

#[test]
fn a_wake_killed_by_sigterm_before_work_is_finished_by_the_next_plain_run() {
    for point in POINTS {
        wake_cut_at(point, libc::SIGTERM);
    }
}

#[test]
fn a_wake_whose_reader_went_away_before_work_is_finished_by_the_next_plain_run() {
    for point in POINTS {
        wake_cut_at(point, libc::SIGPIPE);
    }
}

/// `--new` archives what was pending with the rest of the task: the new task never
/// hears the old utterance.
#[test]
fn new_archives_what_was_pending() {
    let project = Project::new();
    let gate = Gate::new();
    let holding = Arc::new(AtomicBool::new(false));
    let server = held_at(POINTS[0], &gate, &holding);
    assert_eq!(project.run(&server, &[REQUEST]).status.code(), Some(0));
    holding.store(true, Ordering::SeqCst);
    let mut child = project.spawn(&server, &[SAID]);
    assert!(gate.wait_reached(PATIENCE));
    signal(&child, libc::SIGKILL);
    wait_exit(&mut child, PATIENCE);
    gate.open();
    let cut = server.request_count();
    let out = project.run(&server, &["--new", "另一件事"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        server.requests()[cut..]
            .iter()
            .all(|r| !r.messages().iter().any(|m| m.to_string().contains(SAID))),
        "the new task heard the archived utterance"
    );
    assert!(!project.dir.join("runs/said.json").exists());
}

/// The library's side: the record is on disk before the brief has the line, a record
/// whose line never reached the brief gets it (once), and only `clear` ends it.
#[test]
fn said_is_recorded_before_the_brief_and_kept_until_cleared() {
    use flower::continuity::notes::{self, Said};
    use flower::run_dir::RunDir;
    let dir = tempfile::TempDir::new().unwrap();
    let workspace = dir.path();
    let runs = RunDir::new(workspace.join("runs"));
    std::fs::create_dir_all(workspace.join("notes")).unwrap();
    std::fs::write(notes::brief_path(workspace), support::pipeline::BRIEF).unwrap();
    assert_eq!(Said::read(&runs), None);

    let said = Said::record(&runs, workspace, SAID).unwrap();
    assert!(!said.derived);
    assert_eq!(said.prompt().as_deref(), Some(SAID));
    assert_eq!(Said::read(&runs), Some(said.clone()));
    let brief = std::fs::read_to_string(notes::brief_path(workspace)).unwrap();
    assert!(
        brief.contains("## 唤醒时追加") && brief.contains(SAID),
        "{brief}"
    );

    // Killed between the record and the append: the next run appends it, once.
    std::fs::write(notes::brief_path(workspace), support::pipeline::BRIEF).unwrap();
    said.append_missing(workspace).unwrap();
    said.append_missing(workspace).unwrap();
    let brief = std::fs::read_to_string(notes::brief_path(workspace)).unwrap();
    assert_eq!(brief.matches(SAID).count(), 1, "{brief}");

    Said::mark_derived(&runs).unwrap();
    assert!(Said::read(&runs).unwrap().derived);
    // Said again: both are pending, and the checklist must be derived again.
    let again = Said::record(&runs, workspace, "再加一条").unwrap();
    assert!(!again.derived);
    assert_eq!(again.utterances.len(), 2);

    // A record that does not parse still means something is pending.
    std::fs::write(runs.said(), "{not json").unwrap();
    assert_eq!(Said::read(&runs), Some(Said::default()));

    Said::clear(&runs).unwrap();
    assert_eq!(Said::read(&runs), None);
    Said::clear(&runs).unwrap();
}
