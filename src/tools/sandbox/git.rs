//! What git reads for code execution, found for the repository at the workspace: the
//! sandbox keeps these read-only and pins the directories holding them, so that a
//! command cannot plant a hook or a `core.fsmonitor` line that runs, unsandboxed, when
//! the user next runs `git status`.
//!
//! Protected (when they lie where a command could write):
//! - the git directory (`.git`, or where a `.git` file points) is pinned (it cannot be
//!   renamed or removed); a `.git` *file* is read-only;
//! - in it, and in its common directory (`commondir`): `config` (created empty when
//!   missing, so that it can be protected), `config.worktree`, `hooks` (created empty
//!   when missing), `commondir` itself;
//! - every submodule's git directory under `modules/` (nested ones too): its `config`
//!   and `hooks`; every linked worktree's `config.worktree` and `commondir`;
//! - the checkouts of the submodules `.gitmodules` names: their `.git` file or
//!   directory as above, or the empty directory itself while the submodule is not
//!   checked out (so that no `.git` can be planted there);
//! - the files a program-valued key names by a path (`core.fsmonitor = ./tools/fsmon`,
//!   `alias.x = !scripts/x.sh`, a filter or diff driver), existing ones;
//! - the directory `core.hooksPath` names, and every file an `include.path` or
//!   `includeIf.*.path` names, in any of these config files or the user's and the
//!   system's (`~/.gitconfig`, `$XDG_CONFIG_HOME/git`, `$GIT_CONFIG_GLOBAL`,
//!   `/etc/gitconfig`); those files are created empty when missing.
//!
//! Config files are read with a small reader of git's syntax (sections, quoting,
//! escapes, continuation lines); what it cannot read it skips.

use super::UserGitConfig;
use std::path::{Component, Path, PathBuf};

/// Submodules inside submodules followed at most.
const MAX_REPO_DEPTH: usize = 3;
/// Includes inside includes followed at most (git's own limit is 10).
const MAX_INCLUDE_DEPTH: usize = 10;
/// Directories under `modules/` looked at, at most.
const MAX_MODULE_DIRS: usize = 500;

/// The paths to keep read-only and the directories to pin.
#[derive(Debug, Default)]
pub(super) struct Protected {
    pub read_only: Vec<PathBuf>,
    pub pinned: Vec<PathBuf>,
    /// Files that must not appear (a new `commondir` would send git to another
    /// repository's config); git needs its directory writable, so they are removed
    /// after the command instead ([`super::Prepared::sweep`]).
    pub absent: Vec<PathBuf>,
    /// Every path above, existing or not, and those that would be created or protected
    /// if they existed: what the file tools refuse to write ([`named`]).
    pub named: Vec<PathBuf>,
}

struct Finder<'a> {
    /// Where missing files may be created (the writable roots).
    roots: &'a [PathBuf],
    home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME` and `GIT_CONFIG_GLOBAL`, as the settings resolved them.
    xdg_config_home: Option<PathBuf>,
    global: Option<PathBuf>,
    out: Protected,
    configs_read: Vec<PathBuf>,
}

/// Every path git's protection names for `workspace`, existing or not; creates nothing.
pub(crate) fn named(workspace: &Path, user: &UserGitConfig) -> Vec<PathBuf> {
    protected(workspace, &[], user).named
}

/// What to protect for a command in `workspace`; missing files are created only
/// beneath `roots`.
pub(super) fn protected(workspace: &Path, roots: &[PathBuf], user: &UserGitConfig) -> Protected {
    let mut f = Finder {
        roots,
        home: user.home.clone(),
        xdg_config_home: user.xdg_config_home.clone(),
        global: user.global.clone(),
        out: Protected::default(),
        configs_read: Vec::new(),
    };
    if let Some(top) = workspace.ancestors().find(|a| a.join(".git").exists()) {
        f.repository(top, 0);
    }
    f.user_configs();
    f.out
}

impl Finder<'_> {
    fn creatable(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| p.starts_with(r))
    }

    fn read_only(&mut self, p: PathBuf) {
        if !self.out.named.contains(&p) {
            self.out.named.push(p.clone());
        }
        if p.symlink_metadata().is_ok() && !self.out.read_only.contains(&p) {
            self.out.read_only.push(p);
        }
    }

    fn pin(&mut self, p: PathBuf) {
        if p.is_dir() && !self.out.pinned.contains(&p) {
            self.out.pinned.push(p);
        }
    }

    /// A file git would read if it existed: created empty (where a command could
    /// create it) and kept read-only.
    fn file(&mut self, p: PathBuf) {
        if !p.exists()
            && self.creatable(&p)
            && p.parent()
                .is_some_and(|d| std::fs::create_dir_all(d).is_ok())
        {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p);
        }
        self.read_only(p);
    }

    /// A hooks directory, created empty when missing.
    fn hooks_dir(&mut self, p: PathBuf) {
        if !p.exists() && self.creatable(&p) {
            let _ = std::fs::create_dir_all(&p);
        }
        self.read_only(p);
    }

    /// The repository whose work tree is `top`.
    fn repository(&mut self, top: &Path, depth: usize) {
        let dotgit = top.join(".git");
        let gitdir = if dotgit.is_dir() {
            dotgit
        } else {
            let Some(target) = gitdir_file(&dotgit) else {
                return;
            };
            self.read_only(dotgit);
            top.join(target)
        };
        self.gitdir(&gitdir, top);
        if depth < MAX_REPO_DEPTH {
            for path in submodule_paths(top) {
                let checkout = top.join(path);
                if checkout.join(".git").symlink_metadata().is_ok() {
                    self.repository(&checkout, depth + 1);
                } else if checkout.is_dir() {
                    self.read_only(checkout);
                }
            }
        }
    }

    /// A git directory: its files, its common directory, modules and worktrees.
    fn gitdir(&mut self, gitdir: &Path, top: &Path) {
        self.pin(gitdir.to_path_buf());
        self.file(gitdir.join("config"));
        self.hooks_dir(gitdir.join("hooks"));
        self.read_only(gitdir.join("config.worktree"));
        self.config(&gitdir.join("config"), top, 0);
        self.config(&gitdir.join("config.worktree"), top, 0);
        let mut bases = vec![gitdir.to_path_buf()];
        let commondir = gitdir.join("commondir");
        if commondir.symlink_metadata().is_err() {
            self.out.absent.push(commondir.clone());
            self.out.named.push(commondir.clone());
        }
        if let Ok(text) = std::fs::read_to_string(&commondir) {
            self.read_only(commondir);
            let common = gitdir.join(text.trim_end_matches(['\n', '\r']));
            if common.is_dir() {
                self.pin(common.clone());
                self.file(common.join("config"));
                self.hooks_dir(common.join("hooks"));
                self.config(&common.join("config"), top, 0);
                bases.push(common);
            }
        }
        for base in bases {
            self.modules(&base.join("modules"), &mut 0);
            if let Ok(entries) = std::fs::read_dir(base.join("worktrees")) {
                for e in entries.flatten() {
                    self.read_only(e.path().join("config.worktree"));
                    self.read_only(e.path().join("commondir"));
                }
            }
        }
    }

    /// Submodule git directories beneath `dir` (names may hold slashes).
    fn modules(&mut self, dir: &Path, seen: &mut usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            *seen += 1;
            if *seen > MAX_MODULE_DIRS {
                return;
            }
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if p.join("HEAD").is_file() {
                self.pin(p.clone());
                if p.join("commondir").symlink_metadata().is_err() {
                    self.out.absent.push(p.join("commondir"));
                    self.out.named.push(p.join("commondir"));
                }
                self.file(p.join("config"));
                self.hooks_dir(p.join("hooks"));
                self.modules(&p.join("modules"), seen);
            } else {
                self.modules(&p, seen);
            }
        }
    }

    /// Reads a config file for `core.hooksPath` and includes; `top` is the work tree
    /// a relative hooks path is taken from.
    fn config(&mut self, file: &Path, top: &Path, depth: usize) {
        if depth > MAX_INCLUDE_DEPTH || self.configs_read.iter().any(|f| f == file) {
            return;
        }
        let Ok(text) = std::fs::read(file) else {
            return;
        };
        self.configs_read.push(file.to_path_buf());
        let text = String::from_utf8_lossy(&text);
        for entry in parse_config(&text) {
            let Some(value) = entry.value else { continue };
            let (section, key) = (entry.section.as_str(), entry.key.as_str());
            if section == "core" && key == "hookspath" {
                if let Some(p) = self.expand(&value, top) {
                    self.hooks_dir(p);
                }
            } else if (section == "include" || section == "includeif") && key == "path" {
                let base = file.parent().unwrap_or(Path::new("/"));
                if let Some(p) = self.expand(&value, base) {
                    self.file(p.clone());
                    self.config(&p, top, depth + 1);
                }
            } else if runs_program(section, key) {
                self.program_files(&value, top);
            }
        }
    }

    /// The files a program-valued key names by a path (`core.fsmonitor =
    /// ./tools/fsmon`, `alias.x = !scripts/x.sh`): git runs them from the work tree, so
    /// they are configuration too. A word with a `/` is a path from `top`; an existing
    /// file is kept read-only, and a missing one the file tools refuse to create.
    fn program_files(&mut self, value: &str, top: &Path) {
        let words = value
            .split(|c: char| c.is_whitespace() || "'\";&|()<>`".contains(c))
            .map(|w| w.trim_start_matches('!'))
            .filter(|w| w.contains('/'));
        for w in words {
            if let Some(p) = self.expand(w, top)
                && !p.is_dir()
            {
                self.read_only(p);
            }
        }
    }

    /// A path value: `~/` is the home directory, a relative path is taken from `base`.
    fn expand(&self, value: &str, base: &Path) -> Option<PathBuf> {
        let p = if let Some(rest) = value.strip_prefix("~/") {
            self.home.as_ref()?.join(rest)
        } else {
            base.join(value)
        };
        Some(normalize(&p))
    }

    /// The user's and the system's config files.
    fn user_configs(&mut self) {
        let mut files = Vec::new();
        if let Some(home) = self.home.clone() {
            files.push(home.join(".gitconfig"));
            let xdg = self
                .xdg_config_home
                .clone()
                .unwrap_or_else(|| home.join(".config"));
            let dir = xdg.join("git");
            self.read_only(dir.clone());
            files.push(dir.join("config"));
        }
        if let Some(global) = self.global.clone() {
            files.push(global);
        }
        files.push(PathBuf::from("/etc/gitconfig"));
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        for f in files {
            self.read_only(f.clone());
            self.config(&f, &cwd, 0);
        }
    }
}

/// Config keys whose value is a command git runs (lower-case, as [`parse_config`]
/// gives them): `core.fsmonitor`, editors, pagers, helpers, diff and merge drivers,
/// filters, `!` aliases.
fn runs_program(section: &str, key: &str) -> bool {
    const KEYS: [&str; 20] = [
        "fsmonitor",
        "sshcommand",
        "editor",
        "pager",
        "askpass",
        "gitproxy",
        "external",
        "program",
        "helper",
        "textconv",
        "command",
        "clean",
        "smudge",
        "process",
        "driver",
        "cmd",
        "difffilter",
        "packobjectshook",
        "uploadpack",
        "receivepack",
    ];
    matches!(section, "alias" | "pager") || KEYS.contains(&key)
}

/// `..` and `.` applied without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The target of a `.git` file (`gitdir: <path>`).
fn gitdir_file(p: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(p).ok()?;
    let line = text.lines().next()?;
    Some(PathBuf::from(line.strip_prefix("gitdir:")?.trim()))
}

/// The `path` of every submodule `.gitmodules` in `top` names, relative and without
/// `..` (git refuses others).
fn submodule_paths(top: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read(top.join(".gitmodules")) else {
        return Vec::new();
    };
    parse_config(&String::from_utf8_lossy(&text))
        .into_iter()
        .filter(|e| e.section == "submodule" && e.key == "path")
        .filter_map(|e| e.value)
        .map(PathBuf::from)
        .filter(|p| {
            p.components().all(|c| matches!(c, Component::Normal(_))) && !p.as_os_str().is_empty()
        })
        .collect()
}

/// One `key = value` of a config file; section and key lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ConfigEntry {
    pub section: String,
    pub subsection: Option<String>,
    pub key: String,
    /// `None` for a bare key (a boolean true).
    pub value: Option<String>,
}

/// Reads git's config syntax. Lines it cannot read are skipped; it never fails.
pub(super) fn parse_config(text: &str) -> Vec<ConfigEntry> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut subsection: Option<String> = None;
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        // Leading blanks.
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        match chars.peek().copied() {
            None => break,
            Some('\n' | '\r') => {
                chars.next();
            }
            Some('#' | ';') => skip_line(&mut chars),
            Some('[') => {
                chars.next();
                match section_header(&mut chars) {
                    Some((s, sub)) => {
                        section = s;
                        subsection = sub;
                    }
                    None => skip_line(&mut chars),
                }
                // A key may follow the header on the same line.
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let mut key = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        key.push(c.to_ascii_lowercase());
                        chars.next();
                    } else {
                        break;
                    }
                }
                while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                    chars.next();
                }
                let value = match chars.peek() {
                    Some('=') => {
                        chars.next();
                        Some(value(&mut chars))
                    }
                    _ => {
                        skip_line(&mut chars);
                        None
                    }
                };
                if !section.is_empty() {
                    out.push(ConfigEntry {
                        section: section.clone(),
                        subsection: subsection.clone(),
                        key,
                        value,
                    });
                }
            }
            Some(_) => skip_line(&mut chars),
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn skip_line(chars: &mut Chars) {
    for c in chars.by_ref() {
        if c == '\n' {
            break;
        }
    }
}

/// After `[`: `name]`, `name "sub"]` or the old `name.sub]`.
fn section_header(chars: &mut Chars) -> Option<(String, Option<String>)> {
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            name.push(c.to_ascii_lowercase());
            chars.next();
        } else {
            break;
        }
    }
    if name.is_empty() {
        return None;
    }
    match chars.next_if(|c| *c != '\n')? {
        ']' => match name.split_once('.') {
            Some((s, sub)) => Some((s.to_string(), Some(sub.to_string()))),
            None => Some((name, None)),
        },
        ' ' | '\t' => {
            while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                chars.next();
            }
            chars.next_if_eq(&'"')?;
            let mut sub = String::new();
            // The line end is left for the caller, which skips the rest of the line.
            loop {
                match chars.peek().copied()? {
                    '\n' => return None,
                    '"' => {
                        chars.next();
                        break;
                    }
                    '\\' => {
                        chars.next();
                        match chars.peek().copied()? {
                            '\n' => return None,
                            c => {
                                chars.next();
                                sub.push(c);
                            }
                        }
                    }
                    c => {
                        chars.next();
                        sub.push(c);
                    }
                }
            }
            (chars.next_if_eq(&']').is_some()).then_some((name, Some(sub)))
        }
        _ => None,
    }
}

/// A value after `=`: quotes, escapes, comments and continuation lines as git reads
/// them.
fn value(chars: &mut Chars) -> String {
    let mut out = String::new();
    let mut quoted = false;
    // Blanks kept only if something follows them.
    let mut pending = String::new();
    let mut started = false;
    while let Some(c) = chars.next() {
        match c {
            '\n' => break,
            '\r' if chars.peek() == Some(&'\n') => {}
            '"' => {
                out.push_str(&pending);
                pending.clear();
                quoted = !quoted;
                started = true;
            }
            '#' | ';' if !quoted => {
                skip_line(chars);
                break;
            }
            ' ' | '\t' if !quoted => {
                if started {
                    pending.push(c);
                }
            }
            '\\' => {
                let e = match chars.next() {
                    None => break,
                    Some('\n') => continue,
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    Some(e) => e,
                };
                out.push_str(&pending);
                pending.clear();
                out.push(e);
                started = true;
            }
            c => {
                out.push_str(&pending);
                pending.clear();
                out.push(c);
                started = true;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_git_reads() {
        let text = "[core]\n\thooksPath = \"my hooks\" ; comment\n[include]\npath=a\\\nb\n\
                    [includeIf \"gitdir:~/x/\"]\n  path = ~/inc # c\n[Submodule.Name]\nbare\n";
        let e = parse_config(text);
        let get = |s: &str, k: &str| {
            e.iter()
                .find(|x| x.section == s && x.key == k)
                .and_then(|x| x.value.clone())
        };
        assert_eq!(get("core", "hookspath").as_deref(), Some("my hooks"));
        assert_eq!(get("include", "path").as_deref(), Some("ab"));
        assert_eq!(get("includeif", "path").as_deref(), Some("~/inc"));
        assert!(e.iter().any(|x| x.section == "submodule"
            && x.subsection.as_deref() == Some("name")
            && x.key == "bare"
            && x.value.is_none()));
    }

    proptest! {
        /// Config files are written by the commands the sandbox confines: any bytes
        /// are read without a panic, and a plain include always comes through.
        #[test]
        fn any_config_text_is_read(junk in "\\PC{0,200}", name in "[a-z/._]{1,20}") {
            let _ = parse_config(&junk);
            // A backslash at a value's end continues it on the next line, as in git.
            prop_assume!(!junk.ends_with('\\'));
            let text = format!("{junk}\n[include]\n\tpath = {name}\n");
            let e = parse_config(&text);
            prop_assert!(e.iter().any(|x| x.section == "include" && x.value.as_deref() == Some(name.as_str())));
        }
    }
}
