//! Claude Code's custom sub-agents: `.claude/agents/*.md` of the workspace (project)
//! and `~/.claude/agents/*.md` (user), read once with the settings files.
//!
//! Each file is YAML front matter between `---` lines, then the body, which is the
//! agent's system prompt. flower reads `name`, `description`, `tools`,
//! `disallowedTools`, `model` and `maxTurns`; the other keys Claude Code knows
//! (`skills`, `mcpServers`, `isolation`, …) and unknown ones are listed by
//! `flower state -v`, never fatal. A file that cannot be read as an agent (no front
//! matter, no `name` or `description`, a bad permission rule) is ignored with a line
//! saying why. Project agents come before user agents: a user agent with a project
//! agent's name is ignored.
//!
//! The front matter is read by a strict reader of the YAML subset these files use
//! (`key: value`, quoted scalars, `[a, b]` and `- item` lists, `|`/`>` blocks): anything
//! else makes the file ignored rather than guessed at. The files are written by the
//! team (no agent can write `.claude/agents`, see `crate::tools::protected`), and the
//! workspace's are pinned like its settings files ([`super::pin`]).

use super::files::Scope;
use super::pin::PinnedFile;
use crate::engine::AgentSpec;
use crate::engine::permissions::Permissions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The one key read as a number.
const MAX_TURNS: &str = "maxTurns";

/// Front-matter keys flower reads.
const READ_KEYS: [&str; 6] = [
    "name",
    "description",
    "tools",
    "disallowedTools",
    "model",
    MAX_TURNS,
];

/// Claude Code's other keys: known, not used by flower.
const KNOWN_UNUSED: [&str; 9] = [
    "skills",
    "mcpServers",
    "isolation",
    "permissionMode",
    "hooks",
    "color",
    "memory",
    "background",
    "effort",
];

/// A front-matter value: the YAML subset holds strings and lists of strings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum FrontValue {
    Text(String),
    List(Vec<String>),
    /// Indented `key: value` lines (a skill's `metadata`).
    Map(BTreeMap<String, String>),
}

/// A file's front matter, by key.
pub type FrontMatter = BTreeMap<String, FrontValue>;

/// One custom sub-agent as its file defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomAgent {
    pub scope: Scope,
    pub path: PathBuf,
    pub name: String,
    pub description: String,
    /// `tools`: its allow rules; `None`: the role's (Claude Code: all tools).
    pub tools: Option<Vec<String>>,
    pub disallowed_tools: Vec<String>,
    /// `None`: the run's model (`inherit`, or no `model`).
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    /// The body: the agent's system prompt.
    pub prompt: String,
    /// Front-matter keys flower does not use, as written (`state -v` lists them).
    pub unused_keys: Vec<String>,
}

impl CustomAgent {
    /// The agent as a spec of its own (not yet bounded by a role, see
    /// [`AgentSpec::within`]).
    pub fn spec(&self) -> AgentSpec {
        let mut spec = AgentSpec::new(&self.name, &self.prompt);
        spec.description = Some(self.description.clone());
        spec.allowed_tools = self.tools.clone().unwrap_or_default();
        spec.disallowed_tools = self.disallowed_tools.clone();
        spec.model = self.model.clone();
        spec.max_turns = self.max_turns;
        spec
    }
}

/// What the agents directories hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentFiles {
    /// Project agents first, then user agents, each by file name.
    pub agents: Vec<CustomAgent>,
    /// One line per file left out, and why.
    pub ignored: Vec<String>,
    /// The workspace's agent files as written, for the run's pin.
    pub pinned: Vec<PinnedFile>,
}

/// The names flower's pipeline already uses for its default sub-agent.
const RESERVED: [&str; 1] = [crate::engine::GENERAL_PURPOSE];

/// Reads `<workspace>/.claude/agents/*.md`, then `<home>/.claude/agents/*.md`, those
/// of `scopes` (`Project`, `User`).
pub fn load(workspace: &Path, home: Option<&Path>, scopes: &[Scope]) -> AgentFiles {
    let mut out = AgentFiles::default();
    let mut dirs = vec![(Scope::Project, workspace.join(".claude/agents"))];
    if let Some(home) = home {
        dirs.push((Scope::User, home.join(".claude/agents")));
    }
    dirs.retain(|(scope, _)| scopes.contains(scope));
    for (scope, dir) in dirs {
        for path in markdown_files(&dir) {
            let text = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    out.ignored
                        .push(format!("{}:读不了({e}),忽略", path.display()));
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&text).into_owned();
            let parsed = parse(scope, &path, &text, home);
            if scope == Scope::Project {
                let name = path.strip_prefix(workspace).unwrap_or(&path);
                out.pinned.push(pinned(&name.to_string_lossy(), &text));
            }
            match parsed {
                Err(why) => out.ignored.push(format!("{}:{why},忽略", path.display())),
                Ok(agent) => {
                    if let Some(first) = out.agents.iter().find(|a| a.name == agent.name) {
                        out.ignored.push(format!(
                            "{}:代理 {} 已由 {} 定义(项目的优先,同一目录按文件名),忽略",
                            path.display(),
                            agent.name,
                            first.path.display()
                        ));
                    } else {
                        out.agents.push(agent);
                    }
                }
            }
        }
    }
    out
}

/// The `*.md` files of `dir`, by name; none when it is not there.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file())
        .collect();
    files.sort();
    files
}

/// What the pin keeps of an agent file (`file`, relative to the workspace): its front
/// matter as read and its body, so that a change is shown key by key; a file that is
/// not an agent's, as text.
pub(super) fn pinned(file: &str, text: &str) -> PinnedFile {
    let document = match split(text).and_then(|(front, body)| Ok((front_matter(front)?, body))) {
        Ok((front, body)) => serde_json::json!({"front_matter": front, "body": body}),
        Err(_) => serde_json::json!({"text": text}),
    };
    let document = match document {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    PinnedFile::new(file, text.as_bytes(), document)
}

/// One agent file, or why it is not one.
fn parse(
    scope: Scope,
    path: &Path,
    text: &str,
    home: Option<&Path>,
) -> Result<CustomAgent, String> {
    let (front, body) = split(text)?;
    let front = front_matter(front)?;
    let string = |key: &str| -> Result<Option<String>, String> {
        match front.get(key) {
            None => Ok(None),
            Some(FrontValue::Text(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("{key} 应是一个字符串")),
        }
    };
    let name = string("name")?.ok_or("缺少 name")?;
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(format!(
            "name {name:?} 只能用小写字母、数字、- 和 _(至多 64 个)"
        ));
    }
    if RESERVED.contains(&name.as_str()) {
        return Err(format!("name {name:?} 是 flower 自己的工作者的名字"));
    }
    let description = string("description")?
        .filter(|d| !d.trim().is_empty())
        .ok_or("缺少 description")?;
    let tools = rule_list(&front, "tools")?;
    let disallowed_tools = rule_list(&front, "disallowedTools")?.unwrap_or_default();
    Permissions::with_home(
        tools.as_deref().unwrap_or_default(),
        &disallowed_tools,
        home,
    )
    .map_err(|e| format!("权限规则不对:{e}"))?;
    let model = string("model")?.filter(|m| m != "inherit" && !m.is_empty());
    let max_turns = match front.get(MAX_TURNS) {
        None => None,
        Some(FrontValue::Text(n)) => Some(
            n.parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("maxTurns {n:?} 应是正整数"))?,
        ),
        Some(_) => return Err(format!("{MAX_TURNS} 应是正整数")),
    };
    let unused_keys = front
        .keys()
        .filter(|k| !READ_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(CustomAgent {
        scope,
        path: path.to_path_buf(),
        name,
        description: description.trim().to_string(),
        tools,
        disallowed_tools,
        model,
        max_turns,
        prompt: body.trim().to_string(),
        unused_keys,
    })
}

/// Whether a front-matter key is one Claude Code knows that flower does not use.
pub fn known_unused(key: &str) -> bool {
    KNOWN_UNUSED.contains(&key)
}

/// `tools`-like keys: a comma-separated string (Claude Code's form) or a list.
fn rule_list(front: &FrontMatter, key: &str) -> Result<Option<Vec<String>>, String> {
    let items: Vec<String> = match front.get(key) {
        None => return Ok(None),
        Some(FrontValue::Text(s)) => split_rules(s),
        Some(FrontValue::List(items)) => items.iter().flat_map(|i| split_rules(i)).collect(),
        Some(FrontValue::Map(_)) => return Err(format!("{key} 应是一个字符串或列表")),
    };
    Ok(Some(items))
}

/// `Read, Bash(git diff:*), Grep` → its rules (commas inside parentheses stay).
fn split_rules(text: &str) -> Vec<String> {
    let mut rules = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                rules.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    rules.push(current);
    rules
        .into_iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

/// The front matter's text and the body.
pub(super) fn split(text: &str) -> Result<(&str, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("没有以 --- 开头的 YAML 头")?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Ok((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err("YAML 头没有以 --- 结束".into())
}

/// The front matter as a map of strings and lists of strings.
// Long because the YAML subset (scalars, quoted, flow and block lists, block scalars)
// is one small state machine that reads best in one place.
pub(super) fn front_matter(text: &str) -> Result<FrontMatter, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut map = FrontMatter::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(format!("YAML 头第 {i} 行缩进得不对"));
        }
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| format!("YAML 头第 {i} 行不是 key: value"))?;
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("YAML 头第 {i} 行的键 {key:?} 读不懂"));
        }
        let value = value.trim();
        // The indented lines that belong to this key.
        let start = i;
        while i < lines.len() && (lines[i].starts_with([' ', '\t']) || lines[i].trim().is_empty()) {
            i += 1;
        }
        let inner: Vec<&str> = lines[start..i].to_vec();
        let parsed = if value.is_empty() {
            block_list(&inner)
                .or_else(|| block_map(&inner))
                .ok_or_else(|| format!("YAML 头里 {key} 的值读不懂"))?
        } else if let Some(style) = value.strip_prefix(['|', '>']) {
            if !matches!(style, "" | "-" | "+") {
                return Err(format!("YAML 头里 {key} 的块写法读不懂"));
            }
            FrontValue::Text(block_scalar(&inner, value.starts_with('>')))
        } else if !inner.iter().all(|l| l.trim().is_empty()) {
            // A plain scalar continued on indented lines folds into one line.
            let mut all = vec![scalar(value)?];
            for l in inner.iter().filter(|l| !l.trim().is_empty()) {
                all.push(l.trim().to_string());
            }
            FrontValue::Text(all.join(" "))
        } else if let Some(items) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            let items: Result<Vec<String>, String> = items
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(scalar)
                .collect();
            FrontValue::List(items?)
        } else {
            FrontValue::Text(scalar(value)?)
        };
        if map.insert(key.to_string(), parsed).is_some() {
            return Err(format!("YAML 头里 {key} 出现了两次"));
        }
    }
    Ok(map)
}

/// `- a` lines; `None` for anything else.
fn block_list(lines: &[&str]) -> Option<FrontValue> {
    let mut items = Vec::new();
    for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        let item = line.strip_prefix('-')?.trim();
        items.push(scalar(item).ok()?);
    }
    Some(FrontValue::List(items))
}

/// Indented `key: value` lines, one level; `None` for anything else.
fn block_map(lines: &[&str]) -> Option<FrontValue> {
    let mut map = BTreeMap::new();
    for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        let (key, value) = line.split_once(':')?;
        let value = value.trim();
        if value.is_empty()
            || map
                .insert(key.trim().to_string(), scalar(value).ok()?)
                .is_some()
        {
            return None;
        }
    }
    (!map.is_empty()).then_some(FrontValue::Map(map))
}

/// A `|` (kept lines) or `>` (folded) block.
fn block_scalar(lines: &[&str], folded: bool) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let body: Vec<&str> = lines
        .iter()
        .map(|l| if l.len() >= indent { &l[indent..] } else { "" })
        .collect();
    let joined = if folded {
        body.join(" ")
    } else {
        body.join("\n")
    };
    joined.trim_end().to_string()
}

/// A plain or quoted scalar.
fn scalar(value: &str) -> Result<String, String> {
    let value = value.trim();
    if let Some(inner) = value.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| format!("引号没有配对:{value}"))?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other @ ('"' | '\\' | '/')) => out.push(other),
                _ => return Err(format!("读不懂的转义:{value}")),
            }
        }
        return Ok(out);
    }
    if let Some(inner) = value.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| format!("引号没有配对:{value}"))?;
        return Ok(inner.replace("''", "'"));
    }
    if value.starts_with(['{', '&', '*', '!', '@', '`']) {
        return Err(format!("读不懂的 YAML 值:{value}"));
    }
    // A trailing comment.
    let value = match value.find(" #") {
        Some(at) => value[..at].trim_end(),
        None => value,
    };
    Ok(value.to_string())
}
