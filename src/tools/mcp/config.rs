//! MCP servers as configured: `.mcp.json` at the workspace root and `mcpServers` in
//! Claude Code's settings files, in Claude Code's format:
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "some-server"], "env": {"TOKEN": "${TOKEN}"}},
//!   "docs":  {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${KEY:-none}"}}
//! }}
//! ```
//!
//! `${VAR}` and `${VAR:-default}` are expanded in `command`, `args`, `env`, `url` and
//! `headers` when the settings are resolved (a variable that is not set and has no
//! default is an error naming the key, as in Claude Code). Parsing is pure: the caller
//! gives the lookup and names the file.

use crate::lenient::{Entries, Slot, UnknownKeys};
use serde::Deserialize;
use std::time::Duration;

/// How long a server has to start and answer `initialize` (`MCP_TIMEOUT`, ms).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one tool call may take (`MCP_TOOL_TIMEOUT`, ms) before the server is
/// stopped and the call answered with an error.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(600);

/// The prefix of every MCP tool's name: `mcp__<server>__<tool>`.
pub const TOOL_PREFIX: &str = "mcp__";

/// Every MCP server flower knows, and the timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    pub servers: Vec<McpServer>,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: Vec::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
        }
    }
}

impl McpConfig {
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Adds (or, for a name already there, replaces: a later file has precedence)
    /// the servers of one file.
    pub fn add(&mut self, servers: Vec<McpServer>) {
        for server in servers {
            match self.servers.iter_mut().find(|s| s.name == server.name) {
                Some(slot) => *slot = server,
                None => self.servers.push(server),
            }
        }
    }
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// The name as written in the file.
    pub name: String,
    /// The file it came from (`.mcp.json`, a settings file).
    pub source: std::path::PathBuf,
    pub transport: Transport,
    /// Its command and arguments, or its URL, as the file writes them (`${VAR}` not
    /// expanded; no environment, no headers): what `flower state` shows, so that a
    /// secret passed in through the environment is never printed.
    pub written: Transport,
}

impl McpServer {
    /// The name as it appears in tool names and permission rules: characters other
    /// than letters, digits, `_` and `-` become `_` (as Claude Code does).
    pub fn prefix_name(&self) -> String {
        normalize(&self.name)
    }

    /// `mcp__<server>`: the permission rule for all its tools.
    pub fn rule(&self) -> String {
        format!("{TOOL_PREFIX}{}", self.prefix_name())
    }

    /// `mcp__<server>__<tool>`.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("{TOOL_PREFIX}{}__{}", self.prefix_name(), normalize(tool))
    }

    /// One line for `flower state -v`, as the file writes it ([`McpServer::written`]).
    pub fn describe(&self) -> String {
        match &self.written {
            Transport::Stdio { command, args, .. } => {
                let mut line = format!("{} (stdio): {command}", self.name);
                for arg in args {
                    line.push(' ');
                    line.push_str(arg);
                }
                line
            }
            Transport::Http { url, .. } => format!("{} (http): {url}", self.name),
        }
    }
}

/// How flower talks to a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A process flower starts (in the sandbox), speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the server's environment.
        env: Vec<(String, String)>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// A bad `mcpServers` value: the key (`mcpServers.files.args[1]`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub key: String,
    pub message: String,
}

fn bad(key: impl Into<String>, message: impl Into<String>) -> KeyError {
    KeyError {
        key: key.into(),
        message: message.into(),
    }
}

/// What parsing one file's `mcpServers` gave: its servers, and what was skipped.
#[derive(Debug, Default)]
pub struct Parsed {
    pub servers: Vec<McpServer>,
    /// Servers of a kind flower does not run (`sse`), said once as a warning.
    pub ignored: Vec<String>,
}

/// An `mcpServers` object as written: servers by name, in the file's order;
/// [`parse`] checks it (any JSON reads as a section, so that the error names the key).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct McpServersSection(pub Slot<Entries<Slot<ServerEntry>>>);

/// One server's entry as written: `command`, `args`, `env` (stdio) or `type`, `url`,
/// `headers` (http).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServerEntry {
    #[serde(default, rename = "type")]
    pub kind: Slot<String>,
    #[serde(default)]
    pub command: Slot<String>,
    #[serde(default)]
    pub args: Slot<Vec<Slot<String>>>,
    #[serde(default)]
    pub env: Slot<Entries<Slot<Scalar>>>,
    #[serde(default)]
    pub url: Slot<String>,
    #[serde(default)]
    pub headers: Slot<Entries<Slot<Scalar>>>,
    /// Keys flower does not read (`timeout`, `disabled`, …).
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

/// A value of `env` or `headers`: a string (`${VAR}` expanded), or a number or a
/// boolean taken as its text.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Text(String),
    Number(serde_json::Number),
    Flag(bool),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Value: one JSON value of any type, sorted into the three kinds taken.
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => Ok(Scalar::Text(text)),
            serde_json::Value::Number(n) => Ok(Scalar::Number(n)),
            serde_json::Value::Bool(b) => Ok(Scalar::Flag(b)),
            _ => Err(serde::de::Error::custom("not a string, number or boolean")),
        }
    }
}

/// Parses an `mcpServers` section from `source`; `lookup` gives a variable's value for
/// `${VAR}`.
pub fn parse(
    section: &McpServersSection,
    source: &std::path::Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed, KeyError> {
    let Some(servers) = section.0.get() else {
        return Err(bad("mcpServers", "要一个按名字列出服务器的对象"));
    };
    let mut parsed = Parsed::default();
    for (name, server) in servers.iter() {
        let key = format!("mcpServers.{name}");
        if name.trim().is_empty() {
            return Err(bad(key, "服务器要有名字"));
        }
        let Some(fields) = server.get() else {
            return Err(bad(
                key,
                "要一个对象(command、args、env;或 type、url、headers)",
            ));
        };
        let kind = match &fields.kind {
            Slot::Absent | Slot::Null => None,
            Slot::Is(kind) => Some(kind.as_str()),
            Slot::Wrong(_) => return Err(bad(format!("{key}.type"), "要 \"stdio\" 或 \"http\"")),
        };
        // A `url` key (even `null`) without a `command` key makes an HTTP server.
        let kind = kind.unwrap_or(
            if fields.url != Slot::Absent && fields.command == Slot::Absent {
                "http"
            } else {
                "stdio"
            },
        );
        let (transport, written) = match kind {
            "stdio" => stdio(fields, &key, lookup)?,
            "http" | "streamable-http" | "streamableHttp" => http(fields, &key, lookup)?,
            "sse" => {
                parsed.ignored.push(format!(
                    "{}: {key}:不支持老的 SSE 传输(改用 \"type\": \"http\");忽略这个服务器",
                    source.display()
                ));
                continue;
            }
            other => {
                return Err(bad(
                    format!("{key}.type"),
                    format!("没有 {other:?} 这种服务器类型(要 \"stdio\" 或 \"http\")"),
                ));
            }
        };
        parsed.servers.push(McpServer {
            name: name.to_string(),
            source: source.to_path_buf(),
            transport,
            written,
        });
    }
    Ok(parsed)
}

/// A stdio server's transport, expanded, and as written.
fn stdio(
    fields: &ServerEntry,
    key: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Transport, Transport), KeyError> {
    let written_command = match fields.command.get() {
        Some(c) if !c.trim().is_empty() => c,
        _ => return Err(bad(format!("{key}.command"), "要写要运行的命令")),
    };
    let command = expand(written_command, lookup)
        .map_err(|e| bad(format!("{key}.command"), e.to_string()))?;
    let args = strings(&fields.args, &format!("{key}.args"), lookup)?;
    // Every item a string: `strings` refused anything else.
    let written_args = fields
        .args
        .get()
        .map(|items| items.iter().filter_map(Slot::get).cloned().collect())
        .unwrap_or_default();
    let env = pairs(&fields.env, &format!("{key}.env"), lookup)?;
    let written = Transport::Stdio {
        command: written_command.clone(),
        args: written_args,
        env: Vec::new(),
    };
    Ok((Transport::Stdio { command, args, env }, written))
}

/// An HTTP server's transport, expanded and checked, and as written.
fn http(
    fields: &ServerEntry,
    key: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Transport, Transport), KeyError> {
    let Some(written_url) = fields.url.get() else {
        return Err(bad(format!("{key}.url"), "要写服务器的 URL"));
    };
    let url = expand(written_url, lookup).map_err(|e| bad(format!("{key}.url"), e.to_string()))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad(
            format!("{key}.url"),
            // As written: what `${VAR}` gave may be a secret.
            format!("{written_url:?} 不是 http:// 或 https:// 开头的 URL"),
        ));
    }
    let headers = pairs(&fields.headers, &format!("{key}.headers"), lookup)?;
    for (header, value) in &headers {
        if !valid_header(header, value) {
            return Err(bad(
                format!("{key}.headers.{header}"),
                "不是合法的 HTTP 头名和值",
            ));
        }
    }
    let written = Transport::Http {
        url: written_url.clone(),
        headers: Vec::new(),
    };
    Ok((Transport::Http { url, headers }, written))
}

/// A list of strings (absent: empty), each expanded.
fn strings(
    value: &Slot<Vec<Slot<String>>>,
    key: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, KeyError> {
    match value {
        Slot::Absent | Slot::Null => Ok(Vec::new()),
        Slot::Is(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Slot::Is(s) => {
                    expand(s, lookup).map_err(|e| bad(format!("{key}[{i}]"), e.to_string()))
                }
                _ => Err(bad(format!("{key}[{i}]"), "要一个字符串")),
            })
            .collect(),
        Slot::Wrong(_) => Err(bad(key, "要一个字符串数组")),
    }
}

/// An object of strings (absent: empty), each value expanded.
fn pairs(
    value: &Slot<Entries<Slot<Scalar>>>,
    key: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, KeyError> {
    let map = match value {
        Slot::Absent | Slot::Null => return Ok(Vec::new()),
        Slot::Is(map) => map,
        Slot::Wrong(_) => return Err(bad(key, "要一个值都是字符串的对象")),
    };
    map.iter()
        .map(|(name, value)| {
            let at = format!("{key}.{name}");
            match value {
                Slot::Is(Scalar::Text(s)) => Ok((
                    name.to_string(),
                    expand(s, lookup).map_err(|e| bad(&at, e.to_string()))?,
                )),
                Slot::Is(Scalar::Number(n)) => Ok((name.to_string(), n.to_string())),
                Slot::Is(Scalar::Flag(b)) => Ok((name.to_string(), b.to_string())),
                _ => Err(bad(at, "要一个字符串")),
            }
        })
        .collect()
}

/// Why a value's `${…}` cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("unclosed `${{` in {0:?}")]
    Unclosed(String),
    #[error("`${{{0}}}` 不是变量引用")]
    NotAVariable(String),
    #[error("变量 {0} 没有设置(给个默认值:`${{{0}:-…}}`)")]
    Unset(String),
}

/// `${VAR}` and `${VAR:-default}` replaced; a `$` not followed by `{` stays.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err(ExpandError::Unclosed(text.to_string()));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ExpandError::NotAVariable(inner.to_string()));
        }
        match (lookup(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(ExpandError::Unset(name.to_string()));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn normalize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn valid_header(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "HOME_DIR").then(|| "/h".to_string())
    }

    #[test]
    fn expansion_takes_variables_defaults_and_refuses_unset_ones() {
        assert_eq!(expand("${HOME_DIR}/x", &env).as_deref(), Ok("/h/x"));
        assert_eq!(
            expand("${NOPE:-d}-${HOME_DIR:-z}", &env).as_deref(),
            Ok("d-/h")
        );
        assert_eq!(
            expand("$HOME_DIR ${NOPE:-}", &env).as_deref(),
            Ok("$HOME_DIR ")
        );
        assert!(
            expand("${NOPE}", &env)
                .unwrap_err()
                .to_string()
                .contains("NOPE 没有设置")
        );
        assert!(expand("${bad name}", &env).is_err());
    }
}
