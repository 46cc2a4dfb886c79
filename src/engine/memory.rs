//! Project memory: the `CLAUDE.md` / `AGENTS.md` files a repository already has, read
//! into one block of text that goes into every agent's system prompt.
//!
//! # Which files, in which order
//!
//! 1. `~/.claude/CLAUDE.md` (the user's instructions for every project);
//! 2. for each directory from the repository root (the nearest ancestor of the
//!    workspace holding `.git`; without one, the workspace alone) down to the
//!    workspace: `CLAUDE.md`, `.claude/CLAUDE.md`, `CLAUDE.local.md`, and `AGENTS.md`
//!    when that directory has neither `CLAUDE.md` nor `.claude/CLAUDE.md` (a
//!    repository with both usually has one import the other; reading both would say
//!    everything twice).
//!
//! Outer files come first, so the instructions nearest the work come last, as in
//! Claude Code. Each file may import others with `@path` (relative to the importing
//! file, `~/…` or absolute) outside code spans and code blocks; an imported file comes
//! right after the file that imports it, at most [`MAX_IMPORT_DEPTH`] imports deep. A
//! file imported again on its own import chain is a cycle and is refused (with a
//! warning); a file already included elsewhere is not repeated. An `@word` that names
//! no file is left alone (it is often a mention, not an import).
//!
//! The whole is capped at [`MAX_MEMORY_BYTES`]: the file that crosses it is cut, the
//! files after it are left out, and a warning says so.
//!
//! # When it is read (the prompt cache)
//!
//! Memory is read once per session, when the session starts, and the text sent is
//! stored in the session's transcript (an entry of type `system`, subtype `memory`,
//! [`crate::transcript::Chain::memory`]). A resumed session (a retry, a wake after a
//! kill, a gate round) uses the stored text, so its system prompt is byte-identical to
//! what the cache holds, whatever happened to the files since. A file edited mid-run
//! therefore takes effect at the next new session: the next judge round, a handoff's
//! successor, a new sub-agent, the next step.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// How many imports deep `@path` is followed (Claude Code's limit).
pub const MAX_IMPORT_DEPTH: usize = 5;

/// The most memory text sent, bytes (the files' contents; the headings are extra).
pub const MAX_MEMORY_BYTES: usize = 40_000;

/// Where memory is read from. `None` in the engine's config: no memory (`--no-memory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySource {
    /// The workspace (canonical).
    pub workspace: PathBuf,
    /// The home directory: `~/.claude/CLAUDE.md` and `@~/…` imports.
    pub home: Option<PathBuf>,
    /// The kinds of file read where they are found (`User`, `Project`, `Local`);
    /// `None`: all (the CLI). The Python package's `setting_sources` may leave some out.
    pub kinds: Option<Vec<MemoryKind>>,
}

/// Why a file is in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// `~/.claude/CLAUDE.md`.
    User,
    /// `CLAUDE.md`, `.claude/CLAUDE.md` or `AGENTS.md` of the repository.
    Project,
    /// `CLAUDE.local.md`.
    Local,
    /// Imported with `@path` by another memory file.
    Import,
}

impl MemoryKind {
    /// The description Claude Code gives each kind of file.
    fn described(self) -> &'static str {
        match self {
            MemoryKind::User => "user's private global instructions for all projects",
            MemoryKind::Project => "project instructions, checked into the codebase",
            MemoryKind::Local => "user's private project instructions, not checked in",
            MemoryKind::Import => "imported",
        }
    }
}

/// One file that went into memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryFile {
    pub path: PathBuf,
    pub kind: MemoryKind,
    /// Bytes of it that were included (less than its size when the cap cut it).
    pub bytes: usize,
    /// How many imports deep (0: found by location).
    pub depth: usize,
}

/// Memory as read: the files, the text for the system prompt, what went wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    pub files: Vec<MemoryFile>,
    /// The block appended to system prompts; empty when there are no files.
    pub text: String,
    /// One line each: a cycle refused, an import too deep, the cap, an unreadable file.
    pub warnings: Vec<String>,
}

/// A file found, before the cap: its text and where it is.
struct Found {
    path: PathBuf,
    kind: MemoryKind,
    depth: usize,
    text: String,
}

impl MemorySource {
    /// Reads the memory files now (see the module doc).
    pub fn load(&self) -> Memory {
        let mut reader = Reader {
            home: self.home.as_deref(),
            seen: HashSet::new(),
            found: Vec::new(),
            warnings: Vec::new(),
        };
        let reads = |kind: MemoryKind| self.kinds.as_ref().is_none_or(|k| k.contains(&kind));
        if let Some(home) = &self.home
            && reads(MemoryKind::User)
        {
            reader.root(&home.join(".claude").join("CLAUDE.md"), MemoryKind::User);
        }
        for dir in project_dirs(&self.workspace) {
            let claude = dir.join("CLAUDE.md");
            let dot_claude = dir.join(".claude").join("CLAUDE.md");
            let has_claude = claude.is_file() || dot_claude.is_file();
            if reads(MemoryKind::Project) {
                reader.root(&claude, MemoryKind::Project);
                reader.root(&dot_claude, MemoryKind::Project);
            }
            if reads(MemoryKind::Local) {
                reader.root(&dir.join("CLAUDE.local.md"), MemoryKind::Local);
            }
            if !has_claude && reads(MemoryKind::Project) {
                reader.root(&dir.join("AGENTS.md"), MemoryKind::Project);
            }
        }
        let Reader {
            found,
            mut warnings,
            ..
        } = reader;
        let (files, text) = assemble(found, &mut warnings);
        Memory {
            files,
            text,
            warnings,
        }
    }
}

/// The directories whose memory files count, outermost first: the repository root
/// down to `workspace`, or `workspace` alone outside a repository.
fn project_dirs(workspace: &Path) -> Vec<PathBuf> {
    let root = workspace
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(workspace);
    let mut dirs: Vec<PathBuf> = workspace
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

struct Reader<'a> {
    home: Option<&'a Path>,
    /// Canonical paths already included.
    seen: HashSet<PathBuf>,
    found: Vec<Found>,
    warnings: Vec<String>,
}

impl Reader<'_> {
    fn root(&mut self, path: &Path, kind: MemoryKind) {
        if path.is_file() {
            self.file(path, kind, 0, &mut Vec::new());
        }
    }

    /// Includes `path` and, after it, what it imports. `chain`: the files importing it.
    fn file(&mut self, path: &Path, kind: MemoryKind, depth: usize, chain: &mut Vec<PathBuf>) {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if chain.contains(&canonical) {
            self.warnings.push(format!(
                "{} 导入了它自己的导入链上的 {},是个环:没有再读",
                chain
                    .last()
                    .map_or_else(String::new, |p| p.display().to_string()),
                path.display()
            ));
            return;
        }
        if !self.seen.insert(canonical.clone()) {
            return;
        }
        let text = match std::fs::read(path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    self.warnings
                        .push(format!("{} 不是 UTF-8 文本:没有读", path.display()));
                    return;
                }
            },
            Err(e) => {
                self.warnings
                    .push(format!("读不了 {}({e})", path.display()));
                return;
            }
        };
        let imports = imports_of(&text);
        self.found.push(Found {
            path: path.to_path_buf(),
            kind,
            depth,
            text,
        });
        if imports.is_empty() {
            return;
        }
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        chain.push(canonical);
        for import in imports {
            let Some(target) = self.resolve(&dir, &import) else {
                continue;
            };
            if !target.is_file() {
                // A mention (`@alice`) or a file that is not there: not an import.
                continue;
            }
            if depth + 1 > MAX_IMPORT_DEPTH {
                self.warnings.push(format!(
                    "{} 的导入 @{import} 超过了 {MAX_IMPORT_DEPTH} 层:没有读",
                    path.display()
                ));
                continue;
            }
            self.file(&target, MemoryKind::Import, depth + 1, chain);
        }
        chain.pop();
    }

    fn resolve(&self, dir: &Path, import: &str) -> Option<PathBuf> {
        if let Some(rest) = import.strip_prefix("~/") {
            return self.home.map(|home| home.join(rest));
        }
        let path = Path::new(import);
        Some(if path.is_absolute() {
            path.to_path_buf()
        } else {
            dir.join(path)
        })
    }
}

/// The `@path` imports of a memory file, in order: a `@` at the start of a line or
/// after whitespace, then the path up to the next whitespace (`\ ` keeps a space).
/// Nothing inside a fenced code block or an inline code span counts.
pub fn imports_of(text: &str) -> Vec<String> {
    let mut imports = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str()) {
                fence = None;
            }
            continue;
        }
        if let Some(marker) = fence_marker(trimmed) {
            fence = Some(marker);
            continue;
        }
        scan_line(line, &mut imports);
    }
    imports
}

/// The fence a line opens (three or more backticks or tildes).
fn fence_marker(line: &str) -> Option<String> {
    for c in ['`', '~'] {
        let n = line.chars().take_while(|&x| x == c).count();
        if n >= 3 {
            return Some(std::iter::repeat_n(c, n).collect());
        }
    }
    None
}

fn scan_line(line: &str, imports: &mut Vec<String>) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut in_code: Option<usize> = None;
    while i < chars.len() {
        let c = chars[i];
        if c == '`' {
            let run = chars[i..].iter().take_while(|&&x| x == '`').count();
            match in_code {
                Some(open) if open == run => in_code = None,
                None => in_code = Some(run),
                _ => {}
            }
            i += run;
            continue;
        }
        if in_code.is_none() && c == '@' && (i == 0 || chars[i - 1].is_whitespace()) {
            let mut path = String::new();
            let mut j = i + 1;
            while j < chars.len() {
                match chars[j] {
                    '\\' if chars.get(j + 1) == Some(&' ') => {
                        path.push(' ');
                        j += 2;
                    }
                    ch if ch.is_whitespace() => break,
                    ch => {
                        path.push(ch);
                        j += 1;
                    }
                }
            }
            if !path.is_empty() {
                imports.push(path);
            }
            i = j;
            continue;
        }
        i += 1;
    }
}

/// The files and the text, with the cap applied.
fn assemble(found: Vec<Found>, warnings: &mut Vec<String>) -> (Vec<MemoryFile>, String) {
    if found.is_empty() {
        return (Vec::new(), String::new());
    }
    let mut text = String::from(HEADER);
    let mut files = Vec::new();
    let mut used = 0usize;
    let mut left_out = Vec::new();
    for file in found {
        if used >= MAX_MEMORY_BYTES {
            left_out.push(file.path.display().to_string());
            continue;
        }
        let room = MAX_MEMORY_BYTES - used;
        let (body, included) = if file.text.len() > room {
            let mut cut = room;
            while !file.text.is_char_boundary(cut) {
                cut -= 1;
            }
            warnings.push(format!(
                "项目记忆超过 {MAX_MEMORY_BYTES} 字节:{} 只放进了前 {cut} 字节",
                file.path.display()
            ));
            let body = format!(
                "{}\n[… 以下被截掉:项目记忆超过 {MAX_MEMORY_BYTES} 字节 …]",
                &file.text[..cut]
            );
            (body, cut)
        } else {
            (file.text.clone(), file.text.len())
        };
        // Once a file was cut, nothing after it goes in.
        used = if included < file.text.len() {
            MAX_MEMORY_BYTES
        } else {
            used + included
        };
        text.push_str(&format!(
            "\n\nContents of {} ({}):\n\n{}",
            file.path.display(),
            file.kind.described(),
            body.trim_end()
        ));
        files.push(MemoryFile {
            path: file.path,
            kind: file.kind,
            bytes: included,
            depth: file.depth,
        });
    }
    if !left_out.is_empty() {
        warnings.push(format!(
            "项目记忆超过 {MAX_MEMORY_BYTES} 字节,这些文件没有放进去:{}",
            left_out.join("、")
        ));
    }
    (files, text)
}

/// What opens the memory block in a system prompt.
const HEADER: &str = "# Project memory\n\nThe instructions below come from the memory files of this project and of its user (CLAUDE.md, AGENTS.md and the files they import). Follow them, except where your role's own instructions, after them, say otherwise.";

/// An agent's system prompt in the order it is sent: the part every agent of the run
/// shares, then the agent's own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SystemPrompt {
    /// The same for every agent of a run (the memory block), so the prompt cache's
    /// prefix (tools, then this) is written once and read by every role.
    pub shared: String,
    /// The agent's own instructions.
    pub own: String,
}

/// The system prompt of an agent: the memory block first (shared by every agent of the
/// run), then its own instructions. The one place a system prompt is put together:
/// what every agent shares goes into `shared`, what is the agent's into `own`. The
/// same inputs always give the same bytes.
pub fn system_prompt(instructions: &str, memory: &str) -> SystemPrompt {
    SystemPrompt {
        shared: memory.to_string(),
        own: instructions.to_string(),
    }
}
