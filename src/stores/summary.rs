//! Session summaries, folded incrementally inside `append`.
//!
//! A summary is what a session list shows without loading transcripts. Its `data` uses
//! the Claude Agent SDK's field names (`fold_session_summary` in the SDK), so SDK tools
//! can read it. Every field is set-once or last-wins, so a store folds each appended
//! batch into the previous summary without re-reading the transcript.

use serde_json::{Map, Value};

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

/// Entry field → summary field, last value wins.
const LAST_WINS: [(&str, &str); 5] = [
    ("customTitle", "custom_title"),
    ("aiTitle", "ai_title"),
    ("lastPrompt", "last_prompt"),
    ("summary", "summary_hint"),
    ("gitBranch", "git_branch"),
];

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
    prev: Option<Value>,
    entries: impl IntoIterator<Item = &'a Value>,
) -> Value {
    let mut data = match prev {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for entry in entries {
        let Some(entry) = entry.as_object() else {
            continue;
        };
        if !data.contains_key("is_sidechain") {
            let side = entry.get("isSidechain") == Some(&Value::Bool(true));
            data.insert("is_sidechain".into(), Value::Bool(side));
        }
        if !data.contains_key("created_at")
            && let Some(ms) = entry
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(iso_to_epoch_ms)
        {
            data.insert("created_at".into(), Value::from(ms));
        }
        if !data.contains_key("cwd")
            && let Some(cwd) = entry.get("cwd").and_then(Value::as_str)
            && !cwd.is_empty()
        {
            data.insert("cwd".into(), Value::from(cwd));
        }
        fold_first_prompt(&mut data, entry);
        for (from, to) in LAST_WINS {
            if let Some(text) = entry.get(from).and_then(Value::as_str) {
                data.insert(to.into(), Value::from(text));
            }
        }
        if entry.get("type").and_then(Value::as_str) == Some("tag") {
            match entry.get("tag").and_then(Value::as_str) {
                Some(tag) if !tag.is_empty() => {
                    data.insert("tag".into(), Value::from(tag));
                }
                _ => {
                    data.remove("tag");
                }
            }
        }
    }
    Value::Object(data)
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

fn is_true(entry: &Map<String, Value>, field: &str) -> bool {
    entry.get(field) == Some(&Value::Bool(true))
}

fn fold_first_prompt(data: &mut Map<String, Value>, entry: &Map<String, Value>) {
    if data.get("first_prompt_locked") == Some(&Value::Bool(true))
        || entry.get("type").and_then(Value::as_str) != Some("user")
        || is_true(entry, "isMeta")
        || is_true(entry, "isCompactSummary")
    {
        return;
    }
    let content = entry.get("message").and_then(|m| m.get("content"));
    let texts: Vec<&str> = match content {
        Some(Value::String(text)) => vec![text.as_str()],
        Some(Value::Array(blocks)) => {
            if blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            {
                return;
            }
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        }
        _ => return,
    };
    for raw in texts {
        let text = raw.replace('\n', " ");
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if let Some(command) = command_name(text) {
            if data
                .get("command_fallback")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                data.insert("command_fallback".into(), Value::from(command));
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
        data.insert("first_prompt".into(), Value::from(prompt));
        data.insert("first_prompt_locked".into(), Value::Bool(true));
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
        let user = |text: &str| json!({"type": "user", "message": {"content": text}});
        let data = fold_session_summary(None, &[user("<command-name>/init</command-name> x")]);
        assert_eq!(data["command_fallback"], "/init");
        assert!(data.get("first_prompt_locked").is_none());
        let data = fold_session_summary(Some(data), &[user("now real")]);
        assert_eq!(data["first_prompt"], "now real");
        assert_eq!(data["first_prompt_locked"], true);
    }
}
