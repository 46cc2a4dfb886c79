//! Shared by `tests/faults.rs` and `tests/signals.rs`, on top of `support::pipeline`
//! (agents, the simple scripted pipeline, the project directory): small resilience
//! settings for the project's commands, a watcher on the child's stderr, and a checker of
//! request bodies against the Messages API's rules for `messages`.
#![allow(dead_code)]

use crate::support::Flower;
use crate::support::pipeline::Env;
use crate::support::{FakeServer, Recorded};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for an event that must happen; only reached on failure.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A pipeline request here may also be a `flower once` one, so `agent_of` says
/// [`Agent::Once`] for any system prompt that is not a pipeline agent's.
pub use crate::support::pipeline::{
    Agent, BRIEF, GOAL, Project, REQUEST, agent_or_once as agent_of, simple_reply, text, turn_of,
};

/// The text blocks of the newest message (a user message), in order.
pub fn last_texts(req: &Recorded) -> Vec<String> {
    req.messages()
        .last()
        .and_then(|m| m["content"].as_array())
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Every `tool_use` id in the request's history, in order.
pub fn tool_use_ids(req: &Recorded) -> Vec<String> {
    req.messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["id"].as_str().map(str::to_string))
        .collect()
}

// ---------------------------------------------------------------------------------
// A project to run the binary in
// ---------------------------------------------------------------------------------

/// Small resilience settings (a test overrides any of them with `.env(…)` on the
/// command), and none of the retry knobs a test run might inherit.
pub const RESILIENT: Env = &[
    ("FLOWER_BASE_DELAY", Some("0.05")),
    ("FLOWER_MAX_DELAY", Some("0.2")),
    ("FLOWER_PROBE_INTERVAL", Some("0.05")),
    ("FLOWER_PROBE_TIMEOUT", Some("0.5")),
    ("FLOWER_MAX_OFFLINE_WAIT", Some("30")),
    ("FLOWER_MAX_ATTEMPTS", None),
    ("FLOWER_RETRY_UNKNOWN", None),
    ("FLOWER_STREAM_IDLE_TIMEOUT", None),
];

impl Project {
    /// A temporary home with `~/proj` in it, its commands with [`RESILIENT`] settings.
    pub fn resilient() -> Project {
        Project::with("proj", RESILIENT)
    }

    /// Spawns `flower ARGS` with stdout discarded and stderr watched.
    pub fn spawn_watched(&self, server: &FakeServer, args: &[&str]) -> (Child, StderrWatch) {
        spawn_watched(self.command(server, args))
    }

    /// Writes a complete brief and checklist, so that the pipeline skips straight to 干活.
    pub fn freeze_notes(&self) {
        std::fs::create_dir_all(self.dir.join("notes")).unwrap();
        std::fs::write(self.dir.join("notes/需求.md"), BRIEF).unwrap();
        std::fs::write(self.dir.join("notes/目标.md"), GOAL).unwrap();
    }

    /// The manifest rows of one step name, in order.
    pub fn rows(&self, step: &str) -> Vec<Value> {
        self.manifest()
            .into_iter()
            .filter(|r| r["step"] == step)
            .collect()
    }

    /// The session lineage remembers for a step.
    pub fn lineage_step(&self, step: &str) -> Option<String> {
        self.json("runs/lineage.json")["steps"][step]
            .as_str()
            .map(str::to_string)
    }

    /// The store key of a main session of this project.
    pub fn key(&self, session_id: &str) -> String {
        format!("{}/{session_id}", flower::stores::project_key(&self.dir))
    }

    /// `flower store load KEY [--pruned]`: the transcript as stored (or as fed back).
    pub fn store_load(&self, session_id: &str, pruned: bool) -> Vec<Value> {
        let mut cmd = Flower::bin().command();
        cmd.current_dir(&self.dir)
            .args(["store", "load", &self.key(session_id)]);
        if pruned {
            cmd.arg("--pruned");
        }
        let out = cmd.output().expect("run flower store load");
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout)
            .expect("store load prints JSON")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// What `flower state --json` says, read in-process through the library's
    /// read-only probe (`wake_state`): steps only count while their session is in
    /// sessions.db.
    pub fn state(&self) -> flower::WakeState {
        flower::wake_state(&self.dir, self.dir.join("runs"))
    }
}

// ---------------------------------------------------------------------------------
// Watching a child's stderr
// ---------------------------------------------------------------------------------

/// What a [`StderrWatch`] has seen: the lines so far, and whether stderr closed.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    closed: bool,
}

/// The lines a child writes to stderr, collected by a thread; tests wait on them.
#[derive(Clone)]
pub struct StderrWatch(Arc<(Mutex<Seen>, Condvar)>);

impl StderrWatch {
    pub fn start(stderr: ChildStderr) -> StderrWatch {
        let watch = StderrWatch(Arc::new((Mutex::new(Seen::default()), Condvar::new())));
        let shared = watch.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lock, cond) = &*shared;
                lock.lock().unwrap().lines.push(line);
                cond.notify_all();
            }
            let (lock, cond) = &*shared;
            lock.lock().unwrap().closed = true;
            cond.notify_all();
        });
        watch
    }

    /// Blocks until `n` lines contain `needle`; false on timeout or when stderr closed
    /// first.
    pub fn wait_for(&self, needle: &str, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cond) = &*self.0;
        let mut guard = lock.lock().unwrap();
        loop {
            if guard.lines.iter().filter(|l| l.contains(needle)).count() >= n {
                return true;
            }
            let now = Instant::now();
            if guard.closed || now >= deadline {
                return false;
            }
            guard = cond.wait_timeout(guard, deadline - now).unwrap().0;
        }
    }

    /// Blocks until stderr is closed (the child is gone); false on timeout.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cond) = &*self.0;
        let mut guard = lock.lock().unwrap();
        while !guard.closed {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            guard = cond.wait_timeout(guard, deadline - now).unwrap().0;
        }
        true
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.0.lock().unwrap().lines.clone()
    }

    pub fn all(&self) -> String {
        self.lines().join("\n")
    }
}

/// Spawns `cmd` with stdout discarded and stderr watched.
pub fn spawn_watched(mut cmd: Command) -> (Child, StderrWatch) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flower");
    let watch = StderrWatch::start(child.stderr.take().unwrap());
    (child, watch)
}

/// Waits for a child, killing it if it outlives `timeout` (then the test fails).
pub fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flower did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to a child.
pub fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) only sends a signal to the child we spawned (and have not reaped).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill({}, {signal})", child.id());
}

// ---------------------------------------------------------------------------------
// The Messages API's rules for `messages`
// ---------------------------------------------------------------------------------

/// Checks a request's `messages` the way the Messages API does before it answers:
/// - there is at least one message, the first is from the user, the last too;
/// - roles alternate; every message has content, and no text block is empty;
/// - every `tool_use` of an assistant message is answered by a `tool_result` in the very
///   next message, which is a user message;
/// - every `tool_result` answers a `tool_use` of the message right before it, once;
///   in a user message the tool results come before any other block.
pub fn check_messages(req: &Recorded) -> Result<(), String> {
    let messages = req.messages();
    if messages.is_empty() {
        return Err("no messages".into());
    }
    if messages[0]["role"] != "user" {
        return Err("the first message is not from the user".into());
    }
    if messages.last().unwrap()["role"] != "user" {
        return Err("the last message is not from the user".into());
    }
    let mut pending: Vec<String> = Vec::new();
    let mut previous_role = "";
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(format!("message {i}: role {role:?}"));
        }
        if role == previous_role {
            return Err(format!("message {i}: two {role} messages in a row"));
        }
        previous_role = role;
        let blocks: Vec<Value> = match &message["content"] {
            Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) if !blocks.is_empty() => blocks.clone(),
            other => return Err(format!("message {i}: empty or bad content {other}")),
        };
        for block in &blocks {
            if block["type"] == "text" && block["text"].as_str().is_none_or(str::is_empty) {
                return Err(format!("message {i}: an empty text block"));
            }
        }
        if role == "assistant" {
            if !pending.is_empty() {
                return Err(format!("message {i}: unanswered tool_use {pending:?}"));
            }
            let mut ids = HashSet::new();
            for block in blocks.iter().filter(|b| b["type"] == "tool_use") {
                let id = block["id"].as_str().unwrap_or("").to_string();
                if id.is_empty() || !ids.insert(id.clone()) {
                    return Err(format!("message {i}: bad or repeated tool_use id {id:?}"));
                }
                pending.push(id);
            }
        } else {
            let mut seen_other = false;
            for block in &blocks {
                if block["type"] == "tool_result" {
                    if seen_other {
                        return Err(format!("message {i}: a tool_result after other content"));
                    }
                    let id = block["tool_use_id"].as_str().unwrap_or("");
                    match pending.iter().position(|p| p == id) {
                        Some(at) => {
                            pending.remove(at);
                        }
                        None => {
                            return Err(format!(
                                "message {i}: tool_result {id:?} answers no tool_use of the message before"
                            ));
                        }
                    }
                } else {
                    seen_other = true;
                }
            }
            if !pending.is_empty() {
                return Err(format!(
                    "message {i}: tool_use {pending:?} not answered here"
                ));
            }
        }
    }
    Ok(())
}

/// Asserts that every request in `requests` is one the Messages API would accept.
pub fn assert_valid(requests: &[Recorded]) {
    for req in requests {
        if let Err(why) = check_messages(req) {
            panic!(
                "request {} ({:?}) breaks the Messages API rules: {why}\nmessages: {}",
                req.index,
                agent_of(req),
                serde_json::to_string_pretty(req.messages()).unwrap()
            );
        }
    }
}

/// Arrival times of requests, recorded by a handler.
#[derive(Clone, Default)]
pub struct Arrivals(Arc<Mutex<Vec<(usize, Instant)>>>);

impl Arrivals {
    pub fn mark(&self, index: usize) {
        self.0.lock().unwrap().push((index, Instant::now()));
    }

    pub fn at(&self, index: usize) -> Instant {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, t)| *t)
            .expect("request arrived")
    }
}
