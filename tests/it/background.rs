//! Background commands through the real binary against the fake Messages API: Bash's
//! `run_in_background` returns an id at once, `TaskOutput` reads what is new,
//! `TaskStop` stops it; the output kept on disk is capped; a command still running when
//! its session ends is killed, and so is one running at a Ctrl-C.

use crate::faults_support::{PATIENCE, signal, spawn_watched, wait_exit};
use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::pipeline::flower_with_env;
use support::{FakeServer, Flower, Gate, Recorded, Reply, content_text};
use tempfile::TempDir;

/// The text of the newest message's first tool result.
fn result_text(req: &Recorded) -> String {
    req.tool_results()
        .first()
        .map(|r| content_text(&r["content"]))
        .unwrap_or_default()
}

/// The id a `run_in_background` result names.
fn started_id(req: &Recorded) -> String {
    let text = result_text(req);
    let rest = text
        .split("with ID: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no id in {text:?}"));
    rest.split('.').next().unwrap().to_string()
}

fn background(command: &str) -> Reply {
    Reply::tool_use(
        "Bash",
        json!({"command": command, "run_in_background": true, "description": "后台跑"}),
    )
}

/// The records in `runs/background/`.
pub fn records(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir.join("runs/background")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

fn the_record(dir: &Path) -> Value {
    let all = records(dir);
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().unwrap()
}

/// Waits until `ready` holds (an event on disk), or fails after [`PATIENCE`].
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !ready() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the command's process group still has a live member (zombies waiting for
/// a reaper do not count).
pub fn group_alive(pgid: i64) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                return false;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
}

pub fn leader(record: &Value) -> i64 {
    record["leader"]["pid"].as_i64().expect("a leader pid")
}

fn output_file(record: &Value) -> PathBuf {
    PathBuf::from(record["output"].as_str().unwrap())
}

fn run(server: &FakeServer, dir: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let out = flower_with_env(server, dir, &["once", "后台的活"], env);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn start_read_and_stop() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let server = {
        let ws = ws.clone();
        FakeServer::with_handler(move |req, n| match n {
            0 => background("echo started; exec sleep 600"),
            1 => {
                // The command has printed (an event on disk) before it is read.
                let record = the_record(&ws);
                wait_until("the command printed", || {
                    std::fs::read_to_string(output_file(&record))
                        .is_ok_and(|o| o.contains("started"))
                });
                Reply::tool_use(
                    "TaskOutput",
                    json!({"task_id": started_id(req), "block": false}),
                )
            }
            2 => Reply::tool_use(
                "TaskOutput",
                json!({"task_id": the_record(&ws)["id"], "block": false}),
            ),
            3 => Reply::tool_use("TaskStop", json!({"task_id": the_record(&ws)["id"]})),
            _ => Reply::text("好了"),
        })
    };
    run(&server, &ws, &[]);
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let tools = requests[0].tool_names();
    assert!(
        tools.contains(&"TaskOutput".to_string()) && tools.contains(&"TaskStop".to_string()),
        "{tools:?}"
    );
    assert!(
        tools.iter().all(|t| t != "BashOutput" && t != "KillShell"),
        "{tools:?}"
    );
    let first = result_text(&requests[1]);
    assert!(first.contains("runs/background/"), "{first}");
    let read = result_text(&requests[2]);
    assert!(read.contains("running"), "{read}");
    assert!(read.contains("started"), "{read}");
    // Only what is new since the last read.
    let again = result_text(&requests[3]);
    assert!(again.contains("(no new output)"), "{again}");
    let stopped = result_text(&requests[4]);
    assert!(
        stopped.starts_with("Stopped background command"),
        "{stopped}"
    );
    let record = the_record(&ws);
    assert_eq!(record["end"]["how"], "stopped", "{record}");
    assert!(!group_alive(leader(&record)), "the command still runs");
}

#[test]
fn output_over_the_cap_keeps_the_tail_and_says_what_was_dropped() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let server = {
        let ws = ws.clone();
        FakeServer::with_handler(move |_, n| match n {
            0 => background("seq 1 100000"),
            1 => Reply::tool_use(
                "TaskOutput",
                json!({"task_id": the_record(&ws)["id"], "block": true, "timeout": 60000}),
            ),
            _ => Reply::text("好了"),
        })
    };
    run(&server, &ws, &[("FLOWER_BACKGROUND_OUTPUT_CAP", "4096")]);
    let requests = server.requests();
    let read = result_text(&requests[2]);
    assert!(read.contains("exited with code 0"), "{read}");
    assert!(read.contains("bytes of new output were dropped"), "{read}");
    assert!(read.trim_end().ends_with("100000"), "{read}");
    // Capped like a foreground result, too.
    assert!(read.len() < 40_000, "{}", read.len());
    let record = the_record(&ws);
    let kept = std::fs::read_to_string(output_file(&record)).unwrap();
    assert!(kept.len() <= 4096, "{}", kept.len());
    assert!(kept.ends_with("99999\n100000\n"));
}

#[test]
fn a_bad_cap_is_a_usage_error_before_any_request() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("不该问")]);
    let out = Flower::new(&["once", "hi"])
        .server(&server)
        .dir(dir.path())
        .env("FLOWER_BACKGROUND_OUTPUT_CAP", "12")
        .output();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("FLOWER_BACKGROUND_OUTPUT_CAP"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(server.requests().is_empty());
}

#[test]
fn a_command_still_running_when_the_session_ends_is_killed() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let server = {
        let ws = ws.clone();
        FakeServer::with_handler(move |_, n| match n {
            0 => background("touch marker; exec sleep 600"),
            _ => {
                wait_until("the command started", || ws.join("marker").exists());
                Reply::text("不等它了")
            }
        })
    };
    run(&server, &ws, &[]);
    let record = the_record(&ws);
    assert_eq!(record["end"]["how"], "session-ended", "{record}");
    assert!(
        !group_alive(leader(&record)),
        "the command outlived its session"
    );
}

#[test]
fn ctrl_c_kills_what_runs_in_the_background() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |_, n| match n {
            0 => background("touch marker; exec sleep 600"),
            1 => Reply::text("等着").gate_before(&gate),
            _ => Reply::text("好了"),
        })
    };
    let mut cmd = Flower::new(&["once", "后台的活"])
        .server(&server)
        .dir(&ws)
        .attempts(1)
        .stdin_null()
        .command();
    cmd.stdout(std::process::Stdio::null());
    let (mut child, stderr) = spawn_watched(cmd);
    assert!(gate.wait_reached(PATIENCE), "{}", stderr.all());
    wait_until("the command started", || ws.join("marker").exists());
    let pgid = leader(&the_record(&ws));
    assert!(group_alive(pgid));
    signal(&child, libc::SIGINT);
    wait_until("the Ctrl-C stopped it", || {
        the_record(&ws)["end"]["how"] == "interrupted"
    });
    assert!(!group_alive(pgid), "Ctrl-C left it running");
    gate.open();
    let status = wait_exit(&mut child, PATIENCE);
    assert!(status.success(), "{}", stderr.all());
}

/// A SIGKILL leaves the command running (its supervisor is not flower); the next
/// start on the run directory kills it, and the resumed session's first request says
/// it no longer runs, after the new prompt.
#[test]
fn after_a_sigkill_the_next_start_kills_the_leftover_and_tells_the_session() {
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |_, n| match n {
            0 => background("touch marker; exec sleep 600"),
            1 => Reply::text("等着").gate_before(&gate),
            _ => Reply::text("知道了"),
        })
    };
    let cmd = Flower::new(&["once", "后台的活"])
        .server(&server)
        .dir(&ws)
        .attempts(1)
        .stdin_null()
        .command();
    let (mut child, _stderr) = spawn_watched(cmd);
    assert!(gate.wait_reached(PATIENCE));
    wait_until("the command started", || ws.join("marker").exists());
    let record = the_record(&ws);
    let pgid = leader(&record);
    signal(&child, libc::SIGKILL);
    wait_exit(&mut child, PATIENCE);
    gate.open();
    assert!(group_alive(pgid), "gone before the next start");

    let session = record["owner"]["session_id"].as_str().unwrap();
    let before = server.requests().len();
    let out = flower_with_env(&server, &ws, &["once", "接着来", "--resume", session], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!group_alive(pgid), "the leftover still runs");
    let record = the_record(&ws);
    assert_eq!(record["end"]["how"], "killed-on-start", "{record}");
    let first = &server.requests()[before];
    let texts: Vec<String> = first.messages().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .collect();
    let id = record["id"].as_str().unwrap();
    assert_eq!(
        texts.first().map(String::as_str),
        Some("接着来"),
        "{texts:?}"
    );
    let note = texts.last().unwrap();
    assert!(
        note.contains("no longer run")
            && note.contains(id)
            && note.contains("killed when flower was stopped"),
        "{note}"
    );
}

/// The live status line says what runs in the background while the run waits, and
/// stops saying it once the command ended with its session.
#[test]
fn the_status_line_lists_what_runs_in_the_background() {
    use crate::faults_support::{Agent, agent_of, simple_reply, turn_of};
    use crate::terminal::{Pty, TERMINAL_ENV, exited};
    let project = support::pipeline::Project::with("proj", TERMINAL_ENV);
    project.freeze_notes();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        FakeServer::with_handler(move |req, _| match (agent_of(req), turn_of(req)) {
            (Agent::Worker, 0) => background("exec sleep 600"),
            (Agent::Worker, 1) => Reply::text("它在跑。").gate_before(&gate),
            _ => simple_reply(req),
        })
    };
    let mut pty = Pty::spawn(project.flower(&server, &[]));
    // The run's notes are there: Enter goes on with them.
    pty.expect("直接回车 = 接着做");
    pty.line("");
    assert!(gate.wait_reached(PATIENCE), "{}", pty.output());
    pty.expect(" · 后台 1:exec sleep 600");
    gate.open();
    assert_eq!(exited(pty.wait()), Some(0), "{}", pty.output());
    let record = the_record(&project.dir);
    assert_eq!(record["end"]["how"], "session-ended", "{record}");
}

/// A record written where `/proc` could not give its flower's start time holds 0: the
/// next start cannot tell whether that flower still runs, so it leaves the command
/// running and says so, instead of taking a live flower for gone.
#[test]
fn a_record_without_its_flowers_start_time_is_left_alone_with_a_warning() {
    use std::os::unix::process::CommandExt as _;
    let dir = TempDir::new().unwrap();
    let ws = dir.path().to_path_buf();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = sleeper.id() as i64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ticks: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let records_dir = ws.join("runs/background");
    std::fs::create_dir_all(&records_dir).unwrap();
    let record = json!({
        "id": "bg-unjudged",
        "command": "sleep 600",
        "owner": {"session_id": "00000000-0000-4000-8000-000000000001"},
        "leader": {"pid": pid, "start_ticks": ticks},
        // A live flower (this test) whose start time was not read.
        "flower": {"pid": std::process::id(), "start_ticks": 0},
        "started_at": 1,
        "output": records_dir.join("bg-unjudged.out"),
    });
    std::fs::write(records_dir.join("bg-unjudged.json"), record.to_string()).unwrap();
    let server = FakeServer::with_handler(|_, _| Reply::text("好了"));
    let out = run(&server, &ws, &[]);
    let alive = group_alive(pid);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        alive,
        "the command of a flower that may still run was killed"
    );
    assert!(the_record(&ws).get("end").is_none(), "{}", the_record(&ws));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("bg-unjudged").count(), 1, "{stderr}");
    assert!(stderr.contains("没有结束它们"), "{stderr}");
}
