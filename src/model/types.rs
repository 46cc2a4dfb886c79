//! Request and reply types of the Messages API, as flower uses them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::body::History;

/// The key of the marker object that replaces a tool call's input when the streamed
/// JSON was not a valid object: `{"<key>": "<why>: <snippet>"}`. The engine answers
/// such a call with an error result instead of running it.
pub const INVALID_TOOL_INPUT: &str = "_flower_invalid_input";

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// What the engine asks of a model. `messages` are API messages
/// (`{"role": …, "content": [...]}`), kept serialized ([`History`]), because they
/// come straight from stored transcript entries and are sent again every turn. The client adds `stream: true` and the `cache_control`
/// breakpoints; the serialized body is deterministic for the same request.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u32,
    /// The system prompt (may be empty).
    pub system: String,
    pub messages: History,
    pub tools: Vec<ToolDef>,
    /// Extended thinking; `None` sends no `thinking` field.
    pub thinking: Option<Thinking>,
}

/// How the model is asked to think before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// `{"type": "enabled", "budget_tokens": N}`; N ≥ 1024 and below `max_tokens`.
    Budget(u32),
    /// `{"type": "adaptive"}`: models that choose their own budget.
    Adaptive,
}

impl Thinking {
    /// The request's `thinking` field.
    pub fn to_json(self) -> Value {
        match self {
            Thinking::Budget(budget) => {
                serde_json::json!({"type": "enabled", "budget_tokens": budget})
            }
            Thinking::Adaptive => serde_json::json!({"type": "adaptive"}),
        }
    }
}

/// Token usage as the API reports it (`message_start` then cumulative `message_delta`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// The context size of a turn: everything the model read plus what it wrote.
    /// Saturating, as [`add`](Self::add): the counts come from a server or a stored
    /// transcript, and absurd ones must not panic the harness.
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.output_tokens)
    }

    /// Adds another turn's usage to a running total.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
    }
}

/// A finished assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The API's message id (`msg_…`).
    pub id: String,
    pub model: String,
    /// Content blocks exactly as the API sent them (text, thinking with its signature,
    /// tool_use with its parsed input), ready to be stored and sent back unchanged.
    pub content: Vec<Value>,
    pub stop_reason: Option<String>,
    /// The API's `stop_details` (e.g. why a `refusal` happened), when it sent some.
    pub stop_details: Option<Value>,
    pub usage: Usage,
}

/// Progress while a reply streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamDelta<'a> {
    Text(&'a str),
    Thinking(&'a str),
    /// A tool call began; its input is still streaming.
    ToolUseStart {
        id: &'a str,
        name: &'a str,
    },
}
