//! Faults with several sub-agents in flight (issue 43, item 3), through the real binary
//! against the fake Messages API: the coordinator dispatches three workers in one
//! reply; a SIGKILL while they work, then a plain `flower` wakes the run. Each worker
//! goes on in its own session (its Write turn kept, the resume prompt newest), none is
//! started over, no tool call is answered twice, and the coordinator gets the three
//! reports in the order of its calls.

use crate::background;
use crate::faults_support;
use crate::support;

use faults_support::*;
use flower::continuity::resilience::RESUME_PROMPT;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::pipeline::without_cache_marks;
use support::{FakeServer, Gate, Recorded, Reply};

const FILES: [&str; 3] = ["a.txt", "b.txt", "c.txt"];

fn of(requests: &[Recorded], agent: Agent) -> Vec<&Recorded> {
    requests.iter().filter(|r| agent_of(r) == agent).collect()
}

/// The file a worker's task names.
fn file_of(worker: &Recorded) -> &'static str {
    let prompt = worker.first_prompt();
    FILES
        .into_iter()
        .find(|f| prompt.contains(f))
        .unwrap_or("?")
}

/// The command worker `a` starts in the background when there is one: it marks its
/// start and runs until killed.
const BACKGROUND: &str = "touch bg-started; exec sleep 600";

/// The pipeline of [`simple_reply`], but the coordinator sends three workers at once
/// (`task_a`, `task_b`, `task_c`), each writing its own file; with `background`, worker
/// `a` first starts [`BACKGROUND`].
fn three_workers(req: &Recorded, background: bool) -> Reply {
    match (agent_of(req), turn_of(req)) {
        (Agent::Worker, 0) if background && file_of(req) == "a.txt" => Reply::tool_use(
            "Bash",
            json!({"command": BACKGROUND, "run_in_background": true}),
        )
        .then_tool_use("Write", json!({"file_path": "a.txt", "content": "a.txt"})),
        (Agent::Coordinator, 0) => {
            let mut reply = Reply::text("三件事分头做。");
            for file in FILES {
                let id = format!("task_{}", &file[..1]);
                let task = json!({"description": format!("写 {file}"), "prompt": format!("在工作区写 {file},内容 {file}")});
                reply = reply.then_tool_use_with_id(id, "Task", task);
            }
            reply
        }
        (Agent::Worker, 0) => {
            let file = file_of(req);
            Reply::tool_use("Write", json!({"file_path": file, "content": file}))
        }
        (Agent::Worker, _) => Reply::text(format!("写好了 {}。", file_of(req))),
        _ => simple_reply(req),
    }
}

/// The Task call ids of the coordinator's requests (each once: a Task sent out again
/// would be a new id).
fn task_ids(requests: &[Recorded]) -> BTreeSet<String> {
    of(requests, Agent::Coordinator)
        .iter()
        .flat_map(|r| tool_use_ids(r))
        .filter(|id| id.starts_with("task_") || id.starts_with("toolu_"))
        .collect()
}

/// How the run is stopped while its workers are in flight.
#[derive(Clone, Copy)]
struct Fault {
    signal: i32,
    /// Worker `a` has a command running in the background.
    background: bool,
}

const SIGKILL: Fault = Fault {
    signal: libc::SIGKILL,
    background: false,
};

/// A signal while the workers of `held` (files) wait for their second reply, the others
/// having finished; then a plain `flower`. Everything the module doc promises; with a
/// background command, it is killed (by the signal's handler, or by the next start
/// after a SIGKILL) and worker `a` is told so in its first request after the wake.
// Long because it is one scenario: the fault, the wake, then what each party saw.
fn killed_with_workers_in_flight(held: &[&'static str], fault: Fault) {
    let project = Project::resilient();
    project.freeze_notes();
    let gate = Gate::new();
    let killed = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, killed) = (gate.clone(), killed.clone());
        let held: Vec<&'static str> = held.to_vec();
        FakeServer::with_handler(move |req, _| {
            let reply = three_workers(req, fault.background);
            if !killed.load(Ordering::SeqCst)
                && agent_of(req) == Agent::Worker
                && turn_of(req) == 1
                && held.contains(&file_of(req))
            {
                return reply.gate_before(&gate);
            }
            reply
        })
    };
    let (mut child, _stderr) = project.spawn_watched(&server, &[]);
    assert!(
        gate.wait_reached_n(held.len(), PATIENCE),
        "the held workers were never all working at once"
    );
    // The finished workers' results are stored when their calls end: wait for them.
    let finished = FILES.len() - held.len();
    let deadline = Instant::now() + PATIENCE;
    let session = loop {
        if let Some(id) = project.lineage_step("干活") {
            let results = stored_results(&project.store_load(&id, false));
            if results.len() >= finished {
                break id;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the finished results were never stored"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let leader = fault.background.then(|| {
        // The command is at work (an event on disk) before the kill.
        let deadline = Instant::now() + PATIENCE;
        while !project.dir.join("bg-started").exists() {
            assert!(
                Instant::now() < deadline,
                "the background command never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let records = background::records(&project.dir);
        assert_eq!(records.len(), 1, "{records:?}");
        background::leader(&records[0])
    });
    killed.store(true, Ordering::SeqCst);
    signal(&child, fault.signal);
    wait_exit(&mut child, PATIENCE);
    if let Some(leader) = leader
        && fault.signal == libc::SIGKILL
    {
        // Nothing ran in flower on a SIGKILL: the command outlived it, for the next
        // start to find.
        assert!(background::group_alive(leader), "gone before the wake");
    }
    if let Some(leader) = leader
        && fault.signal != libc::SIGKILL
    {
        // The handler ended it with flower: it is gone before any next start.
        let deadline = Instant::now() + PATIENCE;
        while background::group_alive(leader) {
            assert!(Instant::now() < deadline, "the command outlived flower");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let before = server.requests().len();
    gate.open();

    let out = project.run(&server, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let requests = server.requests();
    assert_valid(&requests[before..]);

    // Every worker kept one session: the same opening in each of its requests, its
    // Write turn kept; the held ones went on from the resume prompt.
    let workers = of(&requests, Agent::Worker);
    let mut by_file: BTreeMap<&str, Vec<&Recorded>> = BTreeMap::new();
    for w in &workers {
        by_file.entry(file_of(w)).or_default().push(w);
    }
    assert_eq!(by_file.len(), 3, "three workers");
    for (file, reqs) in &by_file {
        let opening = without_cache_marks(&reqs[0].messages()[0]);
        assert!(
            reqs.iter()
                .all(|r| without_cache_marks(&r.messages()[0]) == opening),
            "{file}: a worker started over"
        );
        let after: Vec<&&Recorded> = reqs.iter().filter(|r| r.index >= before).collect();
        if held.contains(file) {
            let next = after.first().expect("the held worker went on");
            let started = if fault.background && *file == "a.txt" {
                2
            } else {
                1
            };
            assert_eq!(
                tool_use_ids(next).len(),
                started,
                "{file}: its first turn is kept"
            );
            let texts = last_texts(next);
            assert!(
                texts.iter().any(|t| t == RESUME_PROMPT),
                "{file}: {texts:?}"
            );
            if fault.background && *file == "a.txt" {
                // Told, after the resume prompt, that its command no longer runs.
                let record = &background::records(&project.dir)[0];
                let note = texts.last().unwrap();
                assert!(
                    note.contains("no longer run") && note.contains(record["id"].as_str().unwrap()),
                    "{note}"
                );
            } else {
                assert_eq!(
                    texts.last().map(String::as_str),
                    Some(RESUME_PROMPT),
                    "{file}"
                );
            }
        } else {
            assert!(after.is_empty(), "{file}: a finished worker was run again");
        }
        assert_eq!(project.read(file), *file);
    }

    // The coordinator: its three Task calls, never sent out again, each answered once
    // with its worker's report, in the order of the calls.
    assert_eq!(
        task_ids(&requests),
        BTreeSet::from(["task_a".into(), "task_b".into(), "task_c".into()])
    );
    let last = of(&requests, Agent::Coordinator)
        .into_iter()
        .rfind(|r| turn_of(r) == 1)
        .expect("the coordinator went on");
    let results: Vec<(String, String)> = last
        .tool_results()
        .iter()
        .map(|r| {
            (
                r["tool_use_id"].as_str().unwrap().to_string(),
                support::fake::content_text(&r["content"]),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = FILES
        .iter()
        .map(|f| (format!("task_{}", &f[..1]), format!("写好了 {f}。")))
        .collect();
    assert_eq!(results, expected);
    let stored = stored_results(&project.store_load(&session, false));
    let mut ids: Vec<&str> = stored.iter().map(String::as_str).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["task_a", "task_b", "task_c"], "each answered once");
    if let Some(leader) = leader {
        assert!(
            !background::group_alive(leader),
            "the background command outlived the wake"
        );
        let record = &background::records(&project.dir)[0];
        let how = if fault.signal == libc::SIGKILL {
            "killed-on-start"
        } else {
            "gone"
        };
        assert_eq!(record["end"]["how"], how, "{record}");
        assert_eq!(record["reported"], true, "{record}");
    }
}

/// The tool_use ids the stored entries answer, in stored order.
fn stored_results(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["tool_use_id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn sigkill_with_three_workers_in_flight_continues_each_on_wake() {
    killed_with_workers_in_flight(&["a.txt", "b.txt", "c.txt"], SIGKILL);
}

/// The crash test: SIGKILL with three sub-agents and a background command in
/// flight. The wake continues all three sessions, answers no call twice, kills the
/// command (it outlived flower) and tells the worker that started it.
#[test]
fn sigkill_with_three_workers_and_a_background_command_in_flight() {
    let fault = Fault {
        background: true,
        ..SIGKILL
    };
    killed_with_workers_in_flight(&["a.txt", "b.txt", "c.txt"], fault);
}

/// The same with SIGTERM: the handler kills the command with flower; the wake reports it.
#[test]
fn sigterm_with_three_workers_and_a_background_command_in_flight() {
    let fault = Fault {
        signal: libc::SIGTERM,
        background: true,
    };
    killed_with_workers_in_flight(&["a.txt", "b.txt", "c.txt"], fault);
}

/// SIGHUP (the terminal closed) goes through the same handler as SIGTERM; its own test,
/// so that a change to one signal's handling cannot pass unseen.
#[test]
fn sighup_with_three_workers_and_a_background_command_in_flight() {
    let fault = Fault {
        signal: libc::SIGHUP,
        background: true,
    };
    killed_with_workers_in_flight(&["a.txt", "b.txt", "c.txt"], fault);
}

#[test]
fn sigkill_after_one_of_three_workers_finished_continues_the_other_two() {
    killed_with_workers_in_flight(&["a.txt", "c.txt"], SIGKILL);
}

/// `flower once` whose first reply sends three sub-agents (`a`, `b`, `c`) at once.
fn three_at_once(request: &Recorded) -> Option<Reply> {
    if !request.system().contains("sub-agent of a coding harness") {
        return Some(if request.messages().len() == 1 {
            let mut reply = Reply::text("分头做。");
            for name in ["a", "b", "c"] {
                let task =
                    json!({"description": format!("做 {name}"), "prompt": format!("做 {name}")});
                reply = reply.then_tool_use_with_id(format!("task_{name}"), "Task", task);
            }
            reply
        } else {
            Reply::text("都好了")
        });
    }
    None
}

/// One `429` with `retry-after` in one of three sub-agents pauses every request of the
/// run: the other two, released after it, send their next requests only when the wait
/// is over, and the person reads one retry line, not three.
#[test]
fn one_retry_after_pauses_every_sub_agent() {
    let project = Project::resilient();
    let gate = Gate::new();
    let limited: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let arrivals: Arc<std::sync::Mutex<Vec<(String, usize, Instant)>>> = Arc::default();
    let server = {
        let (gate, limited, arrivals) = (gate.clone(), limited.clone(), arrivals.clone());
        FakeServer::with_handler(move |req, _| {
            if let Some(reply) = three_at_once(req) {
                return reply;
            }
            let who = req.first_prompt();
            let turn = req.messages().len();
            arrivals
                .lock()
                .unwrap()
                .push((who.clone(), turn, Instant::now()));
            match (who.as_str(), turn) {
                ("做 a", 1) => {
                    let mut limited = limited.lock().unwrap();
                    if limited.is_none() {
                        *limited = Some(Instant::now());
                        return Reply::rate_limited(2);
                    }
                    Reply::text("a 好了")
                }
                (_, 1) => Reply::tool_use("Glob", json!({"pattern": "*"})).gate_before(&gate),
                _ => Reply::text(format!("{who} 好了")),
            }
        })
    };
    let (mut child, stderr) = project.spawn_watched(&server, &["once", "派活"]);
    let retried = stderr.wait_for("次尝试", 1, PATIENCE);
    gate.open();
    let status = wait_exit(&mut child, PATIENCE);
    assert!(retried, "no retry line: {}", stderr.all());
    assert!(status.success(), "{}", stderr.all());
    let limited_at = limited.lock().unwrap().expect("the 429 was sent");
    let arrivals = arrivals.lock().unwrap().clone();
    // b's and c's first requests went out with a's, before the 429.
    let after: Vec<&(String, usize, Instant)> = arrivals
        .iter()
        .filter(|(who, turn, at)| *at > limited_at && (*turn > 1 || who == "做 a"))
        .collect();
    assert_eq!(
        after.len(),
        3,
        "a's retry, b's and c's second turn: {arrivals:?}"
    );
    for (who, turn, at) in after {
        let waited = at.duration_since(limited_at);
        assert!(
            waited >= Duration::from_millis(1800),
            "{who} (turn {turn}) went out {waited:?} after the 429"
        );
    }
    let lines = stderr
        .lines()
        .iter()
        .filter(|l| l.contains("次尝试"))
        .count();
    assert_eq!(lines, 1, "{}", stderr.all());
}

/// Ctrl-C once while three sub-agents work stops all three and asks the person once
/// (through the library: the prompt is a counter); the coordinator goes on with three
/// interrupted results, and no sub-agent carries on by itself.
#[tokio::test]
async fn ctrl_c_once_stops_every_sub_agent_and_asks_once() {
    use flower::continuity::runtime::{FrontEnd, RuntimeOptions};
    use flower::model::anthropic::AnthropicClient;
    use flower::{AgentSpec, Runtime};
    use std::sync::atomic::AtomicUsize;

    let dir = tempfile::TempDir::new().unwrap();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |req, _| match three_at_once(req) {
            Some(reply) => reply,
            None => Reply::text("做完了").gate_before(&gate),
        })
    };
    let client = AnthropicClient::new(&server.url(), support::FAKE_API_KEY, "claude-fake").unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let interrupt = flower::engine::Interrupt::new();
    let options = RuntimeOptions::new(Arc::new(client));
    let front = FrontEnd {
        interrupt: interrupt.clone(),
        on_interrupt: Some({
            let asked = asked.clone();
            Arc::new(move || {
                asked.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { Some(String::new()) })
            })
        }),
        ..FrontEnd::default()
    };
    let rt = Runtime::with_front_end(dir.path(), dir.path().join("runs"), options, front).unwrap();
    let presser = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            let all = gate.wait_reached_n(3, PATIENCE);
            interrupt.trigger();
            // Whatever a sub-agent sends after the interrupt is answered, so that a
            // failure shows as a failed assertion, not a hang.
            gate.open();
            all
        })
    };
    let spec = AgentSpec::new("派活的", "你把活分给子代理。").allowed_tools(["Task"]);
    let outcome = rt
        .run_agent("派活", &spec, "派活", flower::engine::SessionStart::New)
        .await;
    assert!(
        presser.join().unwrap(),
        "three sub-agents were never at work at once"
    );
    gate.open();
    rt.close();
    assert!(outcome.result.ok, "{:?}", outcome.result);
    assert_eq!(outcome.result.text, "都好了");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "asked once");

    let requests = server.requests();
    let subs: Vec<&Recorded> = requests
        .iter()
        .filter(|r| r.system().contains("sub-agent of a coding harness"))
        .collect();
    assert_eq!(subs.len(), 3, "no sub-agent went on by itself");
    let last = requests.last().unwrap();
    let results = last.tool_results();
    assert_eq!(results.len(), 3);
    for result in &results {
        assert_eq!(result["is_error"], true, "{result}");
        assert!(
            support::fake::content_text(&result["content"]).contains("interrupted"),
            "{result}"
        );
    }
}
