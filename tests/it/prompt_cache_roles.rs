//! The prompt cache across the pipeline's roles (#46 item 1): every agent is offered
//! the same tool list and the project memory comes first, in a system block of its own,
//! so a role's first request reads tools and memory from the cache instead of writing
//! them again; the roles' boundaries hold (the judge's rules still refuse writes).

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use support::pipeline::{Agent, Project, agent_of, simple_reply, text, turn_of};
use support::{FakeServer, Recorded, Reply};

/// Coordinator turns before it hands the work to a sub-agent.
const COORDINATOR_READS: usize = 28;

/// The pipeline of `simple_reply`, with a coordinator that reads for 28 turns first
/// and a judge that reads the checklist before passing.
fn reply(req: &Recorded) -> Reply {
    match (agent_of(req), turn_of(req)) {
        (Agent::Coordinator, t) if t < COORDINATOR_READS => {
            Reply::tool_use("Read", json!({"file_path": "notes/目标.md"}))
        }
        (Agent::Coordinator, t) if t == COORDINATOR_READS => Reply::tool_use(
            "Task",
            json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
        ),
        (Agent::Coordinator, _) => Reply::text("做完了。"),
        (Agent::Judge, 0) => Reply::tool_use("Read", json!({"file_path": "hello.txt"})),
        _ => simple_reply(req),
    }
}

struct Shares {
    read: u64,
    prompt: u64,
    /// Tokens written, by role.
    written: BTreeMap<String, u64>,
    requests: Vec<Recorded>,
}

fn run_pipeline(memory: Option<&str>) -> Shares {
    let project = Project::new();
    if let Some(memory) = memory {
        std::fs::write(project.dir.join("CLAUDE.md"), memory).unwrap();
    }
    let server = FakeServer::with_handler(|req, _| reply(req));
    server.simulate_cache();
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let mut shares = Shares {
        read: 0,
        prompt: 0,
        written: BTreeMap::new(),
        requests: requests.clone(),
    };
    for req in &requests {
        let cache = req.cache.expect("simulated");
        shares.read += cache.read;
        shares.prompt += cache.prompt();
        *shares
            .written
            .entry(format!("{:?}", agent_of(req)))
            .or_default() += cache.written;
    }
    shares
}

/// A memory file of about 32 KB.
fn big_memory() -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 32 * 1024 {
        text.push_str(&format!(
            "- 约定 {i}:函数不超过 40 行,名字要说清楚它做什么。\n"
        ));
        i += 1;
    }
    text
}

#[test]
fn every_role_reads_the_tools_and_the_memory_that_the_first_role_wrote() {
    let memory = big_memory();
    let shares = run_pipeline(Some(&memory));
    let requests = &shares.requests;
    let first = &requests[0];
    // One tool list, one shared block, for every role; each role's first request after
    // the run's first reads at least the tools and the memory.
    let shared_bytes = first.body["tools"].to_string().len() + memory.len();
    // The coordinator is the first of the agents allowed the web tools (run by the
    // API, so offered only to those allowed them): it reads the tools before them and
    // writes the memory once more, and the worker reads it.
    let client_tools: usize = first.body["tools"].to_string().len();
    let coordinator = requests
        .iter()
        .find(|r| agent_of(r) == Agent::Coordinator)
        .unwrap();
    let names = |r: &Recorded| -> Vec<String> {
        r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].to_string())
            .collect()
    };
    assert!(
        coordinator.cache.unwrap().read * 4 >= client_tools as u64 * 99 / 100,
        "{:?} {client_tools} {:?} {:?}",
        coordinator.cache,
        names(first),
        names(coordinator)
    );
    for agent in [Agent::GoalSetter, Agent::Worker, Agent::Judge] {
        let req = requests
            .iter()
            .find(|r| agent_of(r) == agent && turn_of(r) == 0)
            .unwrap_or_else(|| panic!("{agent:?} made no request"));
        assert_eq!(req.body["system"][0], first.body["system"][0], "{agent:?}");
        let read = req.cache.unwrap().read;
        assert!(
            read * 4 >= shared_bytes as u64 * 99 / 100,
            "{agent:?}'s first request read {read} tokens of the {} shared",
            shared_bytes / 4
        );
    }
    let share = shares.read as f64 / shares.prompt as f64;
    eprintln!(
        "32 KB CLAUDE.md: {} requests, cache reads {:.1} % of {} prompt tokens; written by role: {:?}",
        requests.len(),
        share * 100.0,
        shares.prompt,
        shares.written
    );
    // Over this short run (38 requests) the two writes of the memory (the agents with
    // web tools and those without) weigh more than over the longer pipeline,
    // whose goal is 96 %.
    assert!(share >= 0.95, "read share {share}");
}

#[test]
fn without_memory_the_roles_share_the_tools() {
    let shares = run_pipeline(None);
    let share = shares.read as f64 / shares.prompt as f64;
    eprintln!(
        "no CLAUDE.md: {} requests, cache reads {:.1} % of {} prompt tokens; written by role: {:?}",
        shares.requests.len(),
        share * 100.0,
        shares.prompt,
        shares.written
    );
    assert!(share >= 0.94, "read share {share}");
}

/// The judge is offered Write like every role, and its rules refuse it: the boundary is
/// the permission layer's, not the tool list's.
#[test]
fn the_judge_is_offered_write_and_refused_it() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| match (agent_of(req), turn_of(req)) {
        (Agent::Judge, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "hello.txt", "content": "changed"}),
        ),
        _ => simple_reply(req),
    });
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(project.read("hello.txt"), "hello");
    let requests = server.requests();
    let judge = requests
        .iter()
        .find(|r| agent_of(r) == Agent::Judge && turn_of(r) == 1)
        .expect("the judge's second request");
    let names: Vec<&str> = judge.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"Write"), "{names:?}");
    let result = judge.messages().last().unwrap()["content"][0].clone();
    assert_eq!(result["is_error"], Value::Bool(true), "{result}");
    assert!(
        result.to_string().contains("no allow rule names Write"),
        "{result}"
    );
    // Its own instructions say what it may use.
    assert!(
        judge
            .system()
            .contains("Write、Edit、Task、AskUser 对你不开放")
    );
}
