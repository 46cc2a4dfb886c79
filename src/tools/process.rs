//! The process groups of the shell commands running now.
//!
//! Commands run in process groups of their own, so nothing else stops them when flower
//! dies without unwinding (SIGTERM, SIGHUP, a double Ctrl-C): the signal handler kills
//! what is registered here. The registry is a value handed to the tools and the signal
//! handlers, not a global, so two runtimes in one process keep their commands apart.

use std::sync::{Arc, Mutex, MutexGuard};

/// A shared set of process group ids. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct ProcessGroups(Arc<Mutex<Vec<i32>>>);

impl ProcessGroups {
    pub fn new() -> Self {
        ProcessGroups::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<i32>> {
        // A panic elsewhere must not keep commands alive: use the data anyway.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a running command's group.
    pub fn add(&self, pgid: i32) {
        self.lock().push(pgid);
    }

    /// The command was reaped (or killed): its group is not ours to kill any more.
    pub fn remove(&self, pgid: i32) {
        self.lock().retain(|&p| p != pgid);
    }

    /// How many commands are running.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kills (SIGKILL) the process group of every command still running. For a process
    /// about to die: a build or a server the agent started would outlive flower.
    pub fn kill_all(&self) {
        // A group id of 0 or 1 would reach this process's own group or, through
        // kill(-1), every process: never registered, never signalled.
        for pgid in self.lock().drain(..).filter(|&g| g > 1) {
            // SAFETY: killpg only sends a signal; every pgid here belongs to a shell this
            // process spawned (it is removed as soon as the shell is reaped).
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

/// A command's process group while its shell is not reaped: registered with the
/// signal handlers, killed on drop unless disarmed (a dropped call leaves nothing
/// running). Never group 0 or 1. Bash commands and hooks use it.
pub struct GroupGuard {
    pgid: Option<i32>,
    groups: ProcessGroups,
}

impl GroupGuard {
    pub fn new(pgid: Option<i32>, groups: &ProcessGroups) -> Self {
        let pgid = pgid.filter(|&g| g > 1);
        if let Some(pgid) = pgid {
            groups.add(pgid);
        }
        GroupGuard {
            pgid,
            groups: groups.clone(),
        }
    }

    /// The shell was reaped: its group is not ours to kill any more.
    pub fn disarm(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            self.groups.remove(pgid);
        }
    }

    pub fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            self.groups.remove(pgid);
            // SAFETY: killpg only sends a signal; pgid is the id of the group this call
            // created (the shell's pid, not yet reaped, so not reused).
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}
