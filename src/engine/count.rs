//! Counting a prompt before it is sent, where it matters: the handoff decision reads
//! the last turn's usage, but a resume that adds a big prompt, or one huge tool result,
//! can carry the next request past the threshold (or the window) before any usage is
//! seen. Such a request is counted first (`count_tokens`), at most once per resume or
//! wake and when what was added since the last measured turn is a large share of it;
//! over the limit, the run stops at this clean boundary to hand off instead of sending
//! a request the API would refuse. When counting fails, the request goes as before.

use super::{Conversation, Engine};
use crate::model::MessagesRequest;
use serde_json::Value;

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

/// Bytes of the text an entry adds to the prompt (its message's strings): cheap, no
/// serialization, and what grows a conversation (tool results, prompts).
pub fn content_bytes(entry: &Value) -> u64 {
    fn strings(value: &Value) -> u64 {
        match value {
            Value::String(s) => s.len() as u64,
            Value::Array(items) => items.iter().map(strings).sum(),
            Value::Object(map) => map.values().map(strings).sum(),
            _ => 0,
        }
    }
    entry
        .get("message")
        .and_then(|m| m.get("content"))
        .map_or(0, strings)
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
