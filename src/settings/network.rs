//! `sandbox.network` of the settings files: the proxy's policy ([`NetworkRules`]).
//!
//! Keys (Claude Code's): `allowedDomains`, `deniedDomains` (entries `example.com`,
//! `*.example.com`, an IP address, `*`, each with an optional `:port`),
//! `allowUnixSockets` (absolute paths or `~/…`), `allowAllUnixSockets`,
//! `allowLocalBinding`. Other keys under `sandbox.network` are ignored.
//!
//! Across scopes the stricter wins: the user's file is the base (no
//! `allowedDomains` there means `["*"]`: every public host), and a project or local
//! file may only narrow it:
//! - `allowedDomains`: every list that is given must match (they intersect);
//! - `deniedDomains`: every list applies (they add up);
//! - `allowUnixSockets`: only paths the user's list and every later list name;
//! - booleans: `true` only when the user's value (default: `allowAllUnixSockets`
//!   false, `allowLocalBinding` true) and every later value are `true`.

use super::ConfigError;
use super::files::{LoadedFile, Scope};
use super::sources::FileLayer;
use crate::tools::sandbox::proxy::{HostPattern, NetworkRules};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The merged policy of every settings file.
pub fn rules(files: &FileLayer, home: Option<&Path>) -> Result<NetworkRules, ConfigError> {
    let mut rules = NetworkRules::default();
    let mut sockets: Option<Vec<PathBuf>> = None;
    for file in &files.files {
        let Some(network) = section(file)? else {
            continue;
        };
        let user = file.scope == Scope::User;
        if let Some(list) = patterns(file, network, "allowedDomains")? {
            if user {
                rules.allowed = vec![list];
            } else {
                rules.allowed.push(list);
            }
        }
        if let Some(list) = patterns(file, network, "deniedDomains")? {
            rules.denied.extend(list);
        }
        if let Some(list) = paths(file, network, home)? {
            sockets = Some(match sockets {
                None if user => list,
                // The user's list (empty by default) is the base.
                None => Vec::new(),
                Some(base) => base.into_iter().filter(|p| list.contains(p)).collect(),
            });
        }
        if let Some(all) = boolean(file, network, "allowAllUnixSockets")? {
            rules.all_unix_sockets = if user {
                all
            } else {
                rules.all_unix_sockets && all
            };
        }
        if let Some(bind) = boolean(file, network, "allowLocalBinding")? {
            rules.local_binding &= bind;
        }
    }
    rules.unix_sockets = sockets.unwrap_or_default();
    Ok(rules)
}

/// `sandbox.network` of one file, when it has one.
fn section(file: &LoadedFile) -> Result<Option<&serde_json::Map<String, Value>>, ConfigError> {
    let network = match file.document.get("sandbox") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(sandbox)) => sandbox.get("network"),
        Some(_) => return Err(invalid(&file.path, "sandbox", "要一个对象")),
    };
    match network {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(n)) => Ok(Some(n)),
        Some(_) => Err(invalid(&file.path, "sandbox.network", "要一个对象")),
    }
}

fn strings(
    file: &LoadedFile,
    network: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<(String, String)>>, ConfigError> {
    let at = format!("sandbox.network.{key}");
    match network.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok((format!("{at}[{i}]"), s.clone())),
                _ => Err(invalid(&file.path, &format!("{at}[{i}]"), "要一个字符串")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(invalid(&file.path, &at, "要一个字符串数组")),
    }
}

fn patterns(
    file: &LoadedFile,
    network: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<HostPattern>>, ConfigError> {
    let Some(list) = strings(file, network, key)? else {
        return Ok(None);
    };
    list.into_iter()
        .map(|(at, text)| {
            text.parse::<HostPattern>()
                .map_err(|e| invalid(&file.path, &at, &e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn paths(
    file: &LoadedFile,
    network: &serde_json::Map<String, Value>,
    home: Option<&Path>,
) -> Result<Option<Vec<PathBuf>>, ConfigError> {
    let Some(list) = strings(file, network, "allowUnixSockets")? else {
        return Ok(None);
    };
    list.into_iter()
        .map(|(at, text)| {
            let path = match (text.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => home.join(rest),
                (Some(_), None) => {
                    return Err(invalid(&file.path, &at, "`~/` 要靠 HOME,可 HOME 没有设置"));
                }
                (None, _) => PathBuf::from(&text),
            };
            if !path.is_absolute() {
                return Err(invalid(&file.path, &at, "要绝对路径或 `~/…`"));
            }
            Ok(path)
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn boolean(
    file: &LoadedFile,
    network: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<bool>, ConfigError> {
    match network.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(
            &file.path,
            &format!("sandbox.network.{key}"),
            "要 true 或 false",
        )),
    }
}

/// A bad settings file: the setting is `<file>: <key>`, the message names both.
fn invalid(path: &Path, key: &str, why: &str) -> ConfigError {
    let at = format!("{}: {key}", path.display());
    ConfigError::invalid(&at, format!("设置文件 {at}:{why}"))
}
