//! The `Bash` tool: `bash -c COMMAND` in the workspace.
//!
//! The command leads a new session (no controlling terminal), with stdin from
//! `/dev/null` and stdout and stderr sent into one pipe, so their interleaving is kept.
//! In the sandbox ([`super::sandbox`]) it also runs in a PID namespace of its own: when
//! the shell ends, on its own or killed, every process it started dies with it, so
//! nothing it left in the background writes later. Unsandboxed (`--no-sandbox`, or no
//! user namespaces), only its process group is killed on timeout, on cancellation
//! (`ctx.cancel`) or when the call is dropped, and the result says so; processes left
//! in the background keep running, and their later output is not waited for beyond a
//! short grace period.
//!
//! Output is capped while it is read: the first and the last
//! [`HEAD_BYTES`]/[`TAIL_BYTES`] bytes are kept (a fixed buffer and a ring buffer),
//! whatever the command prints in between is counted and dropped, so `yes` for ten
//! minutes costs 30 KB of memory.
//!
//! When a sandboxed command fails on something the sandbox forbids, its result says so.

use super::input::{self, Field};
use super::process::{self, GroupGuard};
use super::sandbox;
use super::{Tool, ToolContext, ToolOutput};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Timeout when the model gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The longest timeout the model may ask for.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Bytes kept from the start of the output.
pub const HEAD_BYTES: usize = 15_000;
/// Bytes kept from the end of the output.
pub const TAIL_BYTES: usize = 15_000;
/// After the shell exits, how long output from leftover background processes is
/// still read.
const GRACE: Duration = Duration::from_millis(300);
/// Added to the result of a sandboxed command that failed on a forbidden write.
pub const SANDBOX_NOTE: &str = "(This command ran in flower's sandbox: it may write only in \
the workspace, the temp directory and /dev/null; git's hooks and config files, the protected \
control files (.claude/settings*.json, .mcp.json, .vscode, shell rc files, …) and the run \
directory are read-only, and .git cannot be renamed; mounting, device nodes and terminal input are refused. A write \
elsewhere fails with \"Permission denied\" or \"Read-only file system\", a rename of a \
protected path with \"Device or resource busy\", a refused call with \"Operation not \
permitted\".)";

/// A cut point moves to a line end at most this many bytes away.
const LINE_SNAP: usize = 2000;

pub struct Bash;

const DESCRIPTION: &str = "Executes a given bash command with `bash -c` in the workspace \
directory, with an optional timeout.

Usage notes:
- The command argument is required.
- You can specify an optional timeout in milliseconds (up to 600000ms / 10 minutes). If not \
specified, commands will timeout after 120000ms (2 minutes). On timeout the command and \
every process it started are killed. Processes the command leaves running in the \
background (`&`) are stopped when it ends: start a server and use it in the same command.
- It is very helpful if you write a clear, concise description of what this command does in \
5-10 words.
- Each call runs in a fresh shell: `cd` and variables do not carry over between calls. \
Standard input is empty (/dev/null), so interactive commands fail; pass flags that avoid \
prompts.
- stdout and stderr are returned together. If the output exceeds 30000 characters, the middle \
is cut and the beginning and the end are kept. A non-zero exit code is reported.
- Avoid using Bash with the `find`, `grep`, `cat`, `head`, `tail`, `sed`, `awk`, or `echo` \
commands, unless explicitly instructed or when these commands are truly necessary for the \
task. Instead, always prefer using the dedicated tools for these commands:
  - File search: Use Glob (NOT find or ls)
  - Content search: Use Grep (NOT grep or rg)
  - Read files: Use Read (NOT cat/head/tail)
  - Edit files: Use Edit (NOT sed/awk)
  - Write files: Use Write (NOT echo >/cat <<EOF)
- When issuing multiple commands, use the ';' or '&&' operator to separate them. DO NOT use \
newlines to separate commands (newlines are ok in quoted strings).
- Always quote file paths that contain spaces with double quotes.
- Commands may be checked against permission rules, which look at every command in a \
pipeline or list; writing a file with `>` needs broader permission than running the command.
- You can use the `run_in_background` parameter to run a command in the background (a dev \
server, a watcher, a long test run): the call returns at once with a task ID; read its new \
output with TaskOutput and stop it with TaskStop. It runs sandboxed like any command, without \
a timeout, and is stopped when this session ends. Do not use `&` for this.";

/// Bash's input.
#[derive(Deserialize)]
struct BashInput {
    #[serde(default)]
    command: Field<String>,
    #[serde(default)]
    timeout: Field<u64>,
    /// Only checked: what the model says the command does.
    #[serde(default)]
    description: Field<String>,
    /// Started by the engine ([`super::background`]); a Bash tool called on its own
    /// refuses it.
    #[serde(default)]
    run_in_background: Field<bool>,
}

/// Whether a Bash call asks to run in the background (`run_in_background: true`).
pub fn wants_background(input: &ToolInput) -> bool {
    #[derive(Deserialize)]
    struct Flag {
        #[serde(default)]
        run_in_background: Field<bool>,
    }
    input::parse::<Flag>(super::names::BASH, input)
        .is_ok_and(|f| matches!(f.run_in_background, Field::Given(true)))
}

impl Tool for Bash {
    fn info(&self) -> &'static super::names::ToolInfo {
        &super::names::BASH_INFO
    }

    fn description(&self) -> String {
        DESCRIPTION.to_string()
    }

    fn input_schema(&self) -> Raw {
        Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The command to execute"
                },
                "timeout": {
                    "type": "number",
                    "description": "Optional timeout in milliseconds (max 600000)"
                },
                "description": {
                    "type": "string",
                    "description": "Clear, concise description of what this command does in 5-10 words, in active voice. Examples:\nInput: ls\nOutput: List files in current directory\n\nInput: git status\nOutput: Show working tree status\n\nInput: npm install\nOutput: Install package dependencies\n\nInput: mkdir foo\nOutput: Create directory 'foo'"
                },
                "run_in_background": {
                    "type": "boolean",
                    "description": "Set to true to run this command in the background. Use TaskOutput to read the output later."
                }
            },
            "required": ["command"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            const T: &str = super::names::BASH;
            let parsed = (|| {
                let fields: BashInput = input::parse(T, input)?;
                let command = fields.command.required(T, "command")?;
                let timeout = fields.timeout.optional(T, "timeout")?;
                fields.description.optional(T, "description")?;
                if fields.run_in_background.optional(T, "run_in_background")? == Some(true) {
                    return Err(ToolOutput::error(
                        "run_in_background is not available here: run the command in the \
                         foreground.",
                    ));
                }
                Ok::<_, ToolOutput>((command, timeout))
            })();
            let (command, timeout) = match parsed {
                Ok(p) => p,
                Err(e) => return e,
            };
            if timeout == Some(0) {
                return ToolOutput::error(
                    "Invalid input for Bash: \"timeout\" must be at least 1 millisecond.",
                );
            }
            if command.trim().is_empty() {
                return ToolOutput::error("Invalid input for Bash: \"command\" is empty.");
            }
            let timeout_ms = timeout.unwrap_or(DEFAULT_TIMEOUT_MS).min(MAX_TIMEOUT_MS);
            run(&command, timeout_ms, ctx).await
        })
    }
}

enum End {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
}

/// A started command: the shell (or its sandbox supervisor) and the read end of its
/// output pipe.
pub(crate) struct Started {
    pub(crate) child: tokio::process::Child,
    pub(crate) pipe: tokio::net::unix::pipe::Receiver,
    pub(crate) sandboxed: bool,
    /// Every process the command starts dies with it (a PID namespace of its own).
    pub(crate) contained: bool,
    pub(crate) sweep: sandbox::Sweep,
    /// What the network proxy refused while the command ran.
    pub(crate) refusals: sandbox::Refusals,
}

/// Why a command did not start; the text is ready for the model.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotStarted {
    #[error("Cannot run the command: pipe: {0}")]
    Pipe(#[source] std::io::Error),
    #[error("Cannot run the command: {0}")]
    Sandbox(#[source] sandbox::SandboxError),
    #[error("Cannot run bash in the sandbox: {0}")]
    SandboxedBash(#[source] std::io::Error),
    #[error("Cannot run bash: {0}")]
    Bash(#[source] std::io::Error),
    #[error("Cannot read the command's output: {0}")]
    Output(#[source] std::io::Error),
}

/// Starts `bash -c command` in a new session, sandboxed as `ctx.sandbox` says. A
/// second attempt is made only when the saved namespaces turned out stale.
pub(crate) fn start(command: &str, ctx: &ToolContext) -> Result<Started, NotStarted> {
    let (reader, writer) = std::io::pipe().map_err(NotStarted::Pipe)?;
    let mut sandboxed = false;
    let mut contained = false;
    let mut sweep = sandbox::Sweep::default();
    let mut refusals = sandbox::Refusals::default();
    let mut spawned = Err(std::io::Error::other("not started"));
    for attempt in 0..2 {
        let (w1, w2) = match (writer.try_clone(), writer.try_clone()) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Err(NotStarted::Pipe(e)),
        };
        let prepared =
            sandbox::prepare(&ctx.sandbox, &ctx.workspace).map_err(NotStarted::Sandbox)?;
        sandboxed = prepared.is_some();
        contained = prepared.as_ref().is_some_and(|p| p.contains_processes());
        sweep = prepared.as_ref().map(|p| p.sweep()).unwrap_or_default();
        refusals = prepared.as_ref().map(|p| p.refusals()).unwrap_or_default();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&ctx.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::from(w1))
            .stderr(Stdio::from(w2))
            .kill_on_drop(true);
        process::withhold(&mut cmd, &ctx.sandbox.withheld_env);
        cmd.envs(ctx.env.iter().map(|(k, v)| (k, v)));
        sandbox::confine(&mut cmd, prepared);
        spawned = cmd.spawn();
        // The Command holds copies of the pipe's write end; they must close, or the
        // pipe never reports end of file.
        drop(cmd);
        match &spawned {
            Err(e) if sandboxed && attempt == 0 && sandbox::is_stale(e) => {
                sandbox::forget_namespaces();
            }
            _ => break,
        }
    }
    drop(writer);
    let child = match spawned {
        Ok(c) => c,
        Err(e) if sandboxed => return Err(NotStarted::SandboxedBash(e)),
        Err(e) => return Err(NotStarted::Bash(e)),
    };
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(NotStarted::Output)?;
    Ok(Started {
        child,
        pipe,
        sandboxed,
        contained,
        sweep,
        refusals,
    })
}

/// Messages of failed writes the sandbox may have caused.
const SANDBOX_ERRORS: [&str; 4] = [
    "Permission denied",
    "Read-only file system",
    "Device or resource busy",
    "Operation not permitted",
];

async fn run(command: &str, timeout_ms: u64, ctx: &ToolContext) -> ToolOutput {
    let Started {
        mut child,
        mut pipe,
        sandboxed,
        contained,
        sweep,
        refusals,
    } = match start(command, ctx) {
        Ok(s) => s,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    // The command leads a session of its own, so its group id is its pid.
    let mut guard = GroupGuard::new(
        child.id().and_then(|id| i32::try_from(id).ok()),
        &ctx.processes,
    );
    let mut capture = Capture::default();
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
    tokio::pin!(deadline);
    let mut eof = false;
    let end = loop {
        tokio::select! {
            r = pipe.read(&mut buf), if !eof => match r {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => capture.push(&buf[..n]),
            },
            s = child.wait() => match s {
                Ok(s) => {
                    // The shell is gone (and reaped). Without a PID namespace what it
                    // left in the background keeps running.
                    guard.disarm();
                    if !eof {
                        drain(&mut pipe, &mut buf, &mut capture, GRACE).await;
                    }
                    break End::Exited(s);
                }
                Err(e) => return ToolOutput::error(format!("Waiting for bash failed: {e}")),
            },
            _ = &mut deadline => break End::TimedOut,
            _ = ctx.cancel.cancelled() => break End::Cancelled,
        }
    };
    if !matches!(end, End::Exited(_)) {
        guard.kill();
        let _ = child.wait().await;
        drain(&mut pipe, &mut buf, &mut capture, GRACE).await;
    }
    let mut output = render(&capture, &end, timeout_ms, contained);
    for note in sweep.run().into_iter().chain(refusals.notes()) {
        output.content.push('\n');
        output.content.push_str(&note);
    }
    if sandboxed && output.is_error && SANDBOX_ERRORS.iter().any(|e| output.content.contains(e)) {
        output.content.push('\n');
        output.content.push_str(SANDBOX_NOTE);
    }
    output
}

/// Reads what is left in the pipe until end of file or `grace` has passed (a process
/// that escaped the group may hold the pipe open forever).
async fn drain(
    pipe: &mut tokio::net::unix::pipe::Receiver,
    buf: &mut [u8],
    capture: &mut Capture,
    grace: Duration,
) {
    let _ = tokio::time::timeout(grace, async {
        loop {
            match pipe.read(buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => capture.push(&buf[..n]),
            }
        }
    })
    .await;
}

fn render(capture: &Capture, end: &End, timeout_ms: u64, contained: bool) -> ToolOutput {
    let mut text = capture.text();
    let killed = if contained {
        "it and every process it started were killed"
    } else {
        "its process group was killed (processes that left the group may still run)"
    };
    let trailer = match end {
        End::Exited(s) => {
            use std::os::unix::process::ExitStatusExt as _;
            match (s.code(), s.signal()) {
                (Some(0), _) => None,
                (Some(code), _) => Some(format!("Exit code: {code}")),
                (None, Some(sig)) => Some(format!("Killed by signal {sig}")),
                (None, None) => Some("Exited abnormally".to_string()),
            }
        }
        End::TimedOut => Some(format!(
            "Command timed out after {timeout_ms} ms; {killed}."
        )),
        End::Cancelled => Some(format!("Command was interrupted (cancelled); {killed}.")),
    };
    match trailer {
        None => {
            if text.is_empty() {
                text = "(no output)".to_string();
            }
            ToolOutput::ok(text)
        }
        Some(t) => {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&t);
            ToolOutput::error(text)
        }
    }
}

/// The output, bounded: a head, a ring-buffer tail, and counts of what fell between.
#[derive(Default)]
pub struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    cut_bytes: u64,
    cut_lines: u64,
}

impl Capture {
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.head.len() < HEAD_BYTES {
            let n = (HEAD_BYTES - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= TAIL_BYTES {
            // Everything in the ring and the start of `data` falls out.
            let (drop, keep) = data.split_at(data.len() - TAIL_BYTES);
            self.evict(self.tail.len());
            self.count_cut(drop);
            self.tail.extend(keep);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(TAIL_BYTES);
        self.evict(overflow);
        self.tail.extend(data);
    }

    fn evict(&mut self, n: usize) {
        let lines = self.tail.range(..n).filter(|&&b| b == b'\n').count() as u64;
        self.tail.drain(..n);
        self.cut_bytes += n as u64;
        self.cut_lines += lines;
    }

    fn count_cut(&mut self, data: &[u8]) {
        self.cut_bytes += data.len() as u64;
        self.cut_lines += data.iter().filter(|&&b| b == b'\n').count() as u64;
    }

    /// The kept output as text (lossy UTF-8), with a note where the middle was cut.
    pub fn text(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.cut_bytes == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        // Cut at line ends when one is near, else at a character boundary.
        let mut head: &[u8] = &self.head;
        let mut tail: &[u8] = &tail;
        let mut cut_bytes = self.cut_bytes;
        let mut cut_lines = self.cut_lines;
        if let Some(nl) = head.iter().rposition(|&b| b == b'\n')
            && head.len() - nl <= LINE_SNAP
        {
            cut_bytes += (head.len() - nl - 1) as u64;
            head = &head[..=nl];
        } else if let Err(e) = std::str::from_utf8(head)
            && e.error_len().is_none()
        {
            cut_bytes += (head.len() - e.valid_up_to()) as u64;
            head = &head[..e.valid_up_to()];
        }
        if let Some(nl) = tail.iter().position(|&b| b == b'\n')
            && nl < LINE_SNAP
            && nl + 1 < tail.len()
        {
            cut_bytes += (nl + 1) as u64;
            cut_lines += 1;
            tail = &tail[nl + 1..];
        } else {
            let skip = tail
                .iter()
                .take(3)
                .take_while(|&&b| (0x80..0xc0).contains(&b))
                .count();
            cut_bytes += skip as u64;
            tail = &tail[skip..];
        }
        let mut out = String::from_utf8_lossy(head).into_owned();
        out.push_str(&format!(
            "\n[… {cut_bytes} bytes ({cut_lines} lines) of output cut here; {} bytes in total. \
             Redirect the output to a file and search it, or narrow the command, to see it …]\n\n",
            self.total
        ));
        out.push_str(&String::from_utf8_lossy(tail));
        out
    }
}
