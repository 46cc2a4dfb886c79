//! The run's record of a background command (`background/<id>.json` in the run
//! directory): what runs, as which process, for which session, and how it ended. A
//! flower killed without unwinding (SIGKILL, a reboot) leaves a record without an end;
//! the next start reads it, kills what is still there ([`sweep_leftovers`]) and the
//! session is told, on its next request, which commands no longer run.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The session a command belongs to: it ends with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub session_id: String,
    /// A sub-agent's transcript under the session (`subagents/agent-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
}

/// A process and its start time (clock ticks since boot, `/proc/<pid>/stat` field
/// 22), so a recycled pid is never taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: i32,
    pub start_ticks: u64,
}

impl ProcessId {
    /// This process, or `None` where `/proc` cannot say.
    pub fn of(pid: i32) -> Option<ProcessId> {
        Some(ProcessId {
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Whether that very process still runs (a zombie waiting for its reaper does not).
    pub fn alive(&self) -> bool {
        self.pid > 1
            && stat(self.pid)
                .is_some_and(|(state, ticks)| state != 'Z' && ticks == self.start_ticks)
    }
}

fn start_ticks(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, ticks)| ticks)
}

/// A process's state and start time from `/proc/<pid>/stat` (fields 3 and 22, after
/// the command name, which may hold spaces and parentheses).
fn stat(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.nth(18)?.parse().ok()?))
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// `exited`, `stopped` (TaskStop), `session-ended`, `interrupted` (Ctrl-C),
    /// `killed-on-start` (a leftover the next start killed), `gone` (a leftover that
    /// had already died).
    pub how: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Unix seconds.
    pub at: u64,
}

/// One background command, as the run directory keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub command: String,
    pub owner: Owner,
    /// The command's process group leader (the shell, or its sandbox supervisor):
    /// killing the group kills the command and everything it started.
    pub leader: ProcessId,
    /// The flower process that started it: while that one lives, nobody else kills it.
    pub flower: ProcessId,
    /// Unix seconds.
    pub started_at: u64,
    /// Its output file.
    pub output: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<End>,
    /// The session was told the command no longer runs (or saw its end itself).
    #[serde(default)]
    pub reported: bool,
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Record {
    pub(super) fn path_in(dir: &Path, id: &str) -> PathBuf {
        dir.join(format!("{id}.json"))
    }

    /// Writes the record atomically into `dir`.
    pub(super) fn save(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::atomic::write(&Self::path_in(dir, &self.id), &text)
    }

    pub(super) fn load(dir: &Path, id: &str) -> Option<Record> {
        let text = std::fs::read(Self::path_in(dir, id)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// Every record in `dir` (unreadable ones skipped), oldest first.
pub fn all(dir: &Path) -> Vec<Record> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut records: Vec<Record> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    records.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    records
}

/// What a start's sweep did: the records it ended, and the ones it could not judge.
#[derive(Debug, Default)]
pub struct Sweep {
    pub ended: Vec<Record>,
    /// Records without their flower's start time (`/proc` could not say when it was
    /// written): whether that flower still runs cannot be told, so they are left.
    pub unjudged: Vec<Record>,
}

impl Sweep {
    /// One line for the person about the records left alone, if any.
    pub fn warning(&self) -> Option<String> {
        if self.unjudged.is_empty() {
            return None;
        }
        let ids: Vec<&str> = self.unjudged.iter().map(|r| r.id.as_str()).collect();
        Some(format!(
            "后台命令 {} 的记录里没有启动它的 flower 的启动时间,看不出那个 flower 是否还在运行:没有结束它们(不需要了就自己结束)",
            ids.join("、")
        ))
    }
}

/// Kills the commands an earlier flower left running in `dir` (it died without
/// unwinding) and records their end. A record whose flower still runs (the pipeline,
/// a `flower once` beside it) is that process's and left alone, and a leader whose
/// start time differs is a recycled pid, never signalled: a pid alone is never
/// trusted. Nor is a start time of 0 (unknown when written): such a record is left
/// alone too, since its flower may be running.
pub fn sweep_leftovers(dir: &Path) -> Sweep {
    let mut sweep = Sweep::default();
    for mut record in all(dir) {
        if record.end.is_some() || record.flower.alive() {
            continue;
        }
        if record.flower.start_ticks == 0 {
            sweep.unjudged.push(record);
            continue;
        }
        let how = if record.leader.alive() {
            // SAFETY: killpg only sends a signal; the leader is the very process the
            // record names (same start time), so its group is the command's.
            unsafe {
                libc::killpg(record.leader.pid, libc::SIGKILL);
            }
            "killed-on-start"
        } else {
            "gone"
        };
        record.end = Some(End {
            how: how.to_string(),
            exit_code: None,
            signal: None,
            at: now(),
        });
        record.reported = false;
        if record.save(dir).is_ok() {
            sweep.ended.push(record);
        }
    }
    sweep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessId::of(std::process::id() as i32).unwrap();
        assert!(me.alive());
        let other = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!other.alive());
    }
}
