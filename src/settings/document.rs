//! A settings file's top-level object, typed ([`SettingsFile`]): the keys flower reads
//! (and those a workspace file may not set, [`super::strict`]) as fields, every other
//! key kept as written in [`SettingsFile::extra`].
//!
//! A known key holds a [`Slot`]: absent, `null`, what the key must hold, or anything
//! else kept as written. So the parse itself never fails on a value of the wrong kind;
//! the file's reader ([`super::files`]) refuses it, naming the file and the key, and the
//! object round-trips to what was written (but for the order of its keys). An object
//! whose entries are read in the file's order is an [`Entries`].

use crate::lenient::{Entries, Slot};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Number, Value};

/// Claude Code's settings file (and `.mcp.json`), as flower reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsFile {
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub env: Slot<Entries<EnvValue>>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub model: Slot<String>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub effort_level: Slot<String>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub permissions: Slot<PermissionsSection>,
    /// `Value`: handed as written to the hooks' reader (`engine::hooks`), which types it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub hooks: Option<Value>,
    /// `Value`: handed as written to the MCP servers' reader (`tools::mcp::config`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub mcp_servers: Option<Value>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub sandbox: Slot<SandboxSection>,
    /// Claude Code's keys that approve servers or hand out a credential: flower reads
    /// none, a workspace file's are left out ([`super::strict`]). `Value`: only whether
    /// one is there (or `true`) counts.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_all_project_mcp_servers: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_key_helper: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub aws_auth_refresh: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub aws_credential_export: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub otel_headers_helper: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub enabled_mcpjson_servers: Option<Value>,
    /// `Value`: every key flower does not read, as written (a file for a newer Claude
    /// Code still loads; `flower state -v` and the pin see them).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `permissions`: flower reads the three rule lists and `additionalDirectories`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsSection {
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub allow: Slot<Vec<Slot<String>>>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub deny: Slot<Vec<Slot<String>>>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub ask: Slot<Vec<Slot<String>>>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub additional_directories: Slot<Vec<Slot<String>>>,
    /// `Value`: keys flower does not read (`defaultMode` …), as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `sandbox`: Claude Code's own sandbox, which flower does not read (its sandbox is
/// `FLOWER_SANDBOX` and the flags); a workspace file may not loosen it
/// ([`super::strict`]). `Value`: only whether a key holds its harmless value counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSection {
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub enabled: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_unsandboxed_commands: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub excluded_commands: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_weaker_nested_sandbox: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub auto_allow_bash_if_sandboxed: Option<Value>,
    /// `Value`: handed as written to the network policy's reader ([`super::network`]),
    /// which types it and words its error.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub network: Option<Value>,
    /// `Value`: every other key, as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A variable of `env`: Claude Code's schema says strings; numbers and booleans are
/// meant as their text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvValue {
    Text(String),
    Number(Number),
    Bool(bool),
    /// `Value`: anything else (an object, a list, `null`), kept for the reader's error.
    Other(Value),
}

impl EnvValue {
    /// The variable's value, `None` when it has none (an object, a list, `null`).
    pub fn text(&self) -> Option<String> {
        match self {
            EnvValue::Text(s) => Some(s.clone()),
            EnvValue::Number(n) => Some(n.to_string()),
            EnvValue::Bool(b) => Some(b.to_string()),
            EnvValue::Other(_) => None,
        }
    }

    /// The value as it reads in the file: the text of a string, JSON otherwise.
    pub fn written(&self) -> String {
        match self {
            EnvValue::Text(s) => s.clone(),
            EnvValue::Number(n) => n.to_string(),
            EnvValue::Bool(b) => b.to_string(),
            EnvValue::Other(v) => v.to_string(),
        }
    }
}

/// A key that is there deserializes as `Some`, `null` included (`Option` alone would
/// read `null` as absent, and the file's reader tells the two apart).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}
