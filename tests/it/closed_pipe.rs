//! A reader that goes away (`flower "…" | head -3`, `2>&1 | less` quit early, a dying
//! `tee`) never panics flower: the run stops as on SIGTERM, with the in-flight step's
//! manifest row written, and the process dies by SIGPIPE, as a writer to a closed pipe
//! does. For stdout and stderr, in the pipeline and in `flower once`.

use crate::support::pipeline::{Agent, Project, REQUEST, agent_or_once, simple_reply, text};
use crate::support::{FakeServer, Gate, Reply};
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Clone, Copy, PartialEq)]
enum Stream {
    Stdout,
    Stderr,
}

/// The pipeline's script (a `once` turn 0 calls Write, so that a line goes to stderr),
/// with the first request held at the returned gate.
fn held_server() -> (FakeServer, Gate) {
    let gate = Gate::new();
    let at = gate.clone();
    let seen = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::with_handler(move |req, _| {
        let reply = match agent_or_once(req) {
            Agent::Once if req.messages().len() == 1 => {
                Reply::tool_use("Write", json!({"file_path": "once.txt", "content": "x"}))
            }
            _ => simple_reply(req),
        };
        match seen.fetch_add(1, Ordering::SeqCst) {
            0 => reply.gate_before(&at),
            _ => reply,
        }
    });
    (server, gate)
}

/// `flower ARGS` whose `stream` loses its reader while the first request is held.
fn run_with_reader_gone(
    project: &Project,
    server: &FakeServer,
    gate: &Gate,
    args: &[&str],
    stream: Stream,
) -> Output {
    let mut child = project
        .command(server, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(Duration::from_secs(60)), "no request");
    match stream {
        Stream::Stdout => drop(child.stdout.take()),
        Stream::Stderr => drop(child.stderr.take()),
    }
    gate.open();
    child.wait_with_output().unwrap()
}

fn assert_stopped_by_sigpipe(out: &Output) {
    let said = format!(
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?} {said}",
        out.status
    );
    assert!(!said.contains("panicked"), "{said}");
}

#[test]
fn the_pipeline_stops_like_sigterm_when_its_stdout_or_stderr_reader_goes_away() {
    for stream in [Stream::Stdout, Stream::Stderr] {
        let project = Project::new();
        let (server, gate) = held_server();
        let out = run_with_reader_gone(&project, &server, &gate, &[REQUEST], stream);
        assert_stopped_by_sigpipe(&out);
        // The step in flight got its row, as on SIGTERM; the next run continues it.
        let rows = project.manifest();
        assert!(
            rows.iter().any(|r| r["error"] == "killed-by-signal"),
            "{rows:#?}"
        );
        assert!(project.json("runs/lineage.json")["steps"]["确认需求"].is_string());
    }
}

#[test]
fn once_stops_when_its_stdout_or_stderr_reader_goes_away() {
    for stream in [Stream::Stdout, Stream::Stderr] {
        let project = Project::new();
        let (server, gate) = held_server();
        let out = run_with_reader_gone(&project, &server, &gate, &["once", "hi"], stream);
        assert_stopped_by_sigpipe(&out);
    }
}
