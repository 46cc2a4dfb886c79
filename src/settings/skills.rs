//! Agent Skills: `.claude/skills/<name>/SKILL.md` of the workspace (project) and
//! `~/.claude/skills/<name>/SKILL.md` (user), read once with the settings files.
//!
//! Anthropic's format (which Claude Code and codex read): YAML front matter with
//! `name` (lower-case letters, digits and `-`, at most 64, the directory's name) and
//! `description` (at most 1,024 characters), then the body, the skill's instructions.
//! The other keys of the format and of Claude Code (`license`, `allowed-tools`, …)
//! are listed by `flower state -v`, never fatal. A skill with
//! `disable-model-invocation: true` is for a person's slash command, which flower does
//! not have: it is left out, with a line saying so. Project skills come first; a user
//! skill with a project skill's name is ignored.
//!
//! The workspace's `SKILL.md` files are pinned like its settings files
//! ([`super::pin`]); no agent can write `.claude/skills` (`crate::tools::protected`).

use super::agents::{FrontMatter, FrontValue, front_matter, pinned, split};
use super::files::Scope;
use super::pin::PinnedFile;
use crate::engine::skills::{MAX_FILES, Skill};
use std::path::{Path, PathBuf};

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// The longest description the format allows, characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Front-matter keys flower reads.
const READ_KEYS: [&str; 3] = ["name", "description", "disable-model-invocation"];

/// The format's and Claude Code's other keys: known, not used by flower.
const KNOWN_UNUSED: [&str; 10] = [
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "model",
    "argument-hint",
    "user-invocable",
    "context",
    "agent",
    "hooks",
];

/// A skill as read, with what `state -v` says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    pub skill: Skill,
    /// Its `SKILL.md`.
    pub path: PathBuf,
    /// Front-matter keys flower does not use, as written.
    pub unused_keys: Vec<String>,
}

/// What the skills directories hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillFiles {
    /// Project skills first, then the user's, each by directory name.
    pub skills: Vec<SkillFile>,
    /// One line per skill left out, and why.
    pub ignored: Vec<String>,
    /// The workspace's `SKILL.md` files as written, for the run's pin.
    pub pinned: Vec<PinnedFile>,
}

impl SkillFiles {
    /// The skills, as the engine offers them.
    pub fn engine_skills(&self) -> Vec<Skill> {
        self.skills.iter().map(|s| s.skill.clone()).collect()
    }
}

/// Whether a front-matter key is one the format knows that flower does not use.
pub fn known_unused(key: &str) -> bool {
    KNOWN_UNUSED.contains(&key)
}

/// Reads `<workspace>/.claude/skills/*/SKILL.md`, then `<home>/.claude/skills/*/SKILL.md`,
/// those of `scopes` (`Project`, `User`).
pub fn load(workspace: &Path, home: Option<&Path>, scopes: &[Scope]) -> SkillFiles {
    let mut out = SkillFiles::default();
    let mut roots = vec![(Scope::Project, workspace.join(".claude/skills"))];
    if let Some(home) = home {
        roots.push((Scope::User, home.join(".claude/skills")));
    }
    roots.retain(|(scope, _)| scopes.contains(scope));
    for (scope, root) in roots {
        for dir in skill_dirs(&root) {
            let path = dir.join(SKILL_FILE);
            let text = match std::fs::read(&path) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => {
                    out.ignored
                        .push(format!("{}:读不了({e}),忽略", path.display()));
                    continue;
                }
            };
            if scope == Scope::Project {
                let name = path.strip_prefix(workspace).unwrap_or(&path);
                out.pinned.push(pinned(&name.to_string_lossy(), &text));
            }
            match parse(scope, &dir, &text) {
                Err(why) => out.ignored.push(format!("{}:{why},忽略", path.display())),
                Ok(skill) => {
                    if let Some(first) =
                        out.skills.iter().find(|s| s.skill.name == skill.skill.name)
                    {
                        out.ignored.push(format!(
                            "{}:技能 {} 已由 {} 定义(项目的优先),忽略",
                            path.display(),
                            skill.skill.name,
                            first.path.display()
                        ));
                    } else {
                        out.skills.push(skill);
                    }
                }
            }
        }
    }
    out
}

/// The directories of `root` that hold a `SKILL.md`, by name; none when it is not there.
fn skill_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join(SKILL_FILE).is_file())
        .collect();
    dirs.sort();
    dirs
}

/// One skill, or why it is not one.
fn parse(scope: Scope, dir: &Path, text: &str) -> Result<SkillFile, String> {
    let (front, body) = split(text)?;
    let front: FrontMatter = front_matter(front)?;
    let string = |key: &str| -> Result<Option<String>, String> {
        match front.get(key) {
            None => Ok(None),
            Some(FrontValue::Text(s)) => Ok(Some(s.trim().to_string())),
            Some(_) => Err(format!("{key} 应是一个字符串")),
        }
    };
    let name = string("name")?.ok_or("缺少 name")?;
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if !valid {
        return Err(format!(
            "name {name:?} 只能用小写字母、数字和 -(至多 64 个,不以 - 开头或结尾)"
        ));
    }
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    if dir_name.as_deref() != Some(name.as_str()) {
        return Err(format!(
            "name {name:?} 和目录名 {:?} 不一样(格式要求一样)",
            dir_name.unwrap_or_default()
        ));
    }
    let description = string("description")?
        .filter(|d| !d.is_empty())
        .ok_or("缺少 description")?;
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "description 有 {chars} 个字符,超过格式允许的 {MAX_DESCRIPTION_CHARS}"
        ));
    }
    if string("disable-model-invocation")?.as_deref() == Some("true") {
        return Err("disable-model-invocation: true(只供人用斜杠命令调用,flower 没有)".into());
    }
    let unused_keys = front
        .keys()
        .filter(|k| !READ_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(SkillFile {
        skill: Skill {
            name,
            description,
            scope: match scope {
                Scope::User => "user",
                _ => "project",
            },
            dir: dir.to_path_buf(),
            body: body.trim().to_string(),
            files: files_beside(dir),
        },
        path: dir.join(SKILL_FILE),
        unused_keys,
    })
}

/// The files of a skill's directory other than `SKILL.md`, relative, sorted; at most
/// [`MAX_FILES`], three directories deep.
fn files_beside(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    while let Some((current, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < 3 {
                pending.push((path, depth + 1));
            } else if kind.is_file()
                && let Ok(rel) = path.strip_prefix(dir)
                && rel != Path::new(SKILL_FILE)
            {
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    files.truncate(MAX_FILES);
    files
}
