//! The one write policy: the paths no agent creates, changes, renames or deletes,
//! whatever writes on its behalf (Write, Edit, Bash, hooks, MCP stdio servers).
//!
//! These are the files that configure what runs next: the settings and MCP servers the
//! next `flower` (or Claude Code) obeys, the hooks and config git runs, the editors'
//! and shells' start-up files, and the run's own record (the stored prompts a resume
//! sends, the run lock). An agent that could write them could change the rules of the
//! next run; `docs/sandbox.md` ("Protected paths") has the list and the guarantee.
//!
//! This module owns the list ([`LIST`]) and the decision; the others ask it:
//! - the file tools call [`check_write`] with the path as written and as resolved;
//! - the sandbox ([`super::sandbox`]) asks [`for_commands`] what to bind read-only
//!   (the paths that exist) and what to remove after the command (the ones that did
//!   not exist: a missing path cannot be bind-mounted);
//! - the permission rules opt a path out ([`Protection::allowed`], filled by
//!   `Permissions::sandbox` from [`candidates`]): an allow rule of a writing tool that
//!   names the path (`Edit(.mcp.json)`, `Edit(.vscode/**)`).

use super::paths;
use super::sandbox::SandboxPolicy;
use std::path::{Path, PathBuf};

/// A protected path, relative to each root an agent writes (the workspace and the
/// additional directories).
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: &'static str,
    /// A directory: everything beneath it is protected too.
    pub dir: bool,
    /// Git's part of the list, governed by [`SandboxPolicy::protect_git`] (in the
    /// sandbox, git's own finder covers more of it).
    pub git: bool,
    /// What it is, for the refusal (Chinese).
    pub what: &'static str,
}

const fn file(path: &'static str, what: &'static str) -> Entry {
    Entry {
        path,
        dir: false,
        git: false,
        what,
    }
}

const fn dir(path: &'static str, what: &'static str) -> Entry {
    Entry {
        path,
        dir: true,
        git: false,
        what,
    }
}

const SETTINGS: &str = "Claude Code 与 flower 的设置文件";
const SHELL: &str = "shell 的启动文件,用户下次开 shell 时执行";

/// Claude Code's sandbox list (sandbox-runtime's dangerous files and directories, plus
/// its settings files), `.claude/skills` and `.claude/hooks`, and the other shells'
/// start-up files.
pub const LIST: &[Entry] = &[
    file(".claude/settings.json", SETTINGS),
    file(".claude/settings.local.json", SETTINGS),
    file(".mcp.json", "MCP 服务器配置,下一次运行会启动它列的程序"),
    dir(".claude/commands", "Claude Code 的斜杠命令"),
    dir(".claude/agents", "Claude Code 的子代理定义"),
    dir(".claude/skills", "Claude Code 的技能"),
    dir(
        ".claude/hooks",
        "钩子脚本的惯常位置:钩子的 allow 回答会跳过 ask 规则",
    ),
    Entry {
        path: ".git/hooks",
        dir: true,
        git: true,
        what: "git 钩子,用户下次运行 git 时执行",
    },
    Entry {
        path: ".git/config",
        dir: false,
        git: true,
        what: "git 配置(core.fsmonitor、core.hooksPath 等会执行程序)",
    },
    file(".gitconfig", "git 配置"),
    file(".gitmodules", "git 子模块配置"),
    file(".ripgreprc", "ripgrep 的配置"),
    dir(".vscode", "VS Code 的工作区配置(任务、设置会执行程序)"),
    dir(".idea", "JetBrains IDE 的工作区配置"),
    file(".bashrc", SHELL),
    file(".bash_profile", SHELL),
    file(".bash_login", SHELL),
    file(".bash_logout", SHELL),
    file(".profile", SHELL),
    file(".zshrc", SHELL),
    file(".zprofile", SHELL),
    file(".zshenv", SHELL),
    file(".zlogin", SHELL),
    file(".zlogout", SHELL),
];

/// What the rules of a run opt out of the protection, and the run's record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Protection {
    /// Protected paths (absolute, as [`candidates`] spells them) that an allow rule of a
    /// writing tool names: no longer protected for that agent.
    pub allowed: Vec<PathBuf>,
    /// The run directory (canonical), protected wherever an agent could write it. Set
    /// by the engine; `None`: no record to protect (a library user's bare engine).
    pub record: Option<PathBuf>,
    /// Files inside a root that a configured hook's command names (absolute, lexical):
    /// a hook's `allow` answer skips `ask` rules, so what it runs is configuration.
    /// Set by the engine from the hooks it was given.
    pub hook_files: Vec<PathBuf>,
}

/// What a protected path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Listed(&'static Entry),
    /// The run directory.
    Record,
    /// A file git's finder names (an included config, `core.hooksPath`, a submodule's).
    Git,
    /// A file a configured hook's command names.
    HookFile,
}

/// One protected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Absolute, as spelled from its root (not resolved).
    pub path: PathBuf,
    /// The canonical directory it is spelled from: what lies between it and `path` is
    /// what a command could make or replace.
    pub root: PathBuf,
    pub kind: Kind,
}

impl Target {
    fn dir(&self) -> bool {
        match self.kind {
            Kind::Listed(e) => e.dir,
            Kind::Record => true,
            Kind::Git | Kind::HookFile => self.path.is_dir(),
        }
    }

    /// The paths a permission rule must name to opt this one out: the path itself, and
    /// for a directory something beneath it (`Edit(.vscode/**)`; for git's hooks also
    /// one hook, `Edit(.git/hooks/pre-commit)`, as before the list existed).
    pub fn probes(&self) -> Vec<PathBuf> {
        let mut out = vec![self.path.clone()];
        if self.dir() {
            out.push(self.path.join("x"));
        }
        if matches!(self.kind, Kind::Listed(e) if e.git && e.dir) {
            out.push(self.path.join("pre-commit"));
        }
        out
    }

    fn what(&self) -> &'static str {
        match self.kind {
            Kind::Listed(e) => e.what,
            Kind::Record => {
                "本次运行的记录(会话、锁、lineage、manifest),下一次恢复会把存下的提示发给模型"
            }
            Kind::Git => "git 读取并据以执行程序的文件",
            Kind::HookFile => "设置里配置的钩子命令运行的文件:钩子的 allow 回答会跳过 ask 规则",
        }
    }
}

/// The roots an agent writes: the workspace and the additional directories.
fn roots(policy: &SandboxPolicy, workspace: &Path) -> Vec<PathBuf> {
    let mut out = vec![paths::root(workspace)];
    for d in &policy.additional_dirs {
        let r = paths::root(d);
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// Every protected path, opted out or not: the list beneath each root, and the record.
/// `Permissions::sandbox` probes these against the allow rules.
pub fn candidates(policy: &SandboxPolicy, workspace: &Path, record: Option<&Path>) -> Vec<Target> {
    let mut out = Vec::new();
    for root in roots(policy, workspace) {
        for entry in LIST {
            out.push(Target {
                path: root.join(entry.path),
                root: root.clone(),
                kind: Kind::Listed(entry),
            });
        }
    }
    if let Some(r) = record {
        out.push(Target {
            path: r.to_path_buf(),
            root: r.parent().unwrap_or(Path::new("/")).to_path_buf(),
            kind: Kind::Record,
        });
    }
    let roots = roots(policy, workspace);
    for f in &policy.protect.hook_files {
        if let Some(root) = roots.iter().find(|r| f.starts_with(r) && f != *r) {
            out.push(Target {
                path: f.clone(),
                root: root.clone(),
                kind: Kind::HookFile,
            });
        }
    }
    out
}

/// The protected paths in force: [`candidates`] less what is opted out, git's part only
/// with `protect_git`.
fn in_force(policy: &SandboxPolicy, workspace: &Path, record: Option<&Path>) -> Vec<Target> {
    candidates(policy, workspace, record)
        .into_iter()
        .filter(|t| !matches!(t.kind, Kind::Listed(e) if e.git && !policy.protect_git))
        .filter(|t| !policy.protect.allowed.contains(&t.path))
        .collect()
}

/// Why a write is refused. The text (Chinese) names the path, what it is, and the rule
/// that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "拒绝写入 {path:?}:它{via}是受保护的路径 {protected}({what})。代理不能创建、修改、改名或删除它,\
     因为下一次运行或用户的工具会照它行事。确实要让代理改它,得由用户在权限规则里写明这个路径,例如 \
     --allowed-tools '{rule}'。"
)]
pub struct Refusal {
    pub path: String,
    pub protected: String,
    via: String,
    what: &'static str,
    pub rule: String,
}

/// The allow rule that opts `target` out, relative to the workspace where it can be.
fn rule_for(target: &Target, workspace: &Path) -> String {
    let ws = paths::root(workspace);
    let shown = match target.path.strip_prefix(&ws) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => target.path.display().to_string(),
    };
    match target.kind {
        Kind::Listed(e) if e.git && e.dir => "Edit(.git/hooks/**)".to_string(),
        Kind::Listed(e) if e.git => "Edit(.git/config)".to_string(),
        _ if target.dir() => format!("Edit({shown}/**)"),
        _ => format!("Edit({shown})"),
    }
}

/// Whether a write to `path` (as written, relative to the workspace) that resolves to
/// `resolved` touches a protected path; `record` is the run directory. Both spellings
/// are checked against both forms of each protected path (as spelled, and with its
/// symbolic links resolved), so neither `..`, nor a link planted to point at a protected
/// path, nor a protected path that is itself reached through a link gets past.
pub fn check_write(
    policy: &SandboxPolicy,
    workspace: &Path,
    record: &Path,
    path: &str,
    resolved: &Path,
) -> Result<(), Refusal> {
    let ws = paths::root(workspace);
    let lexical = paths::lexical(&ws, Path::new(path));
    let mut targets = in_force(policy, workspace, Some(&paths::root(record)));
    if policy.protect_git {
        targets.extend(
            super::sandbox::git_named(&ws, &policy.user_git)
                .into_iter()
                .filter(|p| !policy.protect.allowed.contains(p))
                .map(|path| Target {
                    path,
                    root: PathBuf::from("/"),
                    kind: Kind::Git,
                }),
        );
    }
    for t in &targets {
        let real = paths::resolve(Path::new("/"), &t.path).unwrap_or_else(|_| t.path.clone());
        let hit = [&t.path, &real]
            .iter()
            .any(|p| resolved.starts_with(p) || lexical.starts_with(p));
        if hit {
            let shown = t
                .path
                .strip_prefix(&ws)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| t.path.display().to_string());
            let via = if !lexical.starts_with(&t.path) {
                format!("解析为 {},", resolved.display())
            } else {
                String::new()
            };
            return Err(Refusal {
                path: path.to_string(),
                protected: shown,
                via,
                what: t.what(),
                rule: rule_for(t, workspace),
            });
        }
    }
    Ok(())
}

/// A protected path that did not exist when a command started: whatever the command
/// (or anyone while it ran) made there is removed when it ends, and its result says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absent {
    /// Absolute; as spelled, so its parents may be links.
    pub path: PathBuf,
    /// The first component beneath the canonical root it is spelled from: while that is
    /// missing, so is everything beneath it (one `lstat` after most commands).
    first: PathBuf,
    /// Why it must not appear (Chinese, for the result).
    pub why: &'static str,
    /// The symbolic links on the path when the command started, with their inodes: a
    /// link that is still the same is left alone (the resolved spelling is swept on
    /// its own); any other link on the way is the command's and is removed.
    links: Vec<(PathBuf, u64)>,
}

impl Absent {
    /// `path`, beneath the canonical directory `root`, as it is now (missing).
    pub fn new(root: &Path, path: PathBuf, why: &'static str) -> Absent {
        use std::os::unix::fs::MetadataExt as _;
        let mut links = Vec::new();
        let mut sofar = root.to_path_buf();
        let mut first = None;
        for c in path.strip_prefix(root).unwrap_or(&path).components() {
            sofar.push(c);
            first.get_or_insert_with(|| sofar.clone());
            match sofar.symlink_metadata() {
                Ok(m) if m.file_type().is_symlink() => links.push((sofar.clone(), m.ino())),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        Absent {
            first: first.unwrap_or_else(|| path.clone()),
            path,
            why,
            links,
        }
    }

    /// Removes what is at the path now, walking it by directory descriptors without
    /// following any link, so that a directory swapped for a link while this runs cannot
    /// send the removal elsewhere. `None`: nothing was there.
    pub fn sweep(&self) -> Option<String> {
        use std::os::unix::fs::MetadataExt as _;
        self.first.symlink_metadata().ok()?;
        let parts: Vec<_> = self.path.components().skip(1).collect();
        let mut dir = std::fs::File::open("/").ok()?;
        let mut sofar = PathBuf::from("/");
        for (i, c) in parts.iter().enumerate() {
            sofar.push(c);
            let here = in_dir(&dir, c.as_os_str());
            let m = here.symlink_metadata().ok()?;
            let last = i + 1 == parts.len();
            if m.file_type().is_symlink() {
                if self.links.contains(&(sofar.clone(), m.ino())) {
                    return None;
                }
                return Some(self.note(&sofar, std::fs::remove_file(&here)));
            }
            if last {
                let removed = if m.is_dir() {
                    std::fs::remove_dir_all(&here)
                } else {
                    std::fs::remove_file(&here)
                };
                return Some(self.note(&sofar, removed));
            }
            if !m.is_dir() {
                return None;
            }
            dir = open_dir(&here)?;
        }
        None
    }

    fn note(&self, removed: &Path, result: std::io::Result<()>) -> String {
        let what = if removed == self.path {
            format!(
                "命令运行时新建了受保护的路径 {}({})",
                removed.display(),
                self.why
            )
        } else {
            format!(
                "命令运行时新建了它,挡在受保护的路径 {}({})上",
                self.path.display(),
                self.why
            )
        };
        match result {
            Ok(()) => format!("flower 删除了 {}:{what}。", removed.display()),
            Err(e) => format!("flower 没能删除 {}({e}):{what}。", removed.display()),
        }
    }
}

/// `name` inside the directory `dir` holds, as a path the kernel resolves through the
/// descriptor (only `name` itself is looked up by name).
fn in_dir(dir: &std::fs::File, name: &std::ffi::OsStr) -> PathBuf {
    use std::os::fd::AsRawFd as _;
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

/// Opens a directory, refusing a link in its place.
fn open_dir(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .ok()
}

/// The directory `path` (absolute), opened component by component without following a
/// link; `None` when a link or a non-directory is in the way.
fn open_dir_nofollow(path: &Path) -> Option<std::fs::File> {
    let mut dir = std::fs::File::open("/").ok()?;
    for c in path.components().skip(1) {
        dir = open_dir(&in_dir(&dir, c.as_os_str()))?;
    }
    Some(dir)
}

/// Files kept whole by the second line: larger ones are only bound read-only.
const KEEP_MAX: u64 = 256 * 1024;

/// The second line under the mounts: the protected regular files that exist, with their
/// bytes, taken before a command and checked after it. One that changed (the mounts
/// could not be made: no user namespace) is put back, and the result says so. Cheap:
/// a few small files (a settings file, `.mcp.json`, `.git/config`).
#[derive(Debug, Clone, Default)]
pub struct Kept(Vec<(PathBuf, Vec<u8>, u32)>);

impl Kept {
    /// Reads `files` (canonical) now; directories and large files are skipped.
    pub fn take(files: &[PathBuf]) -> Kept {
        use std::os::unix::fs::PermissionsExt as _;
        let mut out = Vec::new();
        for f in files {
            let Ok(m) = f.symlink_metadata() else {
                continue;
            };
            if !m.is_file() || m.len() > KEEP_MAX {
                continue;
            }
            if let Ok(bytes) = std::fs::read(f) {
                out.push((f.clone(), bytes, m.permissions().mode()));
            }
        }
        Kept(out)
    }

    /// Puts back what changed; one line for each, for the result.
    pub fn check(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (path, bytes, mode) in &self.0 {
            let same = path
                .symlink_metadata()
                .is_ok_and(|m| m.is_file() && std::fs::read(path).is_ok_and(|b| &b == bytes));
            if same {
                continue;
            }
            notes.push(match restore(path, bytes, *mode) {
                Ok(()) => format!(
                    "flower 把受保护的 {} 恢复成了命令运行前的内容:命令改动了它。",
                    path.display()
                ),
                Err(e) => format!(
                    "flower 没能恢复受保护的 {}({e}):命令改动了它。",
                    path.display()
                ),
            });
        }
        notes
    }
}

/// Writes `bytes` back at `path` through its parent opened without following links.
fn restore(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
    let (parent, name) = (
        path.parent().ok_or_else(gone)?,
        path.file_name().ok_or_else(gone)?,
    );
    let dir = open_dir_nofollow(parent).ok_or_else(gone)?;
    let at = in_dir(&dir, name);
    if at.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(&at)?;
    }
    crate::atomic::write(&at, bytes)?;
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode))
}

/// What the sandbox does for a command: bind read-only what exists, sweep afterwards
/// what did not.
#[derive(Debug, Default)]
pub struct ForCommands {
    /// Canonical paths that exist now.
    pub read_only: Vec<PathBuf>,
    pub absent: Vec<Absent>,
}

/// The protected paths for a command in `workspace` (git's own part is the sandbox's
/// git finder's): those that exist are to be bound read-only, those that do not are
/// swept after the command, both as spelled and as resolved.
pub fn for_commands(policy: &SandboxPolicy, workspace: &Path) -> ForCommands {
    let mut out = ForCommands::default();
    let targets = in_force(policy, workspace, policy.protect.record.as_deref());
    for t in targets
        .iter()
        .filter(|t| !matches!(t.kind, Kind::Listed(e) if e.git))
    {
        // Most of the list is missing: one `lstat` says so without resolving the rest.
        let first = t
            .path
            .strip_prefix(&t.root)
            .ok()
            .and_then(|rel| rel.components().next())
            .map(|c| t.root.join(c));
        let real = match first {
            Some(f) if f.symlink_metadata().is_err() => t.path.clone(),
            _ => paths::resolve(Path::new("/"), &t.path).unwrap_or_else(|_| t.path.clone()),
        };
        if real.symlink_metadata().is_ok() {
            if !out.read_only.contains(&real) {
                out.read_only.push(real);
            }
        } else {
            for p in [&t.path, &real] {
                if !out.absent.iter().any(|a| &a.path == p) {
                    out.absent.push(Absent::new(&t.root, p.clone(), t.what()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_relative_and_plain() {
        for e in LIST {
            assert!(
                !e.path.starts_with('/') && !e.path.contains(".."),
                "{}",
                e.path
            );
        }
        let names: Vec<_> = LIST.iter().map(|e| e.path).collect();
        for needed in [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".mcp.json",
            ".git/hooks",
            ".git/config",
            ".vscode",
            ".idea",
            ".bashrc",
        ] {
            assert!(names.contains(&needed), "{needed}");
        }
    }

    fn scratch() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    /// A link the command put where a missing protected path leads is removed, never
    /// followed; a real file there is removed; a link that was there before is left.
    #[test]
    fn the_sweep_removes_links_in_the_way_without_following_them() {
        let (_d, root) = scratch();
        let target = root.join(".claude/settings.json");
        let absent = Absent::new(&root, target.clone(), "x");
        assert_eq!(absent.sweep(), None, "nothing there");
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::fs::write(root.join("elsewhere/settings.json"), "{}").unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join(".claude")).unwrap();
        assert!(absent.sweep().is_some());
        assert!(root.join(".claude").symlink_metadata().is_err());
        assert!(root.join("elsewhere/settings.json").exists());
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::write(&target, "{}").unwrap();
        assert!(absent.sweep().is_some());
        assert!(!target.exists() && root.join(".claude").is_dir());
        // The user's own link, there before: the resolved spelling is swept instead.
        std::fs::remove_dir(root.join(".claude")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join(".claude")).unwrap();
        let users = Absent::new(&root, root.join(".claude/other.json"), "x");
        assert_eq!(users.sweep(), None);
        assert!(root.join(".claude").symlink_metadata().is_ok());
    }

    /// The second line puts a changed protected file back, but never through a link
    /// put in place of its directory.
    #[test]
    fn kept_files_are_put_back_but_not_through_a_link() {
        let (_d, root) = scratch();
        let file = root.join("a/settings.json");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(&file, "mine").unwrap();
        let kept = Kept::take(std::slice::from_ref(&file));
        assert!(kept.check().is_empty());
        std::fs::write(&file, "planted").unwrap();
        assert_eq!(kept.check().len(), 1);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        std::fs::rename(root.join("a"), root.join("a2")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::os::unix::fs::symlink(root.join("b"), root.join("a")).unwrap();
        let notes = kept.check();
        assert!(notes[0].contains("没能恢复"), "{notes:?}");
        assert!(!root.join("b/settings.json").exists());
    }
}
