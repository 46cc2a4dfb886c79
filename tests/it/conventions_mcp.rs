//! MCP servers (`.mcp.json`, `mcpServers` in settings files) through the binary: a
//! real stdio server and a real streamable HTTP server (`fixtures/mcp_server.py`)
//! through whole tool calls, crashes and hangs mid-call (a tool error, one line for
//! the person, a restart at the next call), permission rules by `mcp__` names, no
//! server left behind when flower exits or is killed, and the tool list pinned per
//! session so a woken session sends the same prefix.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::pipeline::{Agent, Project, agent_of, simple_reply, text};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The real python executable (a shim would not run in the sandbox's read-only
/// home); `None`: no python3 here, the test is skipped.
fn python() -> Option<PathBuf> {
    let found = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|path| PathBuf::from(path.trim()))
        .filter(|path| path.is_file());
    if found.is_none() {
        support::skip::skip(
            support::skip::PYTHON,
            "no python3 to run the test MCP server",
        );
    }
    found
}

/// A project whose `.mcp.json` names the test server `t` (a copy of the script at a
/// path of its own, so its processes can be found), logging to `mcp.log` in its home.
struct Mcp {
    project: Project,
    script: PathBuf,
    log: PathBuf,
    python: PathBuf,
}

impl Mcp {
    fn new() -> Option<Mcp> {
        let python = python()?;
        let project = Project::new();
        let script = project.home.join("mcp-test-server.py");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/mcp_server.py"),
            &script,
        )
        .unwrap();
        let log = project.home.join("mcp.log");
        let mcp = Mcp {
            project,
            script,
            log,
            python,
        };
        mcp.write(
            ".mcp.json",
            &json!({"mcpServers": {"t": {
                "command": mcp.python,
                "args": [mcp.script, "stdio"],
                "env": {"MCP_LOG": "${TEST_MCP_LOG:-/nonexistent/log}"}
            }}}),
        );
        Some(mcp)
    }

    fn write(&self, rel: &str, value: &Value) {
        let path = self.project.dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    }

    fn command(&self, server: &FakeServer, args: &[&str]) -> Command {
        let mut cmd = self.project.command(server, args);
        cmd.env("TEST_MCP_LOG", &self.log);
        cmd
    }

    fn run(&self, server: &FakeServer, args: &[&str]) -> Output {
        self.command(server, args).output().unwrap()
    }

    /// `flower once --json ARGS`: the output and the parsed result.
    fn once(&self, server: &FakeServer, args: &[&str]) -> (Output, Value) {
        let mut all = vec!["once", "--json"];
        all.extend_from_slice(args);
        let out = self.run(server, &all);
        let value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out, value)
    }

    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn starts(&self) -> usize {
        self.log_lines()
            .iter()
            .filter(|l| l.starts_with("start"))
            .count()
    }

    /// The pids of live processes running this project's copy of the server.
    fn server_pids(&self) -> Vec<i32> {
        let needle = self.script.to_string_lossy().into_owned();
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            // A zombie has an empty command line: it is gone, only not reaped yet.
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Waits (polling /proc, up to a deadline) until no server process is left.
    fn assert_no_server_left(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.server_pids().is_empty() {
            assert!(
                Instant::now() < deadline,
                "MCP server processes outlived flower: {:?}",
                self.server_pids()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_for_log(&self, line: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while !self.log_lines().iter().any(|l| l == line) {
            assert!(
                Instant::now() < deadline,
                "no {line:?} in {:?}",
                self.log_lines()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn tool<'a>(req: &'a Recorded, name: &str) -> Option<&'a Value> {
    req.body["tools"]
        .as_array()?
        .iter()
        .find(|t| t["name"] == name)
}

fn result_text(result: &Value) -> String {
    crate::support::content_text(&result["content"])
}

/// Replies: the tool calls in order, one per turn, then a closing text.
fn calls(calls: Vec<(&'static str, Value)>) -> FakeServer {
    let calls = Arc::new(calls);
    FakeServer::with_handler(move |_, index| match calls.get(index) {
        Some((name, input)) => Reply::tool_use(*name, input.clone()),
        None => Reply::text("好了。"),
    })
}

#[test]
fn a_stdio_server_answers_a_whole_tool_call_and_is_gone_after_exit() {
    let Some(mcp) = Mcp::new() else { return };
    let server = calls(vec![
        ("mcp__t__echo", json!({"text": "你好"})),
        ("mcp__t__image", json!({})),
    ]);
    let (out, result) = mcp.once(&server, &["用一下 MCP 工具"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);

    // Offered with the server's own schema, after the built-in tools.
    let echo = tool(&requests[0], "mcp__t__echo").expect("echo offered");
    assert_eq!(echo["description"], "Says the text back.");
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));
    let names = requests[0].tool_names();
    assert!(
        names.iter().position(|n| n == "Read") < names.iter().position(|n| n == "mcp__t__echo")
    );
    for name in ["mcp__t__image", "mcp__t__crash", "mcp__t__hang"] {
        assert!(names.contains(&name.to_string()), "{names:?}");
    }

    // The result came back through the server.
    let echoed = &requests[1].tool_results()[0];
    assert_eq!(result_text(echoed), "echo: 你好");
    assert_ne!(echoed["is_error"], true);

    // Text, an image block and the resource link as a line.
    let image = &requests[2].tool_results()[0];
    let blocks = image["content"].as_array().expect("blocks");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["source"]["media_type"], "image/png");
    let said = result_text(image);
    assert!(said.contains("a picture:"), "{said}");
    assert!(
        said.contains("[resource link] dot.png <file:///pics/dot.png> (image/png)"),
        "{said}"
    );

    // Started once for the session, `${VAR}` expanded in its env.
    assert_eq!(mcp.starts(), 1, "{:?}", mcp.log_lines());
    // The list is pinned in the transcript, and `flower show` says so.
    let session = result["session_id"].as_str().unwrap();
    let show = mcp.run(&server, &["show", session]);
    assert!(
        text(&show.stdout).contains("[MCP 工具] 4 个"),
        "{}",
        text(&show.stdout)
    );
    mcp.assert_no_server_left();
}

#[test]
fn a_crash_or_a_hang_mid_call_is_a_tool_error_and_the_server_starts_again() {
    let Some(mcp) = Mcp::new() else { return };
    let server = calls(vec![
        ("mcp__t__crash", json!({})),
        ("mcp__t__echo", json!({"text": "一"})),
        ("mcp__t__hang", json!({})),
        ("mcp__t__echo", json!({"text": "二"})),
    ]);
    let out = mcp
        .command(&server, &["once", "试试"])
        .env("MCP_TOOL_TIMEOUT", "1500")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let crashed = &requests[1].tool_results()[0];
    assert_eq!(crashed["is_error"], true);
    let said = result_text(crashed);
    assert!(
        said.contains("stopped answering during the call of crash"),
        "{said}"
    );
    assert!(!has_chinese(&said), "the model's result in English: {said}");
    assert!(
        said.contains("crashing on purpose"),
        "its stderr is quoted: {said}"
    );
    assert_eq!(result_text(&requests[2].tool_results()[0]), "echo: 一");
    let hung = &requests[3].tool_results()[0];
    assert_eq!(hung["is_error"], true);
    assert!(
        result_text(hung).contains("did not answer the call of hang within 1 s"),
        "{hung}"
    );
    assert_eq!(result_text(&requests[4].tool_results()[0]), "echo: 二");
    // One line each for the person.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("MCP 服务器 t 在调用 crash 时断开"),
        "{stderr}"
    );
    assert!(
        stderr.contains("MCP 服务器 t 调用 hang 超时(1 秒)"),
        "{stderr}"
    );
    // Started, restarted after the crash, restarted after the hang.
    assert_eq!(mcp.starts(), 3, "{:?}", mcp.log_lines());
    mcp.assert_no_server_left();
}

#[test]
fn a_server_that_cannot_start_is_a_tool_error_and_one_line() {
    let Some(mcp) = Mcp::new() else { return };
    mcp.write(
        ".mcp.json",
        &json!({"mcpServers": {"t": {"command": mcp.python, "args": ["-c", "import sys; sys.stderr.write('no luck\\n'); sys.exit(1)"]}}}),
    );
    let server = calls(vec![]);
    let out = mcp.run(&server, &["once", "你好"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("MCP 服务器 t 没有列出工具"), "{stderr}");
    assert!(stderr.contains("no luck"), "{stderr}");
    assert!(
        server.requests()[0]
            .tool_names()
            .iter()
            .all(|n| !n.starts_with("mcp__"))
    );
}

#[test]
fn permission_rules_allow_and_deny_by_mcp_names() {
    let Some(mcp) = Mcp::new() else { return };
    // A settings file's deny rule on one tool: not offered, and refused if called.
    mcp.write(
        ".claude/settings.json",
        &json!({"permissions": {"deny": ["mcp__t__crash"]}}),
    );
    let server = calls(vec![("mcp__t__crash", json!({}))]);
    let out = mcp.run(&server, &["once", "试试"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let names = requests[0].tool_names();
    assert!(names.contains(&"mcp__t__echo".to_string()));
    assert!(!names.contains(&"mcp__t__crash".to_string()), "{names:?}");
    let refused = &requests[1].tool_results()[0];
    assert_eq!(refused["is_error"], true);
    assert!(
        result_text(refused).contains("deny rule mcp__t__crash"),
        "{refused}"
    );
    assert!(!mcp.log_lines().contains(&"call crash".to_string()));
    std::fs::remove_file(mcp.project.dir.join(".claude/settings.json")).unwrap();

    // An allow list naming one tool offers only it; `mcp__t__*` all of the server's.
    for (rule, offered) in [
        ("mcp__t__echo", vec!["mcp__t__echo"]),
        (
            "mcp__t__*",
            vec![
                "mcp__t__echo",
                "mcp__t__image",
                "mcp__t__crash",
                "mcp__t__hang",
            ],
        ),
        (
            "mcp__t",
            vec![
                "mcp__t__echo",
                "mcp__t__image",
                "mcp__t__crash",
                "mcp__t__hang",
            ],
        ),
    ] {
        let server = calls(vec![("mcp__t__echo", json!({"text": "x"}))]);
        let out = mcp.run(&server, &["once", "试试", "--allowed-tools", rule]);
        assert!(out.status.success(), "stderr: {}", text(&out.stderr));
        let requests = server.requests();
        assert_eq!(requests[0].tool_names(), offered, "{rule}");
        assert_eq!(
            result_text(&requests[1].tool_results()[0]),
            "echo: x",
            "{rule}"
        );
    }

    // Denying the server: none of its tools, and (with no sub-agent that could use
    // it: `once`'s Task sub-agent has rules of its own) it is never started.
    let before = mcp.starts();
    let server = calls(vec![("mcp__t__echo", json!({"text": "x"}))]);
    let out = mcp.run(
        &server,
        &["once", "试试", "--disallowed-tools", "mcp__t", "Task"],
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert!(
        requests[0]
            .tool_names()
            .iter()
            .all(|n| !n.starts_with("mcp__"))
    );
    assert!(result_text(&requests[1].tool_results()[0]).contains("deny rule mcp__t"));
    // An agent allowed no MCP tool does not start the server either.
    let server = calls(vec![]);
    let out = mcp.run(&server, &["once", "试试", "--allowed-tools", "Read"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(mcp.starts(), before, "{:?}", mcp.log_lines());
    mcp.assert_no_server_left();
}

#[test]
fn a_terminated_flower_leaves_no_server_behind() {
    let Some(mcp) = Mcp::new() else { return };
    let server = calls(vec![("mcp__t__hang", json!({}))]);
    let mut child = mcp
        .command(&server, &["once", "等着"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    mcp.wait_for_log("call hang");
    assert!(
        !mcp.server_pids().is_empty(),
        "the server runs during the call"
    );
    // SAFETY: signals the flower process this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    mcp.assert_no_server_left();
}

#[test]
fn the_tool_list_is_pinned_so_a_woken_session_sends_the_same_prefix() {
    let Some(mcp) = Mcp::new() else { return };
    // Run 1: the reply after the call is held, and flower is killed there.
    let gate = Gate::new();
    let holding = gate.clone();
    let server = FakeServer::with_handler(move |_, index| match index {
        0 => Reply::tool_use("mcp__t__echo", json!({"text": "一"})),
        _ => Reply::text("never delivered").gate_before(&holding),
    });
    let mut child = mcp
        .command(&server, &["once", "用 echo"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "the second request never came");
    child.kill().unwrap();
    child.wait().unwrap();
    let held = server.requests()[1].clone();
    // Killed without unwinding: the server sees its stdin close and goes.
    mcp.assert_no_server_left();

    // The server now lists one more tool.
    let key = flower::stores::project_key(&mcp.project.dir);
    let sessions = mcp.run(&server, &["store", "sessions", &key]);
    let sessions: Value = serde_json::from_slice(&sessions.stdout).unwrap();
    let id = sessions[0]["session_id"].as_str().unwrap().to_string();
    let server = FakeServer::with_handler(|_, index| match index {
        0 => Reply::tool_use("mcp__t__echo", json!({"text": "二"})),
        _ => Reply::text("好了。"),
    });
    let out = mcp
        .command(&server, &["once", "--json", "--resume", &id, "继续"])
        .env("MCP_EXTRA_TOOL", "extra")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let woken = server.requests();
    // The tools and the system prompt: byte for byte what the cache holds.
    assert_eq!(woken[0].body["tools"], held.body["tools"]);
    assert_eq!(woken[0].body["system"], held.body["system"]);
    assert!(tool(&woken[0], "mcp__t__extra").is_none());
    // The pinned tools still work (the server is started again for the call).
    assert_eq!(result_text(&woken[1].tool_results()[0]), "echo: 二");

    // A new session lists again and gets the new tool.
    let server = calls(vec![]);
    let out = mcp
        .command(&server, &["once", "新的"])
        .env("MCP_EXTRA_TOOL", "extra")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(tool(&server.requests()[0], "mcp__t__extra").is_some());
    mcp.assert_no_server_left();
}

#[test]
fn a_bad_mcp_config_stops_flower_with_exit_2_naming_file_and_key() {
    let Some(mcp) = Mcp::new() else { return };
    let server = calls(vec![]);
    for (file, value, key) in [
        (
            ".mcp.json",
            json!({"mcpServers": {"t": {"command": "x", "args": "not a list"}}}),
            "mcpServers.t.args",
        ),
        (
            ".mcp.json",
            json!({"mcpServers": {"t": {"command": "x", "env": {"A": "${SURELY_UNSET_VAR}"}}}}),
            "mcpServers.t.env.A",
        ),
        (
            ".claude/settings.json",
            json!({"mcpServers": {"h": {"type": "http", "url": "ftp://x"}}}),
            "mcpServers.h.url",
        ),
    ] {
        let _ = std::fs::remove_file(mcp.project.dir.join(".mcp.json"));
        mcp.write(file, &value);
        let out = mcp.run(&server, &["once", "你好"]);
        assert_eq!(out.status.code(), Some(2), "{file}: {}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(stderr.contains(file) && stderr.contains(key), "{stderr}");
        let _ = std::fs::remove_file(mcp.project.dir.join(file));
    }
    for (name, value) in [("MCP_TIMEOUT", "soon"), ("MCP_TOOL_TIMEOUT", "0")] {
        let out = mcp
            .command(&server, &["once", "你好"])
            .env(name, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(text(&out.stderr).contains(name));
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[test]
fn in_the_pipeline_only_the_workers_get_mcp_tools_and_the_server_starts_once() {
    let Some(mcp) = Mcp::new() else { return };
    let server = FakeServer::with_handler(|req, _| {
        if agent_of(req) == Agent::Worker && support::pipeline::turn_of(req) == 0 {
            return Reply::tool_use("mcp__t__echo", json!({"text": "worker"})).then_tool_use(
                "Write",
                json!({"file_path": "hello.txt", "content": "hello"}),
            );
        }
        simple_reply(req)
    });
    let out = mcp.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    for req in &requests {
        let has = req.tool_names().iter().any(|n| n.starts_with("mcp__"));
        assert_eq!(has, agent_of(req) == Agent::Worker, "{:?}", agent_of(req));
    }
    let worker = requests
        .iter()
        .find(|r| agent_of(r) == Agent::Worker && support::pipeline::turn_of(r) == 1)
        .unwrap();
    assert_eq!(result_text(&worker.tool_results()[0]), "echo: worker");
    assert_eq!(mcp.starts(), 1, "{:?}", mcp.log_lines());
    // `flower state -v` says which servers there are.
    let state = mcp.run(&server, &["state", "-v"]);
    let said = text(&state.stdout);
    assert!(
        said.contains("MCP 服务器") && said.contains("t (stdio)"),
        "{said}"
    );
    mcp.assert_no_server_left();
}

/// The test's HTTP server process (killed when dropped) and its URL.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_server(mcp: &Mcp, token: &str) -> HttpServer {
    let port_file = mcp.project.home.join("port");
    let child = Command::new(&mcp.python)
        .arg(&mcp.script)
        .arg("http")
        .arg(&port_file)
        .arg(token)
        .env("MCP_LOG", &mcp.log)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while !port_file.exists() {
        assert!(
            Instant::now() < deadline,
            "the HTTP server never said its port"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let port = std::fs::read_to_string(&port_file).unwrap();
    HttpServer {
        child,
        url: format!("http://127.0.0.1:{}/mcp", port.trim()),
    }
}

#[test]
fn an_http_server_answers_with_its_headers_and_a_dropped_call_reconnects() {
    let Some(mcp) = Mcp::new() else { return };
    let http = http_server(&mcp, "s3cret");
    let _ = std::fs::remove_file(mcp.project.dir.join(".mcp.json"));
    mcp.write(
        ".claude/settings.json",
        &json!({"mcpServers": {"web": {
            "type": "http",
            "url": http.url,
            "headers": {"Authorization": "Bearer ${TEST_MCP_TOKEN}"}
        }}}),
    );
    let server = calls(vec![
        ("mcp__web__echo", json!({"text": "网"})),
        ("mcp__web__crash", json!({})),
        ("mcp__web__echo", json!({"text": "又来"})),
    ]);
    let out = mcp
        .command(&server, &["once", "用网上的工具"])
        .env("TEST_MCP_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert!(tool(&requests[0], "mcp__web__echo").is_some());
    assert_eq!(result_text(&requests[1].tool_results()[0]), "echo: 网");
    let dropped = &requests[2].tool_results()[0];
    assert_eq!(dropped["is_error"], true, "{dropped}");
    assert!(result_text(dropped).contains("crash"), "{dropped}");
    assert!(
        text(&out.stderr).contains("MCP 服务器 web"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(result_text(&requests[3].tool_results()[0]), "echo: 又来");
    // Connected, then connected again after the dropped call.
    assert_eq!(mcp.starts(), 2, "{:?}", mcp.log_lines());

    // A wrong token: the server refuses, the session goes on without its tools.
    let server = calls(vec![]);
    let out = mcp
        .command(&server, &["once", "再试"])
        .env("TEST_MCP_TOKEN", "wrong")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("MCP 服务器 web 没有列出工具"),
        "{}",
        text(&out.stderr)
    );
    assert!(tool(&server.requests()[0], "mcp__web__echo").is_none());
    drop(http);
}

#[test]
fn settings_take_servers_by_precedence_and_expand_variables() {
    use flower::settings::{Environment, Flags, Settings};
    use flower::tools::mcp::Transport;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    let put = |path: PathBuf, value: Value| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, value.to_string()).unwrap();
    };
    put(
        home.join(".claude/settings.json"),
        json!({"mcpServers": {"a": {"command": "user-a"}, "b": {"command": "user-b"}}}),
    );
    put(
        ws.join(".mcp.json"),
        json!({"mcpServers": {"a": {"command": "json-a"}, "c": {"command": "json-c"}}}),
    );
    put(
        ws.join(".claude/settings.json"),
        json!({"env": {"TOKEN": "from-file"}, "mcpServers": {"c": {
            "url": "http://${HOST:-localhost}/mcp",
            "headers": {"Authorization": "Bearer ${TOKEN}"}
        }}}),
    );
    put(
        ws.join(".claude/settings.local.json"),
        json!({"mcpServers": {"b": {"command": "local-b", "args": ["${ARG}", "$NOT_EXPANDED"]}}}),
    );
    let env = Environment::from_vars([("HOME", home.to_str().unwrap()), ("ARG", "x")]);
    let flags = Flags {
        workspace: Some(ws.clone()),
        ..Flags::default()
    };
    let settings = Settings::load(&flags, &env).unwrap();
    let servers = &settings.mcp().servers;
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    // A server of the user's file is not replaced by a workspace file's of the same
    // name (the stricter wins, issue #40): each such one is said on stderr.
    assert!(
        matches!(&servers[0].transport, Transport::Stdio { command, .. } if command == "user-a")
    );
    assert_eq!(servers[0].source, home.join(".claude/settings.json"));
    assert!(matches!(&servers[1].transport,
        Transport::Stdio { command, .. } if command == "user-b"));
    for (file, name) in [(".mcp.json", "a"), (".claude/settings.local.json", "b")] {
        let said = format!("{} 里的 mcpServers.{name}", ws.join(file).display());
        assert!(
            settings.warnings().iter().any(|w| w.contains(&said)),
            "{said}: {:?}",
            settings.warnings()
        );
    }
    // Among the workspace's files the later one still replaces (`c` above), and a
    // variable of its own expands.
    put(
        ws.join(".claude/settings.local.json"),
        json!({"mcpServers": {"d": {"command": "local-d", "args": ["${ARG}", "$NOT_EXPANDED"]}}}),
    );
    let local = Settings::load(&flags, &env).unwrap();
    assert!(local.mcp().servers.iter().any(|s| matches!(&s.transport,
        Transport::Stdio { command, args, .. } if command == "local-d" && args == &["x", "$NOT_EXPANDED"])));
    match &servers[2].transport {
        Transport::Http { url, headers } => {
            assert_eq!(url, "http://localhost/mcp");
            assert_eq!(
                headers,
                &[("Authorization".to_string(), "Bearer from-file".to_string())]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(settings.mcp_rules(), ["mcp__a", "mcp__b", "mcp__c"]);
    assert_eq!(settings.conventions().mcp, *settings.mcp());
}

#[test]
fn a_server_that_fails_to_start_for_a_call_is_tried_again_at_the_next_call() {
    let Some(mcp) = Mcp::new() else { return };
    let server = calls(vec![("mcp__t__echo", json!({"text": "一"}))]);
    let (out, result) = mcp.once(&server, &["用 echo"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let id = result["session_id"].as_str().unwrap().to_string();

    // The resumed session offers the pinned tools; the server is broken now, and is
    // mended while the model reads the first failure.
    let good = std::fs::read_to_string(&mcp.script).unwrap();
    std::fs::write(
        &mcp.script,
        "import sys\nsys.stderr.write('broken build\\n')\nsys.exit(1)\n",
    )
    .unwrap();
    let script = mcp.script.clone();
    let server = FakeServer::with_handler(move |_, index| match index {
        0 => Reply::tool_use("mcp__t__echo", json!({"text": "坏"})),
        1 => {
            std::fs::write(&script, &good).unwrap();
            Reply::tool_use("mcp__t__echo", json!({"text": "好"}))
        }
        _ => Reply::text("好了。"),
    });
    // Without --json, so that the person's lines are printed.
    let out = mcp.run(&server, &["once", "再用", "--resume", &id]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let failed = &requests[1].tool_results()[0];
    assert_eq!(failed["is_error"], true);
    let said = result_text(failed);
    assert!(
        said.contains("could not be started") && said.contains("broken build"),
        "{said}"
    );
    assert!(!has_chinese(&said), "the model's result in English: {said}");
    assert!(
        text(&out.stderr).contains("MCP 服务器 t 启动失败"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(result_text(&requests[2].tool_results()[0]), "echo: 好");
    mcp.assert_no_server_left();
}

/// Whether `text` has Chinese in it: the model's audience gets English (issue #41.13).
fn has_chinese(text: &str) -> bool {
    text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

/// A server or tool name with characters the API refuses in a tool name (a `.`, a
/// space) is offered with those as `_`: every name of the request fits the API's
/// `^[a-zA-Z0-9_-]{1,128}$` (one name that does not is a 400 for every request of the
/// session), and the tool is called under its offered name.
#[test]
fn server_and_tool_names_with_dots_are_offered_as_the_api_takes_them() {
    let Some(mcp) = Mcp::new() else { return };
    mcp.write(
        ".mcp.json",
        &json!({"mcpServers": {"t.v2 x": {
            "command": mcp.python,
            "args": [mcp.script, "stdio"],
            "env": {"MCP_LOG": "${TEST_MCP_LOG:-/nonexistent/log}"}
        }}}),
    );
    let server = calls(vec![("mcp__t_v2_x__echo", json!({"text": "点"}))]);
    let out = mcp
        .command(&server, &["once", "--json", "用 echo"])
        .env("MCP_EXTRA_TOOL", "read.file")
        .output()
        .unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let names = requests[0].tool_names();
    for name in ["mcp__t_v2_x__echo", "mcp__t_v2_x__read_file"] {
        assert!(names.contains(&name.to_string()), "{names:?}");
    }
    for name in &names {
        assert!(
            !name.is_empty()
                && name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{name:?} is a 400"
        );
    }
    assert_eq!(result_text(&requests[1].tool_results()[0]), "echo: 点");
    mcp.assert_no_server_left();
}
