//! The `hooks` key of Claude Code's settings files, parsed and checked.
//!
//! ```json
//! "hooks": {
//!   "PreToolUse": [
//!     {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "fmt.sh", "timeout": 30}]}
//!   ]
//! }
//! ```
//!
//! An event holds matcher groups; a group holds commands. Groups from every settings
//! file are kept (user, then project, then local): hooks merge across files, as in
//! Claude Code. A matcher is Claude Code's: empty or `*` matches everything; a plain
//! name (letters, digits, `_`, `|`) is one or more exact names; anything else is a
//! regular expression searched in the name (`Notebook.*`, `mcp__memory__.*`). Only
//! `PreToolUse`/`PostToolUse` (the tool name), `SessionStart` (the source) and
//! `PreCompact` (the trigger) look at it; the other events run every group.
//!
//! Events flower does not have (`Notification`, `PermissionRequest`, …) and hook types
//! other than `command` (`prompt`, `agent`, `http`) are kept out with a warning, so a
//! settings file written for a newer Claude Code still loads. A malformed entry of a
//! known event is an error naming the file and the key.

use crate::lenient::{Entries, Slot, UnknownKeys};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a hook may run when its entry gives no `timeout` (Claude Code's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The events flower fires. `PreCompact` is fired before a 换代 (a session handing off
/// to its successor), with `trigger: "auto"`: the nearest thing flower has to a
/// compaction, so a Claude Code `PreCompact` hook (a transcript backup, say) works
/// unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
    SubagentStop,
    SessionStart,
    SessionEnd,
    PreCompact,
}

impl HookEvent {
    pub const ALL: [HookEvent; 8] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::SessionStart,
        HookEvent::SessionEnd,
        HookEvent::PreCompact,
    ];

    /// The name in settings files and in `hook_event_name`.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::PreCompact => "PreCompact",
        }
    }

    pub fn from_name(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether the event's matcher means anything (else every group runs).
    pub fn uses_matcher(self) -> bool {
        matches!(
            self,
            HookEvent::PreToolUse
                | HookEvent::PostToolUse
                | HookEvent::SessionStart
                | HookEvent::PreCompact
        )
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A matcher, as Claude Code reads it.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Empty, absent or `*`.
    All,
    /// `Write` or `Write|Edit`: exact names.
    Names(Vec<String>),
    /// Anything else: a regular expression searched in the name.
    Regex(regex::Regex),
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Matcher) -> bool {
        match (self, other) {
            (Matcher::All, Matcher::All) => true,
            (Matcher::Names(a), Matcher::Names(b)) => a == b,
            (Matcher::Regex(a), Matcher::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Eq for Matcher {}

impl Matcher {
    /// Parses a matcher; `Err` says why a regular expression does not compile.
    pub fn parse(text: &str) -> Result<Matcher, regex::Error> {
        let text = text.trim();
        if text.is_empty() || text == "*" {
            return Ok(Matcher::All);
        }
        if text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
        {
            return Ok(Matcher::Names(
                text.split('|')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            ));
        }
        regex::Regex::new(text).map(Matcher::Regex)
    }

    pub fn matches(&self, subject: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|n| n == subject),
            Matcher::Regex(re) => re.is_match(subject),
        }
    }

    /// As written in a listing (`*` for all).
    pub fn shown(&self) -> String {
        match self {
            Matcher::All => "*".into(),
            Matcher::Names(names) => names.join("|"),
            Matcher::Regex(re) => re.as_str().to_string(),
        }
    }
}

/// The `hooks` section of a settings file as written: events by name, each a list of
/// matcher groups; [`HookSet::add_from`] checks it (any JSON reads as a section, so
/// that the error names the key).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct HooksSection(pub Slot<Entries<Slot<Vec<Slot<GroupEntry>>>>>);

/// `{"matcher": "Write|Edit", "hooks": [...]}` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GroupEntry {
    #[serde(default)]
    pub matcher: Slot<String>,
    #[serde(default)]
    pub hooks: Slot<Vec<Slot<HookEntry>>>,
    /// Keys Claude Code may add; not read.
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

/// `{"type": "command", "command": "fmt.sh", "timeout": 30}` as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HookEntry {
    #[serde(default, rename = "type")]
    pub kind: Slot<String>,
    #[serde(default)]
    pub command: Slot<String>,
    /// Seconds.
    #[serde(default)]
    pub timeout: Slot<f64>,
    /// Keys of other hook types (`prompt`, `url`, …) and newer ones; not read.
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

/// One command hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    /// Run with `bash -c` in the workspace.
    pub command: String,
    pub timeout: Duration,
    /// The settings file that declared it.
    pub source: PathBuf,
}

/// A matcher and the commands it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookGroup {
    pub matcher: Matcher,
    pub commands: Vec<HookCommand>,
}

/// Every configured hook, by event, in the order of the settings files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookSet {
    groups: BTreeMap<HookEvent, Vec<HookGroup>>,
    /// What was left out (an unknown event, a hook type flower does not run), one line
    /// each, for the warnings and `flower state -v`.
    pub ignored: Vec<String>,
}

/// A malformed `hooks` entry: `key` is its path in the file (`hooks.PreToolUse[0].hooks[1].command`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfigError {
    pub key: String,
    pub message: String,
}

impl HookConfigError {
    fn at(key: impl Into<String>, message: impl Into<String>) -> HookConfigError {
        HookConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl HookSet {
    pub fn is_empty(&self) -> bool {
        self.groups.values().all(Vec::is_empty)
    }

    /// Whether any hook is configured for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.groups.get(&event).is_some_and(|g| !g.is_empty())
    }

    /// Every configured command, of every event.
    pub fn commands(&self) -> impl Iterator<Item = &HookCommand> {
        self.groups.values().flatten().flat_map(|g| &g.commands)
    }

    /// The groups of `event`.
    pub fn groups(&self, event: HookEvent) -> &[HookGroup] {
        self.groups.get(&event).map_or(&[], Vec::as_slice)
    }

    /// The commands that run for `event` on `subject` (a tool name, a source, a
    /// trigger; ignored by events without matchers), each once (Claude Code runs an
    /// identical command once per event).
    pub fn matching(&self, event: HookEvent, subject: &str) -> Vec<&HookCommand> {
        let mut out: Vec<&HookCommand> = Vec::new();
        for group in self.groups(event) {
            if event.uses_matcher() && !group.matcher.matches(subject) {
                continue;
            }
            for command in &group.commands {
                if !out.iter().any(|c| c.command == command.command) {
                    out.push(command);
                }
            }
        }
        out
    }

    /// Adds the `hooks` section of the settings file `file` after what is there.
    pub fn add_from(&mut self, section: &HooksSection, file: &Path) -> Result<(), HookConfigError> {
        let Some(events) = section.0.get() else {
            return Err(HookConfigError::at(
                "hooks",
                "要一个按事件分的对象(\"PreToolUse\": [...])",
            ));
        };
        for (name, groups) in events.iter() {
            let Some(event) = HookEvent::from_name(name) else {
                self.ignored.push(format!(
                    "{}: hooks.{name}:flower 没有这个事件,忽略",
                    file.display()
                ));
                continue;
            };
            let Some(groups) = groups.get() else {
                return Err(HookConfigError::at(
                    format!("hooks.{name}"),
                    "要一个 {\"matcher\": …, \"hooks\": [...]} 的数组",
                ));
            };
            for (i, group) in groups.iter().enumerate() {
                let key = format!("hooks.{name}[{i}]");
                if let Some(parsed) = self.group(group, &key, file)? {
                    self.groups.entry(event).or_default().push(parsed);
                }
            }
        }
        Ok(())
    }

    /// One matcher group, checked in the order Claude Code documents its keys, each
    /// error naming its key.
    fn group(
        &mut self,
        group: &Slot<GroupEntry>,
        key: &str,
        file: &Path,
    ) -> Result<Option<HookGroup>, HookConfigError> {
        let Some(group) = group.get() else {
            return Err(HookConfigError::at(
                key,
                "要一个对象 {\"matcher\": …, \"hooks\": [...]}",
            ));
        };
        let matcher = match &group.matcher {
            Slot::Absent | Slot::Null => Matcher::All,
            Slot::Is(text) => Matcher::parse(text).map_err(|e| {
                HookConfigError::at(
                    format!("{key}.matcher"),
                    format!("不是合法的正则表达式({e})"),
                )
            })?,
            Slot::Wrong(_) => {
                return Err(HookConfigError::at(
                    format!("{key}.matcher"),
                    "要一个字符串",
                ));
            }
        };
        let Some(hooks) = group.hooks.get() else {
            return Err(HookConfigError::at(
                format!("{key}.hooks"),
                "要一个 {\"type\": \"command\", \"command\": …} 的数组",
            ));
        };
        let mut commands = Vec::new();
        for (j, hook) in hooks.iter().enumerate() {
            let key = format!("{key}.hooks[{j}]");
            if let Some(command) = self.command(hook, &key, file)? {
                commands.push(command);
            }
        }
        Ok((!commands.is_empty()).then_some(HookGroup { matcher, commands }))
    }

    /// One hook of a group; `None` for a type flower does not run (noted in `ignored`).
    fn command(
        &mut self,
        hook: &Slot<HookEntry>,
        key: &str,
        file: &Path,
    ) -> Result<Option<HookCommand>, HookConfigError> {
        let Some(hook) = hook.get() else {
            return Err(HookConfigError::at(
                key,
                "要一个对象 {\"type\": \"command\", \"command\": …}",
            ));
        };
        match hook.kind.get().map(String::as_str) {
            Some("command") => {}
            Some(other) => {
                self.ignored.push(format!(
                    "{}: {key}:flower 不支持 {other:?} 类型的钩子,忽略",
                    file.display()
                ));
                return Ok(None);
            }
            None => return Err(HookConfigError::at(format!("{key}.type"), "要 \"command\"")),
        }
        let command = match hook.command.get() {
            Some(c) if !c.trim().is_empty() => c.clone(),
            _ => {
                return Err(HookConfigError::at(
                    format!("{key}.command"),
                    "要一条非空的 shell 命令",
                ));
            }
        };
        let timeout = match hook.timeout {
            Slot::Absent | Slot::Null => DEFAULT_TIMEOUT,
            Slot::Is(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
            Slot::Is(_) | Slot::Wrong(_) => {
                return Err(HookConfigError::at(
                    format!("{key}.timeout"),
                    "要一个秒数,大于 0(最多 86400)",
                ));
            }
        };
        Ok(Some(HookCommand {
            command,
            timeout,
            source: file.to_path_buf(),
        }))
    }

    /// One line per configured command, for `flower state -v`:
    /// `PreToolUse Bash: ./check.sh (60 s, .claude/settings.json)`.
    pub fn listing(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (event, groups) in &self.groups {
            for group in groups {
                for command in &group.commands {
                    let matcher = if event.uses_matcher() {
                        format!(" {}", group.matcher.shown())
                    } else {
                        String::new()
                    };
                    lines.push(format!(
                        "{event}{matcher}: {} ({} s, {})",
                        command.command,
                        command.timeout.as_secs_f64(),
                        command.source.display()
                    ));
                }
            }
        }
        lines
    }
}
