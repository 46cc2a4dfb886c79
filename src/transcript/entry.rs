//! A transcript entry, typed: one line of Claude Code's JSONL. The fields flower reads
//! and writes are typed; every other field, and the order of all of them, is kept
//! ([`crate::content::object`]), so a line read and written again is the same bytes.

use super::loaded::Kind;
use super::markers;
use crate::content::object::object;
use crate::content::{Block, Content, Raw, ToolUseBlock};

object! {
    /// One transcript entry (a line of the JSONL file, a row of a store).
    pub struct Entry {
        /// `user`, `assistant`, `system`, or one flower does not send (`attachment`,
        /// `summary`, `file-history-snapshot`, …).
        kind: String = "type",
        uuid: String = "uuid",
        /// The entry this one follows; `null` for the first of a chain.
        parent_uuid: Option<String> = "parentUuid",
        session_id: String = "sessionId",
        timestamp: String = "timestamp",
        cwd: String = "cwd",
        /// A sub-agent's transcript is a side chain.
        is_sidechain: bool = "isSidechain",
        agent_id: String = "agentId",
        /// A `system` entry's kind ([`markers::MEMORY_SUBTYPE`], …, or Claude Code's).
        subtype: String = "subtype",
        /// A `system` entry's text.
        content: String = "content",
        level: String = "level",
        /// The memory files a memory entry's text was read from.
        memory_files: Vec<String> = "memoryFiles",
        /// The MCP tools a session was started with: read by `tools::mcp`.
        mcp_tools: Raw = "mcpTools",
        mcp_failures: Raw = "mcpFailures",
        hook_event: String = "hookEvent",
        hook_subject: String = "hookSubject",
        /// What each hook command did: read by the views that show it.
        hook_runs: Raw = "hookRuns",
        /// How the hooks of a hook entry ended (`ran`, `blocked`, `failed`).
        hook_outcome: String = "hookOutcome",
        is_api_error_message: bool = "isApiErrorMessage",
        is_hook_context: bool = "isHookContext",
        is_continuation: bool = "isContinuation",
        message: Message = "message",
        /// Claude Code's: a user entry the harness wrote (not typed by a person).
        is_meta: bool = "isMeta",
        /// Claude Code's: a user entry holding a compaction's summary.
        is_compact_summary: bool = "isCompactSummary",
        /// Claude Code's session titles and hints (what a session list shows).
        custom_title: String = "customTitle",
        ai_title: String = "aiTitle",
        last_prompt: String = "lastPrompt",
        /// A `summary` entry's text.
        summary: String = "summary",
        git_branch: String = "gitBranch",
        /// A `tag` entry's tag (empty: the tag is cleared).
        tag: String = "tag",
    }
}

object! {
    /// A user or assistant entry's message, as sent to (or received from) the API.
    pub struct Message {
        id: String = "id",
        kind: String = "type",
        role: String = "role",
        model: String = "model",
        content: Content = "content",
        /// `null` while a reply streams (Claude Code writes those entries too).
        stop_reason: Option<String> = "stop_reason",
        stop_sequence: Option<String> = "stop_sequence",
        usage: MessageUsage = "usage",
        /// Why a reply stopped, in detail (a refusal's category): carried.
        stop_details: Raw = "stop_details",
    }
}

object! {
    /// An assistant message's `usage`.
    pub struct MessageUsage {
        input_tokens: u64 = "input_tokens",
        output_tokens: u64 = "output_tokens",
        cache_creation_input_tokens: u64 = "cache_creation_input_tokens",
        cache_read_input_tokens: u64 = "cache_read_input_tokens",
        /// Server tool requests of the turn: read as [`crate::model::Usage`] reads it.
        server_tool_use: Raw = "server_tool_use",
    }
}

/// What a `system` entry flower writes holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum System<'a> {
    /// The memory text a session was started with, and the files it came from.
    Memory { text: &'a str, files: &'a [String] },
    /// The MCP tools a session was started with, and the servers that failed.
    McpTools {
        tools: Option<&'a Raw>,
        failures: Option<&'a Raw>,
    },
    /// What hooks did.
    Hook {
        event: Option<&'a str>,
        subject: Option<&'a str>,
        runs: Option<&'a Raw>,
    },
    /// Another subtype (Claude Code's `api_error`, `turn_duration`, …), or none.
    Other(Option<&'a str>),
}

impl Entry {
    /// Reads one line (or stored row).
    pub fn parse(json: &str) -> Result<Entry, serde_json::Error> {
        Entry::from_json_str(json)
    }

    /// The entry as one line of JSON (no newline).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// The entry as copied into a fork of its session: `sessionId` the fork's, and
    /// `forkedFrom` the session it was copied from (each set in its place if the entry
    /// has it, at the end otherwise).
    pub fn forked(mut self, session_id: &str, from: &str) -> Entry {
        self.session_id = Some(session_id.to_string());
        self.rest.insert("forkedFrom", Raw::of_tree(from));
        self
    }

    /// Which of the kinds flower tells apart it is.
    pub fn kind(&self) -> Kind {
        Kind::of(self.kind.as_deref())
    }

    pub fn uuid(&self) -> Option<&str> {
        self.uuid.as_deref()
    }

    pub fn is_sidechain(&self) -> bool {
        self.is_sidechain == Some(true)
    }

    /// The message's blocks (none for a string content or no message).
    pub fn blocks(&self) -> &[Block] {
        self.content().map_or(&[], Content::blocks)
    }

    /// The message's content.
    pub fn content(&self) -> Option<&Content> {
        self.message.as_ref()?.content.as_ref()
    }

    /// The `tool_use` blocks of the message.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUseBlock> {
        self.blocks().iter().filter_map(|b| match b {
            Block::ToolUse(call) => Some(call),
            _ => None,
        })
    }

    /// Whether it is an assistant reply that ended in `stop_reason: refusal`: it is kept
    /// in the database but never fed back (replaying it only invites another refusal).
    pub fn is_refusal(&self) -> bool {
        self.message
            .as_ref()
            .and_then(|m| m.stop_reason.as_ref())
            .and_then(Option::as_deref)
            == Some("refusal")
    }

    /// Whether it is a synthetic API-error message a harness wrote
    /// ([`markers::API_ERROR_FLAG`], or the model [`markers::SYNTHETIC_MODEL`]).
    pub fn is_synthetic_error(&self) -> bool {
        self.is_api_error_message == Some(true)
            || self.message.as_ref().and_then(|m| m.model.as_deref())
                == Some(markers::SYNTHETIC_MODEL)
    }

    /// The usage of an assistant turn the model really sent: `None` for other entries,
    /// synthetic API errors and assistant entries without one. What the context size
    /// of a session's last turn is read from.
    pub fn turn_usage(&self) -> Option<&MessageUsage> {
        if self.kind() != Kind::Assistant || self.is_synthetic_error() {
            return None;
        }
        self.message.as_ref()?.usage.as_ref()
    }

    /// What a `system` entry holds; `None` for other entries.
    pub fn system(&self) -> Option<System<'_>> {
        if self.kind() != Kind::System {
            return None;
        }
        Some(match self.subtype.as_deref() {
            Some(markers::MEMORY_SUBTYPE) => System::Memory {
                text: self.content.as_deref().unwrap_or_default(),
                files: self.memory_files.as_deref().unwrap_or_default(),
            },
            Some(markers::MCP_TOOLS_SUBTYPE) => System::McpTools {
                tools: self.mcp_tools.as_ref(),
                failures: self.mcp_failures.as_ref(),
            },
            Some(markers::HOOK_SUBTYPE) => System::Hook {
                event: self.hook_event.as_deref(),
                subject: self.hook_subject.as_deref(),
                runs: self.hook_runs.as_ref(),
            },
            other => System::Other(other),
        })
    }
}

impl MessageUsage {
    /// As the model layer counts it.
    pub fn to_model(&self) -> crate::model::Usage {
        crate::model::Usage {
            input_tokens: self.input_tokens.unwrap_or_default(),
            output_tokens: self.output_tokens.unwrap_or_default(),
            cache_creation_input_tokens: self.cache_creation_input_tokens.unwrap_or_default(),
            cache_read_input_tokens: self.cache_read_input_tokens.unwrap_or_default(),
            server_tool_use: self
                .server_tool_use
                .as_ref()
                .and_then(|raw| raw.parse().ok())
                .unwrap_or_default(),
        }
    }
}
