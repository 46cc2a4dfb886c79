//! The facts pruning reads from each entry once (roles, blocks, tool ids, what a
//! result's body is), and the small readers behind them.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    User,
    Assistant,
}

pub(super) fn timestamp(entry: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = str_field(entry, "timestamp")?;
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

pub(super) fn block_type(block: &Value) -> Option<&str> {
    block.get("type")?.as_str()
}

pub(super) fn str_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field)?.as_str()
}

/// The text of a tool result's `content`: a string, or its text blocks joined.
pub(super) fn result_text(block: &Value) -> Cow<'_, str> {
    match block.get("content") {
        Some(Value::String(text)) => Cow::Borrowed(text),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts.iter().filter_map(|p| str_field(p, "text")).collect();
            if texts.len() == 1 {
                Cow::Borrowed(texts[0])
            } else {
                Cow::Owned(texts.join("\n"))
            }
        }
        _ => Cow::Borrowed(""),
    }
}

/// A uuid-shaped id derived from a tool_use id (two FNV-1a hashes), so the result
/// synthesized for a call has the same uuid every time the transcript is pruned.
pub(super) fn synthetic_uuid(tool_use_id: &str) -> String {
    let fnv = |seed: u64| {
        tool_use_id.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let hi = fnv(0xcbf2_9ce4_8422_2325);
    let lo = fnv(0x8422_2325_cbf2_9ce4);
    let n = (u128::from(hi) << 64) | u128::from(lo);
    // Version nibble 8 (custom), RFC 4122 variant.
    let n = (n & !(0xf << 76) & !(0x3 << 62)) | (0x8 << 76) | (0x2 << 62);
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What a tool result's body is, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// Output of a run.
    Output,
    /// `is_error` with a denial text.
    Denial,
    /// Left by an interruption, not yet neutralized.
    Interruption,
    /// [`INTERRUPTED_BODY`].
    Interrupted,
    /// [`STALE_BODY`].
    Stale,
    /// A trim pointer.
    Pointer,
}

impl Body {
    /// What a result with this text is.
    pub(super) fn of(text: &str, is_error: bool) -> Body {
        if is_error && is_denial_text(text) {
            Body::Denial
        } else if text == INTERRUPTED_BODY {
            Body::Interrupted
        } else if text == STALE_BODY {
            Body::Stale
        } else if text.starts_with(TRIM_POINTER_PREFIX) {
            Body::Pointer
        } else if is_interruption_text(text) {
            Body::Interruption
        } else {
            Body::Output
        }
    }

    /// Whether the result carries output of a run (that can supersede or be stale).
    pub(super) fn is_output(self) -> bool {
        matches!(self, Body::Output | Body::Pointer)
    }
}

/// The facts about one content block the rules use.
#[derive(Debug)]
pub(super) enum Block {
    ToolUse {
        id: String,
        /// The normalized command line, for a `Bash` call of a snapshot command.
        snapshot: Option<String>,
    },
    ToolResult {
        id: String,
        body: Body,
        /// Bytes of text, when the content is only text (so it can be trimmed).
        text_len: Option<usize>,
    },
    Thinking,
    /// A `server_tool_use` block (the API ran the tool).
    ServerToolUse {
        id: String,
    },
    /// Its result (`web_search_tool_result`, `web_fetch_tool_result`), with the size of
    /// its content in bytes of JSON.
    ServerResult {
        id: String,
        len: usize,
    },
    Other,
}

impl Block {
    pub(super) fn read(block: &Value) -> Block {
        match block_type(block) {
            Some("tool_use") => Block::ToolUse {
                id: str_field(block, "id").unwrap_or_default().to_string(),
                snapshot: (str_field(block, "name") == Some(crate::transcript::tools::BASH))
                    .then(|| {
                        block
                            .get("input")
                            .and_then(|input| str_field(input, "command"))
                            .and_then(snapshot_command)
                    })
                    .flatten(),
            },
            Some("tool_result") => {
                let text = result_text(block);
                let is_error = block.get("is_error") == Some(&Value::Bool(true));
                let body = Body::of(&text, is_error);
                let only_text = match block.get("content") {
                    Some(Value::String(_)) => true,
                    Some(Value::Array(parts)) => {
                        parts.iter().all(|p| block_type(p) == Some("text"))
                    }
                    _ => false,
                };
                Block::ToolResult {
                    id: str_field(block, "tool_use_id")
                        .unwrap_or_default()
                        .to_string(),
                    body,
                    text_len: only_text.then_some(text.len()),
                }
            }
            Some("thinking" | "redacted_thinking") => Block::Thinking,
            Some("server_tool_use") => Block::ServerToolUse {
                id: str_field(block, "id").unwrap_or_default().to_string(),
            },
            Some(kind) if kind.ends_with("_tool_result") => Block::ServerResult {
                id: str_field(block, "tool_use_id")
                    .unwrap_or_default()
                    .to_string(),
                len: block.get("content").map_or(0, |c| c.to_string().len()),
            },
            _ => Block::Other,
        }
    }
}

/// An entry's `uuid` or `parentUuid` as pruning keeps it. Every entry has both, so a
/// long transcript holds tens of thousands: a canonical uuid
/// ([`crate::stores::entry_uuid`]) is kept as its 16 bytes rather than 36 on the heap,
/// any other text as it is. One to one, so equality and hashing are the text's.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) enum Id {
    Canonical(u128),
    Text(Box<str>),
}

impl Id {
    pub(super) fn new(text: &str) -> Id {
        crate::stores::entry_uuid::canonical(text)
            .map_or_else(|| Id::Text(text.into()), Id::Canonical)
    }

    /// The id as it was written.
    pub(super) fn text(&self) -> Cow<'_, str> {
        match self {
            Id::Canonical(bits) => Cow::Owned(crate::stores::entry_uuid::text(*bits)),
            Id::Text(text) => Cow::Borrowed(text),
        }
    }
}

impl std::fmt::Debug for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.text().fmt(f)
    }
}

/// What a user or assistant entry's `message.content` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Content {
    /// Missing, not a string or array, or a blank string: nothing the API accepts.
    Unusable,
    Text,
    Blocks,
}

/// One entry and the facts about it, read once: the rules work on these facts and
/// touch an entry's JSON only to change it (a cold pass over 20 MB of entries costs
/// more than all the rules together).
pub(super) struct Slot {
    /// As stored (its text) until a rule changes it.
    pub(super) entry: Json,
    pub(super) role: Option<Role>,
    /// A `system` entry.
    pub(super) system: bool,
    /// When it was written (user and assistant entries).
    pub(super) timestamp: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) uuid: Option<Id>,
    pub(super) parent: Option<Id>,
    pub(super) synthetic_error: bool,
    /// A continuation request ([`crate::transcript::markers::is_continuation`]).
    pub(super) continuation: bool,
    pub(super) content: Content,
    /// Parallel to the content array (empty unless `content` is `Blocks`).
    pub(super) blocks: Vec<Block>,
    pub(super) removed: bool,
    /// Inserted by this prune (a result for a call that had none).
    pub(super) synthesized: bool,
    /// Appended since the last cold load while the cache is warm: sent verbatim.
    pub(super) warm: bool,
}

impl Slot {
    pub(super) fn new(entry: Value) -> Slot {
        let role = match str_field(&entry, "type") {
            Some("user") => Some(Role::User),
            Some("assistant") => Some(Role::Assistant),
            _ => None,
        };
        let (content, blocks) = match role.and_then(|_| entry.get("message")?.get("content")) {
            Some(Value::String(text)) if !text.trim().is_empty() => (Content::Text, Vec::new()),
            Some(Value::Array(list)) => (Content::Blocks, list.iter().map(Block::read).collect()),
            _ => (Content::Unusable, Vec::new()),
        };
        Slot {
            role,
            system: str_field(&entry, "type") == Some("system"),
            timestamp: role.and_then(|_| timestamp(&entry)),
            uuid: str_field(&entry, "uuid").map(Id::new),
            parent: str_field(&entry, "parentUuid").map(Id::new),
            synthetic_error: role == Some(Role::Assistant)
                && (is_synthetic_error(&entry) || is_refusal(&entry)),
            continuation: role == Some(Role::User)
                && crate::transcript::markers::is_continuation(&entry),
            content,
            blocks,
            removed: false,
            synthesized: false,
            warm: false,
            entry: Json::Value(entry),
        }
    }

    /// A user entry a person or the runtime wrote (text, no tool results): what a
    /// load is followed by.
    pub(super) fn is_prompt(&self) -> bool {
        match self.content {
            Content::Text => true,
            Content::Blocks => !self
                .blocks
                .iter()
                .any(|b| matches!(b, Block::ToolResult { .. })),
            Content::Unusable => false,
        }
    }

    /// A user or assistant entry that gives the API nothing to send.
    pub(super) fn is_empty_message(&self) -> bool {
        self.role.is_some()
            && match self.content {
                Content::Unusable => true,
                Content::Text => false,
                Content::Blocks => self.blocks.is_empty(),
            }
    }

    /// The entry, parsed from its text if need be.
    pub(super) fn value(&self) -> Cow<'_, Value> {
        self.entry.value()
    }

    pub(super) fn content_array(&mut self) -> Option<&mut Vec<Value>> {
        self.entry
            .value_mut()
            .get_mut("message")?
            .get_mut("content")?
            .as_array_mut()
    }

    pub(super) fn delete_block(&mut self, b: usize) {
        if b < self.blocks.len() {
            self.blocks.remove(b);
            if let Some(list) = self.content_array()
                && b < list.len()
            {
                list.remove(b);
            }
        }
    }

    pub(super) fn set_result_body(&mut self, b: usize, text: String, body: Body) {
        let len = text.len();
        if let Some(Block::ToolResult {
            body: old,
            text_len,
            ..
        }) = self.blocks.get_mut(b)
        {
            *old = body;
            *text_len = Some(len);
        }
        if let Some(Value::Object(block)) = self.content_array().and_then(|l| l.get_mut(b)) {
            block.insert("content".into(), Value::from(text));
        }
    }
}

/// Below this many entries a transcript is pruned on the calling thread.
pub(super) const PARALLEL_MIN_ENTRIES: usize = 2000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_uuids_are_stable_uuid_shaped_and_distinct() {
        let a = synthetic_uuid("toolu_01");
        assert_eq!(a, synthetic_uuid("toolu_01"));
        assert_ne!(a, synthetic_uuid("toolu_02"));
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'8');
        assert!(uuid::Uuid::parse_str(&a).is_ok());
    }
}
