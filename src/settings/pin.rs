//! The settings a run started with, pinned in its run directory (issue #40, item 1b).
//!
//! An agent can write the workspace's files, and the next `flower` there reads the
//! settings files. So a run records what it loaded from the workspace
//! (`.claude/settings.json`, `.claude/settings.local.json`, `.mcp.json`): per file a
//! SHA-256 of its bytes and the document as written (a secret's value as a digest of
//! it), in `runs/settings-pin.json`
//! ([`crate::run_dir::SETTINGS_PIN_FILE`]). A later run that finds them changed, new or
//! removed shows what changed ([`Drift::lines`], secret values masked) and applies it
//! only when a person says so; accepting pins again.
//!
//! The user's own `~/.claude/settings.json` is not pinned: it lies outside the
//! workspace, where no agent writes (the sandbox confines Bash, the file tools stay in
//! the workspace and the directories the user's file adds), and it is how a person
//! changes a setting on purpose without a question.
//!
//! The pin stays in the run directory of this host: it vouches for this workspace's
//! files, which another host sharing the run through PostgreSQL does not have (its own
//! first run there pins what its directory holds).

use crate::run_dir::RunDir;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The format of `settings-pin.json`.
pub const PIN_VERSION: u32 = 1;

/// What a run loaded from the workspace's settings files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsPin {
    pub version: u32,
    /// In a fixed order: the project's file, the local one, `.mcp.json`; those that
    /// were not there are not listed.
    pub files: Vec<PinnedFile>,
}

/// One settings file as a run loaded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedFile {
    /// Relative to the workspace: `.claude/settings.json`, `.mcp.json` …
    pub file: String,
    /// SHA-256 of the file's bytes, lower-case hex.
    pub sha256: String,
    /// The file's top-level object, as written (before anything was ignored), except
    /// that a secret's value is replaced by a digest of it
    /// ([`PinnedFile::new`]): the pin tells
    /// a changed secret without keeping it.
    pub document: Map<String, Value>,
}

impl PinnedFile {
    /// `file` (relative to the workspace) with `bytes` and its parsed `document`.
    // `Value`: the document as written, every key, read by flower or not, is compared.
    pub fn new(file: &str, bytes: &[u8], document: Map<String, Value>) -> PinnedFile {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(bytes);
        let mut pinned = PinnedFile {
            file: file.to_string(),
            sha256: hex(&digest),
            document,
        };
        pinned.mask_secrets();
        pinned
    }

    /// Replaces each secret value of the document (see [`secret`]; an array is one
    /// value, as in [`Drift`]) by [`MASKED`] and the first 16 hex digits of its SHA-256.
    fn mask_secrets(&mut self) {
        use sha2::Digest as _;
        let mut objects = vec![(String::new(), &mut self.document)];
        while let Some((prefix, object)) = objects.pop() {
            for (name, value) in object.iter_mut() {
                let key = dotted(&prefix, name);
                match value {
                    Value::Object(inner) => objects.push((key, inner)),
                    other => {
                        let text = other.to_string();
                        if secret(&key, &text) {
                            let digest = sha2::Sha256::digest(text.as_bytes());
                            *other = Value::String(format!("{MASKED}{}", &hex(&digest)[..16]));
                        }
                    }
                }
            }
        }
    }

    /// The document's values by dotted key (objects are opened, arrays kept whole).
    fn flattened(&self) -> BTreeMap<String, Leaf<'_>> {
        let mut out = BTreeMap::new();
        let mut objects = vec![(String::new(), &self.document)];
        while let Some((prefix, object)) = objects.pop() {
            for (name, value) in object {
                let key = dotted(&prefix, name);
                match value {
                    Value::Object(inner) if !inner.is_empty() => objects.push((key, inner)),
                    other => {
                        out.insert(key, Leaf(other));
                    }
                }
            }
        }
        out
    }
}

/// One value of a flattened document. `Value`: compared as JSON is (the order of keys
/// inside an array's objects is no change), shown as its text.
#[derive(PartialEq)]
struct Leaf<'a>(&'a Value);

/// `name` under `prefix` (`env` and `FLOWER_NETWORK`: `env.FLOWER_NETWORK`).
fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a masked value starts with.
const MASKED: &str = "(隐去) sha256:";

/// What the run directory holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinned {
    /// No pin: a run that never started here (or one from before pinning).
    Missing,
    Pin(SettingsPin),
    /// A pin that cannot be read: nothing in it is trusted.
    Unreadable,
}

impl SettingsPin {
    /// The pin of `dir`.
    pub fn read(dir: &RunDir) -> Pinned {
        match std::fs::read(dir.settings_pin()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Pinned::Missing,
            Err(_) => Pinned::Unreadable,
            Ok(bytes) => match serde_json::from_slice::<SettingsPin>(&bytes) {
                Ok(pin) if pin.version == PIN_VERSION => Pinned::Pin(pin),
                _ => Pinned::Unreadable,
            },
        }
    }

    /// Writes this pin into `dir` (which exists: the run lock is in it), atomically.
    pub fn write(&self, dir: &RunDir) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        crate::atomic::write(&dir.settings_pin(), &bytes)
    }

    /// The pinned file named `name` (relative to the workspace).
    fn file(&self, name: &str) -> Option<&PinnedFile> {
        self.files.iter().find(|f| f.file == name)
    }

    /// What changed from this pin to `now`; `None` when no file says anything
    /// different (a file only reformatted is no change).
    pub fn drift(&self, now: &SettingsPin) -> Option<Drift> {
        let mut names: Vec<&str> = self.files.iter().map(|f| f.file.as_str()).collect();
        for file in &now.files {
            if !names.contains(&file.file.as_str()) {
                names.push(&file.file);
            }
        }
        let mut files = Vec::new();
        for name in names {
            let (before, after) = (self.file(name), now.file(name));
            if before.map(|f| &f.document) == after.map(|f| &f.document) {
                continue;
            }
            let kind = match (&before, &after) {
                (None, _) => ChangeKind::Added,
                (_, None) => ChangeKind::Removed,
                _ => ChangeKind::Changed,
            };
            let keys = key_changes(
                &before.map(PinnedFile::flattened).unwrap_or_default(),
                &after.map(PinnedFile::flattened).unwrap_or_default(),
            );
            files.push(FileChange {
                file: name.to_string(),
                kind,
                keys,
            });
        }
        (!files.is_empty()).then_some(Drift { files })
    }
}

/// The settings files that changed since the run pinned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub files: Vec<FileChange>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Relative to the workspace.
    pub file: String,
    pub kind: ChangeKind,
    pub keys: Vec<KeyChange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// One key (dotted: `env.FLOWER_NETWORK`) added, removed or changed, with its values
/// as shown (a secret's masked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    pub key: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

impl Drift {
    /// What changed, for a person: one line per file, then one per key.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for file in &self.files {
            let what = match file.kind {
                ChangeKind::Added => "新出现",
                ChangeKind::Removed => "删掉了",
                ChangeKind::Changed => "改了",
            };
            out.push(format!("  {}({what})", file.file));
            for key in &file.keys {
                out.push(match (&key.before, &key.after) {
                    (None, Some(after)) => format!("    + {} = {after}", key.key),
                    (Some(before), None) => format!("    - {}(原来是 {before})", key.key),
                    (Some(before), Some(after)) => {
                        format!("    ~ {}:{before} → {after}", key.key)
                    }
                    (None, None) => format!("    ~ {}", key.key),
                });
            }
        }
        out
    }
}

/// The keys of two flattened documents ([`PinnedFile::flattened`]) that differ.
fn key_changes(
    old: &BTreeMap<String, Leaf<'_>>,
    new: &BTreeMap<String, Leaf<'_>>,
) -> Vec<KeyChange> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| old.get(*key) != new.get(*key))
        .map(|key| KeyChange {
            key: key.clone(),
            before: old.get(key).map(|v| shown(key, v)),
            after: new.get(key).map(|v| shown(key, v)),
        })
        .collect()
}

/// Words of a name that say its value is a secret (`ANTHROPIC_AUTH_TOKEN`,
/// `apiKeyHelper`; not `FLOWER_MAX_TOKENS`), upper-cased.
const SECRET_WORDS: &[&str] = &[
    "KEY",
    "APIKEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PWD",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "HEADERS",
];

/// Text inside a value that says it holds a secret (matched lower-cased).
const SECRET_TEXT: &[&str] = &["key=", "token=", "secret=", "password=", "bearer "];

/// Whether a key's last name says its value is a secret: one of its words (split at
/// `_`, `-` and a lower-case letter followed by an upper-case one) is in
/// [`SECRET_WORDS`], or it is `FLOWER_STORE` (a URL that may hold a password).
fn secret_name(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    if last == "FLOWER_STORE" {
        return true;
    }
    let mut words = vec![String::new()];
    let mut previous_lower = false;
    for c in last.chars() {
        if c == '_' || c == '-' {
            words.push(String::new());
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            words.push(String::new());
        }
        previous_lower = c.is_lowercase();
        if let Some(word) = words.last_mut() {
            word.extend(c.to_uppercase());
        }
    }
    words.iter().any(|w| SECRET_WORDS.contains(&w.as_str()))
}

/// Whether the value at `key` (its JSON text) is a secret: by its name, or by what it
/// says (a `token=`, a `Bearer `, a URL with credentials).
fn secret(key: &str, json: &str) -> bool {
    let lower = json.to_lowercase();
    let url_credentials = lower.contains("://") && lower.contains('@');
    secret_name(key) || SECRET_TEXT.iter().any(|s| lower.contains(s)) || url_credentials
}

/// A value as a person is shown it: JSON, shortened; a secret's masked.
fn shown(key: &str, value: &Leaf<'_>) -> String {
    let text = value.0.to_string();
    if secret(key, &text) || text.contains(MASKED) {
        return "(隐去)".to_string();
    }
    const MAX: usize = 120;
    if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        return format!("{cut}…");
    }
    text
}
