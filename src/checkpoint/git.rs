//! The object store under a checkpoint directory: git's own format, written by the
//! `git` binary's plumbing (`ls-files`, `update-index`, `write-tree`, `diff-tree`,
//! `cat-file`) with a git directory and an index of flower's own. The workspace's own
//! repository (if any) is never touched: every call names its directories explicitly
//! and runs with the user's and the system's git configuration left out.

use super::CheckpointError;
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Git's empty tree, the "before" of the first checkpoint.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Variables that would point git elsewhere than the directories named here.
const FOREIGN_VARIABLES: [&str; 8] = [
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
];

#[derive(Debug, Clone)]
pub struct Git {
    pub git_dir: PathBuf,
    pub index: PathBuf,
    pub workspace: PathBuf,
}

impl Git {
    fn command(&self) -> Command {
        let mut command = Command::new("git");
        for name in FOREIGN_VARIABLES {
            command.env_remove(name);
        }
        command
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.workspace)
            .env("GIT_INDEX_FILE", &self.index)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C")
            .current_dir(&self.workspace)
            .stdin(Stdio::null());
        command
    }

    /// Runs git with `args`, `input` on its stdin; its stdout when it exits 0.
    pub fn run<I, S>(&self, args: I, input: Option<&[u8]>) -> Result<Vec<u8>, CheckpointError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> = args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect();
        let what = args
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut command = self.command();
        command
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let output = spawn_with_input(command, input).map_err(|source| CheckpointError::Git {
            what: what.clone(),
            source,
        })?;
        if !output.status.success() {
            return Err(CheckpointError::GitFailed {
                what,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(output.stdout)
    }

    /// Creates the git directory (bare, with flower's settings) when it does not exist.
    pub fn init(&self, excludes: &[String]) -> Result<(), CheckpointError> {
        if self.git_dir.join("objects").is_dir() {
            return Ok(());
        }
        let io = |source| CheckpointError::Io {
            path: self.git_dir.clone(),
            source,
        };
        std::fs::create_dir_all(&self.git_dir).map_err(io)?;
        let mut command = self.command();
        command
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE");
        command
            .args(["init", "-q", "--bare"])
            .arg(&self.git_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let output = spawn_with_input(command, None).map_err(|source| CheckpointError::Git {
            what: "init".into(),
            source,
        })?;
        if !output.status.success() {
            return Err(CheckpointError::GitFailed {
                what: "init".into(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        // No automatic gc (objects are the checkpoints), no line-ending or file-mode
        // guesses, no hooks, and the untracked-file cache for the walk's speed.
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tautocrlf = false\n\
                      \tfilemode = true\n\tsymlinks = true\n\tuntrackedCache = true\n\
                      \thooksPath = /dev/null\n\tfsmonitor = false\n[gc]\n\tauto = 0\n";
        std::fs::write(self.git_dir.join("config"), config).map_err(io)?;
        let mut exclude = String::from("# flower's checkpoints never hold these\n.git/\n");
        for line in excludes {
            exclude.push_str(line);
            exclude.push('\n');
        }
        let info = self.git_dir.join("info");
        std::fs::create_dir_all(&info).map_err(io)?;
        std::fs::write(info.join("exclude"), exclude).map_err(io)
    }
}

fn spawn_with_input(mut command: Command, input: Option<&[u8]>) -> std::io::Result<Output> {
    let mut child = command.spawn()?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A writer thread: git may fill its stdout before reading all of stdin.
        let bytes = bytes.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&bytes));
        let output = child.wait_with_output()?;
        writer
            .join()
            .map_err(|_| std::io::Error::other("writer thread panicked"))??;
        return Ok(output);
    }
    child.wait_with_output()
}

/// One changed path between two trees (`diff-tree --raw`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// `A`, `M`, `D` or `T` (type change).
    pub status: char,
    pub path: String,
    /// The "after" mode and blob (`000000` and zeros for a deletion).
    pub mode: String,
    pub blob: String,
}

/// Lines added and removed over a `diff-tree --numstat -z` output (binary files: 0).
pub fn sum_numstat(out: &[u8]) -> (u64, u64) {
    let mut added = 0;
    let mut removed = 0;
    for record in out.split(|b| *b == 0) {
        let text = String::from_utf8_lossy(record);
        let mut parts = text.split('\t');
        let (Some(a), Some(r)) = (parts.next(), parts.next()) else {
            continue;
        };
        added += a.trim().parse::<u64>().unwrap_or(0);
        removed += r.trim().parse::<u64>().unwrap_or(0);
    }
    (added, removed)
}
