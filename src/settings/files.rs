//! Claude Code's settings files, read once into the [`FileLayer`] of the settings
//! resolution.
//!
//! | scope   | file                                         |
//! |---------|----------------------------------------------|
//! | user    | `~/.claude/settings.json`                    |
//! | project | `<workspace>/.claude/settings.json`          |
//! | local   | `<workspace>/.claude/settings.local.json`    |
//!
//! Precedence is Claude Code's: local over project over user for a single value
//! (`model`, each variable of `env`); lists merge (the permission rules of every file
//! apply, `additionalDirectories` add up, hooks of every file run). Flags and the
//! process environment stay above every file ([`super`]'s precedence). Two exceptions,
//! because an agent can write the workspace's files: security-relevant keys follow
//! "the stricter wins" ([`super::strict`]), and the workspace's files are pinned as
//! written ([`FileLayer::pin`], [`super::pin`]) so that a run obeys only what a person
//! has seen.
//!
//! Keys flower reads: `permissions.allow`, `permissions.deny`, `permissions.ask`,
//! `permissions.additionalDirectories`, `env`, `model`, `effortLevel`, `hooks`,
//! `mcpServers`, `sandbox.network`. Each file is parsed once into a
//! [`SettingsFile`] (its keys typed, every other key kept as written in
//! [`SettingsFile::extra`]); [`LoadedFile::document`] is the same object as JSON, for
//! `flower state -v`. A key flower does not know is not an error (a file written for a
//! newer Claude Code still loads).
//! A known key with a value flower cannot use is a [`ConfigError`] naming the file and
//! the key, and the binary exits 2 before anything is sent.

use super::ConfigError;
use super::document::{PermissionsSection, SettingsFile};
use super::pin::{PIN_VERSION, PinnedFile, SettingsPin};
use super::sources::FileLayer;
use super::strict;
use crate::engine::permissions::Permissions;
use crate::lenient::Slot;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Where a settings file sits in the precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    User,
    Project,
    Local,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Local => "local",
        }
    }
}

/// One settings file that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedFile {
    pub scope: Scope,
    pub path: PathBuf,
    /// The file's top-level object as applied: every key, known or not, as written
    /// (known keys first), except what a workspace file may not widen
    /// ([`super::strict`]); the file as written is in the pin ([`FileLayer::pin`]).
    /// `Value`: the applied [`LoadedFile::settings`] as JSON, for whoever shows it.
    pub document: Map<String, Value>,
    /// The same, typed: what flower reads.
    pub settings: SettingsFile,
}

/// A permission rule and the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRule {
    pub rule: String,
    pub source: PathBuf,
    pub scope: Scope,
}

/// `permissions` of every file, merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilePermissions {
    pub allow: Vec<FileRule>,
    pub deny: Vec<FileRule>,
    pub ask: Vec<FileRule>,
    /// Absolute (relative entries are taken from the workspace, `~/` from the home).
    pub additional_directories: Vec<PathBuf>,
}

impl FilePermissions {
    /// The rules of one list, as text.
    pub fn rules(list: &[FileRule]) -> Vec<String> {
        list.iter().map(|r| r.rule.clone()).collect()
    }
}

/// The settings files of `workspace` and `home`, in precedence order (user, project,
/// local); those that do not exist are skipped.
pub fn paths(workspace: &Path, home: Option<&Path>) -> Vec<(Scope, PathBuf)> {
    let mut out = Vec::new();
    if let Some(home) = home {
        out.push((Scope::User, home.join(".claude").join("settings.json")));
    }
    let dir = workspace.join(".claude");
    out.push((Scope::Project, dir.join("settings.json")));
    out.push((Scope::Local, dir.join("settings.local.json")));
    out
}

impl FileLayer {
    /// Reads the settings files of `workspace` (the project's) and `home` (the user's)
    /// and merges them. A file that is not there is skipped; one that cannot be read,
    /// is not a JSON object, or has a known key flower cannot use is the error. The
    /// workspace's files are pinned as written ([`FileLayer::pin`]); what in them
    /// would widen the user's settings is left out ([`super::strict`]).
    pub fn load(workspace: &Path, home: Option<&Path>) -> Result<FileLayer, ConfigError> {
        let mut layer = Self::load_from(
            workspace,
            home,
            &[Scope::User, Scope::Project, Scope::Local],
        )?;
        layer.sources = None;
        Ok(layer)
    }

    /// [`FileLayer::load`] of the files of `sources` only (the Agent SDK's
    /// `setting_sources`): `User` is everything under `~/.claude` (settings, memory,
    /// agents, skills); `Project` the workspace's `.claude/settings.json`, `.mcp.json`,
    /// memory, agents and skills; `Local` `.claude/settings.local.json` and
    /// `CLAUDE.local.md`.
    pub fn load_from(
        workspace: &Path,
        home: Option<&Path>,
        sources: &[Scope],
    ) -> Result<FileLayer, ConfigError> {
        let mut layer = FileLayer {
            pin: SettingsPin {
                version: PIN_VERSION,
                files: Vec::new(),
            },
            sources: Some(sources.to_vec()),
            ..FileLayer::default()
        };
        for (scope, path) in paths(workspace, home) {
            if !sources.contains(&scope) {
                continue;
            }
            let Some(read) = read_object(&path)? else {
                continue;
            };
            if scope != Scope::User {
                layer.pin_file(workspace, &path, &read);
            }
            let settings = layer.narrow(scope, &path, read.typed(&path)?, workspace, home);
            layer.add(scope, &path, settings, workspace, home)?;
        }
        let mcp_path = workspace.join(MCP_JSON);
        let mcp_json = match sources.contains(&Scope::Project) {
            true => read_object(&mcp_path)?,
            false => None,
        };
        if let Some(read) = mcp_json {
            layer.pin_file(workspace, &mcp_path, &read);
            let settings = read.typed(&mcp_path)?;
            let settings = layer.narrow(Scope::Project, &mcp_path, settings, workspace, home);
            layer.mcp_json = Some(LoadedFile::new(Scope::Project, &mcp_path, settings));
        }
        layer.agents = super::agents::load(workspace, home, sources);
        layer.pin.files.extend(layer.agents.pinned.iter().cloned());
        layer.skills = super::skills::load(workspace, home, sources);
        layer.pin.files.extend(layer.skills.pinned.iter().cloned());
        Ok(layer)
    }

    /// Records a workspace file as written in [`FileLayer::pin`].
    fn pin_file(&mut self, workspace: &Path, path: &Path, read: &ReadFile) {
        let name = path.strip_prefix(workspace).unwrap_or(path);
        self.pin.files.push(PinnedFile::new(
            &name.to_string_lossy(),
            read.text.as_bytes(),
            read.document.clone(),
        ));
    }

    /// `settings` without what would widen the user's settings ([`super::strict`]).
    fn narrow(
        &mut self,
        scope: Scope,
        path: &Path,
        settings: SettingsFile,
        workspace: &Path,
        home: Option<&Path>,
    ) -> SettingsFile {
        let mut ignored = Vec::new();
        let before = strict::Before {
            layer: self,
            workspace,
            home,
        };
        let settings = strict::narrow(scope, path, settings, &before, &mut ignored);
        self.ignored.extend(ignored);
        settings
    }

    /// Merges one file's settings over what is there (files come in precedence order).
    fn add(
        &mut self,
        scope: Scope,
        path: &Path,
        settings: SettingsFile,
        workspace: &Path,
        home: Option<&Path>,
    ) -> Result<(), ConfigError> {
        match &settings.env {
            Slot::Absent => {}
            Slot::Is(env) => {
                for (name, value) in &env.0 {
                    let Some(value) = value.text() else {
                        return Err(invalid(path, &format!("env.{name}"), "要一个字符串".into()));
                    };
                    self.vars.insert(name.clone(), value);
                }
            }
            Slot::Null | Slot::Wrong(_) => {
                return Err(invalid(path, "env", "要一个值都是字符串的对象".into()));
            }
        }
        let model = text(path, &settings.model, "model", "要一个模型 id 或别名")?;
        if let Some(model) = model {
            self.model = Some(model);
        }
        let why = "要 low、medium、high、xhigh 或 max";
        if let Some(level) = text(path, &settings.effort_level, "effortLevel", why)? {
            self.effort = Some(level);
        }
        match &settings.permissions {
            Slot::Absent => {}
            Slot::Is(permissions) => {
                self.add_permissions(scope, path, permissions, workspace, home)?;
            }
            Slot::Null | Slot::Wrong(_) => {
                return Err(invalid(
                    path,
                    "permissions",
                    "要一个对象(allow、deny、ask、additionalDirectories)".into(),
                ));
            }
        }
        if let Some(hooks) = &settings.hooks {
            // Reads any JSON (the section marks what is mistyped): the check is add_from's.
            let section: crate::engine::hooks::HooksSection =
                serde::Deserialize::deserialize(hooks)
                    .map_err(|e| invalid(path, "hooks", e.to_string()))?;
            self.hooks
                .add_from(&section, path)
                .map_err(|e| invalid(path, &e.key, e.message))?;
        }
        self.files.push(LoadedFile::new(scope, path, settings));
        Ok(())
    }

    fn add_permissions(
        &mut self,
        scope: Scope,
        path: &Path,
        permissions: &PermissionsSection,
        workspace: &Path,
        home: Option<&Path>,
    ) -> Result<(), ConfigError> {
        for (key, said, list) in [
            ("allow", &permissions.allow, &mut self.permissions.allow),
            ("deny", &permissions.deny, &mut self.permissions.deny),
            ("ask", &permissions.ask, &mut self.permissions.ask),
        ] {
            for (i, rule) in strings(path, said, &format!("permissions.{key}"))?
                .into_iter()
                .enumerate()
            {
                // Checked now, so that a typo stops the run before it starts.
                let rules = [rule.clone()];
                Permissions::with_home(&rules, &[], home).map_err(|e| {
                    invalid(path, &format!("permissions.{key}[{i}]"), e.to_string())
                })?;
                list.push(FileRule {
                    rule,
                    source: path.to_path_buf(),
                    scope,
                });
            }
        }
        let key = "permissions.additionalDirectories";
        let dirs = &permissions.additional_directories;
        for (i, dir) in strings(path, dirs, key)?.into_iter().enumerate() {
            let Some(resolved) = strict::resolve_dir(&dir, workspace, home) else {
                return Err(invalid(
                    path,
                    &format!("{key}[{i}]"),
                    "`~/` 要靠 HOME,可 HOME 没有设置".into(),
                ));
            };
            if !resolved.is_dir() {
                return Err(invalid(
                    path,
                    &format!("{key}[{i}]"),
                    format!("{} 不是目录", resolved.display()),
                ));
            }
            let resolved = resolved.canonicalize().unwrap_or(resolved);
            if !self.permissions.additional_directories.contains(&resolved) {
                self.permissions.additional_directories.push(resolved);
            }
        }
        Ok(())
    }
}

/// The project's MCP servers file, at the workspace root.
pub const MCP_JSON: &str = ".mcp.json";

/// A settings file as read.
struct ReadFile {
    text: String,
    /// `Value`: the top-level object as written, every key, for the pin.
    document: Map<String, Value>,
}

impl ReadFile {
    /// The object, typed.
    fn typed(self, path: &Path) -> Result<SettingsFile, ConfigError> {
        // Not expected to fail: every known key takes any value ([`Slot`]).
        serde_json::from_value(Value::Object(self.document))
            .map_err(|e| invalid(path, "", format!("读不出来({e})")))
    }
}

impl LoadedFile {
    fn new(scope: Scope, path: &Path, settings: SettingsFile) -> LoadedFile {
        let document = match serde_json::to_value(&settings) {
            Ok(Value::Object(document)) => document,
            // Not expected: a struct of string-keyed maps is an object.
            _ => Map::new(),
        };
        LoadedFile {
            scope,
            path: path.to_path_buf(),
            document,
            settings,
        }
    }
}

/// A JSON object file, its text and its object; `None` when there is no such file.
fn read_object(path: &Path) -> Result<Option<ReadFile>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A directory of that name, say: there is no file to read.
        Err(_) if path.is_dir() => return Ok(None),
        Err(e) => return Err(invalid(path, "", format!("读不出来({e})"))),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(document)) => Ok(Some(ReadFile { text, document })),
        Ok(_) => Err(invalid(path, "", "要一个 JSON 对象".into())),
        Err(e) => Err(invalid(path, "", format!("不是合法的 JSON({e})"))),
    }
}

impl FileLayer {
    /// The files, lowest precedence first, in the order their `mcpServers` apply: the
    /// user's settings file, `.mcp.json`, the project's settings file, the local one
    /// (a server of the same name in a later one replaces the earlier).
    fn mcp_order(&self) -> impl Iterator<Item = &LoadedFile> {
        let user = self.files.iter().filter(|f| f.scope == Scope::User);
        let workspace = self.files.iter().filter(|f| f.scope != Scope::User);
        user.chain(self.mcp_json.iter()).chain(workspace)
    }
}

/// `mcpServers` of every file, parsed with `${VAR}` expanded by `lookup`, and the
/// warnings (servers of a kind flower does not run).
pub fn mcp_config(
    layer: &FileLayer,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(crate::tools::mcp::McpConfig, Vec<String>), ConfigError> {
    let mut config = crate::tools::mcp::McpConfig::default();
    let mut warnings = Vec::new();
    for file in layer.mcp_order() {
        let Some(value) = &file.settings.mcp_servers else {
            continue;
        };
        // Reads any JSON (the section marks what is mistyped): the check is parse's.
        let section: crate::tools::mcp::config::McpServersSection =
            serde::Deserialize::deserialize(value)
                .map_err(|e| invalid(&file.path, "mcpServers", e.to_string()))?;
        let parsed = crate::tools::mcp::config::parse(&section, &file.path, lookup)
            .map_err(|e| invalid(&file.path, &e.key, e.message))?;
        warnings.extend(parsed.ignored);
        config.add(parsed.servers);
    }
    Ok((config, warnings))
}

/// A list of strings at `key` (absent: empty).
fn strings(
    path: &Path,
    value: &Slot<Vec<Slot<String>>>,
    key: &str,
) -> Result<Vec<String>, ConfigError> {
    match value {
        Slot::Absent | Slot::Null => Ok(Vec::new()),
        Slot::Is(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Slot::Is(s) => Ok(s.clone()),
                _ => Err(invalid(path, &format!("{key}[{i}]"), "要一个字符串".into())),
            })
            .collect(),
        Slot::Wrong(_) => Err(invalid(path, key, "要一个字符串数组".into())),
    }
}

/// A name at `key` (`model`, `effortLevel`), trimmed; absent or `null`: `None`; blank
/// or not a string: the error `why`.
fn text(
    path: &Path,
    value: &Slot<String>,
    key: &str,
    why: &str,
) -> Result<Option<String>, ConfigError> {
    match value {
        Slot::Absent | Slot::Null => Ok(None),
        Slot::Is(name) if !name.trim().is_empty() => Ok(Some(name.trim().to_string())),
        Slot::Is(_) | Slot::Wrong(_) => Err(invalid(path, key, why.into())),
    }
}

/// A bad settings file: the setting is `<file>:<key>`, the message names both.
fn invalid(path: &Path, key: &str, why: String) -> ConfigError {
    let at = if key.is_empty() {
        path.display().to_string()
    } else {
        format!("{}: {key}", path.display())
    };
    ConfigError::invalid(&at, format!("设置文件 {at}:{why}"))
}
