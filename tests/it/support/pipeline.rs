//! Driving flower's default pipeline (确认需求 → 设定目标 → 干活 → 判定) against the fake
//! Messages API: which agent a request comes from, a complete scripted run, a home with a
//! project directory to run the real binary in, and request helpers.
//!
//! Test files add what only they need with their own `impl Project` blocks.

use super::Flower;
use super::{FakeServer, Recorded, Reply};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use tempfile::TempDir;

/// What the user asks for, in the tests that start a whole run.
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
    /// `flower once`: any other system prompt (only [`agent_or_once`] says so).
    Once,
}

/// The pipeline agent a request comes from, by its system prompt; `None` for any other.
fn pipeline_agent(system: &str) -> Option<Agent> {
    if system.contains("需求确认者") {
        Some(Agent::Clarifier)
    } else if system.contains("目标设定者") {
        Some(Agent::GoalSetter)
    } else if system.contains("协调者派来的子代理") {
        Some(Agent::Worker)
    } else if system.contains("协调者") {
        Some(Agent::Coordinator)
    } else if system.contains("判定者") {
        Some(Agent::Judge)
    } else {
        None
    }
}

/// The pipeline agent a request comes from; panics on any other system prompt (never
/// says [`Agent::Once`]).
pub fn agent_of(req: &Recorded) -> Agent {
    let system = req.system();
    pipeline_agent(&system).unwrap_or_else(|| panic!("unknown agent: {system}"))
}

/// The pipeline agent a request comes from, or [`Agent::Once`] for any other.
pub fn agent_or_once(req: &Recorded) -> Agent {
    pipeline_agent(&req.system()).unwrap_or(Agent::Once)
}

/// How many assistant messages the request carries: the agent's turn number, from 0.
pub fn turn_of(req: &Recorded) -> usize {
    req.messages()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// The simplest complete pipeline, by turn: the clarifier writes the brief, the goal
/// setter the checklist, the coordinator sends one sub-agent that writes hello.txt, the
/// judge passes; `flower once` just answers.
pub fn simple_reply(req: &Recorded) -> Reply {
    let agent = agent_or_once(req);
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
// Requests
// ---------------------------------------------------------------------------------

/// `value` without the prompt-cache markers (they move to the newest message on every
/// turn).
pub fn without_cache_marks(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), without_cache_marks(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_cache_marks).collect()),
        other => other.clone(),
    }
}

/// Messages without their prompt-cache markers, as one JSON array.
pub fn plain(messages: &[Value]) -> Value {
    without_cache_marks(&Value::Array(messages.to_vec()))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------

/// Environment for a project's `flower` commands, on top of `HOME` and `NO_COLOR`:
/// `Some` sets a variable, `None` removes it.
pub type Env = &'static [(&'static str, Option<&'static str>)];

/// One attempt per model call: a failure shows at once.
pub const ONE_ATTEMPT: Env = &[("FLOWER_MAX_ATTEMPTS", Some("1"))];

/// `flower ARGS` in `dir`, against `server`, with one attempt per model call (no `HOME`
/// of its own).
pub fn flower_in(server: &FakeServer, dir: &Path, args: &[&str]) -> Output {
    flower_with_env(server, dir, args, &[])
}

/// [`flower_in`] with `env` on top.
pub fn flower_with_env(
    server: &FakeServer,
    dir: impl AsRef<Path>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    Flower::new(args)
        .server(server)
        .dir(dir)
        .attempts(1)
        .envs(env.iter().copied())
        .output()
}

/// A command flower refuses: its arguments after the common ones, its environment,
/// what its stderr says.
pub type Refused<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

/// `flower BASE ARGS` in `dir` against `server` for each case, stdin closed and no
/// `FLOWER_STORE`: each exits 2 with its message, and not one request is made. Their
/// stderr, in order.
pub fn refused_before_any_request(
    server: &FakeServer,
    dir: impl AsRef<Path>,
    base: &[&str],
    cases: &[Refused<'_>],
) -> Vec<String> {
    let mut said = Vec::new();
    for (args, env, says) in cases {
        let args = [base, args].concat();
        let out = Flower::new(&args)
            .server(server)
            .dir(dir.as_ref())
            .attempts(1)
            .env_remove("FLOWER_STORE")
            .envs(env.iter().copied())
            .stdin_null()
            .output();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} {env:?}: {says}: {stderr}");
        said.push(stderr);
    }
    assert_eq!(server.request_count(), 0);
    said
}

/// A temporary home with a project directory in it, so the banner can show `~/…`.
pub struct Project {
    _home: TempDir,
    pub home: PathBuf,
    pub dir: PathBuf,
    env: Env,
}

impl Default for Project {
    fn default() -> Self {
        Project::new()
    }
}

impl Project {
    /// `~/proj`, with [`ONE_ATTEMPT`].
    pub fn new() -> Project {
        Project::with("proj", ONE_ATTEMPT)
    }

    /// `~/REL` (made with its parents), whose commands get `env`.
    pub fn with(rel: &str, env: Env) -> Project {
        let home = TempDir::new().unwrap();
        let path = home.path().canonicalize().unwrap();
        let dir = path.join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        Project {
            home: path,
            dir,
            _home: home,
            env,
        }
    }

    /// `flower ARGS` in the project, pointed at `server`, with the project's environment;
    /// stdio as the caller sets it.
    pub fn flower(&self, server: &FakeServer, args: &[&str]) -> Command {
        let mut cmd = Flower::bin().server(server).command();
        cmd.current_dir(&self.dir)
            .args(args)
            .env("HOME", &self.home)
            .env("NO_COLOR", "1");
        for (name, value) in self.env {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        cmd
    }

    /// [`Project::flower`] with stdin closed (a test overrides any setting with `.env(…)`
    /// on the returned command).
    pub fn command(&self, server: &FakeServer, args: &[&str]) -> Command {
        let mut cmd = self.flower(server, args);
        cmd.stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, server: &FakeServer, args: &[&str]) -> Output {
        self.command(server, args).output().expect("run flower")
    }

    /// Spawns `flower ARGS` with stdout and stderr discarded.
    pub fn spawn(&self, server: &FakeServer, args: &[&str]) -> Child {
        self.command(server, args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn flower")
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap_or_default()
    }

    pub fn json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel)).unwrap_or(Value::Null)
    }

    /// `runs/sessions.db` replaced by `bytes` (its WAL and shared-memory files gone).
    pub fn replace_sessions_db(&self, bytes: &[u8]) {
        let runs = self.dir.join("runs");
        for side in ["sessions.db-wal", "sessions.db-shm"] {
            let _ = std::fs::remove_file(runs.join(side));
        }
        std::fs::write(runs.join("sessions.db"), bytes).unwrap();
    }

    /// The rows of `runs/manifest.json` (empty when there is none).
    pub fn manifest(&self) -> Vec<Value> {
        self.json("runs/manifest.json")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The step names of the manifest's rows, in order.
    pub fn steps(&self) -> Vec<String> {
        self.manifest()
            .iter()
            .map(|r| r["step"].as_str().unwrap().to_string())
            .collect()
    }
}

/// A project where one whole pipeline run has finished (every step, the judge passed),
/// and the server that answered it.
pub fn finished_run() -> (Project, FakeServer) {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    (project, server)
}
