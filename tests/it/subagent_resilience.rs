//! A sub-agent survives a blip (issue 29, item 1), through the real binary against the
//! fake Messages API: a 529, a cut stream, an outage and a SIGKILL at points of a
//! sub-agent's life. Each time the sub-agent's own session is resumed (it keeps
//! growing, with the resume prompt), and the coordinator sees one Task result: the
//! sub-agent's final report, never an interruption marker or a second Task.

use crate::faults_support;
use crate::support;

use faults_support::*;
use flower::continuity::resilience::RESUME_PROMPT;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use support::pipeline::without_cache_marks;
use support::{FakeServer, Gate, Recorded, Reply};

/// The worker's final report in [`simple_reply`].
const REPORT: &str = "写好了 hello.txt。";

fn of(requests: &[Recorded], agent: Agent) -> Vec<&Recorded> {
    requests.iter().filter(|r| agent_of(r) == agent).collect()
}

/// The one `Task` call the coordinator made, and the stored transcript of its sub-agent.
fn task_call(project: &Project, requests: &[Recorded]) -> (String, Vec<Value>) {
    let coordinator = of(requests, Agent::Coordinator);
    let tasks: Vec<String> = coordinator
        .iter()
        .flat_map(|r| {
            r.messages()
                .iter()
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|b| b["type"] == "tool_use" && b["name"] == "Task")
                .filter_map(|b| b["id"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        tasks.len(),
        1,
        "one Task call, never sent out again: {tasks:?}"
    );
    let work = project.lineage_step("干活").expect("干活 in lineage");
    let sub = format!("{work}/subagents/agent-{}", tasks[0]);
    (tasks[0].clone(), project.store_load(&sub, false))
}

/// The coordinator's requests answer its Task call once, with the sub-agent's report.
fn assert_one_result(requests: &[Recorded], task: &str) {
    let results: Vec<Value> = of(requests, Agent::Coordinator)
        .iter()
        .flat_map(|r| r.tool_results())
        .filter(|r| r["tool_use_id"] == task)
        .collect();
    assert!(!results.is_empty(), "the Task call was answered");
    for result in &results {
        assert_eq!(result["content"], REPORT, "{result:#}");
        assert_ne!(result["is_error"], true, "{result:#}");
    }
}

/// Every worker request belongs to one session: the same task as its first message.
fn assert_one_worker_session(requests: &[Recorded]) {
    let workers = of(requests, Agent::Worker);
    let first = without_cache_marks(&workers[0].messages()[0]);
    for w in &workers {
        let opening = without_cache_marks(&w.messages()[0]);
        assert_eq!(opening, first, "request {} starts over", w.index);
    }
}

/// A worker's second turn fails once with `fault`; the sub-agent retries by resuming
/// its own session, and the step goes on without the coordinator being retried.
fn sub_agent_fault(fault: Reply) {
    let project = Project::resilient();
    project.freeze_notes();
    let failed = Arc::new(AtomicBool::new(false));
    let fault = Arc::new(std::sync::Mutex::new(Some(fault)));
    let server = {
        let failed = failed.clone();
        FakeServer::with_handler(move |req, _| {
            if agent_of(req) == Agent::Worker
                && turn_of(req) == 1
                && !failed.swap(true, Ordering::SeqCst)
                && let Some(fault) = fault.lock().unwrap().take()
            {
                return fault;
            }
            simple_reply(req)
        })
    };
    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.contains("子代理第 2/6 次尝试"), "{stderr}");
    let requests = server.requests();
    assert_valid(&requests);

    // The sub-agent's retry resumes its session: the Write turn is kept, the resume
    // prompt is the newest message.
    let workers = of(&requests, Agent::Worker);
    assert_eq!(workers.len(), 3, "turn 0, the failed turn 1, its retry");
    assert_one_worker_session(&requests);
    let retry = workers[2];
    assert_eq!(tool_use_ids(retry), tool_use_ids(workers[1]));
    assert_eq!(
        last_texts(retry).last().map(String::as_str),
        Some(RESUME_PROMPT)
    );
    assert!(!retry.raw_body.contains("API Error"), "{}", retry.raw_body);

    // The coordinator was never retried: two requests, one result.
    let coordinator = of(&requests, Agent::Coordinator);
    assert_eq!(coordinator.len(), 2);
    let (task, stored) = task_call(&project, &requests);
    assert_one_result(&requests, &task);
    assert!(
        stored.iter().any(|e| e["isApiErrorMessage"] == true),
        "the failure is in the sub-agent's transcript"
    );
    assert!(
        stored
            .iter()
            .any(|e| e["message"]["content"] == RESUME_PROMPT)
    );

    // Counted in the manifest: one more attempt, the error named.
    let row = project.rows("干活").into_iter().next().unwrap();
    assert_eq!(row["ok"], true, "{row:#}");
    assert_eq!(row["attempts"], 2, "{row:#}");
    assert_eq!(
        row["resumed"], false,
        "the coordinator's session was not retried"
    );
    let errors = row["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{row:#}");
    assert!(
        errors[0]
            .as_str()
            .unwrap()
            .starts_with(&format!("sub-agent {task}: ")),
        "{row:#}"
    );
    assert_eq!(project.read("hello.txt"), "hello");
    // `flower log` counts the retry from the same row.
    let log = crate::figures::log_json(&project);
    assert_eq!(log["totals"]["retries"], 1, "{log:#}");
}

#[test]
fn a_529_in_a_sub_agent_resumes_the_sub_agent_not_the_coordinator() {
    sub_agent_fault(Reply::overloaded());
}

#[test]
fn a_cut_stream_in_a_sub_agent_resumes_the_sub_agent_not_the_coordinator() {
    sub_agent_fault(Reply::text("写好").cut_after(Reply::FIRST_DELTA + 1));
}

/// SIGKILL while the worker's turn `turn` is in flight, then a plain `flower`: the woken
/// coordinator's cut-short Task continues in the sub-agent's session.
fn killed_during_worker_turn(turn: usize) {
    killed_during_worker_turn_by(turn, libc::SIGKILL);
}

/// [`killed_during_worker_turn`] by `sig`.
fn killed_during_worker_turn_by(turn: usize, sig: i32) {
    let project = Project::resilient();
    project.freeze_notes();
    let gate = Gate::new();
    let killed = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, killed) = (gate.clone(), killed.clone());
        FakeServer::with_handler(move |req, _| {
            let reply = simple_reply(req);
            if !killed.load(Ordering::SeqCst)
                && agent_of(req) == Agent::Worker
                && turn_of(req) == turn
            {
                return reply.gate_before(&gate);
            }
            reply
        })
    };
    let (mut child, _stderr) = project.spawn_watched(&server, &[]);
    assert!(gate.wait_reached(PATIENCE), "the worker was never asked");
    killed.store(true, Ordering::SeqCst);
    signal(&child, sig);
    wait_exit(&mut child, PATIENCE);
    let before = server.requests().len();
    let held = server.requests()[before - 1].clone();
    gate.open();

    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let requests = server.requests();
    assert_valid(&requests[before..]);
    assert_one_worker_session(&requests);

    let workers_after: Vec<&Recorded> = of(&requests[before..], Agent::Worker);
    let next = workers_after.first().expect("the sub-agent went on");
    if turn == 0 {
        // Killed before any answer: the same request again, byte for byte.
        assert_eq!(
            without_cache_marks(&json!(next.messages())),
            without_cache_marks(&json!(held.messages()))
        );
    } else {
        assert_eq!(
            tool_use_ids(next),
            tool_use_ids(&held),
            "its Write turn is kept"
        );
        assert_eq!(
            last_texts(next).last().map(String::as_str),
            Some(RESUME_PROMPT)
        );
    }
    let (task, stored) = task_call(&project, &requests);
    assert_one_result(&requests, &task);
    let replies = stored.iter().filter(|e| e["type"] == "assistant").count();
    assert_eq!(
        replies, 2,
        "the Write turn and the report, in one transcript"
    );
    assert_eq!(project.read("hello.txt"), "hello");
}

#[test]
fn sigkill_before_a_sub_agents_first_reply_continues_its_session_on_wake() {
    killed_during_worker_turn(0);
}

#[test]
fn sigkill_after_a_sub_agents_write_continues_its_session_on_wake() {
    killed_during_worker_turn(1);
}

#[test]
fn sigterm_while_a_sub_agent_works_continues_its_session_on_wake() {
    // SIGTERM writes the row and dies; the wake continues the sub-agent as after a kill.
    killed_during_worker_turn_by(1, libc::SIGTERM);
}

/// Only a sub-agent that truly failed (its attempts spent) ends its Task call with an
/// error; the coordinator reads it and goes on, and is itself never retried for it.
#[test]
fn a_sub_agent_that_truly_fails_ends_its_task_with_an_error() {
    let project = Project::resilient();
    project.freeze_notes();
    let server = FakeServer::with_handler(|req, _| match agent_of(req) {
        Agent::Worker => Reply::overloaded(),
        _ => simple_reply(req),
    });
    let out = project
        .command(&server, &[])
        .env("FLOWER_MAX_ATTEMPTS", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = server.requests();
    assert_valid(&requests);
    assert_eq!(
        of(&requests, Agent::Worker).len(),
        2,
        "two tries, then it failed"
    );
    let coordinator = of(&requests, Agent::Coordinator);
    assert_eq!(coordinator.len(), 2, "the coordinator was not retried");
    let results = coordinator[1].tool_results();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("sub-agent failed: API Error: 529"),
        "{:#}",
        results[0]
    );
    let row = project.rows("干活").into_iter().next().unwrap();
    assert_eq!(row["attempts"], 2, "{row:#}");
    assert_eq!(row["ok"], true, "{row:#}");
}
