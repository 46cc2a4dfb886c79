//! Workspace path confinement.
//!
//! Every path a tool touches is resolved the way the kernel would follow it: relative
//! to the workspace, every existing symbolic link replaced by its target, `.` and `..`
//! applied to the resolved prefix (so `link/..` is the parent of the link's *target*,
//! as the kernel sees it). Then the result must lie inside the workspace (writes) or
//! inside the workspace or the run directory (reads). A symlink inside the workspace
//! that points outside therefore does not let a tool out.
//!
//! A write must also spare the protected paths ([`super::protected`]): the control
//! files and the run's record.
//!
//! Not covered: a race where a directory is replaced by a symlink between the check and
//! the use, and hard links (which cannot be told from ordinary files). Tools run in the
//! agent's own workspace, not against an adversary racing them.

use super::ToolContext;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::{LazyLock, Mutex};

/// Symlinks followed while resolving one path before giving up (Linux uses 40 too).
const MAX_SYMLINKS: usize = 40;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    #[error("too many levels of symbolic links while resolving {0}")]
    SymlinkLoop(PathBuf),
}

/// Resolves `path` against `base` like `realpath -m`: the result is absolute, free of
/// `.`, `..` and symlinks in its existing part; components that do not exist yet are
/// kept as written (they cannot be links).
pub fn resolve(base: &Path, path: &Path) -> Result<PathBuf, PathError> {
    if path.as_os_str().is_empty() {
        return Err(PathError::Empty);
    }
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut pending: VecDeque<OsString> = components(&joined);
    let mut out = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == "." {
            continue;
        }
        if c == ".." {
            out.pop();
            continue;
        }
        let candidate = out.join(&c);
        match std::fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(PathError::SymlinkLoop(joined));
                }
                let Ok(target) = std::fs::read_link(&candidate) else {
                    out = candidate;
                    continue;
                };
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                let mut next = components(&target);
                next.extend(pending);
                pending = next;
            }
            _ => out = candidate,
        }
    }
    Ok(out)
}

/// The lexical absolute form of `path` (joined to `base`, `.` and `..` applied without
/// looking at the file system). Used where the written path matters as much as the
/// resolved one (deny rules).
pub fn lexical(base: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in components(&joined) {
        if c == ".." {
            out.pop();
        } else if c != "." {
            out.push(c);
        }
    }
    out
}

fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir => Some(OsString::from(".")),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// The canonical form of a root directory (workspace, run dir); as given if it cannot
/// be resolved.
///
/// Remembered per process: every tool call asked for the workspace's and the run
/// directory's form several times (the permission check, the write policy, the
/// confinement), a `statx` per path component each, about 30 a turn (#46). A
/// remembered form is used only while both `dir` and the form still lead to the
/// directory it named (a `stat` each, following links: same device and inode; one
/// when they are the same path);
/// otherwise `dir` is resolved again. So a directory renamed while `dir` is re-pointed
/// at it (the link leads to the same inode, the old form no longer does), or another
/// directory made at the old form's place, is noticed.
pub fn root(dir: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return resolve_root(dir);
    };
    let identity = (meta.dev(), meta.ino());
    let mut known = ROOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let leads_here =
        |path: &Path| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == identity);
    if let Some((seen, resolved)) = known.get(dir)
        && *seen == identity
        // The same path (no link on the way): the `stat` above answered for both.
        && (resolved == dir || leads_here(resolved))
    {
        return resolved.clone();
    }
    let resolved = resolve_root(dir);
    // A long-lived process (the Python package) may see many workspaces: bounded.
    if known.len() >= MAX_REMEMBERED_ROOTS {
        known.clear();
    }
    known.insert(dir.to_path_buf(), (identity, resolved.clone()));
    resolved
}

fn resolve_root(dir: &Path) -> PathBuf {
    resolve(Path::new("/"), dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Directories whose [`root`] a process remembers before it starts over.
const MAX_REMEMBERED_ROOTS: usize = 64;

/// [`root`]'s memory: a directory as given, the device and inode it led to, its form.
type Remembered = HashMap<PathBuf, ((u64, u64), PathBuf)>;
static ROOTS: LazyLock<Mutex<Remembered>> = LazyLock::new(Mutex::default);

/// Why a tool may not use a path. The text is ready for the model.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("The path is empty.")]
    Empty,
    #[error(
        "The path {0:?} starts with `~`, which is not expanded. Give an absolute path \
         or a path relative to the workspace."
    )]
    Tilde(String),
    #[error("The path {0:?} contains a NUL byte.")]
    Nul(String),
    #[error(transparent)]
    Resolve(#[from] PathError),
    #[error(
        "Refusing to write {path:?}: it resolves to {}{}, which is outside the workspace {}. \
         Writes are confined to the workspace.",
        .resolved.display(), through(*.via_link), .workspace.display()
    )]
    OutsideWrite {
        path: String,
        resolved: PathBuf,
        via_link: bool,
        workspace: PathBuf,
    },
    #[error(
        "Refusing to read {path:?}: it resolves to {}{}, which is outside the workspace {} \
         and the run directory {}. Reads are confined to those two directories.",
        .resolved.display(), through(*.via_link), .workspace.display(), .run_dir.display()
    )]
    OutsideRead {
        path: String,
        resolved: PathBuf,
        via_link: bool,
        workspace: PathBuf,
        run_dir: PathBuf,
    },
    /// A protected path (the write policy, [`super::protected`]).
    #[error(transparent)]
    Protected(#[from] super::protected::Refusal),
}

fn through(via_link: bool) -> &'static str {
    if via_link {
        " through a symbolic link"
    } else {
        ""
    }
}

fn check_input(path: &str) -> Result<(), Refused> {
    if path.is_empty() {
        return Err(Refused::Empty);
    }
    if path.starts_with('~') {
        return Err(Refused::Tilde(path.to_string()));
    }
    if path.contains('\0') {
        return Err(Refused::Nul(path.to_string()));
    }
    Ok(())
}

/// Whether `resolved` lies in one of the additional directories (a settings file's
/// `permissions.additionalDirectories`, carried by the sandbox policy): the tools
/// reach them as they reach the workspace.
fn in_additional(ctx: &ToolContext, resolved: &Path) -> bool {
    ctx.sandbox
        .additional_dirs
        .iter()
        .any(|dir| resolved.starts_with(root(dir)))
}

/// Resolves a path a tool is about to write. Relative paths are relative to the
/// workspace; the result must be inside it (or an additional directory) and not a
/// protected path ([`super::protected::check_write`]). The error text is ready for the
/// model.
pub fn resolve_for_write(ctx: &ToolContext, path: &str) -> Result<PathBuf, Refused> {
    check_input(path)?;
    let ws = root(&ctx.workspace);
    let resolved = resolve(&ws, Path::new(path))?;
    if resolved.starts_with(&ws) || in_additional(ctx, &resolved) {
        super::protected::check_write(&ctx.sandbox, &ws, &ctx.run_dir, path, &resolved)?;
        return Ok(resolved);
    }
    let via_link = lexical(&ws, Path::new(path)).starts_with(&ws);
    Err(Refused::OutsideWrite {
        path: path.to_string(),
        resolved,
        via_link,
        workspace: ws,
    })
}

/// Resolves a path a tool is about to read. Relative paths are relative to the
/// workspace; the result must be inside the workspace or the run directory.
pub fn resolve_for_read(ctx: &ToolContext, path: &str) -> Result<PathBuf, Refused> {
    check_input(path)?;
    let ws = root(&ctx.workspace);
    let run = root(&ctx.run_dir);
    let resolved = resolve(&ws, Path::new(path))?;
    if resolved.starts_with(&ws) || resolved.starts_with(&run) || in_additional(ctx, &resolved) {
        return Ok(resolved);
    }
    let lex = lexical(&ws, Path::new(path));
    let via_link = lex.starts_with(&ws) || lex.starts_with(&run);
    Err(Refused::OutsideRead {
        path: path.to_string(),
        resolved,
        via_link,
        workspace: ws,
        run_dir: run,
    })
}
