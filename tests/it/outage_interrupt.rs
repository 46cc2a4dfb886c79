//! Ctrl-C once during an outage wait (issue #41.3) behaves as during a model turn: the
//! wait stops, the person is asked for a line (a second Ctrl-C exits), and the same
//! session is tried again; without a terminal, the line says how to stop.

use crate::faults_support::{PATIENCE, signal, wait_exit};
use crate::support;
use crate::terminal::{AFTER_INTERRUPT, Pty, TURN_INTERRUPTED, exited};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use support::pipeline::{Env, Project, text};
use support::{FakeServer, Gate, Reply};

/// Small retry settings, and an outage wait far longer than any test.
const ENV: Env = &[
    ("TERM", Some("xterm")),
    ("FLOWER_BASE_DELAY", Some("0.05")),
    ("FLOWER_MAX_DELAY", Some("0.2")),
    ("FLOWER_PROBE_INTERVAL", Some("0.05")),
    ("FLOWER_PROBE_TIMEOUT", Some("0.5")),
    ("FLOWER_MAX_OFFLINE_WAIT", Some("600")),
    ("FLOWER_MAX_ATTEMPTS", None),
];

/// A server whose first reply is held at the returned gate; [`go_away`] then makes it
/// unreachable, [`come_back`] reachable again.
fn server() -> (FakeServer, Gate, Arc<AtomicBool>) {
    let gate = Gate::new();
    let away = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, away) = (gate.clone(), away.clone());
        FakeServer::with_handler(move |_, index| {
            if away.load(Ordering::SeqCst) {
                return Reply::text("lost").cut_after(0);
            }
            // A tool call delivered just before the outage: the next request meets it.
            if index == 0 {
                return Reply::tool_use("Glob", serde_json::json!({"pattern": "*"}))
                    .gate_before(&gate);
            }
            Reply::text("好的,接着做完了。")
        })
    };
    (server, gate, away)
}

fn go_away(server: &FakeServer, gate: &Gate, away: &AtomicBool) {
    server.stop_accepting();
    away.store(true, Ordering::SeqCst);
    gate.open();
}

fn come_back(server: &FakeServer, away: &AtomicBool) {
    away.store(false, Ordering::SeqCst);
    server.resume_accepting();
}

#[test]
fn ctrl_c_once_during_an_outage_wait_stops_it_and_asks() {
    let project = Project::with("proj", ENV);
    let (server, gate, away) = server();
    let mut pty = Pty::spawn(project.flower(&server, &["once", "写个 hello 脚本"]));
    assert!(gate.wait_reached(PATIENCE));
    go_away(&server, &gate, &away);
    pty.expect("已等");
    pty.ctrl_c();
    pty.expect("已打断等待");
    pty.expect(&format!("{AFTER_INTERRUPT}\r\n> "));
    come_back(&server, &away);
    let before = server.request_count();
    pty.line("换成 python 写");
    assert!(
        server.wait_for_requests(before + 1, PATIENCE),
        "{}",
        pty.output()
    );
    assert_eq!(exited(pty.wait()), Some(0), "{}", pty.output());
    let last = server.requests().last().unwrap().clone();
    let said = serde_json::Value::Array(last.messages().to_vec()).to_string();
    assert!(said.contains(TURN_INTERRUPTED), "{said}");
    assert!(said.contains("换成 python 写"), "{said}");
}

#[test]
fn without_a_terminal_ctrl_c_during_an_outage_wait_says_how_to_stop_and_twice_exits() {
    let project = Project::with("proj", ENV);
    let (server, gate, away) = server();
    let (mut child, stderr) = crate::faults_support::spawn_watched(
        project.command(&server, &["once", "写个 hello 脚本"]),
    );
    assert!(gate.wait_reached(PATIENCE));
    go_away(&server, &gate, &away);
    assert!(stderr.wait_for("已等", 1, PATIENCE), "{}", stderr.all());
    signal(&child, libc::SIGINT);
    assert!(
        stderr.wait_for("已打断等待", 1, PATIENCE),
        "{}",
        stderr.all()
    );
    assert!(
        stderr.all().contains("再按一次 Ctrl-C 退出"),
        "{}",
        stderr.all()
    );
    signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, PATIENCE);
    come_back(&server, &away);
    assert_eq!(
        status.code(),
        Some(130),
        "{}",
        text(stderr.all().as_bytes())
    );
}
