//! Content blocks: what a message's `content` (and a tool result's) is made of, typed
//! per block type; a block of a type flower does not know is kept as written
//! ([`Block::Unknown`]). Below the model layer: a reply streams in as these blocks,
//! the transcript stores them, a request sends them back.

pub mod input;
pub mod object;

pub use input::ToolInput;
use object::Fields;
pub(crate) use object::object;
pub use object::{Order, Raw, RawObject};
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The field naming a block's type.
const TAG: &str = "type";

/// A message's (or a tool result's) `content`: a string, or blocks.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

impl Content {
    /// The blocks; a string content has none (see [`Content::text`]).
    pub fn blocks(&self) -> &[Block] {
        match self {
            Content::Text(_) => &[],
            Content::Blocks(blocks) => blocks,
        }
    }

    /// The text: a string content, or its text blocks joined.
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Blocks(blocks) => blocks.iter().filter_map(Block::text).collect(),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(text) => serializer.serialize_str(text),
            Content::Blocks(blocks) => blocks.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContentVisitor { one_pass: false })
    }
}

/// Reads a content: a string, or blocks, each read by `Block`'s `Deserialize` (from
/// its text) or in one pass ([`object::Typed::read_one_pass`]).
struct ContentVisitor {
    one_pass: bool,
}

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or a list of blocks")
    }
    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Content, E> {
        Ok(Content::Text(text.to_string()))
    }
    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Content, E> {
        Ok(Content::Text(text))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
        let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(1));
        loop {
            let block = if self.one_pass {
                seq.next_element_seed(object::OnePass::<Block>::new())?
            } else {
                seq.next_element::<Block>()?
            };
            match block {
                Some(block) => blocks.push(block),
                None => return Ok(Content::Blocks(blocks)),
            }
        }
    }
}

/// One content block.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(TextBlock),
    Thinking(ThinkingBlock),
    RedactedThinking(RedactedThinkingBlock),
    ToolUse(ToolUseBlock),
    ToolResult(ToolResultBlock),
    /// A call of a tool the API runs (web search, web fetch).
    ServerToolUse(ToolUseBlock),
    /// The result of a server tool call (`web_search_tool_result`,
    /// `web_fetch_tool_result`: its `type` says which).
    ServerToolResult(ServerToolResultBlock),
    /// `image` or `document` (its `type` says which).
    Media(MediaBlock),
    /// A block of a type flower does not know (or not an object), as written.
    Unknown(Raw),
}

impl Block {
    /// A text block.
    pub fn text_block(text: &str) -> Block {
        Block::Text(TextBlock {
            kind: Some("text".into()),
            text: Some(text.into()),
            ..TextBlock::default()
        })
    }

    /// A `tool_use` block: a call of one of flower's tools.
    pub fn tool_use(id: &str, name: &str, input: ToolInput) -> Block {
        Block::ToolUse(ToolUseBlock {
            kind: Some("tool_use".into()),
            id: Some(id.into()),
            name: Some(name.into()),
            input: Some(input),
            ..ToolUseBlock::default()
        })
    }

    /// The call, if it is a `tool_use` block (not a server tool's).
    pub fn as_tool_use(&self) -> Option<&ToolUseBlock> {
        match self {
            Block::ToolUse(call) => Some(call),
            _ => None,
        }
    }

    /// The block's `type`, as written (`None` for an unknown block that has none).
    pub fn kind(&self) -> Option<&str> {
        match self {
            Block::Text(b) => b.kind.as_deref(),
            Block::Thinking(b) => b.kind.as_deref(),
            Block::RedactedThinking(b) => b.kind.as_deref(),
            Block::ToolUse(b) | Block::ServerToolUse(b) => b.kind.as_deref(),
            Block::ToolResult(b) => b.kind.as_deref(),
            Block::ServerToolResult(b) => b.kind.as_deref(),
            Block::Media(b) => b.kind.as_deref(),
            Block::Unknown(_) => None,
        }
    }

    /// The `type` of any block, one flower does not know included (`None`: it has
    /// none, or is not an object).
    pub fn type_name(&self) -> Option<String> {
        match self {
            Block::Unknown(raw) => raw.parse::<RawObject>().ok()?.get(TAG)?.parse().ok(),
            known => known.kind().map(str::to_string),
        }
    }

    /// The text of a text block.
    pub fn text(&self) -> Option<&str> {
        match self {
            Block::Text(b) => b.text.as_deref(),
            _ => None,
        }
    }

    /// Whether it is thinking (plain or redacted).
    pub fn is_thinking(&self) -> bool {
        matches!(self, Block::Thinking(_) | Block::RedactedThinking(_))
    }
}

/// The text blocks' text, joined.
pub fn text_of(blocks: &[Block]) -> String {
    blocks.iter().filter_map(Block::text).collect()
}

/// Whether the blocks are thinking and nothing else (a reply cut by `max_tokens` while
/// the model was thinking).
pub fn is_thinking_only(blocks: &[Block]) -> bool {
    blocks.iter().all(Block::is_thinking)
}

impl Serialize for Block {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Block::Text(b) => b.serialize(serializer),
            Block::Thinking(b) => b.serialize(serializer),
            Block::RedactedThinking(b) => b.serialize(serializer),
            Block::ToolUse(b) | Block::ServerToolUse(b) => b.serialize(serializer),
            Block::ToolResult(b) => b.serialize(serializer),
            Block::ServerToolResult(b) => b.serialize(serializer),
            Block::Media(b) => b.serialize(serializer),
            Block::Unknown(raw) => raw.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Read as text first: a block of an unknown type is kept as exactly that.
        let raw = Raw::deserialize(deserializer)?;
        let Ok(fields) = Fields::of_str(raw.get()) else {
            return Ok(Block::Unknown(raw));
        };
        let kind = fields
            .get(TAG)
            .and_then(|t| serde_json::from_str::<String>(t.get()).ok());
        Ok(match kind.as_deref() {
            Some("text") => Block::Text(TextBlock::from_borrowed(fields)),
            Some("thinking") => Block::Thinking(ThinkingBlock::from_borrowed(fields)),
            Some("redacted_thinking") => {
                Block::RedactedThinking(RedactedThinkingBlock::from_borrowed(fields))
            }
            Some("tool_use") => Block::ToolUse(ToolUseBlock::from_borrowed(fields)),
            Some("tool_result") => Block::ToolResult(ToolResultBlock::from_borrowed(fields)),
            Some("server_tool_use") => Block::ServerToolUse(ToolUseBlock::from_borrowed(fields)),
            Some("web_search_tool_result" | "web_fetch_tool_result") => {
                Block::ServerToolResult(ServerToolResultBlock::from_borrowed(fields))
            }
            Some("image" | "document") => Block::Media(MediaBlock::from_borrowed(fields)),
            _ => Block::Unknown(raw),
        })
    }
}

impl object::Typed for Content {
    fn read(raw: &serde_json::value::RawValue) -> Result<Self, serde_json::Error> {
        serde_json::from_str(raw.get())
    }

    fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContentVisitor { one_pass: true })
    }
}

impl object::Typed for Block {
    fn read(raw: &serde_json::value::RawValue) -> Result<Self, serde_json::Error> {
        serde_json::from_str(raw.get())
    }

    /// One pass only for a block whose `type` comes first (as the API, Claude Code and
    /// flower write them) and is one flower knows: the others are read from their text.
    fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Known;
        impl<'de> Visitor<'de> for Known {
            type Value = Block;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a block")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Block, A::Error> {
                match map.next_key::<object::Key<'de>>()? {
                    Some(object::Key(key)) if key == TAG => {}
                    _ => return Err(object::not_one_pass()),
                }
                let kind: String = map.next_value()?;
                // Every block type declares `type` first: field 0.
                macro_rules! rest {
                    ($block:ident) => {{
                        let mut block = $block::default();
                        block.order.push(object::Slot::Typed(0));
                        let mut block = $block::fields_one_pass(block, 1, &mut map)?;
                        block.kind = Some(kind);
                        block
                    }};
                }
                Ok(match kind.as_str() {
                    "text" => Block::Text(rest!(TextBlock)),
                    "thinking" => Block::Thinking(rest!(ThinkingBlock)),
                    "redacted_thinking" => Block::RedactedThinking(rest!(RedactedThinkingBlock)),
                    "tool_use" => Block::ToolUse(rest!(ToolUseBlock)),
                    "tool_result" => Block::ToolResult(rest!(ToolResultBlock)),
                    "server_tool_use" => Block::ServerToolUse(rest!(ToolUseBlock)),
                    "web_search_tool_result" | "web_fetch_tool_result" => {
                        Block::ServerToolResult(rest!(ServerToolResultBlock))
                    }
                    "image" | "document" => Block::Media(rest!(MediaBlock)),
                    _ => return Err(object::not_one_pass()),
                })
            }
        }
        deserializer.deserialize_map(Known)
    }
}

object! {
    /// `{"type":"text","text":…}`.
    pub struct TextBlock {
        kind: String = "type",
        text: String = "text",
        /// Where the text came from (a web search's results, a document); carried.
        citations: Raw = "citations",
        cache_control: Raw = "cache_control",
    }
}

object! {
    /// The model's thinking, with the signature the API checks when it is sent back.
    pub struct ThinkingBlock {
        kind: String = "type",
        thinking: String = "thinking",
        signature: String = "signature",
    }
}

object! {
    /// Thinking the API returned encrypted.
    pub struct RedactedThinkingBlock {
        kind: String = "type",
        data: String = "data",
    }
}

object! {
    /// A tool call (`tool_use`, or `server_tool_use` for a tool the API runs).
    pub struct ToolUseBlock {
        kind: String = "type",
        id: String = "id",
        name: String = "name",
        /// The call's input: read by the tool that runs it, carried as written.
        input: ToolInput = "input",
        cache_control: Raw = "cache_control",
    }
}

object! {
    /// A tool's result, sent back in a user message.
    pub struct ToolResultBlock {
        kind: String = "type",
        tool_use_id: String = "tool_use_id",
        content: Content = "content",
        is_error: bool = "is_error",
        cache_control: Raw = "cache_control",
    }
}

object! {
    /// A server tool's result (web search, web fetch).
    pub struct ServerToolResultBlock {
        kind: String = "type",
        tool_use_id: String = "tool_use_id",
        /// The API's result, sent back as it came.
        content: Raw = "content",
    }
}

object! {
    /// An image or a document (PDF, text).
    pub struct MediaBlock {
        kind: String = "type",
        /// Where the bytes are (base64, URL, file): sent as written.
        source: Raw = "source",
        title: String = "title",
        context: String = "context",
        citations: Raw = "citations",
        cache_control: Raw = "cache_control",
    }
}

impl ToolResultBlock {
    /// The result's text: a string content, or its text blocks joined.
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }
}
