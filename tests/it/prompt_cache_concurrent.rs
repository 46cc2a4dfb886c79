//! The prompt cache with sub-agents at work at once (issue 43): each keeps its own
//! prefix warm. Three workers of one reply take three turns each, their requests held
//! so that they interleave (every first request before any second, every second before
//! any third); against the fake API's cache model, each worker's every request sends
//! its previous one's bytes unchanged and reads from the cache what that one cached,
//! and the coordinator's next request extends its own first.

use crate::prompt_cache::assert_extends;
use crate::support;

use serde_json::{Value, json};
use std::time::Duration;
use support::pipeline::{Project, text};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);
const WORKERS: usize = 3;

fn is_worker(request: &Recorded) -> bool {
    request.system().contains("sub-agent of a coding harness")
}

fn task(n: usize) -> Value {
    json!({"description": format!("第 {n} 件"), "prompt": format!("读第 {n} 份")})
}

#[test]
fn interleaved_sub_agents_each_read_their_own_prefix_from_the_cache() {
    let project = Project::new();
    for n in 1..=WORKERS {
        let body = format!("第 {n} 份:{}\n", "向日葵".repeat(300));
        std::fs::write(project.dir.join(format!("a{n}.txt")), &body).unwrap();
        std::fs::write(project.dir.join(format!("b{n}.txt")), &body).unwrap();
    }
    // One gate per worker turn: a turn's requests are held until all three are in.
    let gates = [Gate::new(), Gate::new()];
    let server = {
        let gates = gates.clone();
        FakeServer::with_handler(move |request, _| {
            if is_worker(request) {
                let prompt = request.first_prompt();
                let n = prompt.trim_start_matches("读第 ").trim_end_matches(" 份");
                return match request.messages().len() {
                    1 => Reply::tool_use("Read", json!({"file_path": format!("a{n}.txt")}))
                        .gate_before(&gates[0]),
                    3 => Reply::tool_use("Read", json!({"file_path": format!("b{n}.txt")}))
                        .gate_before(&gates[1]),
                    _ => Reply::text(format!("第 {n} 份读完了")),
                };
            }
            if request.messages().len() == 1 {
                let mut reply = Reply::text("分头读。");
                for n in 1..=WORKERS {
                    reply = reply.then_tool_use_with_id(format!("task_{n}"), "Task", task(n));
                }
                return reply;
            }
            Reply::text("都读完了")
        })
    };
    server.simulate_cache();
    let cmd = project.command(&server, &["once", "派活"]);
    let run = std::thread::spawn(move || {
        let mut cmd = cmd;
        cmd.output().expect("run flower")
    });
    for gate in &gates {
        assert!(gate.wait_reached_n(WORKERS, TIMEOUT), "all workers at once");
        gate.open();
    }
    let out = run.join().unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));

    let requests = server.requests();
    // The workers' requests came interleaved: every first turn before any second.
    let turns: Vec<usize> = requests
        .iter()
        .filter(|r| is_worker(r))
        .map(|r| r.messages().len() / 2)
        .collect();
    assert_eq!(turns, [0, 0, 0, 1, 1, 1, 2, 2, 2], "{turns:?}");
    for n in 1..=WORKERS {
        let prompt = format!("读第 {n} 份");
        let own: Vec<&Recorded> = requests
            .iter()
            .filter(|r| is_worker(r) && r.first_prompt() == prompt)
            .collect();
        assert_eq!(own.len(), 3, "{prompt}");
        for pair in own.windows(2) {
            assert_extends(pair[0], pair[1]);
            let (before, after) = (pair[0].cache.unwrap(), pair[1].cache.unwrap());
            let cached = before.prompt() - before.uncached;
            assert!(
                after.read >= cached,
                "{prompt}: read {} of the {cached} its previous request cached",
                after.read
            );
        }
    }
    let coordinator: Vec<&Recorded> = requests.iter().filter(|r| !is_worker(r)).collect();
    assert_eq!(coordinator.len(), 2);
    assert_extends(coordinator[0], coordinator[1]);
    let first = coordinator[0].cache.unwrap();
    assert!(coordinator[1].cache.unwrap().read >= first.prompt() - first.uncached);
}
