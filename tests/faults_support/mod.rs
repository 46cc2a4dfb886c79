//! Shared by `tests/faults.rs` and `tests/signals.rs`: a project directory to run the
//! real binary in (with small resilience settings), a scripted model for the `flower`
//! pipeline (routed by the agent's system prompt), a watcher on the child's stderr, and a
//! checker of request bodies against the Messages API's rules for `messages`.
#![allow(dead_code)]

use crate::support::{FakeServer, Recorded, Reply};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a test waits for an event that must happen; only reached on failure.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub const REQUEST: &str = "写个 hello 脚本";
pub const BRIEF: &str = "## 目标\n写一个 hello 脚本\n## 范围\n一个文件 hello.txt\n## 约束\n无\n## 验收\nhello.txt 内容是 hello\n";
pub const GOAL: &str = "- [ ] hello.txt 存在\n- [ ] hello.txt 的内容是 hello\n";

// ---------------------------------------------------------------------------------
// Agents of the pipeline
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Agent {
    Clarifier,
    GoalSetter,
    Coordinator,
    Worker,
    Judge,
    /// `flower once`.
    Once,
}

pub fn agent_of(req: &Recorded) -> Agent {
    let system = req.system();
    if system.contains("需求确认者") {
        Agent::Clarifier
    } else if system.contains("目标设定者") {
        Agent::GoalSetter
    } else if system.contains("协调者派来的子代理") {
        Agent::Worker
    } else if system.contains("协调者") {
        Agent::Coordinator
    } else if system.contains("判定者") {
        Agent::Judge
    } else {
        Agent::Once
    }
}

/// How many assistant messages the request carries: the agent's turn number, from 0.
pub fn turn_of(req: &Recorded) -> usize {
    req.messages()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

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

/// The simplest complete pipeline: the clarifier writes the brief, the goal setter the
/// checklist, the coordinator sends one sub-agent that writes hello.txt, the judge passes.
pub fn simple_reply(req: &Recorded) -> Reply {
    let agent = agent_of(req);
    let turn = turn_of(req);
    match (agent, turn) {
        (Agent::Clarifier, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/需求.md", "content": BRIEF}),
        ),
        (Agent::Clarifier, _) => Reply::text("确认好了。"),
        (Agent::GoalSetter, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/目标.md", "content": GOAL}),
        ),
        (Agent::GoalSetter, _) => Reply::text("清单写好了。"),
        (Agent::Coordinator, 0) => Reply::tool_use(
            "Task",
            json!({"description": "写 hello", "prompt": "在工作区写 hello.txt,内容 hello"}),
        ),
        (Agent::Coordinator, _) => Reply::text("做完了。"),
        (Agent::Worker, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "hello.txt", "content": "hello"}),
        ),
        (Agent::Worker, _) => Reply::text("写好了 hello.txt。"),
        (Agent::Judge, _) => Reply::text("1. hello.txt 存在:是\n2. 内容是 hello:是\n判定:通过"),
        (Agent::Once, _) => Reply::text("好的。"),
    }
}

// ---------------------------------------------------------------------------------
// A project to run the binary in
// ---------------------------------------------------------------------------------

/// A temporary home with a project directory in it.
pub struct Project {
    _home: TempDir,
    pub home: PathBuf,
    pub dir: PathBuf,
}

impl Default for Project {
    fn default() -> Self {
        Project::new()
    }
}

impl Project {
    pub fn new() -> Project {
        let home = TempDir::new().unwrap();
        let path = home.path().canonicalize().unwrap();
        let dir = path.join("proj");
        std::fs::create_dir(&dir).unwrap();
        Project {
            home: path,
            dir,
            _home: home,
        }
    }

    /// `flower ARGS` in the project, against `server`, with small resilience settings
    /// (a test overrides any of them with `.env(…)` on the returned command).
    pub fn command(&self, server: &FakeServer, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flower"));
        server.configure(&mut cmd);
        cmd.current_dir(&self.dir)
            .args(args)
            .env("HOME", &self.home)
            .env("NO_COLOR", "1")
            .env("FLOWER_BASE_DELAY", "0.05")
            .env("FLOWER_MAX_DELAY", "0.2")
            .env("FLOWER_PROBE_INTERVAL", "0.05")
            .env("FLOWER_PROBE_TIMEOUT", "0.5")
            .env("FLOWER_MAX_OFFLINE_WAIT", "30")
            .env_remove("FLOWER_MAX_ATTEMPTS")
            .env_remove("FLOWER_RETRY_UNKNOWN")
            .env_remove("FLOWER_STREAM_IDLE_TIMEOUT")
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, server: &FakeServer, args: &[&str]) -> Output {
        self.command(server, args).output().expect("run flower")
    }

    /// Spawns `flower ARGS` with stdout discarded and stderr watched.
    pub fn spawn(&self, server: &FakeServer, args: &[&str]) -> (Child, StderrWatch) {
        spawn_watched(self.command(server, args))
    }

    /// Writes a complete brief and checklist, so that the pipeline skips straight to 干活.
    pub fn freeze_notes(&self) {
        std::fs::create_dir_all(self.dir.join("notes")).unwrap();
        std::fs::write(self.dir.join("notes/需求.md"), BRIEF).unwrap();
        std::fs::write(self.dir.join("notes/目标.md"), GOAL).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap_or_default()
    }

    pub fn json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel)).unwrap_or(Value::Null)
    }

    /// The rows of `runs/manifest.json` (empty when there is none).
    pub fn manifest(&self) -> Vec<Value> {
        self.json("runs/manifest.json")
            .as_array()
            .cloned()
            .unwrap_or_default()
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flower"));
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

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
