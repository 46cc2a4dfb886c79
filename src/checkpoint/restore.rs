//! Restoring a checkpoint, crash-safe: the changes are written to `journal.json`
//! (atomically) before the first file is touched, and the journal is removed only once
//! the workspace's tree is the checkpoint's. A restore killed at any point is finished
//! by the next [`super::Checkpoints::open`] (every flower command that reads or takes
//! checkpoints opens them first), replaying the journal: each change is idempotent
//! (write this blob, remove this path), so the workspace ends in the state after.

use super::git::Change;
use super::{CheckpointError, Checkpoints};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

const JOURNAL_FILE: &str = "journal.json";

/// A test hook: after `after_files` files the restore writes `marker` and waits to be
/// killed (the crash test kills it there, on the marker's appearance).
#[derive(Debug, Clone)]
pub struct RestoreHook {
    pub after_files: usize,
    pub marker: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    target: String,
    changes: Vec<Change>,
}

fn journal_path(checkpoints: &Checkpoints) -> PathBuf {
    checkpoints.dir.join(JOURNAL_FILE)
}

/// Takes the workspace to `tree`; returns the number of paths changed.
pub(super) fn restore(
    checkpoints: &Checkpoints,
    tree: &str,
    hook: Option<&RestoreHook>,
) -> Result<usize, CheckpointError> {
    let now = checkpoints.snapshot()?;
    let changes = checkpoints.changes(&now, tree)?;
    let journal = Journal {
        target: tree.to_string(),
        changes,
    };
    let path = journal_path(checkpoints);
    let bytes = serde_json::to_vec(&journal).unwrap_or_default();
    crate::atomic::write(&path, &bytes).map_err(|source| CheckpointError::Io {
        path: path.clone(),
        source,
    })?;
    apply(checkpoints, &journal, hook)?;
    Ok(journal.changes.len())
}

/// Finishes a restore that a kill interrupted, if there is one.
pub fn finish_interrupted(checkpoints: &Checkpoints) -> Result<bool, CheckpointError> {
    let path = journal_path(checkpoints);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(CheckpointError::Io { path, source }),
    };
    // Written atomically: a journal that does not parse was never a journal.
    let Ok(journal) = serde_json::from_slice::<Journal>(&bytes) else {
        let _ = std::fs::remove_file(&path);
        return Ok(false);
    };
    apply(checkpoints, &journal, None)?;
    Ok(true)
}

/// Applies the journal's changes, checks the result, removes the journal.
fn apply(
    checkpoints: &Checkpoints,
    journal: &Journal,
    hook: Option<&RestoreHook>,
) -> Result<(), CheckpointError> {
    let workspace = checkpoints.workspace();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    for change in &journal.changes {
        safe_path(workspace, &change.path)?;
    }
    // Deletions first: a file may give way to a directory of the same name.
    let (deletions, writes): (Vec<&Change>, Vec<&Change>) =
        journal.changes.iter().partition(|c| c.status == 'D');
    let writes: Vec<&Change> = writes.into_iter().filter(|c| c.mode != "160000").collect();
    let ids: Vec<&str> = writes.iter().map(|c| c.blob.as_str()).collect();
    let blobs = ids
        .iter()
        .map(|id| checkpoints.blob(id))
        .collect::<Result<Vec<_>, _>>()?;
    let mut done = 0;
    for change in deletions {
        let full = workspace.join(&change.path);
        match std::fs::remove_file(&full) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(CheckpointError::Io { path: full, source }),
        }
        remove_empty_parents(workspace, &full);
        done += 1;
        pause_if_asked(hook, done);
    }
    for (change, blob) in writes.iter().zip(blobs) {
        let full = workspace.join(&change.path);
        if let Some(parent) = full.parent() {
            if parent.is_file() || parent.is_symlink() {
                std::fs::remove_file(parent).map_err(io(parent))?;
            }
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if full.is_dir() && !full.is_symlink() {
            std::fs::remove_dir_all(&full).map_err(io(&full))?;
        }
        if change.mode == "120000" {
            let _ = std::fs::remove_file(&full);
            let target = String::from_utf8_lossy(&blob).into_owned();
            std::os::unix::fs::symlink(target, &full).map_err(io(&full))?;
        } else {
            if full.is_symlink() {
                std::fs::remove_file(&full).map_err(io(&full))?;
            }
            crate::atomic::write(&full, &blob).map_err(io(&full))?;
            let mode = if change.mode == "100755" {
                0o755
            } else {
                0o644
            };
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode))
                .map_err(io(&full))?;
        }
        done += 1;
        pause_if_asked(hook, done);
    }
    let got = checkpoints.snapshot()?;
    if got != journal.target {
        return Err(CheckpointError::Mismatch {
            got,
            want: journal.target.clone(),
        });
    }
    let path = journal_path(checkpoints);
    std::fs::remove_file(&path).map_err(io(&path))
}

/// A second line of defence behind git's own tree rules: a restored path is relative,
/// has no `..` or `.git` component, and no directory on its way is a symbolic link.
fn safe_path(workspace: &Path, path: &str) -> Result<(), CheckpointError> {
    let unsafe_path = || CheckpointError::UnsafePath {
        path: path.to_string(),
    };
    let relative = Path::new(path);
    let mut dir = workspace.to_path_buf();
    let components: Vec<Component> = relative.components().collect();
    for (i, component) in components.iter().enumerate() {
        let Component::Normal(name) = component else {
            return Err(unsafe_path());
        };
        if name.eq_ignore_ascii_case(".git") {
            return Err(unsafe_path());
        }
        if i + 1 < components.len() {
            dir.push(name);
            if dir.is_symlink() {
                return Err(unsafe_path());
            }
        }
    }
    if components.is_empty() {
        return Err(unsafe_path());
    }
    Ok(())
}

fn remove_empty_parents(workspace: &Path, file: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == workspace || !d.starts_with(workspace) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

fn pause_if_asked(hook: Option<&RestoreHook>, done: usize) {
    let Some(hook) = hook else { return };
    if done != hook.after_files {
        return;
    }
    let _ = std::fs::write(&hook.marker, done.to_string());
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}
