//! Ctrl-C when nobody can be asked (stdin is not a terminal): the first interrupt
//! restarts the turn at once, so "twice" also means two presses within a moment.

use crate::support;

use crate::support::Flower;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{FakeServer, Gate, Reply};

fn sigint(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn two_quick_ctrl_c_exit_130_even_without_a_terminal() {
    let dir = tempfile::TempDir::new().unwrap();
    let first = Gate::new();
    let second = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("never finished").gate_before(&first),
        Reply::text("never finished either").gate_before(&second),
    ]);
    let mut cmd = Flower::bin().server(&server).command();
    let mut child = cmd
        .current_dir(dir.path())
        .args(["once", "hi"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(first.wait_reached(Duration::from_secs(60)));
    sigint(child.id());
    // The first press stops the stream and, with nobody to ask, continues at once.
    assert!(second.wait_reached(Duration::from_secs(60)));
    let continued = &server.requests()[1];
    assert!(
        continued
            .last_user_text()
            .contains("[Request interrupted by user]")
    );
    sigint(child.id());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    first.open();
    second.open();
}
