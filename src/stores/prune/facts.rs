//! The facts pruning reads from each entry once (roles, blocks, tool ids, what a
//! result's body is), and the small readers behind them.

use super::*;
use crate::transcript::{
    Block as TypedBlock, Content as TypedContent, Entry, Raw, ToolResultBlock,
};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    User,
    Assistant,
}

/// The text of a tool result's `content`: a string, or the text of its parts joined
/// (a part's `text` whatever its type says, as a reader of the JSON would take it).
pub(super) fn result_text(result: &ToolResultBlock) -> Cow<'_, str> {
    match &result.content {
        Some(TypedContent::Text(text)) => Cow::Borrowed(text),
        Some(TypedContent::Blocks(parts)) => {
            let mut texts: Vec<Cow<'_, str>> = parts.iter().filter_map(part_text).collect();
            if texts.len() == 1 {
                texts.swap_remove(0)
            } else {
                Cow::Owned(texts.join("\n"))
            }
        }
        None => Cow::Borrowed(""),
    }
}

/// A part of a tool result's content: its `text`, if a string.
fn part_text(part: &TypedBlock) -> Option<Cow<'_, str>> {
    match part {
        TypedBlock::Text(text) => text.text.as_deref().map(Cow::Borrowed),
        TypedBlock::Unknown(raw) => Lenient::of(raw)?.text().map(Cow::Owned),
        _ => None,
    }
}

/// The few fields of a block flower does not type, each as written: one of another
/// type than expected reads as absent.
#[derive(Default, Deserialize)]
pub(super) struct Lenient {
    #[serde(rename = "type")]
    kind: Option<Raw>,
    text: Option<Raw>,
    tool_use_id: Option<Raw>,
    pub(super) content: Option<Raw>,
}

impl Lenient {
    /// `None` unless `raw` is an object.
    pub(super) fn of(raw: &Raw) -> Option<Lenient> {
        if !raw.get().starts_with('{') {
            return None;
        }
        // A repeated field: as a reader of the JSON takes it, the last one.
        raw.parse()
            .ok()
            .or_else(|| Raw::from_text(canonical(raw.get())).ok()?.parse().ok())
    }

    pub(super) fn string(field: &Option<Raw>) -> Option<String> {
        field.as_ref()?.parse().ok()
    }

    pub(super) fn kind(&self) -> Option<String> {
        Self::string(&self.kind)
    }

    pub(super) fn text(&self) -> Option<String> {
        Self::string(&self.text)
    }
}

/// JSON text as serde_json writes it (compact, a repeated key once).
pub(super) fn canonical(json: &str) -> String {
    if crate::model::canonical::is_canonical(json) {
        return json.to_string();
    }
    // A tree only to rewrite odd text (spaces, escapes, repeated keys).
    serde_json::from_str::<serde_json::Value>(json)
        .map_or_else(|_| json.to_string(), |v| v.to_string())
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
    /// The facts of a typed block (what [`super::raw`] reads from the text).
    pub(super) fn of(block: &TypedBlock) -> Block {
        let id = |field: &Option<String>| field.clone().unwrap_or_default();
        match block {
            TypedBlock::ToolUse(call) => Block::ToolUse {
                id: id(&call.id),
                snapshot: (call.name.as_deref() == Some(crate::transcript::tools::BASH))
                    .then(|| command_of(call.input.as_ref()?.raw()))
                    .flatten()
                    .and_then(|c| snapshot_command(&c)),
            },
            TypedBlock::ToolResult(result) => {
                let text = result_text(result);
                let only_text = match &result.content {
                    Some(TypedContent::Text(_)) => true,
                    Some(TypedContent::Blocks(parts)) => {
                        parts.iter().all(|p| matches!(p, TypedBlock::Text(_)))
                    }
                    None => false,
                };
                Block::ToolResult {
                    id: id(&result.tool_use_id),
                    body: Body::of(&text, result.is_error == Some(true)),
                    text_len: only_text.then_some(text.len()),
                }
            }
            TypedBlock::Thinking(_) | TypedBlock::RedactedThinking(_) => Block::Thinking,
            TypedBlock::ServerToolUse(call) => Block::ServerToolUse { id: id(&call.id) },
            TypedBlock::ServerToolResult(result) => Block::ServerResult {
                id: id(&result.tool_use_id),
                len: result
                    .content
                    .as_ref()
                    .map_or(0, |c| canonical(c.get()).len()),
            },
            TypedBlock::Unknown(raw) => match Lenient::of(raw) {
                Some(fields) if fields.kind().is_some_and(|k| k.ends_with("_tool_result")) => {
                    Block::ServerResult {
                        id: Lenient::string(&fields.tool_use_id).unwrap_or_default(),
                        len: fields
                            .content
                            .as_ref()
                            .map_or(0, |c| canonical(c.get()).len()),
                    }
                }
                _ => Block::Other,
            },
            _ => Block::Other,
        }
    }
}

/// `input.command` of a tool call, if a string.
pub(super) fn command_of(input: &Raw) -> Option<String> {
    #[derive(Deserialize)]
    struct Input {
        command: Option<Raw>,
    }
    if !input.get().starts_with('{') {
        return None;
    }
    let input = input
        .parse::<Input>()
        .ok()
        .or_else(|| Raw::from_text(canonical(input.get())).ok()?.parse().ok())?;
    input.command?.parse().ok()
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
    pub(super) entry: Stored,
    pub(super) role: Option<Role>,
    /// A `system` entry.
    pub(super) system: bool,
    /// When it was written (user and assistant entries).
    pub(super) timestamp: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) uuid: Option<Id>,
    pub(super) parent: Option<Id>,
    pub(super) synthetic_error: bool,
    /// A continuation request ([`crate::transcript::markers::CONTINUATION_FLAG`]).
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
    /// The facts of a typed entry (what [`super::raw`] reads from the text), the entry
    /// kept as `text`.
    pub(super) fn of_entry(entry: &Entry, text: Box<str>) -> Slot {
        let role = match entry.kind() {
            Kind::User => Some(Role::User),
            Kind::Assistant => Some(Role::Assistant),
            _ => None,
        };
        let (content, blocks) = match role.and(entry.content()) {
            Some(TypedContent::Text(text)) if !text.trim().is_empty() => {
                (Content::Text, Vec::new())
            }
            Some(TypedContent::Blocks(list)) => {
                (Content::Blocks, list.iter().map(Block::of).collect())
            }
            _ => (Content::Unusable, Vec::new()),
        };
        Slot {
            role,
            system: entry.kind() == Kind::System,
            timestamp: role
                .and(entry.timestamp.as_deref())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc)),
            uuid: entry.uuid().map(Id::new),
            parent: entry.parent_uuid.clone().flatten().as_deref().map(Id::new),
            synthetic_error: role == Some(Role::Assistant)
                && (entry.is_synthetic_error() || entry.is_refusal()),
            continuation: role == Some(Role::User) && entry.is_continuation == Some(true),
            content,
            blocks,
            removed: false,
            synthesized: false,
            warm: false,
            entry: Stored::Text(text),
        }
    }

    /// An entry built here (a synthesized result).
    pub(super) fn built(entry: Entry) -> Option<Slot> {
        let text = entry.to_json().ok()?;
        Slot::from_text(text.into_boxed_str()).ok()
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

    /// The entry, parsed from its text if need be (`None`: not an object).
    pub(super) fn entry(&self) -> Option<Cow<'_, Entry>> {
        match &self.entry {
            Stored::Text(text) => Entry::parse(text).ok().map(Cow::Owned),
            Stored::Edited(entry) => Some(Cow::Borrowed(entry)),
        }
    }

    /// The entry to change in place (parsed once, then kept so).
    pub(super) fn entry_mut(&mut self) -> Option<&mut Entry> {
        if let Stored::Text(text) = &self.entry {
            self.entry = Stored::Edited(Box::new(Entry::parse(text).ok()?));
        }
        match &mut self.entry {
            Stored::Edited(entry) => Some(entry),
            Stored::Text(_) => None,
        }
    }

    /// The content blocks, to change.
    pub(super) fn content_blocks(&mut self) -> Option<&mut Vec<TypedBlock>> {
        match self.entry_mut()?.message.as_mut()?.content.as_mut()? {
            TypedContent::Blocks(blocks) => Some(blocks),
            TypedContent::Text(_) => None,
        }
    }

    pub(super) fn delete_block(&mut self, b: usize) {
        if b < self.blocks.len() {
            self.blocks.remove(b);
            if let Some(list) = self.content_blocks()
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
        if let Some(TypedBlock::ToolResult(block)) =
            self.content_blocks().and_then(|l| l.get_mut(b))
        {
            block.content = Some(TypedContent::Text(text));
        }
    }
}

/// An entry as pruning holds it: the text it was stored as, until a rule changes it.
pub(super) enum Stored {
    Text(Box<str>),
    Edited(Box<Entry>),
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
