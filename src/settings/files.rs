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
//! `permissions.additionalDirectories`, `env`, `model`, `effortLevel`, `hooks`. Every other key is
//! kept as written ([`LoadedFile::document`]), for whoever reads it (the MCP servers'
//! `mcpServers`, `enabledMcpjsonServers` …) and for `flower state -v`; a key flower
//! does not know is not an error (a file written for a newer Claude Code still loads).
//! A known key with a value flower cannot use is a [`ConfigError`] naming the file and
//! the key, and the binary exits 2 before anything is sent.

use super::ConfigError;
use super::pin::{PIN_VERSION, PinnedFile, SettingsPin};
use super::sources::FileLayer;
use super::strict;
use crate::engine::permissions::Permissions;
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
    /// The file's top-level object as applied: every key, known or not, as written,
    /// except what a workspace file may not widen ([`super::strict`]); the file as
    /// written is in the pin ([`FileLayer::pin`]).
    pub document: Map<String, Value>,
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
            let Some((text, document)) = read_object(&path)? else {
                continue;
            };
            if scope != Scope::User {
                layer.pin_file(workspace, &path, &text, &document);
            }
            let document = layer.narrow(scope, &path, document, workspace, home);
            layer.add(scope, &path, document, workspace, home)?;
        }
        let mcp_path = workspace.join(MCP_JSON);
        let mcp_json = match sources.contains(&Scope::Project) {
            true => read_object(&mcp_path)?,
            false => None,
        };
        if let Some((text, document)) = mcp_json {
            layer.pin_file(workspace, &mcp_path, &text, &document);
            let document = layer.narrow(Scope::Project, &mcp_path, document, workspace, home);
            layer.mcp_json = Some(LoadedFile {
                scope: Scope::Project,
                path: mcp_path,
                document,
            });
        }
        layer.agents = super::agents::load(workspace, home, sources);
        layer.pin.files.extend(layer.agents.pinned.iter().cloned());
        layer.skills = super::skills::load(workspace, home, sources);
        layer.pin.files.extend(layer.skills.pinned.iter().cloned());
        Ok(layer)
    }

    /// Records a workspace file as written in [`FileLayer::pin`].
    fn pin_file(
        &mut self,
        workspace: &Path,
        path: &Path,
        text: &str,
        document: &Map<String, Value>,
    ) {
        let name = path.strip_prefix(workspace).unwrap_or(path);
        self.pin.files.push(PinnedFile::new(
            &name.to_string_lossy(),
            text.as_bytes(),
            document.clone(),
        ));
    }

    /// `document` without what would widen the user's settings ([`super::strict`]).
    fn narrow(
        &mut self,
        scope: Scope,
        path: &Path,
        document: Map<String, Value>,
        workspace: &Path,
        home: Option<&Path>,
    ) -> Map<String, Value> {
        let mut ignored = Vec::new();
        let before = strict::Before {
            layer: self,
            workspace,
            home,
        };
        let document = strict::narrow(scope, path, document, &before, &mut ignored);
        self.ignored.extend(ignored);
        document
    }

    /// Merges one file's document over what is there (files come in precedence order).
    fn add(
        &mut self,
        scope: Scope,
        path: &Path,
        document: Map<String, Value>,
        workspace: &Path,
        home: Option<&Path>,
    ) -> Result<(), ConfigError> {
        if let Some(env) = document.get("env") {
            let Value::Object(env) = env else {
                return Err(invalid(path, "env", "要一个值都是字符串的对象".into()));
            };
            for (name, value) in env {
                let value = match value {
                    Value::String(s) => s.clone(),
                    // Claude Code's schema says strings; numbers and booleans are meant.
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => {
                        return Err(invalid(path, &format!("env.{name}"), "要一个字符串".into()));
                    }
                };
                self.vars.insert(name.clone(), value);
            }
        }
        match document.get("model") {
            None | Some(Value::Null) => {}
            Some(Value::String(model)) if !model.trim().is_empty() => {
                self.model = Some(model.trim().to_string());
            }
            Some(_) => {
                return Err(invalid(path, "model", "要一个模型 id 或别名".into()));
            }
        }
        match document.get("effortLevel") {
            None | Some(Value::Null) => {}
            Some(Value::String(level)) if !level.trim().is_empty() => {
                self.effort = Some(level.trim().to_string());
            }
            Some(_) => {
                return Err(invalid(
                    path,
                    "effortLevel",
                    "要 low、medium、high、xhigh 或 max".into(),
                ));
            }
        }
        if let Some(permissions) = document.get("permissions") {
            self.add_permissions(scope, path, permissions, workspace, home)?;
        }
        if let Some(hooks) = document.get("hooks") {
            self.hooks
                .add_from(hooks, path)
                .map_err(|e| invalid(path, &e.key, e.message))?;
        }
        self.files.push(LoadedFile {
            scope,
            path: path.to_path_buf(),
            document,
        });
        Ok(())
    }

    fn add_permissions(
        &mut self,
        scope: Scope,
        path: &Path,
        permissions: &Value,
        workspace: &Path,
        home: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let Value::Object(permissions) = permissions else {
            return Err(invalid(
                path,
                "permissions",
                "要一个对象(allow、deny、ask、additionalDirectories)".into(),
            ));
        };
        for (key, list) in [
            ("allow", &mut self.permissions.allow),
            ("deny", &mut self.permissions.deny),
            ("ask", &mut self.permissions.ask),
        ] {
            for (i, rule) in strings(path, permissions.get(key), &format!("permissions.{key}"))?
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
        for (i, dir) in strings(path, permissions.get("additionalDirectories"), key)?
            .into_iter()
            .enumerate()
        {
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

    /// The documents' values of a top-level key, in precedence order (user first),
    /// with the file each came from: what the MCP servers' reader uses for
    /// `mcpServers`.
    pub fn values_of<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Iterator<Item = (&'a LoadedFile, &'a Value)> {
        self.files
            .iter()
            .filter_map(move |file| file.document.get(key).map(|value| (file, value)))
    }
}

/// The project's MCP servers file, at the workspace root.
pub const MCP_JSON: &str = ".mcp.json";

/// A settings file's text and its top-level object.
type Read = (String, Map<String, Value>);

/// A JSON object file, its text and its object; `None` when there is no such file.
fn read_object(path: &Path) -> Result<Option<Read>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A directory of that name, say: there is no file to read.
        Err(_) if path.is_dir() => return Ok(None),
        Err(e) => return Err(invalid(path, "", format!("读不出来({e})"))),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(Some((text, map))),
        Ok(_) => Err(invalid(path, "", "要一个 JSON 对象".into())),
        Err(e) => Err(invalid(path, "", format!("不是合法的 JSON({e})"))),
    }
}

impl FileLayer {
    /// Every `mcpServers` value, lowest precedence first: the user's settings file,
    /// `.mcp.json`, the project's settings file, the local one (a server of the same
    /// name in a later one replaces the earlier).
    pub fn mcp_servers(&self) -> Vec<(&LoadedFile, &Value)> {
        fn of(file: &LoadedFile) -> Option<(&LoadedFile, &Value)> {
            file.document.get("mcpServers").map(|v| (file, v))
        }
        let mut out: Vec<(&LoadedFile, &Value)> = Vec::new();
        out.extend(
            self.files
                .iter()
                .filter(|f| f.scope == Scope::User)
                .filter_map(of),
        );
        out.extend(self.mcp_json.iter().filter_map(of));
        out.extend(
            self.files
                .iter()
                .filter(|f| f.scope != Scope::User)
                .filter_map(of),
        );
        out
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
    for (file, value) in layer.mcp_servers() {
        let parsed = crate::tools::mcp::config::parse(value, &file.path, lookup)
            .map_err(|e| invalid(&file.path, &e.key, e.message))?;
        warnings.extend(parsed.ignored);
        config.add(parsed.servers);
    }
    Ok((config, warnings))
}

/// A list of strings at `key` (absent: empty).
fn strings(path: &Path, value: Option<&Value>, key: &str) -> Result<Vec<String>, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(invalid(path, &format!("{key}[{i}]"), "要一个字符串".into())),
            })
            .collect(),
        Some(_) => Err(invalid(path, key, "要一个字符串数组".into())),
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
