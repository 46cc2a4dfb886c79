//! Transcript entries in Claude Code's JSONL shape (DESIGN.md §4), and how a
//! transcript becomes the `messages` of a Messages API request.
//!
//! Every entry links to its predecessor through `parentUuid`, making one chain from the
//! first prompt to the newest entry (the leaf). [`Chain`] mints entries and tracks the leaf.
//!
//! This is the one owner of the entry format and its marker strings ([`markers`]): the
//! engine writes entries, the stores and pruning read them, and neither spells a marker
//! of its own.

use crate::model::{History, RequestMessage, Role};
use std::borrow::Cow;
use std::path::Path;

mod entry;
mod loaded;
pub mod markers;
mod order;
pub mod tools;

pub use crate::content::{
    Block, Content, MediaBlock, Order, Raw, RawObject, RedactedThinkingBlock,
    ServerToolResultBlock, TextBlock, ThinkingBlock, ToolInput, ToolResultBlock, ToolUseBlock,
};
pub use entry::{Entry, Message, MessageUsage, System};
pub use loaded::{Json, Kind, Loaded};

pub use markers::{INTERRUPTED_TOOL_RESULT, INTERRUPTED_TURN};

/// Mints the entries of one transcript (a session's main chain, or a sub-agent's).
#[derive(Debug, Clone)]
pub struct Chain {
    session_id: String,
    cwd: String,
    leaf: Option<String>,
    /// Sub-agent transcripts are side chains, as in Claude Code.
    sidechain: bool,
    agent_id: Option<String>,
}

impl Chain {
    pub fn new(session_id: &str, cwd: &Path) -> Self {
        Chain {
            session_id: session_id.to_string(),
            cwd: cwd.to_string_lossy().into_owned(),
            leaf: None,
            sidechain: false,
            agent_id: None,
        }
    }

    /// A side chain for a sub-agent (`isSidechain: true`, `agentId`).
    pub fn sidechain(session_id: &str, cwd: &Path, agent_id: &str) -> Self {
        Chain {
            sidechain: true,
            agent_id: Some(agent_id.to_string()),
            ..Chain::new(session_id, cwd)
        }
    }

    /// Continues after an existing entry.
    pub fn with_leaf(mut self, leaf: Option<String>) -> Self {
        self.leaf = leaf;
        self
    }

    pub fn leaf(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// A user entry with the given content (a string or blocks).
    pub fn user(&mut self, content: Content) -> Entry {
        let message = Message {
            role: Some("user".into()),
            content: Some(content),
            ..Message::default()
        };
        self.entry("user", message, Entry::default())
    }

    /// A user entry saying `text` (a string content).
    pub fn user_text(&mut self, text: &str) -> Entry {
        self.user(Content::Text(text.to_string()))
    }

    /// A user entry holding one tool result.
    pub fn tool_result(&mut self, tool_use_id: &str, content: &str, is_error: bool) -> Entry {
        self.tool_result_content(tool_use_id, Content::Text(content.to_string()), is_error)
    }

    /// A user entry holding one tool result whose `content` is a string or blocks
    /// (text and images).
    pub fn tool_result_content(
        &mut self,
        tool_use_id: &str,
        content: Content,
        is_error: bool,
    ) -> Entry {
        let block = Block::ToolResult(ToolResultBlock {
            kind: Some("tool_result".into()),
            tool_use_id: Some(tool_use_id.into()),
            content: Some(content),
            is_error: Some(is_error),
            ..ToolResultBlock::default()
        });
        self.user(Content::Blocks(vec![block]))
    }

    /// A user entry holding text a hook added (context for the model, a Stop hook's
    /// reason to go on), marked so that it is never taken for a prompt.
    pub fn hook_context(&mut self, text: &str) -> Entry {
        let flags = Entry {
            is_hook_context: Some(true),
            ..Entry::default()
        };
        self.entry("user", text_message(text), flags)
    }

    /// A user entry asking the model to go on with its reply cut by `max_tokens`,
    /// marked ([`markers::CONTINUATION_FLAG`]) so that it is never taken for a prompt.
    pub fn continuation(&mut self, text: &str) -> Entry {
        let flags = Entry {
            is_continuation: Some(true),
            ..Entry::default()
        };
        self.entry("user", text_message(text), flags)
    }

    /// A `system` entry (Claude Code's shape: `subtype`, `content`, `level`) with the
    /// fields set in `fields` (the subtype's own: hook runs, memory files, …). Never
    /// sent to the model ([`Messages`] skips it); a link of the chain like any other.
    pub fn system(&mut self, subtype: &str, content: &str, level: &str, fields: Entry) -> Entry {
        let mut entry = self.header("system", fields);
        entry.subtype = Some(subtype.into());
        entry.content = Some(content.into());
        entry.level = Some(level.into());
        entry
    }

    /// The entry pinning the memory text a session was started with; `files` are the
    /// memory files it was read from.
    pub fn memory(&mut self, text: &str, files: &[String]) -> Entry {
        let fields = Entry {
            memory_files: Some(files.to_vec()),
            ..Entry::default()
        };
        self.system(markers::MEMORY_SUBTYPE, text, "info", fields)
    }

    /// The entry pinning the MCP tools a session was started with (`tools`: a list of
    /// [`crate::tools::mcp::McpTool`] as JSON), and the servers that failed to list
    /// theirs then.
    pub fn mcp_tools(&mut self, tools: Raw, failures: Raw) -> Entry {
        let count = tools
            .parse::<Vec<serde::de::IgnoredAny>>()
            .map_or(0, |list| list.len());
        let fields = Entry {
            mcp_tools: Some(tools),
            mcp_failures: Some(failures),
            ..Entry::default()
        };
        self.system(
            markers::MCP_TOOLS_SUBTYPE,
            &format!("{count} MCP tools offered to this session"),
            "info",
            fields,
        )
    }

    /// An assistant entry for a finished model reply.
    pub fn assistant(&mut self, reply: &crate::model::ModelReply) -> Entry {
        let message = Message {
            id: Some(reply.id.clone()),
            kind: Some("message".into()),
            role: Some("assistant".into()),
            model: Some(reply.model.clone()),
            content: Some(Content::Blocks(reply.content.clone())),
            stop_reason: Some(reply.stop_reason.clone()),
            usage: Some(message_usage(&reply.usage)),
            stop_details: reply.stop_details.clone(),
            ..Message::default()
        };
        self.entry("assistant", message, Entry::default())
    }

    /// The synthetic assistant entry Claude Code writes when a request failed. It stays
    /// in the database; the pruning layer keeps it out of what is fed back.
    pub fn api_error(&mut self, text: &str) -> Entry {
        let message = Message {
            id: Some(format!("msg_synthetic_{}", uuid::Uuid::new_v4().simple())),
            kind: Some("message".into()),
            role: Some("assistant".into()),
            model: Some(markers::SYNTHETIC_MODEL.into()),
            content: Some(Content::Blocks(vec![Block::text_block(text)])),
            stop_reason: Some(Some("stop_sequence".into())),
            usage: Some(message_usage(&crate::model::Usage::default())),
            ..Message::default()
        };
        let flags = Entry {
            is_api_error_message: Some(true),
            ..Entry::default()
        };
        self.entry("assistant", message, flags)
    }

    fn entry(&mut self, kind: &str, message: Message, fields: Entry) -> Entry {
        let mut entry = self.header(kind, fields);
        entry.message = Some(message);
        entry
    }

    /// The fields every entry starts with, set on `fields`; the new entry becomes the
    /// leaf. Written in the declaration order of [`Entry`]'s fields: the header first.
    fn header(&mut self, kind: &str, fields: Entry) -> Entry {
        let uuid = uuid::Uuid::new_v4().to_string();
        let entry = Entry {
            kind: Some(kind.into()),
            uuid: Some(uuid.clone()),
            parent_uuid: Some(self.leaf.clone()),
            session_id: Some(self.session_id.clone()),
            timestamp: Some(now_timestamp()),
            cwd: Some(self.cwd.clone()),
            is_sidechain: Some(self.sidechain),
            agent_id: self.agent_id.clone(),
            ..fields
        };
        self.leaf = Some(uuid);
        entry
    }
}

/// A user message of one text block.
fn text_message(text: &str) -> Message {
    Message {
        role: Some("user".into()),
        content: Some(Content::Blocks(vec![Block::text_block(text)])),
        ..Message::default()
    }
}

/// A reply's usage as an entry stores it: its fields as [`crate::model::Usage`] writes
/// them.
fn message_usage(usage: &crate::model::Usage) -> MessageUsage {
    Raw::of_tree(usage).parse().unwrap_or_default()
}

/// `2026-12-02T10:58:16.123Z`, as Claude Code writes timestamps.
pub fn now_timestamp() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// The uuid a resumed main session continues from: that of the last entry that has a
/// uuid and is not on a side chain. A Claude Code transcript ends with lines that have
/// none (`last-prompt`, titles, `file-history-snapshot`), and may hold old sub-agent
/// entries (`isSidechain: true`); continuing from either would break the chain that
/// Claude Code walks back from the leaf. Entries of other types with a uuid
/// (`attachment`, `system`) are links of that chain, so they can be the leaf.
pub fn resume_leaf(entries: &[Entry]) -> Option<&str> {
    entries
        .iter()
        .rev()
        .filter(|e| !e.is_sidechain())
        .find_map(Entry::uuid)
}

/// [`resume_leaf`] of a loaded transcript (entries parsed from the newest back, until
/// one has the leaf).
pub fn resume_leaf_loaded(entries: &[Loaded]) -> Option<String> {
    entries.iter().rev().find_map(|e| {
        let entry = e.json.entry()?;
        resume_leaf(std::slice::from_ref(&entry)).map(str::to_string)
    })
}

/// What `pick` takes from the first main-chain `system` entry of a loaded transcript
/// with this subtype where it finds something.
fn first_system<T>(
    entries: &[Loaded],
    subtype: &str,
    pick: impl Fn(Entry) -> Option<T>,
) -> Option<T> {
    entries
        .iter()
        .filter(|e| e.kind == Kind::System)
        .filter_map(|e| e.json.entry())
        .filter(|e| e.subtype.as_deref() == Some(subtype) && !e.is_sidechain())
        .find_map(pick)
}

/// The memory text a session was started with: that of its first memory entry
/// ([`Chain::memory`]); `None` when it has none (a session begun before memory existed,
/// or imported from Claude Code: it goes on without, as it began).
pub fn pinned_memory(entries: &[Loaded]) -> Option<String> {
    first_system(entries, markers::MEMORY_SUBTYPE, |e| e.content)
}

/// The MCP tools a session was started with: those of its first MCP entry
/// ([`Chain::mcp_tools`]), as written; `None` when it has none (a session begun
/// without MCP servers goes on without, as it began).
pub fn pinned_mcp_tools(entries: &[Loaded]) -> Option<Raw> {
    first_system(entries, markers::MCP_TOOLS_SUBTYPE, |e| e.mcp_tools)
}

/// Builds API messages from transcript entries, incrementally: consecutive entries of
/// the same role merge into one message (Claude Code stores one tool result per entry,
/// and may split one assistant message over several entries). Held serialized
/// ([`History`]): the request body is built from it by concatenation.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    history: History,
    /// The call ids of the newest assistant message: the order its results are sent in.
    calls: Vec<String>,
}

impl Messages {
    /// The messages of a loaded transcript: the content of an entry kept
    /// as its stored text goes into the history as that text (when it is what
    /// serializing it gives, [`crate::model::canonical::is_canonical`]), never built
    /// as a tree; each entry is dropped once its message is sealed.
    pub fn from_loaded(entries: impl IntoIterator<Item = Loaded>) -> Self {
        let mut gather = Gather::default();
        for entry in entries {
            gather.push(entry);
        }
        gather.finish()
    }

    /// Adds an entry (one [`Chain`] minted, or one read back); entries that are not
    /// user or assistant messages are skipped. A string content goes in as one text
    /// block.
    pub fn push_entry(&mut self, entry: Entry) {
        if !matches!(entry.kind(), Kind::User | Kind::Assistant) {
            return;
        }
        let Some(Message {
            role: Some(role),
            content: Some(content),
            ..
        }) = entry.message
        else {
            return;
        };
        let Some(role) = Role::parse(&role) else {
            return;
        };
        let blocks = match content {
            Content::Text(text) => vec![Block::text_block(&text)],
            Content::Blocks(blocks) => blocks,
        };
        self.add(role, blocks);
    }

    fn add(&mut self, role: Role, mut blocks: Vec<Block>) {
        if blocks.is_empty() {
            return;
        }
        let assistant = role == Role::Assistant;
        let call_id = |b: &Block| b.as_tool_use().and_then(|call| call.id.clone());
        let result_id = |b: &Block| match b {
            Block::ToolResult(result) => result.tool_use_id.clone(),
            _ => None,
        };
        if let Some(last) = self.history.last_mut()
            && last.role == role
            && let Content::Blocks(content) = &mut last.content
        {
            if assistant {
                self.calls.extend(blocks.iter().filter_map(call_id));
            }
            content.extend(blocks);
            if !assistant {
                order::order_results(content, &self.calls, result_id);
            }
            return;
        }
        if assistant {
            self.calls = blocks.iter().filter_map(call_id).collect();
        } else {
            order::order_results(&mut blocks, &self.calls, result_id);
        }
        // A reply of thinking only (cut by max_tokens before it wrote anything) stays in
        // the transcript but is not sent: the API refuses an assistant message whose
        // last block is thinking. The user turns around it then go as two in a row,
        // which the API takes as one.
        if let Some(last) = self.history.last()
            && last.role == Role::Assistant
            && let Content::Blocks(content) = &last.content
            && crate::content::is_thinking_only(content)
        {
            self.history.drop_last();
        }
        self.history.push(RequestMessage::blocks(role, blocks));
    }

    /// The messages, serialized.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Moves the messages out (leaving none), e.g. into a request, without copying
    /// them; give them back with [`Messages::restore`].
    pub fn take(&mut self) -> History {
        std::mem::take(&mut self.history)
    }

    /// Puts back what [`Messages::take`] took.
    pub fn restore(&mut self, history: History) {
        self.history = history;
    }

    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }
}

/// The message [`Messages::from_loaded`] is gathering: consecutive entries of one role.
#[derive(Default)]
struct Gather {
    messages: Messages,
    role: Option<Role>,
    /// The blocks' JSON, comma-separated.
    text: String,
    /// Where each block is in `text`.
    parts: Vec<(usize, usize)>,
    blocks: usize,
    /// The entries it is made of, until it is sealed: the newest message stays typed
    /// (the next entry of its role joins it), built from them.
    entries: Vec<Loaded>,
}

impl Gather {
    fn push(&mut self, entry: Loaded) {
        if !matches!(entry.kind, Kind::User | Kind::Assistant) {
            return;
        }
        let Some((role, blocks)) = sendable_json(&entry.json) else {
            return;
        };
        // A role the API does not take is skipped (`Messages::push_entry` too).
        let Some(role) = Role::parse(&role) else {
            return;
        };
        if blocks.is_empty() {
            return;
        }
        let assistant = role == Role::Assistant;
        if self.role != Some(role) {
            self.seal();
            self.role = Some(role);
            if assistant {
                self.messages.calls.clear();
            }
        }
        for block in blocks {
            if self.blocks > 0 {
                self.text.push(',');
            }
            if assistant && let Some(id) = order::call_id_of_text(&block) {
                self.messages.calls.push(id);
            }
            let start = self.text.len();
            self.text.push_str(&block);
            self.parts.push((start, self.text.len()));
            self.blocks += 1;
        }
        self.entries.push(entry);
    }

    fn seal(&mut self) {
        let Some(role) = self.role.take() else { return };
        if role == Role::User
            && let Some(ordered) =
                order::order_result_texts(&self.text, &self.parts, &self.messages.calls)
        {
            self.text = ordered;
        }
        self.parts.clear();
        // A reply of thinking only is not sent when a message follows (`Messages::add`);
        // a block of that type spells the word.
        let thinking_only = role == Role::Assistant
            && self.text.contains("thinking")
            && serde_json::from_str::<Vec<Block>>(&format!("[{}]", self.text))
                .is_ok_and(|blocks| crate::content::is_thinking_only(&blocks));
        if !thinking_only {
            // Serializing a role cannot fail.
            let role_json = serde_json::to_string(&role).unwrap_or_default();
            let json = format!(r#"{{"role":{role_json},"content":[{}]}}"#, self.text);
            self.messages
                .history
                .push_sealed(json, role == Role::Assistant, self.blocks);
        }
        self.text.clear();
        self.blocks = 0;
        self.entries.clear();
    }

    fn finish(mut self) -> Messages {
        for entry in std::mem::take(&mut self.entries) {
            if let Some(entry) = entry.json.entry() {
                self.messages.push_entry(entry);
            }
        }
        self.messages
    }
}

/// The role of a user or assistant entry's message, and its content blocks' JSON as
/// serializing them gives it (a string content is one text block): sliced from the
/// entry's text when that is exact, serialized from the parsed entry otherwise.
fn sendable_json(json: &Json) -> Option<(Cow<'_, str>, Vec<Cow<'_, str>>)> {
    use crate::model::canonical::is_canonical;
    if let Ok(view) = serde_json::from_str::<EntryView<'_>>(json.text())
        && matches!(view.kind.as_deref(), Some("user" | "assistant"))
    {
        let message = view.message?;
        let role = message.role?;
        let content = message.content?.get();
        let blocks = match content.as_bytes().first() {
            Some(b'"') if is_canonical(content) => Some(vec![Cow::Owned(format!(
                r#"{{"type":"text","text":{content}}}"#
            ))]),
            Some(b'[') => serde_json::from_str::<Vec<&serde_json::value::RawValue>>(content)
                .ok()
                .map(|list| list.into_iter().map(|b| b.get()).collect::<Vec<_>>())
                .filter(|list| list.iter().all(|b| is_canonical(b)))
                .map(|list| list.into_iter().map(Cow::Borrowed).collect()),
            Some(b'"') => None,
            // Nothing the API takes (`Messages::push` skips it too).
            _ => return None,
        };
        if let Some(blocks) = blocks {
            return Some((role, blocks));
        }
    }
    // Anything else as `Messages::push_entry` reads it: each block as serializing it
    // as a `Value` gives it.
    let entry = json.entry()?;
    if !matches!(entry.kind(), Kind::User | Kind::Assistant) {
        return None;
    }
    let message = entry.message?;
    let role = message.role?;
    let blocks = match message.content? {
        Content::Text(text) => vec![Block::text_block(&text)],
        Content::Blocks(blocks) => blocks,
    };
    let blocks = blocks
        .iter()
        .map(|b| Cow::Owned(crate::model::message::canonical_json(b)))
        .collect();
    Some((Cow::Owned(role), blocks))
}

/// The fields of an entry [`sendable_json`] reads, borrowed from its text. A repeated
/// field or one of another type fails, and the entry is read as a `Value` instead.
#[derive(serde::Deserialize)]
struct EntryView<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<MessageView<'a>>,
}

#[derive(serde::Deserialize)]
struct MessageView<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a serde_json::value::RawValue>,
}
