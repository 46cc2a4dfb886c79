//! Signals: what Ctrl-C, SIGTERM and SIGHUP do to a running flower.
//!
//! | event            | behaviour                                                          |
//! |------------------|--------------------------------------------------------------------|
//! | Ctrl-C once      | cooperative interrupt at the next message boundary (see [`Interrupt`]) |
//! | Ctrl-C twice     | rescue (the in-flight row, `killed-by-signal`), exit at once with status 130 (running commands stopped); lineage is already on disk |
//! | SIGTERM / SIGHUP | rescue: write the in-flight step's row (`killed-by-signal`), stop running commands, then die by that signal |
//! | SIGKILL          | nothing runs; the next run resumes all the same                    |
//! | stdout/stderr closed | as SIGTERM (the reader went away: `| head`), then die by SIGPIPE ([`output_closed`]) |

use super::runtime::Rescuer;
use crate::engine::Interrupt;
use crate::tools::ProcessGroups;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

/// Told by a front end whose stdout or stderr lost its reader ([`output_closed`]).
static OUTPUT_CLOSED: Notify = Notify::const_new();

/// The front end's stdout or stderr lost its reader (a write met `EPIPE`: `flower … |
/// head`, a `less` quit early). Nobody reads what the run says any more, so it stops as on
/// SIGTERM (the in-flight step's row written, running commands stopped) and dies by
/// SIGPIPE, as a writer to a closed pipe does; the next `flower` continues. Before the
/// handlers are installed the news waits for them.
pub fn output_closed() {
    OUTPUT_CLOSED.notify_one();
}

/// Without a terminal to ask, two Ctrl-C within this long count as twice.
pub const DOUBLE_PRESS: std::time::Duration = std::time::Duration::from_secs(2);

/// Exit status after a double Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Installs the handlers on the current tokio runtime. `asks_after_interrupt`: the user
/// is asked for a line after a Ctrl-C (stdin is a terminal). `on_exit` runs before a
/// double Ctrl-C exits and before SIGTERM or SIGHUP end the process (finish the
/// progress output, say how to continue). The store
/// needs no closing: every append is durable when it returns.
pub fn install(
    rescuer: Option<Rescuer>,
    processes: ProcessGroups,
    interrupt: Interrupt,
    asks_after_interrupt: bool,
    on_exit: impl Fn() + Send + Sync + 'static,
) -> std::io::Result<()> {
    let on_exit = std::sync::Arc::new(on_exit);
    // Without a rescuer (`flower once`) there is no row to write; the running commands
    // are still stopped before the process dies by the signal. The front end ends its
    // output first (a status line drawn on the terminal is cleared).
    for kind in [SignalKind::terminate(), SignalKind::hangup()] {
        let mut stream = signal(kind)?;
        let rescuer = rescuer.clone();
        let processes = processes.clone();
        let on_exit = on_exit.clone();
        tokio::spawn(async move {
            if stream.recv().await.is_some() {
                if let Some(rescuer) = rescuer {
                    rescuer.rescue();
                }
                on_exit();
                processes.kill_all();
                die_by(kind.as_raw_value());
            }
        });
    }
    {
        let rescuer = rescuer.clone();
        let processes = processes.clone();
        tokio::spawn(async move {
            OUTPUT_CLOSED.notified().await;
            if let Some(rescuer) = rescuer {
                rescuer.rescue();
            }
            processes.kill_all();
            die_by(libc::SIGPIPE);
        });
    }
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let mut last: Option<std::time::Instant> = None;
        while sigint.recv().await.is_some() {
            // Twice: while the first is still being handled (the user is being asked),
            // or, when nobody can be asked and the first was handled at once, within a
            // moment of it.
            let soon = !asks_after_interrupt && last.is_some_and(|at| at.elapsed() < DOUBLE_PRESS);
            last = Some(std::time::Instant::now());
            if interrupt.is_pending() || soon {
                // The step cut short keeps its row, as on SIGTERM.
                if let Some(rescuer) = &rescuer {
                    rescuer.rescue();
                }
                on_exit();
                processes.kill_all();
                std::process::exit(EXIT_INTERRUPTED);
            }
            interrupt.trigger();
        }
    });
    Ok(())
}

/// Sends SIGTERM to this process (not to this thread: whatever waits for SIGTERM from
/// outside gets it, e.g. the handler [`install`] started), so that a reason to stop
/// found inside the library ends the process exactly as a `kill` would.
pub fn terminate_self() {
    // SAFETY: kill(2) on our own pid with a constant signal.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Restores the default action of `signal` and raises it, so the process dies by it
/// (its parent sees the signal, not an exit code).
fn die_by(signal: i32) -> ! {
    // SAFETY: resetting a disposition to SIG_DFL and raising a signal are
    // async-signal-safe and touch no Rust state; we are in a normal task, not a handler.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    // The default action of SIGTERM/SIGHUP/SIGPIPE terminates; should it not, exit like a
    // shell.
    std::process::exit(128 + signal)
}
