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
use crate::lenient::Slot;
use crate::tools::sandbox::proxy::{HostPattern, NetworkRules};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// `sandbox` as this reads it when it is not an object (as serde reads a struct: an
/// array is taken as its fields in order, anything else refused in serde's words).
#[derive(Deserialize)]
struct Sandbox {
    network: Option<Network>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Network {
    allowed_domains: Option<Vec<String>>,
    denied_domains: Option<Vec<String>>,
    allow_unix_sockets: Option<Vec<String>>,
    allow_all_unix_sockets: Option<bool>,
    allow_local_binding: Option<bool>,
}

/// The merged policy of every settings file.
pub fn rules(files: &FileLayer, home: Option<&Path>) -> Result<NetworkRules, ConfigError> {
    let mut rules = NetworkRules::default();
    let mut sockets: Option<Vec<PathBuf>> = None;
    for file in &files.files {
        let Some(network) = section(file)? else {
            continue;
        };
        let user = file.scope == Scope::User;
        if let Some(list) = &network.allowed_domains {
            let list = patterns(file, list, "allowedDomains")?;
            if user {
                rules.allowed = vec![list];
            } else {
                rules.allowed.push(list);
            }
        }
        if let Some(list) = &network.denied_domains {
            rules.denied.extend(patterns(file, list, "deniedDomains")?);
        }
        if let Some(list) = &network.allow_unix_sockets {
            let list = paths(file, list, home)?;
            sockets = Some(match sockets {
                None if user => list,
                // The user's list (empty by default) is the base.
                None => Vec::new(),
                Some(base) => base.into_iter().filter(|p| list.contains(p)).collect(),
            });
        }
        if let Some(all) = network.allow_all_unix_sockets {
            rules.all_unix_sockets = if user {
                all
            } else {
                rules.all_unix_sockets && all
            };
        }
        if let Some(bind) = network.allow_local_binding {
            rules.local_binding &= bind;
        }
    }
    rules.unix_sockets = sockets.unwrap_or_default();
    Ok(rules)
}

/// `sandbox.network` of one file, when it has one: the typed document's section, read
/// by serde's derive (whose words the error quotes, first bad key in the file's order).
fn section(file: &LoadedFile) -> Result<Option<Network>, ConfigError> {
    let read = match &file.settings.sandbox {
        Slot::Absent | Slot::Null => return Ok(None),
        Slot::Is(sandbox) => match &sandbox.network {
            None => return Ok(None),
            Some(network) => Option::<Network>::deserialize(network),
        },
        Slot::Wrong(sandbox) => Sandbox::deserialize(sandbox).map(|s| s.network),
    };
    read.map_err(|e| {
        invalid(
            &file.path,
            "sandbox.network",
            &format!(
                "要 allowedDomains、deniedDomains、allowUnixSockets(字符串数组)和 allowAllUnixSockets、allowLocalBinding(true 或 false)({e})"
            ),
        )
    })
}

fn patterns(
    file: &LoadedFile,
    list: &[String],
    key: &str,
) -> Result<Vec<HostPattern>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<HostPattern>().map_err(|e| {
                invalid(
                    &file.path,
                    &format!("sandbox.network.{key}[{i}]"),
                    &e.to_string(),
                )
            })
        })
        .collect()
}

fn paths(
    file: &LoadedFile,
    list: &[String],
    home: Option<&Path>,
) -> Result<Vec<PathBuf>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            let at = format!("sandbox.network.allowUnixSockets[{i}]");
            let path = match (text.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => home.join(rest),
                (Some(_), None) => {
                    return Err(invalid(&file.path, &at, "`~/` 要靠 HOME,可 HOME 没有设置"));
                }
                (None, _) => PathBuf::from(text),
            };
            if !path.is_absolute() {
                return Err(invalid(&file.path, &at, "要绝对路径或 `~/…`"));
            }
            Ok(path)
        })
        .collect()
}

/// A bad settings file: the setting is `<file>: <key>`, the message names both.
fn invalid(path: &Path, key: &str, why: &str) -> ConfigError {
    let at = format!("{}: {key}", path.display());
    ConfigError::invalid(&at, format!("设置文件 {at}:{why}"))
}
