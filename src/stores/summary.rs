//! Session summaries, folded incrementally inside `append`.
//!
//! A summary is what a session list shows without loading transcripts. Its `data` uses
//! the Claude Agent SDK's field names (`fold_session_summary` in the SDK), so SDK tools
//! can read it. Every field is set-once or last-wins, so a store folds each appended
//! batch into the previous summary without re-reading the transcript.

use crate::transcript::{Block, Content, Entry};
use serde::{Deserialize, Serialize};

/// Summary rows as stored (session id, mtime, the JSON text) into
/// [`SessionSummary`](super::SessionSummary)s;
/// a row whose JSON does not parse is reported through `bad` (a store's own error),
/// with what is wrong and the parser's error.
pub fn parse_summary_rows(
    rows: Vec<(String, i64, String)>,
    bad: impl Fn(String, serde_json::Error) -> super::StoreError,
) -> Result<Vec<super::SessionSummary>, super::StoreError> {
    rows.into_iter()
        .map(|(session_id, mtime, data)| {
            let data = serde_json::from_str(&data)
                .map_err(|e| bad(format!("{session_id} 的摘要不是合法的 JSON({e})"), e))?;
            Ok(super::SessionSummary {
                session_id,
                mtime,
                data,
            })
        })
        .collect()
}

/// The longest first prompt kept, in characters; longer ones are cut and get `…`.
pub const FIRST_PROMPT_MAX_CHARS: usize = 200;

/// A session's summary `data`, with the SDK's field names, in the order they are
/// usually set (a field absent is not written).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_sidechain: Option<bool>,
    /// Epoch ms of the first parseable `timestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The first slash command, until a real prompt comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_fallback: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt_locked: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ai_title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_hint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Fields a newer flower wrote: kept as they are.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

impl SummaryData {
    /// A stored summary's text; `None` if it is not one (a new summary starts then).
    pub fn parse(text: &str) -> Option<SummaryData> {
        serde_json::from_str(text).ok()
    }

    /// The JSON text stored.
    pub fn to_json(&self) -> String {
        // Strings, numbers and kept JSON only: nothing here fails to serialize.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

/// Folds a batch of newly stored entries into a session's summary `data`.
///
/// `prev` is the previous `data` (or `None` for a new session); the result is the new
/// `data`. Fields: `is_sidechain` (first entry's `isSidechain`), `created_at` (epoch ms
/// of the first parseable `timestamp`), `cwd` (first non-empty), `first_prompt` and
/// `first_prompt_locked` (the first real user text: not a tool result, not meta, not a
/// slash command or harness-generated text; `command_fallback` keeps the first slash
/// command meanwhile), `custom_title`, `ai_title`, `last_prompt`, `summary_hint`,
/// `git_branch` (last wins) and `tag` (entries of type `tag`; an empty tag clears it).
///
/// Callers fold main transcripts only: a sub-agent's entries never touch its
/// session's summary.
pub fn fold_session_summary<'a>(
    prev: Option<SummaryData>,
    entries: impl IntoIterator<Item = &'a Entry>,
) -> SummaryData {
    let mut data = prev.unwrap_or_default();
    for entry in entries {
        if data.is_sidechain.is_none() {
            data.is_sidechain = Some(entry.is_sidechain());
        }
        if data.created_at.is_none() {
            data.created_at = entry.timestamp.as_deref().and_then(iso_to_epoch_ms);
        }
        if data.cwd.is_none() {
            data.cwd = entry.cwd.clone().filter(|cwd| !cwd.is_empty());
        }
        fold_first_prompt(&mut data, entry);
        for (from, to) in [
            (&entry.custom_title, &mut data.custom_title),
            (&entry.ai_title, &mut data.ai_title),
            (&entry.last_prompt, &mut data.last_prompt),
            (&entry.summary, &mut data.summary_hint),
            (&entry.git_branch, &mut data.git_branch),
        ] {
            if let Some(text) = from {
                *to = Some(text.clone());
            }
        }
        if entry.kind.as_deref() == Some("tag") {
            data.tag = entry.tag.clone().filter(|tag| !tag.is_empty());
        }
    }
    data
}

/// Parses an RFC 3339 / ISO 8601 timestamp (`2024-01-01T00:00:00.000Z`) to epoch ms.
/// A timestamp without an offset is taken as UTC.
pub fn iso_to_epoch_ms(text: &str) -> Option<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    None
}

fn fold_first_prompt(data: &mut SummaryData, entry: &Entry) {
    if data.first_prompt_locked == Some(true)
        || entry.kind.as_deref() != Some("user")
        || entry.is_meta == Some(true)
        || entry.is_compact_summary == Some(true)
    {
        return;
    }
    let texts: Vec<&str> = match entry.content() {
        Some(Content::Text(text)) => vec![text.as_str()],
        Some(Content::Blocks(blocks)) => {
            if blocks.iter().any(|b| matches!(b, Block::ToolResult(_))) {
                return;
            }
            blocks.iter().filter_map(Block::text).collect()
        }
        None => return,
    };
    for raw in texts {
        let text = raw.replace('\n', " ");
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(command) = command_name(text) {
            if data.command_fallback.as_deref().is_none_or(str::is_empty) {
                data.command_fallback = Some(command.to_string());
            }
            continue;
        }
        if is_generated_text(text) {
            continue;
        }
        let prompt = if text.chars().count() > FIRST_PROMPT_MAX_CHARS {
            let cut: String = text.chars().take(FIRST_PROMPT_MAX_CHARS).collect();
            format!("{}\u{2026}", cut.trim_end())
        } else {
            text.to_string()
        };
        data.first_prompt = Some(prompt);
        data.first_prompt_locked = Some(true);
        return;
    }
}

/// `<command-name>/x</command-name>` anywhere in the text → `/x`.
fn command_name(text: &str) -> Option<&str> {
    const OPEN: &str = "<command-name>";
    let start = text.find(OPEN)? + OPEN.len();
    let len = text[start..].find("</command-name>")?;
    Some(&text[start..start + len])
}

/// Text the harness wrote into a user entry, not something the user typed (the SDK's
/// skip list: command output, hooks, ticks, goals, interruption notes, IDE context).
fn is_generated_text(text: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "<local-command-stdout>",
        "<session-start-hook>",
        "<tick>",
        "<goal>",
        "[Request interrupted by user",
    ];
    if PREFIXES.iter().any(|p| text.starts_with(p)) {
        return true;
    }
    ["ide_opened_file", "ide_selection"]
        .iter()
        .any(|tag| text.starts_with(&format!("<{tag}>")) && text.ends_with(&format!("</{tag}>")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_parse_with_and_without_offset() {
        assert_eq!(
            iso_to_epoch_ms("2024-01-01T00:00:01.000Z"),
            Some(1_704_067_201_000)
        );
        assert_eq!(
            iso_to_epoch_ms("2024-01-01T00:00:01"),
            Some(1_704_067_201_000)
        );
        assert_eq!(iso_to_epoch_ms("yesterday"), None);
    }

    #[test]
    fn command_fallback_until_a_real_prompt() {
        let user = |text: &str| {
            Entry::parse(&json!({"type": "user", "message": {"content": text}}).to_string())
                .unwrap()
        };
        let data = fold_session_summary(None, &[user("<command-name>/init</command-name> x")]);
        assert_eq!(data.command_fallback.as_deref(), Some("/init"));
        assert_eq!(data.first_prompt_locked, None);
        let data = fold_session_summary(Some(data), &[user("now real")]);
        assert_eq!(data.first_prompt.as_deref(), Some("now real"));
        assert_eq!(data.first_prompt_locked, Some(true));
    }
}
