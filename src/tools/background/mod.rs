//! Background commands: `Bash` with `run_in_background: true` (Claude Code's parameter)
//! starts the command exactly as a foreground one (the same sandbox, its own process
//! group, registered with the signal handlers) and returns at once with an id and the
//! file its output goes to. `TaskOutput` reads what it printed since the last read,
//! `TaskStop` stops it ([`tools`]).
//!
//! Every command ends with the session that started it: the engine ends a session's
//! commands when its run ends (a step's end, a handoff, a failed attempt), all of them
//! on Ctrl-C, and the signal handlers kill their process groups on SIGTERM and SIGHUP.
//! Against a SIGKILL each command has a record in the run directory
//! ([`record`]): the next start kills what is left, and the session is told, in its
//! next request, which commands no longer run. `docs/concurrency.md` says the rest.

mod output;
pub mod record;
pub mod tools;

pub use output::{DEFAULT_OUTPUT_CAP, MIN_OUTPUT_CAP};
pub use record::{End, Owner, Record};

use crate::events::{Event, EventSink};
use crate::tools::bash::{self, Started};
use crate::tools::process::GroupGuard;
use crate::tools::{ToolContext, ToolOutput};
use output::{NewOutput, Output};
use record::ProcessId;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a stop waits for the command to be reaped.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// After the shell exits, how long its pipe is still read.
const GRACE: Duration = Duration::from_millis(300);

/// Told when a command ends (after its record says so): the place for a checkpoint
/// of what it changed.
pub type OnEnd = Arc<dyn Fn(&Record) + Send + Sync>;

/// A running background command, for the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub id: String,
    pub command: String,
    pub owner: Owner,
    /// 0: the main session's; 1: a sub-agent's.
    pub depth: u32,
    /// Unix seconds.
    pub started_at: u64,
}

/// The background commands of one engine. Cheap to clone; clones share them.
#[derive(Clone)]
pub struct Background(Arc<Inner>);

struct Inner {
    /// `background/` in the run directory: records and output files.
    dir: PathBuf,
    cap: u64,
    events: EventSink,
    commands: Mutex<Vec<Arc<Command>>>,
    on_end: Mutex<Option<OnEnd>>,
}

struct Command {
    depth: u32,
    stop: CancellationToken,
    ended: watch::Sender<bool>,
    state: Mutex<State>,
}

struct State {
    record: Record,
    output: Output,
    /// Logical position up to which the model has read the output.
    read_to: u64,
    /// Why flower stops it (`None`: it ends on its own).
    stop_why: Option<&'static str>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Command {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn running(&self) -> bool {
        !*self.ended.borrow()
    }

    /// Asks the runner to kill it, `why` going into its record.
    fn request_stop(&self, why: &'static str) {
        if self.running() {
            self.state().stop_why.get_or_insert(why);
            self.stop.cancel();
        }
    }

    async fn wait_ended(&self, limit: Duration) -> bool {
        let mut ended = self.ended.subscribe();
        tokio::time::timeout(limit, ended.wait_for(|e| *e))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

impl Background {
    /// Background commands kept under `dir`, each output capped at `cap` bytes.
    pub fn new(dir: PathBuf, cap: u64, events: EventSink) -> Background {
        Background(Arc::new(Inner {
            dir,
            cap,
            events,
            commands: Mutex::new(Vec::new()),
            on_end: Mutex::new(None),
        }))
    }

    /// Where the records and output files live.
    pub fn dir(&self) -> &std::path::Path {
        &self.0.dir
    }

    /// Calls `on_end` whenever a command ends (exited, stopped or killed).
    pub fn on_end(&self, on_end: OnEnd) {
        *lock(&self.0.on_end) = Some(on_end);
    }

    /// The commands running now, oldest first.
    pub fn running(&self) -> Vec<Running> {
        lock(&self.0.commands)
            .iter()
            .filter(|c| c.running())
            .map(|c| {
                let state = c.state();
                Running {
                    id: state.record.id.clone(),
                    command: state.record.command.clone(),
                    owner: state.record.owner.clone(),
                    depth: c.depth,
                    started_at: state.record.started_at,
                }
            })
            .collect()
    }

    fn find(&self, id: &str) -> Option<Arc<Command>> {
        lock(&self.0.commands)
            .iter()
            .find(|c| c.state().record.id == id)
            .cloned()
    }

    /// Starts `command` in the background as Bash would run it in the foreground,
    /// for `owner`; the result names its id and output file.
    pub fn start(&self, command: &str, ctx: &ToolContext, owner: Owner, depth: u32) -> ToolOutput {
        let id = format!("b{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let dir = &self.0.dir;
        let out_path = dir.join(format!("{id}.out"));
        let output = match std::fs::create_dir_all(dir)
            .and_then(|()| Output::create(&out_path, self.0.cap))
        {
            Ok(output) => output,
            Err(e) => {
                return ToolOutput::error(format!(
                    "Cannot keep the command's output in {}: {e}",
                    out_path.display()
                ));
            }
        };
        let started = match bash::start(command, ctx) {
            Ok(started) => started,
            Err(e) => {
                let _ = std::fs::remove_file(&out_path);
                return ToolOutput::error(e.to_string());
            }
        };
        let pid = started.child.id().and_then(|id| i32::try_from(id).ok());
        let guard = GroupGuard::new(pid, &ctx.processes);
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let record = Record {
            id: id.clone(),
            command: command.to_string(),
            owner,
            leader: pid.and_then(ProcessId::of).unwrap_or(ProcessId {
                pid: 0,
                start_ticks: 0,
            }),
            flower: ProcessId::of(me).unwrap_or(ProcessId {
                pid: me,
                start_ticks: 0,
            }),
            started_at: record::now(),
            output: out_path.clone(),
            end: None,
            reported: false,
        };
        // Without its record a SIGKILL would leave it running unseen: refuse to run it.
        if let Err(e) = record.save(dir) {
            drop(guard);
            return ToolOutput::error(format!("Cannot record the background command: {e}"));
        }
        let command_state = Arc::new(Command {
            depth,
            stop: CancellationToken::new(),
            ended: watch::Sender::new(false),
            state: Mutex::new(State {
                record,
                output,
                read_to: 0,
                stop_why: None,
            }),
        });
        lock(&self.0.commands).push(Arc::clone(&command_state));
        (self.0.events)(&Event::BackgroundStarted {
            id: id.clone(),
            command: command.to_string(),
            depth,
        });
        tokio::spawn(supervise(
            Arc::clone(&self.0),
            command_state,
            started,
            guard,
        ));
        ToolOutput::ok(started_text(&id, &out_path))
    }

    /// Stops every running command of `owner` (its session ended: `why`) and waits
    /// for them to be reaped.
    pub async fn end_owner(&self, owner: &Owner, why: &'static str) {
        let theirs: Vec<Arc<Command>> = lock(&self.0.commands)
            .iter()
            .filter(|c| c.running() && c.state().record.owner == *owner)
            .cloned()
            .collect();
        stop_and_wait(&theirs, why).await;
    }

    /// Stops every running command (`why`: Ctrl-C, the run's end) and waits for them.
    pub async fn stop_all(&self, why: &'static str) {
        let all: Vec<Arc<Command>> = lock(&self.0.commands)
            .iter()
            .filter(|c| c.running())
            .cloned()
            .collect();
        stop_and_wait(&all, why).await;
    }

    /// Kills what an earlier flower left running in this run directory (see
    /// [`record::sweep_leftovers`]); every runtime calls it when it opens.
    pub fn sweep_leftovers(&self) -> record::Sweep {
        record::sweep_leftovers(&self.0.dir)
    }

    /// The commands of `owner` that ended without the session knowing (killed with
    /// its last run, by a Ctrl-C, or on the next start after a kill), now marked as
    /// told: what its next request says no longer runs.
    pub fn take_unreported(&self, owner: &Owner) -> Vec<Record> {
        let mut told = Vec::new();
        for mut record in record::all(&self.0.dir) {
            if record.owner != *owner || record.end.is_none() || record.reported {
                continue;
            }
            record.reported = true;
            if let Some(command) = self.find(&record.id) {
                command.state().record.reported = true;
            }
            if record.save(&self.0.dir).is_ok() {
                told.push(record);
            }
        }
        told
    }
}

/// What the model reads when a command started.
fn started_text(id: &str, output: &std::path::Path) -> String {
    format!(
        "Command running in background with ID: {id}. Output is being written to: {}\n\
         Read its new output with TaskOutput (task_id \"{id}\"), stop it with TaskStop. It \
         is stopped when this session ends.",
        output.display()
    )
}

async fn stop_and_wait(commands: &[Arc<Command>], why: &'static str) {
    for command in commands {
        command.request_stop(why);
    }
    for command in commands {
        command.wait_ended(STOP_WAIT).await;
    }
}

/// Copies the command's output to its file until it ends (on its own or stopped),
/// then records how it ended.
async fn supervise(
    inner: Arc<Inner>,
    command: Arc<Command>,
    started: Started,
    mut guard: GroupGuard,
) {
    let Started {
        mut child,
        mut pipe,
        sweep,
        refusals,
        ..
    } = started;
    let mut buf = vec![0u8; 16 * 1024];
    let mut eof = false;
    let status = loop {
        tokio::select! {
            r = pipe.read(&mut buf), if !eof => match r {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => append(&command, &buf[..n]),
            },
            s = child.wait() => {
                guard.disarm();
                break s.ok();
            }
            _ = command.stop.cancelled() => {
                guard.kill();
                break child.wait().await.ok();
            }
        }
    };
    if !eof {
        let _ = tokio::time::timeout(GRACE, async {
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                append(&command, &buf[..n]);
            }
        })
        .await;
    }
    for note in sweep.run().into_iter().chain(refusals.notes()) {
        append(&command, format!("\n{note}\n").as_bytes());
    }
    let record = {
        let mut state = command.state();
        use std::os::unix::process::ExitStatusExt as _;
        state.record.end = Some(End {
            how: state.stop_why.unwrap_or("exited").to_string(),
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            at: record::now(),
        });
        let _ = state.record.save(&inner.dir);
        state.record.clone()
    };
    command.ended.send_replace(true);
    if let Some(end) = &record.end {
        (inner.events)(&Event::BackgroundEnded {
            id: record.id.clone(),
            how: end.how.clone(),
            depth: command.depth,
        });
    }
    let on_end = lock(&inner.on_end).clone();
    if let Some(on_end) = on_end {
        on_end(&record);
    }
}

fn append(command: &Command, data: &[u8]) {
    // A full disk loses output, never the command.
    let _ = command.state().output.append(data);
}

/// What a read says about a command's state.
fn status_line(record: &Record) -> String {
    match &record.end {
        None => "running".to_string(),
        Some(end) => match (end.how.as_str(), end.exit_code, end.signal) {
            ("exited", Some(code), _) => format!("exited with code {code}"),
            ("exited", None, Some(signal)) => format!("killed by signal {signal}"),
            ("stopped", ..) => "stopped (TaskStop)".to_string(),
            ("session-ended", ..) => "killed: the session that started it ended".to_string(),
            ("interrupted", ..) => "killed: the user pressed Ctrl-C".to_string(),
            ("killed-on-start" | "gone", ..) => {
                "killed: flower was stopped while it ran".to_string()
            }
            (how, ..) => how.to_string(),
        },
    }
}

impl Background {
    /// Reads what command `id` printed since the last read; `block`: first waits up
    /// to `timeout` for it to end.
    pub async fn read(&self, id: &str, block: bool, timeout: Duration) -> ToolOutput {
        let Some(command) = self.find(id) else {
            return self.read_ended_elsewhere(id);
        };
        if block && command.running() {
            command.wait_ended(timeout).await;
        }
        let mut state = command.state();
        let from = state.read_to;
        let new = match state.output.read_from(from) {
            Ok(new) => new,
            Err(e) => return ToolOutput::error(format!("Cannot read the output of {id}: {e}")),
        };
        state.read_to = state.output.written;
        if state.record.end.is_some() && !state.record.reported {
            state.record.reported = true;
            let _ = state.record.save(&self.0.dir);
        }
        let still = block && state.record.end.is_none();
        ToolOutput::ok(render(&state.record, &new, still, state.output.path()))
    }

    /// A command this process does not hold: one from before a restart.
    fn read_ended_elsewhere(&self, id: &str) -> ToolOutput {
        match Record::load(&self.0.dir, id) {
            Some(mut record) => {
                let line = status_line(&record);
                if !record.reported {
                    record.reported = true;
                    let _ = record.save(&self.0.dir);
                }
                ToolOutput::error(format!(
                    "Background command {id} no longer runs ({line}). What it printed is kept \
                     in {}.",
                    record.output.display()
                ))
            }
            None => ToolOutput::error(format!("No background command with ID {id}.")),
        }
    }

    /// Stops command `id` and its processes.
    pub async fn stop(&self, id: &str) -> ToolOutput {
        let Some(command) = self.find(id) else {
            return self.read_ended_elsewhere(id);
        };
        if !command.running() {
            let state = command.state();
            return ToolOutput::error(format!(
                "Background command {id} is not running ({}).",
                status_line(&state.record)
            ));
        }
        command.request_stop("stopped");
        if !command.wait_ended(STOP_WAIT).await {
            return ToolOutput::error(format!("Background command {id} did not stop yet."));
        }
        let mut state = command.state();
        state.record.reported = true;
        let _ = state.record.save(&self.0.dir);
        ToolOutput::ok(format!(
            "Stopped background command {id} ({}).",
            state.record.command
        ))
    }
}

fn render(record: &Record, new: &NewOutput, still_running: bool, path: &std::path::Path) -> String {
    let mut text = format!(
        "Background command {} ({}): {}.",
        record.id,
        record.command,
        status_line(record)
    );
    if still_running {
        text.push_str(" It did not end within the timeout.");
    }
    if new.lost > 0 {
        text.push_str(&format!(
            "\n[… {} bytes of new output were dropped: the kept output is capped; {} keeps \
             the latest …]",
            new.lost,
            path.display()
        ));
    }
    if new.bytes == 0 {
        text.push_str("\n(no new output)");
    } else {
        text.push_str("\nNew output:\n");
        text.push_str(&new.text);
    }
    text
}
