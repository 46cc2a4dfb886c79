//! Counting a prompt before it is sent, where it matters: the handoff decision reads
//! the last turn's usage, but a resume that adds a big prompt, or one huge tool result,
//! can carry the next request past the threshold (or the window) before any usage is
//! seen. Such a request is counted first (`count_tokens`), at most once per resume or
//! wake and when what was added since the last measured turn is a large share of it;
//! over the limit, the run stops at this clean boundary to hand off instead of sending
//! a request the API would refuse. When counting fails, the request goes as before.

use super::{Conversation, Engine};
use crate::model::MessagesRequest;
use crate::transcript::{Block, Content, Entry, Raw, RawObject};

/// What was added since the last measured turn is counted when it is more than this
/// share of that turn's context…
pub const COUNT_GROWTH_SHARE: f64 = 0.2;

/// …and at least this many tokens (estimated at 4 bytes a token).
pub const COUNT_MIN_GROWTH_TOKENS: u64 = 2_000;

/// What a conversation knows of its size between replies.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measure {
    /// The context of the last measured turn, tokens (a reply's usage, or a count).
    pub tokens: Option<u64>,
    /// Bytes of message content recorded since.
    pub pending_bytes: u64,
    /// Count the next request whatever it grew by: the first one of a resume or wake.
    pub count_next: bool,
}

impl Measure {
    /// A measured context; nothing pending.
    pub fn measured(&mut self, tokens: u64) {
        self.tokens = Some(tokens);
        self.pending_bytes = 0;
    }

    /// Whether the next request is worth counting.
    pub fn wants_count(&self) -> bool {
        if self.count_next {
            return true;
        }
        let Some(tokens) = self.tokens else {
            return false;
        };
        let grown = self.pending_bytes / 4;
        grown >= COUNT_MIN_GROWTH_TOKENS && grown as f64 > tokens as f64 * COUNT_GROWTH_SHARE
    }
}

/// Bytes of the text an entry adds to the prompt (its message's strings, keys not
/// counted): what grows a conversation (tool results, prompts).
pub fn content_bytes(entry: &Entry) -> u64 {
    entry.content().map_or(0, content_of)
}

/// A content's strings: the typed fields' lengths, what is carried as written read by
/// [`StringBytes`] (no serialization of the text a turn adds).
fn content_of(content: &Content) -> u64 {
    match content {
        Content::Text(text) => text.len() as u64,
        Content::Blocks(blocks) => blocks.iter().map(block_bytes).sum(),
    }
}

fn block_bytes(block: &Block) -> u64 {
    fn text(text: &Option<String>) -> u64 {
        text.as_ref().map_or(0, |t| t.len() as u64)
    }
    fn raw(raw: &Option<Raw>) -> u64 {
        raw.as_ref().map_or(0, string_bytes)
    }
    fn rest(rest: &RawObject) -> u64 {
        rest.iter().map(|(_, value)| string_bytes(value)).sum()
    }
    match block {
        Block::Text(b) => {
            text(&b.kind)
                + text(&b.text)
                + raw(&b.citations)
                + raw(&b.cache_control)
                + rest(&b.rest)
        }
        Block::Thinking(b) => {
            text(&b.kind) + text(&b.thinking) + text(&b.signature) + rest(&b.rest)
        }
        Block::RedactedThinking(b) => text(&b.kind) + text(&b.data) + rest(&b.rest),
        Block::ToolUse(b) | Block::ServerToolUse(b) => {
            text(&b.kind)
                + text(&b.id)
                + text(&b.name)
                + b.input
                    .as_ref()
                    .map_or(0, |input| string_bytes(input.raw()))
                + raw(&b.cache_control)
                + rest(&b.rest)
        }
        Block::ToolResult(b) => {
            text(&b.kind)
                + text(&b.tool_use_id)
                + b.content.as_ref().map_or(0, content_of)
                + raw(&b.cache_control)
                + rest(&b.rest)
        }
        Block::ServerToolResult(b) => {
            text(&b.kind) + text(&b.tool_use_id) + raw(&b.content) + rest(&b.rest)
        }
        Block::Media(b) => {
            text(&b.kind)
                + raw(&b.source)
                + text(&b.title)
                + text(&b.context)
                + raw(&b.citations)
                + raw(&b.cache_control)
                + rest(&b.rest)
        }
        Block::Unknown(b) => string_bytes(b),
    }
}

/// The bytes of the strings in JSON text (object keys not counted).
fn string_bytes(raw: &Raw) -> u64 {
    serde_json::from_str::<StringBytes>(raw.get()).map_or(0, |n| n.0)
}

/// Reads JSON counting the bytes of its strings (object keys skipped).
struct StringBytes(u64);

impl<'de> serde::Deserialize<'de> for StringBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Count;
        impl<'de> serde::de::Visitor<'de> for Count {
            type Value = StringBytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_str<E>(self, s: &str) -> Result<StringBytes, E> {
                Ok(StringBytes(s.len() as u64))
            }
            fn visit_bool<E>(self, _: bool) -> Result<StringBytes, E> {
                Ok(StringBytes(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<StringBytes, E> {
                Ok(StringBytes(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<StringBytes, E> {
                Ok(StringBytes(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<StringBytes, E> {
                Ok(StringBytes(0))
            }
            fn visit_unit<E>(self) -> Result<StringBytes, E> {
                Ok(StringBytes(0))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<StringBytes, A::Error> {
                let mut n = 0;
                while let Some(item) = seq.next_element::<StringBytes>()? {
                    n += item.0;
                }
                Ok(StringBytes(n))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<StringBytes, A::Error> {
                let mut n = 0;
                while let Some((serde::de::IgnoredAny, item)) =
                    map.next_entry::<serde::de::IgnoredAny, StringBytes>()?
                {
                    n += item.0;
                }
                Ok(StringBytes(n))
            }
        }
        deserializer.deserialize_any(Count)
    }
}

impl Engine {
    /// Before a request of a main session that hands off at a limit: when the request
    /// is worth counting (see [`Measure::wants_count`]), counts it; `Some(tokens)` when
    /// that reaches the limit (the caller stops to hand off before sending). A count
    /// that fails is not retried: the request goes as it would have.
    pub(super) async fn counted_over_limit(
        &self,
        conv: &mut Conversation<'_>,
        request: &mut MessagesRequest,
    ) -> Option<u64> {
        let limit = conv.context_limit.filter(|_| conv.depth == 0)?;
        if !conv.measure.wants_count() {
            return None;
        }
        conv.measure.count_next = false;
        // Lent the history as a turn is (see `take_turn`), and given it back.
        request.messages = conv.messages.take();
        let counted = self.config.model.count_tokens(request).await;
        conv.messages.restore(std::mem::take(&mut request.messages));
        let tokens = counted.ok()?;
        conv.measure.measured(tokens);
        (tokens >= limit).then_some(tokens)
    }
}
