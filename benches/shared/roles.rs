//! The prompt cache across the pipeline's roles (#46 item 1), against the fake's cache
//! model fed the real request bytes.

use crate::child::flower_cmd;
use crate::support::pipeline::{Agent, agent_of, simple_reply, turn_of};
use crate::support::{FakeServer, Gate, Recorded, Reply};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Coordinator turns: reads, then one Task, then its final text.
const COORDINATOR_TURNS: usize = 30;
/// The coordinator turn whose request the first process is killed at.
const KILLED_AT: usize = 15;

fn reply(req: &Recorded) -> Reply {
    match (agent_of(req), turn_of(req)) {
        (Agent::Coordinator, t) if t + 2 < COORDINATOR_TURNS => {
            Reply::tool_use("Read", json!({"file_path": "notes/目标.md"}))
        }
        (Agent::Coordinator, t) if t + 2 == COORDINATOR_TURNS => Reply::tool_use(
            "Task",
            json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
        ),
        (Agent::Judge, 0) => Reply::tool_use("Read", json!({"file_path": "hello.txt"})),
        (Agent::Judge, 1) => Reply::tool_use("Bash", json!({"command": "cat hello.txt"})),
        _ => simple_reply(req),
    }
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

/// One whole run, killed at the coordinator's turn [`KILLED_AT`] and woken; the fake's
/// requests.
fn pipeline(flower: &str, memory: Option<&str>) -> Vec<Recorded> {
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(memory) = memory {
        std::fs::write(dir.join("CLAUDE.md"), memory).unwrap();
    }
    let gate = Gate::new();
    let holding = gate.clone();
    let held = Arc::new(AtomicBool::new(false));
    let server = FakeServer::with_handler(move |req, _| {
        if agent_of(req) == Agent::Coordinator
            && turn_of(req) == KILLED_AT
            && !held.swap(true, Ordering::SeqCst)
        {
            return Reply::text("never delivered").gate_before(&holding);
        }
        reply(req)
    });
    server.simulate_cache();
    let command = |args: &[&str]| {
        let mut cmd = flower_cmd(flower, &server, &dir, args);
        cmd.env("HOME", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let mut child = command(&["写个 hello 脚本"]).spawn().expect("run flower");
    assert!(
        gate.wait_reached(Duration::from_secs(60)),
        "the coordinator never reached turn {KILLED_AT}"
    );
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    gate.open();
    let woken = command(&[]).status().expect("wake flower");
    assert!(woken.success(), "the wake failed");
    server.requests()
}

/// Tokens by role: read, written, uncached.
type ByRole = BTreeMap<String, [u64; 3]>;

fn by_role(requests: &[Recorded]) -> ByRole {
    let mut roles = ByRole::new();
    for req in requests {
        let Some(cache) = req.cache else { continue };
        let row = roles.entry(format!("{:?}", agent_of(req))).or_default();
        row[0] += cache.read;
        row[1] += cache.written;
        row[2] += cache.uncached;
    }
    roles
}

/// The judge's calls its rules refused.
fn judge_denied(requests: &[Recorded]) -> usize {
    let Some(last) = requests.iter().rfind(|r| agent_of(r) == Agent::Judge) else {
        return 0;
    };
    last.raw_body.matches("no allow rule names").count()
}

pub fn cache_across_roles(flower: &str) {
    let prices = flower::model::prices::table();
    for (label, memory, goal) in [
        ("a 32 KB CLAUDE.md", Some(big_memory()), 0.96),
        ("no CLAUDE.md", None, 0.94),
    ] {
        let requests = pipeline(flower, memory.as_deref());
        let roles = by_role(&requests);
        let (read, prompt) = roles.values().fold((0, 0), |(r, p), row| {
            (r + row[0], p + row.iter().sum::<u64>())
        });
        let share = read as f64 / prompt.max(1) as f64;
        let model = requests[0].body["model"].as_str().unwrap_or_default();
        let dollars: f64 = requests
            .iter()
            .filter_map(|r| r.cache)
            .map(|c| {
                let usage = flower::model::Usage {
                    input_tokens: c.uncached,
                    cache_creation_input_tokens: c.written,
                    cache_read_input_tokens: c.read,
                    ..Default::default()
                };
                prices.cost_usd(model, &usage).unwrap_or(0.0)
            })
            .sum();
        println!();
        println!(
            "prompt cache across the roles, {label}: {COORDINATOR_TURNS} coordinator turns, SIGKILL at its turn {KILLED_AT} and a wake ({} requests, {prompt} prompt tokens as the fake counts them):",
            requests.len()
        );
        println!(
            "  cache reads {:.1} % of prompt tokens; goal >= {:.0} %: {}",
            share * 100.0,
            goal * 100.0,
            crate::verdict(share >= goal)
        );
        for (role, [read, written, uncached]) in &roles {
            println!("  {role}: wrote {written}, read {read}, uncached {uncached} tokens");
        }
        println!(
            "  the prompt's cost at list prices ({model}, output left out): ${dollars:.4} per pipeline; the judge's refused calls: {}",
            judge_denied(&requests)
        );
    }
}
