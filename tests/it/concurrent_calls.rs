//! A reply's independent calls run at the same time (issue 43, item 1), through the
//! real binary against the fake Messages API: `Task` sub-agents and reads together, up
//! to `FLOWER_MAX_TOOL_USE_CONCURRENCY`; a writer in between is a barrier; the next
//! request carries every result in the order of the calls, whatever order they
//! finished in.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::pipeline::{Project, refused_before_any_request, text};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);

fn is_sub(request: &Recorded) -> bool {
    request.system().contains("sub-agent of a coding harness")
}

fn task(n: usize) -> Value {
    json!({"description": format!("第 {n} 件"), "prompt": format!("做第 {n} 件")})
}

/// A coordinator whose first reply dispatches `tasks` Task calls (ids `task_N`) and
/// whose second ends; each sub-agent answers its first request with a report naming
/// its task, held at `gate`, after `delay(n)`.
fn dispatcher(
    tasks: usize,
    gate: &Gate,
    delay: impl Fn(usize) -> Duration + Send + Sync + 'static,
) -> FakeServer {
    let gate = gate.clone();
    FakeServer::with_handler(move |request, _| {
        if is_sub(request) {
            let prompt = request.first_prompt();
            let n: usize = prompt
                .trim_start_matches("做第 ")
                .trim_end_matches(" 件")
                .parse()
                .unwrap_or(0);
            return Reply::text(format!("第 {n} 件做完了"))
                .gate_before(&gate)
                .delay(delay(n));
        }
        if request.messages().len() == 1 {
            let mut reply = Reply::text("分头做。");
            for n in 1..=tasks {
                reply = reply.then_tool_use_with_id(format!("task_{n}"), "Task", task(n));
            }
            return reply;
        }
        Reply::text("都做完了")
    })
}

/// Runs `flower once PROMPT` in `project` on a thread, with `env`.
fn spawn_once(
    project: &Project,
    server: &FakeServer,
    env: &[(&str, &str)],
) -> std::thread::JoinHandle<std::process::Output> {
    let mut cmd = project.command(server, &["once", "派活"]);
    for (name, value) in env {
        cmd.env(name, value);
    }
    std::thread::spawn(move || cmd.output().expect("run flower"))
}

/// The ids of the tool results of a request, in order, and their texts.
fn results(request: &Recorded) -> Vec<(String, String)> {
    request
        .tool_results()
        .iter()
        .map(|r| {
            (
                r["tool_use_id"].as_str().unwrap_or_default().to_string(),
                support::fake::content_text(&r["content"]),
            )
        })
        .collect()
}

/// Four sub-agents dispatched in one reply are all working at once: each holds its
/// first request at the gate until all four have arrived (one after another, the
/// second would never come). They finish in the reverse order (the first is slowest),
/// and the coordinator's next request carries the four reports in the order of the
/// calls.
#[test]
fn four_task_calls_of_one_reply_run_at_once_and_answer_in_call_order() {
    let project = Project::new();
    let gate = Gate::new();
    let server = dispatcher(4, &gate, |n| Duration::from_millis(150 * (4 - n as u64)));
    let run = spawn_once(&project, &server, &[]);
    let together = gate.wait_reached_n(4, TIMEOUT);
    let reached = gate.reached();
    gate.open();
    let out = run.join().unwrap();
    assert!(together, "only {reached} sub-agents were working at once");
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).trim().ends_with("都做完了"));

    let requests = server.requests();
    let coordinator: Vec<&Recorded> = requests.iter().filter(|r| !is_sub(r)).collect();
    assert_eq!(coordinator.len(), 2);
    let expected: Vec<(String, String)> = (1..=4)
        .map(|n| (format!("task_{n}"), format!("第 {n} 件做完了")))
        .collect();
    assert_eq!(results(coordinator[1]), expected);
    // One user message holds the four results, right after the reply that asked.
    let messages = coordinator[1].messages();
    assert_eq!(messages.len(), 3);
}

/// `FLOWER_MAX_TOOL_USE_CONCURRENCY` bounds how many run at once: with 2, two of the
/// four sub-agents reach the gate and no third joins them while they are held.
#[test]
fn the_concurrency_limit_holds_the_rest_back() {
    let project = Project::new();
    let gate = Gate::new();
    let server = dispatcher(4, &gate, |_| Duration::ZERO);
    let run = spawn_once(
        &project,
        &server,
        &[("FLOWER_MAX_TOOL_USE_CONCURRENCY", "2")],
    );
    let two = gate.wait_reached_n(2, TIMEOUT);
    // A third would arrive at once if the limit did not hold; a short wait suffices.
    let third = gate.wait_reached_n(3, Duration::from_millis(700));
    gate.open();
    let out = run.join().unwrap();
    assert!(two, "two sub-agents work at once");
    assert!(!third, "a third started while two were held");
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let last = server.requests().into_iter().rfind(|r| !is_sub(r)).unwrap();
    assert_eq!(results(&last).len(), 4);
}

/// A writer between concurrent calls is a barrier: in `Task Write Task`, the first
/// sub-agent runs before the file exists and the second after it does, and the results
/// keep the order of the calls.
#[test]
fn a_writer_keeps_its_place_between_concurrent_calls() {
    let project = Project::new();
    let dir = project.dir.clone();
    let server = FakeServer::with_handler(move |request, _| {
        if is_sub(request) {
            let seen = Path::new(&dir).join("made.txt").exists();
            return Reply::text(format!("{} 看到 made.txt: {seen}", request.first_prompt()));
        }
        if request.messages().len() == 1 {
            return Reply::text("先后有序。")
                .then_tool_use_with_id("task_1", "Task", task(1))
                .then_tool_use_with_id(
                    "write",
                    "Write",
                    json!({"file_path": "made.txt", "content": "x\n"}),
                )
                .then_tool_use_with_id("task_2", "Task", task(2))
                .then_tool_use_with_id("read", "Read", json!({"file_path": "made.txt"}));
        }
        Reply::text("好了")
    });
    let out = project.run(&server, &["once", "派活"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let last = server.requests().into_iter().rfind(|r| !is_sub(r)).unwrap();
    let results = results(&last);
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["task_1", "write", "task_2", "read"]);
    assert_eq!(results[0].1, "做第 1 件 看到 made.txt: false");
    assert_eq!(results[2].1, "做第 2 件 看到 made.txt: true");
    assert!(results[3].1.contains('x'), "{}", results[3].1);
}

/// A bad limit is refused before any request, in Chinese, naming the variable.
#[test]
fn a_bad_concurrency_setting_is_refused_before_any_request() {
    let project = Project::new();
    let server = FakeServer::start(vec![]);
    refused_before_any_request(
        &server,
        &project.dir,
        &["once", "hi"],
        &[
            (
                vec![],
                vec![("FLOWER_MAX_TOOL_USE_CONCURRENCY", "0")],
                "FLOWER_MAX_TOOL_USE_CONCURRENCY=\"0\":要 1 到 100 之间的整数",
            ),
            (
                vec![],
                vec![("FLOWER_MAX_TOOL_USE_CONCURRENCY", "lots")],
                "FLOWER_MAX_TOOL_USE_CONCURRENCY",
            ),
            (
                vec![],
                vec![("FLOWER_CONCURRENT_MCP_TOOLS", "Read")],
                "不是 MCP 工具的全名",
            ),
        ],
    );
}

/// Sub-agents running at once keep their own prompt-cache prefixes warm (the fake
/// server's cache model): each worker's second request reads from the cache at least
/// everything its first request sent, whatever the other three sent in between.
#[test]
fn concurrent_sub_agents_keep_their_own_prefixes_warm() {
    let project = Project::new();
    std::fs::write(project.dir.join("seed.txt"), "向日葵\n".repeat(200)).unwrap();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |request, _| {
            if is_sub(request) {
                return match request.messages().len() {
                    1 => {
                        Reply::tool_use("Read", json!({"file_path": "seed.txt"})).gate_before(&gate)
                    }
                    _ => Reply::text(format!("{} 读完了", request.first_prompt())),
                };
            }
            if request.messages().len() == 1 {
                let mut reply = Reply::text("分头读。");
                for n in 1..=4 {
                    reply = reply.then_tool_use_with_id(format!("task_{n}"), "Task", task(n));
                }
                return reply;
            }
            Reply::text("都读完了")
        })
    };
    server.simulate_cache();
    let run = spawn_once(&project, &server, &[]);
    let together = gate.wait_reached_n(4, TIMEOUT);
    gate.open();
    let out = run.join().unwrap();
    assert!(together, "the four workers were not at work at once");
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));

    let requests = server.requests();
    let workers: Vec<&Recorded> = requests.iter().filter(|r| is_sub(r)).collect();
    assert_eq!(workers.len(), 8, "two turns each");
    for n in 1..=4 {
        let prompt = format!("做第 {n} 件");
        let turns: Vec<&&Recorded> = workers
            .iter()
            .filter(|r| r.first_prompt() == prompt)
            .collect();
        assert_eq!(turns.len(), 2, "{prompt}");
        let first = turns[0].cache.expect("cache accounted");
        let second = turns[1].cache.expect("cache accounted");
        assert!(
            second.read >= first.prompt() - first.uncached,
            "{prompt}: the second turn read {} of the {} the first cached",
            second.read,
            first.prompt() - first.uncached
        );
        assert!(second.read * 2 > second.prompt(), "{prompt}: {second:?}");
    }
}
