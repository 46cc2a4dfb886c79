//! Running one command hook: `bash -c COMMAND` in the workspace, the event's JSON on
//! stdin, stdout and stderr read apart, started exactly as the agent's Bash commands
//! are (the sandbox's public API, [`crate::tools::sandbox`]: `prepare`, then
//! `apply_in_child`, or `new_session` when unconfined; `sweep` after), killed with
//! its whole session's process group when its timeout passes. Never fails: whatever
//! goes wrong is in the [`HookRun`].

use super::config::HookCommand;
use crate::tools::ProcessGroups;
use crate::tools::process::{self, GroupGuard};
use crate::tools::sandbox::{self, SandboxPolicy};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Bytes of a hook's stdout (and, apart, of its stderr) that are kept.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// After the shell exits, how long output of what it left in the background is read.
const GRACE: Duration = Duration::from_millis(300);

/// How a hook's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Exit(i32),
    /// A signal killed it (a crash).
    Signal(i32),
    /// Its timeout passed; it and its process group were killed.
    TimedOut(Duration),
    /// It could not be started (or waited for): why.
    Failed(String),
}

/// One command hook, run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    pub command: String,
    pub ended: Ended,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
}

impl HookRun {
    /// The exit status, when it exited.
    pub fn exit_code(&self) -> Option<i32> {
        match self.ended {
            Ended::Exit(code) => Some(code),
            _ => None,
        }
    }
}

/// What a hook's process runs with.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The working directory (the workspace).
    pub workspace: PathBuf,
    /// The sandbox of the agent whose event it is.
    pub sandbox: SandboxPolicy,
    /// Variables added to the hook's environment (the settings files' `env`, and
    /// `CLAUDE_PROJECT_DIR`).
    pub env: Arc<Vec<(String, String)>>,
    pub processes: ProcessGroups,
}

/// Runs `hook` with `input` on its stdin.
pub async fn run(hook: &HookCommand, input: &[u8], launch: &Launch) -> HookRun {
    let started = Instant::now();
    let done = |ended: Ended, stdout: String, stderr: String| HookRun {
        command: hook.command.clone(),
        ended,
        stdout,
        stderr,
        duration: started.elapsed(),
    };
    let (mut child, sweep) = match spawn(&hook.command, launch) {
        Ok(spawned) => spawned,
        Err(why) => return done(Ended::Failed(why.to_string()), String::new(), String::new()),
    };
    // It leads a session of its own, so its group id is its pid.
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut group = GroupGuard::new(pgid, &launch.processes);
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return done(
            Ended::Failed("the hook's pipes were not set up".into()),
            String::new(),
            String::new(),
        );
    };
    let input = input.to_vec();
    // A hook that does not read its stdin must not block on a full pipe, nor fail us.
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    });
    let mut out = Capped::default();
    let mut err = Capped::default();
    let ended = {
        let reading = async {
            tokio::join!(out.read_from(stdout), err.read_from(stderr));
        };
        tokio::pin!(reading);
        let deadline = tokio::time::sleep(hook.timeout);
        tokio::pin!(deadline);
        let mut reading_done = false;
        loop {
            tokio::select! {
                () = &mut reading, if !reading_done => reading_done = true,
                status = child.wait() => {
                    // Reaped: its group id may be anyone's now. In the sandbox, what it
                    // left in the background died with it (a PID namespace of its own).
                    group.disarm();
                    let ended = match status {
                        Ok(status) => ended_of(status),
                        Err(e) => Ended::Failed(format!("waiting for the hook failed: {e}")),
                    };
                    if !reading_done {
                        let _ = tokio::time::timeout(GRACE, &mut reading).await;
                    }
                    break ended;
                }
                () = &mut deadline => {
                    group.kill();
                    let _ = child.wait().await;
                    let _ = tokio::time::timeout(GRACE, &mut reading).await;
                    break Ended::TimedOut(hook.timeout);
                }
            }
        }
    };
    feed.abort();
    let mut stderr = err.text();
    for note in sweep.run() {
        stderr.push('\n');
        stderr.push_str(&note);
    }
    done(ended, out.text(), stderr)
}

/// Why a hook's command did not start.
#[derive(Debug, thiserror::Error)]
enum SpawnError {
    #[error("没法把钩子放进沙箱:{0}")]
    Sandbox(#[source] sandbox::SandboxError),
    #[error("钩子起不来({0})")]
    Start(#[source] std::io::Error),
}

fn spawn(
    command: &str,
    launch: &Launch,
) -> Result<(tokio::process::Child, sandbox::Sweep), SpawnError> {
    // A second attempt only when the saved namespaces turned out stale (as Bash does).
    let mut attempt = 0;
    loop {
        attempt += 1;
        let prepared =
            sandbox::prepare(&launch.sandbox, &launch.workspace).map_err(SpawnError::Sandbox)?;
        let sandboxed = prepared.is_some();
        let sweep = prepared.as_ref().map(|p| p.sweep()).unwrap_or_default();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&launch.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        process::withhold(&mut cmd, &launch.sandbox.withheld_env);
        for (name, value) in launch.env.iter() {
            cmd.env(name, value);
        }
        sandbox::confine(&mut cmd, prepared);
        match cmd.spawn() {
            Ok(child) => return Ok((child, sweep)),
            Err(e) if sandboxed && attempt == 1 && sandbox::is_stale(&e) => {
                sandbox::forget_namespaces();
            }
            Err(e) => return Err(SpawnError::Start(e)),
        }
    }
}

fn ended_of(status: std::process::ExitStatus) -> Ended {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exit(code),
        (None, Some(signal)) => Ended::Signal(signal),
        (None, None) => Ended::Failed("exited abnormally".into()),
    }
}

/// The first [`MAX_OUTPUT_BYTES`] of a stream; the rest is read and dropped.
#[derive(Default)]
struct Capped {
    bytes: Vec<u8>,
    dropped: usize,
}

impl Capped {
    async fn read_from(&mut self, mut stream: impl AsyncRead + Unpin) {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_OUTPUT_BYTES.saturating_sub(self.bytes.len());
                    let keep = n.min(room);
                    self.bytes.extend_from_slice(&buf[..keep]);
                    self.dropped += n - keep;
                }
            }
        }
    }

    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n[… {} more bytes not kept]", self.dropped));
        }
        text
    }
}
