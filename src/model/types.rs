//! Request and reply types of the Messages API, as flower uses them.

use crate::content::{Block, Raw};
use serde::{Deserialize, Serialize};

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
    /// Sent as it is, never read.
    pub input_schema: Raw,
}

/// What the engine asks of a model. `messages` are API messages
/// (`{"role": …, "content": [...]}`), kept serialized ([`History`]), because they
/// come straight from stored transcript entries and are sent again every turn. The client adds `stream: true` and the `cache_control`
/// breakpoints; the serialized body is deterministic for the same request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u32,
    /// The part of the system prompt every agent of a run shares (the project memory),
    /// sent first as its own block with a cache breakpoint, so that each agent's first
    /// request reads it from the cache instead of writing it again (may be empty).
    pub system_shared: String,
    /// The agent's own system prompt, after the shared part (may be empty).
    pub system: String,
    pub messages: History,
    pub tools: Vec<ToolDef>,
    /// Extended thinking; `None` sends no `thinking` field.
    pub thinking: Option<Thinking>,
    /// `output_config: {effort: …}`; `None` sends none (the API's default, `high`).
    pub effort: Option<Effort>,
    /// Tools the API runs itself (web search, web fetch), after `tools`.
    pub server_tools: Vec<ServerTool>,
}

/// How eagerly the model spends tokens (`output_config.effort`): text, tool calls and
/// thinking alike. `high` is the API's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effort {
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl Effort {
    /// Every level, lowest first.
    pub const ALL: [Effort; 5] = [
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::Xhigh,
        Effort::Max,
    ];

    /// The API's name of the level.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }

    /// `low`, `medium`, `high`, `xhigh` or `max` (any case); else `None`.
    pub fn parse(text: &str) -> Option<Effort> {
        let text = text.trim();
        Effort::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(text))
    }
}

impl std::fmt::Display for Effort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `web_search` server tool's version flower sends.
pub const WEB_SEARCH_TOOL: &str = "web_search_20250305";
/// The `web_fetch` server tool's version flower sends.
pub const WEB_FETCH_TOOL: &str = "web_fetch_20250910";
/// The beta header the `web_fetch_20250910` tool needs.
pub const WEB_FETCH_BETA: &str = "web-fetch-2025-09-10";

/// A tool the API runs on its side: no network from flower's process; its calls and
/// results come back as `server_tool_use` and `web_search_tool_result` /
/// `web_fetch_tool_result` blocks in the reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerTool {
    pub kind: ServerToolKind,
    /// At most this many uses per request; `None`: the API's default.
    pub max_uses: Option<u32>,
    /// Only these domains (`allowed_domains`); empty: any not blocked.
    pub allowed_domains: Vec<String>,
    /// Never these domains (`blocked_domains`); the API refuses both lists at once.
    pub blocked_domains: Vec<String>,
}

/// How many uses of each server tool one request allows (`max_uses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebLimits {
    /// `FLOWER_WEB_TOOLS=off`: no agent gets them, whatever its rules (an organization
    /// that has not enabled web search in the Console). Default on.
    pub enabled: bool,
    /// `FLOWER_WEB_SEARCH_MAX_USES`, default [`WebLimits::DEFAULT_MAX_USES`].
    pub search_max_uses: u32,
    /// `FLOWER_WEB_FETCH_MAX_USES`, default [`WebLimits::DEFAULT_MAX_USES`].
    pub fetch_max_uses: u32,
}

impl WebLimits {
    /// Uses per request of each web tool unless configured.
    pub const DEFAULT_MAX_USES: u32 = 5;
}

impl Default for WebLimits {
    fn default() -> Self {
        WebLimits {
            enabled: true,
            search_max_uses: WebLimits::DEFAULT_MAX_USES,
            fetch_max_uses: WebLimits::DEFAULT_MAX_USES,
        }
    }
}

/// Which server tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerToolKind {
    #[default]
    WebSearch,
    WebFetch,
}

impl ServerTool {
    /// The tool's entry in the request's `tools`, with a cache breakpoint when
    /// `cache_control` is given.
    pub fn wire<'a, C: Serialize + 'a>(&'a self, cache_control: Option<C>) -> impl Serialize + 'a {
        /// Field order as the API's examples write it.
        #[derive(Serialize)]
        struct Wire<'a, C> {
            #[serde(rename = "type")]
            kind: &'static str,
            name: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            max_uses: Option<u32>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            allowed_domains: &'a [String],
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            blocked_domains: &'a [String],
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<C>,
        }
        let (kind, name) = match self.kind {
            ServerToolKind::WebSearch => (WEB_SEARCH_TOOL, "web_search"),
            ServerToolKind::WebFetch => (WEB_FETCH_TOOL, "web_fetch"),
        };
        Wire {
            kind,
            name,
            max_uses: self.max_uses,
            allowed_domains: &self.allowed_domains,
            blocked_domains: &self.blocked_domains,
            cache_control,
        }
    }

    /// The beta header value the tool needs, if any.
    pub fn beta(&self) -> Option<&'static str> {
        match self.kind {
            ServerToolKind::WebSearch => None,
            ServerToolKind::WebFetch => Some(WEB_FETCH_BETA),
        }
    }
}

/// How the model is asked to think before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// `{"type": "enabled", "budget_tokens": N}`; N ≥ 1024 and below `max_tokens`.
    Budget(u32),
    /// `{"type": "adaptive"}`: models that choose their own budget.
    Adaptive,
}

/// The request's `thinking` field.
impl Serialize for Thinking {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire {
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            budget_tokens: Option<u32>,
        }
        let wire = match *self {
            Thinking::Budget(budget) => Wire {
                kind: "enabled",
                budget_tokens: Some(budget),
            },
            Thinking::Adaptive => Wire {
                kind: "adaptive",
                budget_tokens: None,
            },
        };
        wire.serialize(serializer)
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
    /// Server tool requests of the turn (`usage.server_tool_use`); left out of the
    /// stored usage when there were none.
    #[serde(default, skip_serializing_if = "ServerToolUsage::is_zero")]
    pub server_tool_use: ServerToolUsage,
}

/// `usage.server_tool_use`: how many server tool requests a turn made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerToolUsage {
    #[serde(default)]
    pub web_search_requests: u64,
    #[serde(default)]
    pub web_fetch_requests: u64,
}

impl ServerToolUsage {
    pub fn is_zero(&self) -> bool {
        self.web_search_requests == 0 && self.web_fetch_requests == 0
    }

    pub fn add(&mut self, other: &ServerToolUsage) {
        self.web_search_requests = self
            .web_search_requests
            .saturating_add(other.web_search_requests);
        self.web_fetch_requests = self
            .web_fetch_requests
            .saturating_add(other.web_fetch_requests);
    }
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
        self.server_tool_use.add(&other.server_tool_use);
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
    pub content: Vec<Block>,
    pub stop_reason: Option<String>,
    /// The API's `stop_details` (e.g. why a `refusal` happened), when it sent some.
    pub stop_details: Option<Raw>,
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
