//! The pipeline of issue #46 item 1, shared by the protocol-level cache test
//! (`prompt_cache_roles`) and the engine bench (`-- roles`): a whole run whose 干活 step
//! takes 30 coordinator turns over three generations (two handoffs), SIGKILLed at the
//! coordinator's turn 15 and woken; the fake's cache model fed the real request bytes.

use super::pipeline::{Agent, agent_of, simple_reply, turn_of};
use super::{FakeServer, Gate, Recorded, Reply};
use flower::continuity::handoff::SECTIONS;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Coordinator turns over the whole step: reads, then one Task, then its final text.
pub const COORDINATOR_TURNS: usize = 30;
/// Coordinator turns of each generation before its context is reported full (the
/// last generation does the rest).
const GENERATION_TURNS: usize = 10;
/// Handoffs over the step.
pub const HANDOFFS: usize = 2;
/// The coordinator turn (over the whole step) whose request the first process is
/// killed at.
pub const KILLED_AT: usize = 15;
/// A context over the default threshold (60 % of 200K).
const FULL: u64 = 130_000;

/// Which part of the run a request belongs to: the agent, and for the coordinator its
/// generation and whether it is being asked for its handoff document.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Part {
    Agent(AgentKey),
    /// The coordinator session after the Nth handoff (N = 1, 2, …).
    Successor(usize),
    /// A retiring coordinator session asked for its document.
    HandoffAsk,
}

/// [`Agent`] with an order, for a table.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum AgentKey {
    Clarifier,
    GoalSetter,
    Coordinator,
    Worker,
    Judge,
    Once,
}

impl Part {
    pub fn of(req: &Recorded) -> Part {
        let agent = agent_of(req);
        if agent == Agent::Coordinator {
            if asks_for_handoff(req) {
                return Part::HandoffAsk;
            }
            let generation = generation(req);
            if generation > 0 {
                return Part::Successor(generation);
            }
        }
        Part::Agent(match agent {
            Agent::Clarifier => AgentKey::Clarifier,
            Agent::GoalSetter => AgentKey::GoalSetter,
            Agent::Coordinator => AgentKey::Coordinator,
            Agent::Worker => AgentKey::Worker,
            Agent::Judge => AgentKey::Judge,
            Agent::Once => AgentKey::Once,
        })
    }

    pub fn label(self) -> String {
        match self {
            Part::Agent(agent) => format!("{agent:?}"),
            Part::Successor(n) => format!("Coordinator after handoff {n}"),
            Part::HandoffAsk => "Coordinator asked to hand off".to_string(),
        }
    }
}

/// How many handoffs came before this coordinator session: its first prompt says
/// `你接手这一步,是第 N 代` (the step's first session is generation 1); 0 for the first.
fn generation(req: &Recorded) -> usize {
    let first = req.first_prompt();
    let Some((_, rest)) = first.split_once("你接手这一步,是第 ") else {
        return 0;
    };
    rest.split_whitespace()
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n.saturating_sub(1))
}

fn asks_for_handoff(req: &Recorded) -> bool {
    req.messages()
        .iter()
        .any(|m| m["role"] == "user" && m["content"].to_string().contains("这一步要换代"))
}

/// The coordinator's turn over the whole step (its generations one after another).
fn step_turn(req: &Recorded) -> usize {
    generation(req) * GENERATION_TURNS + turn_of(req)
}

/// A complete handoff document.
fn handoff_doc() -> String {
    let mut doc = String::from("# 交接书\n\n");
    for section in SECTIONS {
        doc.push_str(&format!(
            "## {section}\n读了 notes/目标.md,还没派人写 hello.txt。\n\n"
        ));
    }
    doc
}

/// Where the handoff prompt says the document goes (`写到 REL,只写这一个文件`).
fn handoff_path(req: &Recorded) -> String {
    let asked = req
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .find(|c| c.contains("这一步要换代"))
        .unwrap_or_default();
    asked
        .split_once("写到 ")
        .and_then(|(_, rest)| rest.split_once(','))
        .map(|(path, _)| path.to_string())
        .unwrap_or_else(|| "notes/交接/干活.md".to_string())
}

/// The scripted pipeline: the coordinator reads for 28 turns over its generations (the
/// last turn of the first two reports a full context), sends a worker, and is done; the
/// judge reads hello.txt and cats it before passing.
pub fn reply(req: &Recorded) -> Reply {
    match Part::of(req) {
        Part::HandoffAsk if req.last_user_text().contains("这一步要换代") => Reply::tool_use(
            "Write",
            json!({"file_path": handoff_path(req), "content": handoff_doc()}),
        )
        .usage(FULL + 2_000, 100),
        Part::HandoffAsk => Reply::text("交接书写好了。").usage(FULL + 3_000, 100),
        Part::Agent(AgentKey::Coordinator) | Part::Successor(_) => {
            let turn = step_turn(req);
            let reply = if turn + 2 < COORDINATOR_TURNS {
                Reply::tool_use("Read", json!({"file_path": "notes/目标.md"}))
            } else if turn + 2 == COORDINATOR_TURNS {
                Reply::tool_use(
                    "Task",
                    json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
                )
            } else {
                Reply::text("做完了。")
            };
            let last_of_generation =
                turn_of(req) + 1 == GENERATION_TURNS && generation(req) < HANDOFFS;
            if last_of_generation {
                reply.usage(FULL, 100)
            } else {
                reply
            }
        }
        Part::Agent(AgentKey::Judge) => match turn_of(req) {
            0 => Reply::tool_use("Read", json!({"file_path": "hello.txt"})),
            1 => Reply::tool_use("Bash", json!({"command": "cat hello.txt"})),
            _ => simple_reply(req),
        },
        _ => simple_reply(req),
    }
}

/// Runs the whole pipeline in `dir` (with `memory` as its CLAUDE.md), killed at the
/// coordinator's turn [`KILLED_AT`] and woken; `command(server, args)` makes a `flower`
/// command in `dir`. The fake's requests, each with its cache accounting.
pub fn run(
    dir: &Path,
    memory: Option<&str>,
    command: &dyn Fn(&FakeServer, &[&str]) -> Command,
) -> Vec<Recorded> {
    if let Some(memory) = memory {
        std::fs::write(dir.join("CLAUDE.md"), memory).expect("write CLAUDE.md");
    }
    let gate = Gate::new();
    let holding = gate.clone();
    let held = Arc::new(AtomicBool::new(false));
    let server = FakeServer::with_handler(move |req, _| {
        let at_kill = matches!(
            Part::of(req),
            Part::Agent(AgentKey::Coordinator) | Part::Successor(_)
        ) && step_turn(req) == KILLED_AT;
        if at_kill && !held.swap(true, Ordering::SeqCst) {
            return Reply::text("never delivered").gate_before(&holding);
        }
        reply(req)
    });
    server.simulate_cache();
    let quiet = |args: &[&str]| {
        let mut cmd = command(&server, args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let mut child = quiet(&["写个 hello 脚本"]).spawn().expect("run flower");
    if !gate.wait_reached(Duration::from_secs(60)) {
        let _ = child.kill();
        let seen: Vec<String> = server
            .requests()
            .iter()
            .map(|r| format!("{} turn {}", Part::of(r).label(), turn_of(r)))
            .collect();
        panic!("the coordinator never reached turn {KILLED_AT}: {seen:#?}");
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap flower");
    gate.open();
    let woken = quiet(&[]).status().expect("wake flower");
    assert!(woken.success(), "the wake failed");
    assert_eq!(
        std::fs::read_to_string(dir.join("hello.txt")).unwrap_or_default(),
        "hello",
        "the worker's file"
    );
    server.requests()
}

/// A memory file of about 32 KB.
pub fn big_memory() -> String {
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

/// Tokens of one part of the run, as the fake's cache model counted them.
#[derive(Default, Debug, Clone, Copy)]
pub struct Tokens {
    pub requests: usize,
    pub read: u64,
    pub written: u64,
    pub uncached: u64,
}

/// What a run's requests cost, by part.
pub struct Shares {
    pub parts: BTreeMap<Part, Tokens>,
    pub read: u64,
    pub prompt: u64,
    /// The judge's calls its rules refused.
    pub judge_denied: usize,
    /// Handoffs seen (successor sessions that made a request).
    pub handoffs: usize,
}

impl Shares {
    pub fn of(requests: &[Recorded]) -> Shares {
        let mut parts: BTreeMap<Part, Tokens> = BTreeMap::new();
        let (mut read, mut prompt) = (0, 0);
        for req in requests {
            let cache = req.cache.expect("the fake simulates the cache");
            let row = parts.entry(Part::of(req)).or_default();
            row.requests += 1;
            row.read += cache.read;
            row.written += cache.written;
            row.uncached += cache.uncached;
            read += cache.read;
            prompt += cache.prompt();
        }
        let judge_denied = requests
            .iter()
            .rfind(|r| agent_of(r) == Agent::Judge)
            .map_or(0, |last| {
                last.raw_body.matches("no allow rule names").count()
            });
        let handoffs = parts
            .keys()
            .filter(|p| matches!(p, Part::Successor(_)))
            .count();
        Shares {
            parts,
            read,
            prompt,
            judge_denied,
            handoffs,
        }
    }

    pub fn share(&self) -> f64 {
        self.read as f64 / self.prompt.max(1) as f64
    }
}
