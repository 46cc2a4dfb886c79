//! Server-sent events, and the Messages API stream built on them.
//!
//! Two pure, incremental state machines, with no I/O so that they can be tested with any
//! split of the bytes:
//! - [`SseParser`] turns arbitrary byte chunks into [`SseEvent`]s, following the
//!   WHATWG event-stream rules: lines end in `\n`, `\r\n` or `\r`; `data:` lines of one
//!   event are joined with `\n`; `:` lines are comments; a blank line dispatches. A chunk
//!   may end anywhere: inside a line, between `\r` and `\n`, inside a UTF-8 character.
//! - [`MessageAssembler`] turns the Messages API events (`message_start`,
//!   `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`) into a
//!   [`ModelReply`], reporting progress through [`StreamDelta`]s as it goes.

use crate::content::{Block, Order, Raw, TextBlock, ThinkingBlock, ToolUseBlock};
use crate::error::Cause;
use crate::model::{ModelError, ModelReply, StreamDelta, Usage};
use serde::Deserialize;
use std::borrow::Cow;

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `"message"` when the event had none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental event-stream parser. Feed it chunks as they arrive; it keeps the
/// incomplete tail (a partial line, a partial UTF-8 character) for the next chunk.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The bytes of the line being read. Lines are decoded only once complete, so a
    /// UTF-8 character split across chunks is never seen in halves.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` at the start of the next one belongs
    /// to that line end and must not count as an empty line.
    skip_lf: bool,
    /// Nothing has been read yet (a leading byte-order mark is dropped).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Parses one chunk and returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.feed_with(chunk, |event| out.push(event));
        out
    }

    /// Like [`SseParser::feed`], handing each completed event to `emit` (no allocation
    /// of a result vector on the hot path).
    pub fn feed_with(&mut self, chunk: &[u8], mut emit: impl FnMut(SseEvent)) {
        let mut rest = chunk;
        if self.skip_lf && !rest.is_empty() {
            self.skip_lf = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let was_cr = rest[pos] == b'\r';
            rest = &rest[pos + 1..];
            if was_cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.process_line(&line) {
                emit(event);
            }
            // Reuse the allocation for the next line.
            self.line = line;
            self.line.clear();
        }
        self.line.extend_from_slice(rest);
    }

    fn process_line(&mut self, raw: &[u8]) -> Option<SseEvent> {
        let mut bytes = raw;
        if !self.started {
            self.started = true;
            if let Some(tail) = bytes.strip_prefix("\u{feff}".as_bytes()) {
                bytes = tail;
            }
        }
        if bytes.is_empty() {
            return self.dispatch();
        }
        if bytes[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(bytes);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let value = &text[i + 1..];
                (&text[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&text[..], ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` concern browser reconnection; unknown fields are ignored.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event: if event.is_empty() {
                "message".to_string()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
        })
    }
}

/// A content block being streamed.
#[derive(Debug)]
enum Streaming {
    Text {
        text: String,
        /// Citations arrive as `citations_delta`s; kept when present.
        citations: Vec<Raw>,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    /// `tool_use` (and `server_tool_use`): the input arrives as JSON fragments.
    ToolUse {
        block: ToolUseBlock,
        json: String,
    },
    /// Anything else (`redacted_thinking`, server tool results, future types): kept as
    /// the start event gave it.
    Verbatim(Block),
    /// Finished (`content_block_stop` seen).
    Done(Block),
}

/// The input of a tool call whose streamed JSON could not be used; see
/// [`crate::model::types::INVALID_TOOL_INPUT`].
fn invalid_input(why: &str, json: &str) -> Result<Raw, serde_json::Error> {
    let marker = [(
        crate::model::types::INVALID_TOOL_INPUT,
        format!("{why}: {}", snippet(json)),
    )];
    Raw::of(&std::collections::BTreeMap::from(marker))
}

/// A block read from an event, its JSON written again as `serde_json` writes it (no
/// whitespace): what is stored and sent back does not depend on how the server
/// spaced its events.
fn compact<T: serde::de::DeserializeOwned>(tree: &impl serde::Serialize) -> Result<T, ModelError> {
    serde_json::to_string(tree)
        .and_then(|text| serde_json::from_str(&text))
        .map_err(|e| ModelError::protocol_because("a block that cannot be read", e))
}

impl Streaming {
    fn start(block: Block) -> Streaming {
        match block {
            Block::Text(b) => Streaming::Text {
                text: b.text.unwrap_or_default(),
                citations: Vec::new(),
            },
            Block::Thinking(b) => Streaming::Thinking {
                thinking: b.thinking.unwrap_or_default(),
                signature: b.signature.unwrap_or_default(),
            },
            Block::ToolUse(mut block) | Block::ServerToolUse(mut block) => {
                // The start event carries `"input": {}`; the real input streams after.
                block.input = None;
                Streaming::ToolUse {
                    block,
                    json: String::new(),
                }
            }
            other => Streaming::Verbatim(other),
        }
    }

    /// The block as the API accepts it back in a later request.
    fn finish(self) -> Result<Block, ModelError> {
        let serialize = |e| ModelError::protocol_because("a block that cannot be written", e);
        Ok(match self {
            Streaming::Text { text, citations } => Block::Text(TextBlock {
                kind: Some("text".into()),
                text: Some(text),
                citations: if citations.is_empty() {
                    None
                } else {
                    Some(Raw::of(&citations).map_err(serialize)?)
                },
                ..TextBlock::default()
            }),
            Streaming::Thinking {
                thinking,
                signature,
            } => Block::Thinking(ThinkingBlock {
                kind: Some("thinking".into()),
                thinking: Some(thinking),
                signature: Some(signature),
                ..ThinkingBlock::default()
            }),
            Streaming::ToolUse { mut block, json } => {
                // Input that is not a JSON object (a reply cut by max_tokens mid-call)
                // is the model's mistake, not the stream's: the call is kept, its input
                // replaced by a marker object the engine answers with an error result,
                // and the session goes on. A good input is written again compactly.
                let input = if json.trim().is_empty() {
                    Raw::from_text("{}".into())
                } else {
                    // Parsed to check it is an object and to write it canonically.
                    match serde_json::from_str::<serde_json::Value>(&json) {
                        Ok(value @ serde_json::Value::Object(_)) => Raw::of(&value),
                        Ok(_) => invalid_input("not a JSON object", &json),
                        Err(e) => invalid_input(&e.to_string(), &json),
                    }
                };
                block.input = Some(input.map_err(serialize)?);
                // Canonical key order (type, id, name, input), whatever the server sent.
                block.order = Order::default();
                match block.kind.as_deref() {
                    Some("server_tool_use") => Block::ServerToolUse(block),
                    _ => Block::ToolUse(block),
                }
            }
            Streaming::Verbatim(block) | Streaming::Done(block) => block,
        })
    }
}

/// The fields of a `message_start` event flower reads.
#[derive(Deserialize)]
struct MessageStartEvent {
    message: Option<MessageStart>,
}

#[derive(Deserialize)]
struct MessageStart {
    id: Option<String>,
    model: Option<String>,
    stop_reason: Option<String>,
    usage: Option<UsageFields>,
}

/// A `content_block_start` event.
#[derive(Deserialize)]
struct BlockStartEvent {
    index: Option<serde_json::Number>,
    /// Read as a tree to be written again compactly ([`compact`]).
    content_block: Option<serde_json::Value>,
}

/// A `content_block_delta` event: the text pieces borrowed from the event's data
/// where they need no unescaping.
#[derive(Deserialize)]
struct BlockDeltaEvent<'a> {
    index: Option<serde_json::Number>,
    #[serde(borrow)]
    delta: Option<BlockDelta<'a>>,
}

#[derive(Deserialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow)]
    partial_json: Option<Cow<'a, str>>,
    /// Read as a tree to be written again compactly ([`compact`]).
    citation: Option<serde_json::Value>,
}

/// A `content_block_stop` event.
#[derive(Deserialize)]
struct BlockStopEvent {
    index: Option<serde_json::Number>,
}

/// A `message_delta` event.
#[derive(Deserialize)]
struct MessageDeltaEvent {
    delta: Option<MessageDelta>,
    usage: Option<UsageFields>,
}

#[derive(Deserialize)]
struct MessageDelta {
    stop_reason: Option<String>,
    /// Carried to the refusal error as the API wrote it (`null` is none).
    stop_details: Option<serde_json::Value>,
}

/// An `error` event: `{"type":"error","error":{"type":…,"message":…}}`, or the error's
/// fields at the top.
#[derive(Deserialize)]
struct ErrorEvent {
    error: Option<ErrorFields>,
    #[serde(flatten)]
    top: ErrorFields,
}

#[derive(Deserialize)]
struct ErrorFields {
    #[serde(rename = "type", default, deserialize_with = "string_or_none")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "string_or_none")]
    message: Option<String>,
}

/// A string, or `None` for a value of any other type.
fn string_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct AnyString;
    impl<'de> serde::de::Visitor<'de> for AnyString {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Option<String>, E> {
            Ok(Some(text.to_string()))
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<String>, E> {
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Option<String>, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Option<String>, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }
    }
    d.deserialize_any(AnyString)
}

/// The `usage` fields of `message_start` and `message_delta`; absent or `null` ones
/// leave the count as it was.
#[derive(Deserialize)]
struct UsageFields {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    server_tool_use: Option<ServerUsageFields>,
}

#[derive(Deserialize)]
struct ServerUsageFields {
    web_search_requests: Option<u64>,
    web_fetch_requests: Option<u64>,
}

/// Only an event's `type` (for a server that sends bare `data:` lines).
#[derive(Deserialize)]
struct EventType<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
}

/// Assembles one streamed Messages API reply from its events.
///
/// Feed every [`SseEvent`] to [`MessageAssembler::handle`]; after the stream ends, call
/// [`MessageAssembler::finish`], which succeeds only if `message_stop` was seen.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    id: String,
    model: String,
    /// Indexed by the API's block `index`.
    blocks: Vec<Option<Streaming>>,
    stop_reason: Option<String>,
    stop_details: Option<Raw>,
    usage: Usage,
    started: bool,
    stopped: bool,
    events: usize,
}

/// The data of a known event, read as `T`.
fn data_of<'a, T: Deserialize<'a>>(event: &'a SseEvent, kind: &str) -> Result<T, ModelError> {
    serde_json::from_str(&event.data).map_err(|e| {
        let why = format!(
            "{kind} event: data is not JSON of its shape ({e}): {}",
            snippet(&event.data)
        );
        ModelError::protocol_because(why, e)
    })
}

impl MessageAssembler {
    pub fn new() -> Self {
        MessageAssembler::default()
    }

    /// Whether `message_stop` has arrived (the reply is complete).
    pub fn is_complete(&self) -> bool {
        self.stopped
    }

    /// How many events were handled (for error messages).
    pub fn events_seen(&self) -> usize {
        self.events
    }

    /// Handles one event. Unknown events are ignored; an `error` event, malformed JSON
    /// in a known event or a block protocol violation is an error.
    pub fn handle(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> Result<(), ModelError> {
        self.events += 1;
        // The Anthropic stream names each event twice (`event:` and `data.type`); the
        // event name wins, the data type covers a server that sends bare `data:` lines.
        let bare;
        let kind = if event.event == "message" {
            bare = serde_json::from_str::<EventType<'_>>(&event.data)
                .ok()
                .and_then(|t| t.kind);
            bare.as_deref().unwrap_or("message")
        } else {
            event.event.as_str()
        };
        match kind {
            "message_start" => self.message_start(data_of(event, kind)?),
            "content_block_start" => self.block_start(data_of(event, kind)?, on_delta),
            "content_block_delta" => self.block_delta(data_of(event, kind)?, on_delta),
            "content_block_stop" => self.block_stop(data_of(event, kind)?),
            "message_delta" => {
                let data: MessageDeltaEvent = data_of(event, kind)?;
                if let Some(delta) = data.delta {
                    if let Some(reason) = delta.stop_reason {
                        self.stop_reason = Some(reason);
                    }
                    if let Some(details) = &delta.stop_details {
                        self.stop_details = Some(compact(&details)?);
                    }
                }
                if let Some(usage) = &data.usage {
                    merge_usage(&mut self.usage, usage);
                }
                Ok(())
            }
            "message_stop" => {
                let _: serde::de::IgnoredAny = data_of(event, kind)?;
                self.stopped = true;
                Ok(())
            }
            "error" => {
                let data: ErrorEvent = data_of(event, kind)?;
                let error = data.error.unwrap_or(data.top);
                Err(ModelError::Api {
                    status: None,
                    kind: error.kind.unwrap_or_else(|| "error".into()),
                    message: error.message.unwrap_or_else(|| snippet(&event.data)),
                    retry_after: None,
                })
            }
            // `ping` and event types added to the API later.
            _ => Ok(()),
        }
    }

    fn message_start(&mut self, data: MessageStartEvent) -> Result<(), ModelError> {
        let message = data
            .message
            .ok_or_else(|| ModelError::protocol("message_start without message"))?;
        self.started = true;
        if let Some(id) = message.id {
            self.id = id;
        }
        if let Some(model) = message.model {
            self.model = model;
        }
        if let Some(reason) = message.stop_reason {
            self.stop_reason = Some(reason);
        }
        if let Some(usage) = &message.usage {
            merge_usage(&mut self.usage, usage);
        }
        Ok(())
    }

    fn block_start(
        &mut self,
        data: BlockStartEvent,
        on_delta: &mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> Result<(), ModelError> {
        let index = block_index(data.index.as_ref(), "content_block_start")?;
        let block = data
            .content_block
            .ok_or_else(|| ModelError::protocol("content_block_start without block"))?;
        if self.blocks.len() <= index {
            self.blocks.resize_with(index + 1, || None);
        }
        let started = Streaming::start(compact(&block)?);
        if let Streaming::ToolUse { block, .. } = &started
            && block.kind.as_deref() == Some("tool_use")
        {
            on_delta(StreamDelta::ToolUseStart {
                id: block.id.as_deref().unwrap_or_default(),
                name: block.name.as_deref().unwrap_or_default(),
            });
        }
        if let Streaming::Text { text, .. } = &started
            && !text.is_empty()
        {
            on_delta(StreamDelta::Text(text));
        }
        self.blocks[index] = Some(started);
        Ok(())
    }

    fn block_delta(
        &mut self,
        data: BlockDeltaEvent<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> Result<(), ModelError> {
        let index = block_index(data.index.as_ref(), "content_block_delta")?;
        let Some(block) = self.blocks.get_mut(index).and_then(Option::as_mut) else {
            return Err(ModelError::protocol(format!(
                "content_block_delta for block {index}, which was never started"
            )));
        };
        let Some(delta) = data.delta else {
            return Err(ModelError::protocol("content_block_delta without delta"));
        };
        match (delta.kind.as_deref(), block) {
            (Some("text_delta"), Streaming::Text { text, .. }) => {
                let part = delta.text.as_deref().unwrap_or_default();
                text.push_str(part);
                on_delta(StreamDelta::Text(part));
            }
            (Some("citations_delta"), Streaming::Text { citations, .. }) => {
                if let Some(c) = &delta.citation {
                    citations.push(compact(c)?);
                }
            }
            (Some("thinking_delta"), Streaming::Thinking { thinking, .. }) => {
                let part = delta.thinking.as_deref().unwrap_or_default();
                thinking.push_str(part);
                on_delta(StreamDelta::Thinking(part));
            }
            (Some("signature_delta"), Streaming::Thinking { signature, .. }) => {
                signature.push_str(delta.signature.as_deref().unwrap_or_default());
            }
            (Some("input_json_delta"), Streaming::ToolUse { json, .. }) => {
                json.push_str(delta.partial_json.as_deref().unwrap_or_default());
            }
            (Some(kind), Streaming::Done(_)) => {
                return Err(ModelError::protocol(format!(
                    "{kind} for block {index} after its content_block_stop"
                )));
            }
            // A delta this client does not know, or one that does not fit the block: the
            // block is kept as started rather than guessing what the delta means.
            _ => {}
        }
        Ok(())
    }

    fn block_stop(&mut self, data: BlockStopEvent) -> Result<(), ModelError> {
        let index = block_index(data.index.as_ref(), "content_block_stop")?;
        let slot = self.blocks.get_mut(index).ok_or_else(|| {
            ModelError::protocol(format!("content_block_stop for unknown block {index}"))
        })?;
        match slot.take() {
            Some(block) => {
                *slot = Some(Streaming::Done(block.finish()?));
                Ok(())
            }
            None => Err(ModelError::protocol(format!(
                "content_block_stop for unknown block {index}"
            ))),
        }
    }

    /// The finished reply; [`ModelError::Incomplete`] unless `message_stop` arrived.
    /// `why` says how the stream ended (for the error message).
    pub fn finish(self, why: &str) -> Result<ModelReply, ModelError> {
        self.finish_cut(why, None)
    }

    /// [`finish`](Self::finish) after the connection broke with `cause`, which `why`
    /// quotes: an incomplete reply keeps it as its source.
    pub fn finish_broken(
        self,
        why: &str,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Result<ModelReply, ModelError> {
        self.finish_cut(why, Some(Cause::new(cause)))
    }

    fn finish_cut(self, why: &str, cause: Option<Cause>) -> Result<ModelReply, ModelError> {
        if !self.stopped {
            let why = format!(
                "{why} after {} events{}",
                self.events,
                if self.started {
                    ""
                } else {
                    ", before message_start"
                }
            );
            return Err(ModelError::Incomplete { why, cause });
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.into_iter().flatten() {
            let block = block.finish()?;
            // The API refuses empty text blocks in a request; one can only be noise.
            if let Block::Text(text) = &block
                && text.text.as_deref() == Some("")
                && text.citations.is_none()
            {
                continue;
            }
            content.push(block);
        }
        Ok(ModelReply {
            id: self.id,
            model: self.model,
            content,
            stop_reason: self.stop_reason,
            stop_details: self.stop_details,
            usage: self.usage,
        })
    }
}

fn block_index(index: Option<&serde_json::Number>, event: &str) -> Result<usize, ModelError> {
    index
        .and_then(serde_json::Number::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        // A bound on the index keeps a hostile server from making us allocate wildly.
        .filter(|&i| i < 100_000)
        .ok_or_else(|| ModelError::protocol(format!("{event} without a valid index")))
}

/// Overwrites the usage fields present (and not null); the others keep their value.
/// `message_delta` counts are cumulative, so overwriting is right.
fn merge_usage(usage: &mut Usage, fields: &UsageFields) {
    let set = |to: &mut u64, from: Option<u64>| {
        if let Some(n) = from {
            *to = n;
        }
    };
    set(&mut usage.input_tokens, fields.input_tokens);
    set(&mut usage.output_tokens, fields.output_tokens);
    set(
        &mut usage.cache_creation_input_tokens,
        fields.cache_creation_input_tokens,
    );
    set(
        &mut usage.cache_read_input_tokens,
        fields.cache_read_input_tokens,
    );
    if let Some(server) = &fields.server_tool_use {
        let counts = &mut usage.server_tool_use;
        set(&mut counts.web_search_requests, server.web_search_requests);
        set(&mut counts.web_fetch_requests, server.web_fetch_requests);
    }
}

/// The start of a long text, for error messages.
pub(crate) fn snippet(text: &str) -> String {
    const MAX: usize = 300;
    let trimmed = text.trim();
    match trimmed.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &trimmed[..i]),
        None => trimmed.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Blocks from their JSON.
    fn blocks(json: Value) -> Vec<Block> {
        serde_json::from_str(&json.to_string()).unwrap()
    }

    /// Blocks as JSON.
    fn json_of(blocks: &[Block]) -> Value {
        serde_json::from_str(&serde_json::to_string(blocks).unwrap()).unwrap()
    }

    /// A stream recorded from the API's documented shape, with CRLF line ends, a
    /// comment, a multi-line `data:`, an unknown event and non-ASCII text (so that
    /// splits fall inside multi-byte characters).
    const RECORDED: &str = concat!(
        ": a comment line\r\n",
        "event: message_start\r\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":7,\"cache_read_input_tokens\":11,\"output_tokens\":1}}}\r\n",
        "\r\n",
        "event: ping\r\n",
        "data: {\"type\": \"ping\"}\r\n",
        "\r\n",
        "event: content_block_start\r\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"思考 ✓\"}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYUs=\"}}\r\n",
        "\r\n",
        "event: content_block_stop\r\n",
        "data: {\"type\":\"content_block_stop\",\"index\":0}\r\n",
        "\r\n",
        "event: content_block_start\r\n",
        "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hé 🌸\"}}\r\n",
        "\r\n",
        "event: some_future_event\r\n",
        "data: not even json\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":1,\r\n",
        "data: \"delta\":{\"type\":\"text_delta\",\"text\":\" là\"}}\r\n",
        "\r\n",
        "event: content_block_stop\r\n",
        "data: {\"type\":\"content_block_stop\",\"index\":1}\r\n",
        "\r\n",
        "event: content_block_start\r\n",
        "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"Read\",\"input\":{}}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/tmp/\"}}\r\n",
        "\r\n",
        "event: content_block_delta\r\n",
        "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"é.txt\\\", \\\"limit\\\": 5}\"}}\r\n",
        "\r\n",
        "event: content_block_stop\r\n",
        "data: {\"type\":\"content_block_stop\",\"index\":2}\r\n",
        "\r\n",
        "event: message_delta\r\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":42}}\r\n",
        "\r\n",
        "event: message_stop\r\n",
        "data: {\"type\":\"message_stop\"}\r\n",
        "\r\n",
    );

    #[derive(Debug, PartialEq)]
    enum Seen {
        Text(String),
        Thinking(String),
        Tool(String, String),
    }

    fn run(chunks: &[&[u8]]) -> (Result<ModelReply, ModelError>, Vec<Seen>) {
        let mut parser = SseParser::new();
        let mut asm = MessageAssembler::new();
        let mut seen = Vec::new();
        let mut on_delta = |d: StreamDelta<'_>| {
            seen.push(match d {
                StreamDelta::Text(t) => Seen::Text(t.to_string()),
                StreamDelta::Thinking(t) => Seen::Thinking(t.to_string()),
                StreamDelta::ToolUseStart { id, name } => Seen::Tool(id.into(), name.into()),
            })
        };
        for chunk in chunks {
            for event in parser.feed(chunk) {
                if let Err(e) = asm.handle(&event, &mut on_delta) {
                    return (Err(e), seen);
                }
            }
        }
        (asm.finish("stream ended"), seen)
    }

    fn expected_reply() -> ModelReply {
        ModelReply {
            id: "msg_01".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            content: blocks(json!([
                {"type": "thinking", "thinking": "思考 ✓", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYUs="},
                {"type": "text", "text": "Hé 🌸 là"},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/tmp/é.txt", "limit": 5}},
            ])),
            stop_reason: Some("tool_use".into()),
            stop_details: None,
            usage: Usage {
                input_tokens: 25,
                output_tokens: 42,
                cache_creation_input_tokens: 7,
                cache_read_input_tokens: 11,
                ..Usage::default()
            },
        }
    }

    fn expected_deltas() -> Vec<Seen> {
        vec![
            Seen::Thinking("思考 ✓".into()),
            Seen::Text("Hé 🌸".into()),
            Seen::Text(" là".into()),
            Seen::Tool("toolu_01".into(), "Read".into()),
        ]
    }

    #[test]
    fn whole_stream_in_one_chunk() {
        let (reply, seen) = run(&[RECORDED.as_bytes()]);
        assert_eq!(reply.unwrap(), expected_reply());
        assert_eq!(seen, expected_deltas());
    }

    #[test]
    fn every_split_point_gives_the_same_reply() {
        let bytes = RECORDED.as_bytes();
        for i in 0..=bytes.len() {
            let (reply, seen) = run(&[&bytes[..i], &bytes[i..]]);
            assert_eq!(reply.as_ref().ok(), Some(&expected_reply()), "split at {i}");
            // Text arrives in the same pieces whatever the byte split.
            assert_eq!(seen, expected_deltas(), "split at {i}");
        }
    }

    #[test]
    fn byte_by_byte_and_every_pair_of_splits_in_a_window() {
        let bytes = RECORDED.as_bytes();
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(run(&singles).0.unwrap(), expected_reply());
        // Three chunks: every pair of cut points around the multi-byte text and around
        // the multi-line data event (the full quadratic space is needlessly slow).
        for anchor in ["Hé 🌸", "index\":1,\r\ndata"] {
            let start = RECORDED.find(anchor).unwrap() - 8;
            let end = start + anchor.len() + 16;
            for i in start..end {
                for j in i..end {
                    let (reply, _) = run(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                    assert_eq!(reply.unwrap(), expected_reply(), "splits at {i},{j}");
                }
            }
        }
    }

    #[test]
    fn line_ends_lf_cr_and_crlf_are_equivalent() {
        let lf = RECORDED.replace("\r\n", "\n");
        let cr = RECORDED.replace("\r\n", "\r");
        for variant in [lf, cr] {
            let bytes = variant.as_bytes();
            for i in 0..=bytes.len() {
                let (reply, _) = run(&[&bytes[..i], &bytes[i..]]);
                assert_eq!(reply.unwrap(), expected_reply(), "split at {i}");
            }
        }
    }

    #[test]
    fn parser_fields_comments_and_multiline_data() {
        let mut p = SseParser::new();
        let events = p.feed(
            b"\xEF\xBB\xBFdata: a\ndata:b\ndata\n: comment\nid: 7\nretry: 10\n\nevent: x\n\n\nevent: y\ndata:  two spaces\n\n",
        );
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: "message".into(),
                    data: "a\nb\n".into()
                },
                SseEvent {
                    event: "y".into(),
                    data: " two spaces".into()
                },
            ]
        );
        // An event without its blank line is not dispatched.
        assert!(p.feed(b"data: partial").is_empty());
        assert!(p.feed(b"\r").is_empty());
        // The `\n` after a chunk-final `\r` ends the same line: it is not a blank line.
        assert!(p.feed(b"").is_empty());
        assert!(p.feed(b"\n").is_empty());
        assert_eq!(p.feed(b"\r\n")[0].data, "partial");
        // A lone `\r` ends a line too.
        assert_eq!(p.feed(b"data: z\r\r")[0].data, "z");
    }

    #[test]
    fn stream_cut_before_message_stop_is_incomplete() {
        let cut = RECORDED.find("event: message_stop").unwrap();
        let (reply, _) = run(&[&RECORDED.as_bytes()[..cut]]);
        match reply {
            Err(ModelError::Incomplete { why, .. }) => {
                assert!(why.contains("stream ended"), "{why}")
            }
            other => panic!("expected Incomplete, got {other:?}"),
        }
        let (reply, _) = run(&[b""]);
        assert!(
            matches!(reply, Err(ModelError::Incomplete { why: w, .. }) if w.contains("before message_start"))
        );
    }

    fn events(list: &[(&str, Value)]) -> Vec<u8> {
        let mut out = String::new();
        for (name, data) in list {
            out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        }
        out.into_bytes()
    }

    fn start() -> (&'static str, Value) {
        (
            "message_start",
            json!({"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":3,"output_tokens":1}}}),
        )
    }

    #[test]
    fn error_event_is_an_api_error_without_status() {
        let bytes = events(&[
            start(),
            (
                "error",
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
        ]);
        let (reply, _) = run(&[&bytes]);
        assert_eq!(
            reply.unwrap_err(),
            ModelError::Api {
                status: None,
                kind: "overloaded_error".into(),
                message: "Overloaded".into(),
                retry_after: None
            }
        );
    }

    #[test]
    fn tool_input_empty_is_an_empty_object_and_invalid_is_marked() {
        let tool = |json_pieces: &[&str]| {
            let mut list = vec![
                start(),
                (
                    "content_block_start",
                    json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"Glob","input":{}}}),
                ),
            ];
            for p in json_pieces {
                list.push((
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":p}}),
                ));
            }
            list.push((
                "content_block_stop",
                json!({"type":"content_block_stop","index":0}),
            ));
            list.push(("message_stop", json!({"type":"message_stop"})));
            run(&[&events(&list)]).0
        };
        let reply = tool(&[]).unwrap();
        assert_eq!(
            json_of(&reply.content),
            json!([{"type":"tool_use","id":"t","name":"Glob","input":{}}])
        );
        assert_eq!(
            json_of(&tool(&[""]).unwrap().content)[0]["input"],
            json!({})
        );
        let broken = json_of(&tool(&["{\"pattern\": ", "\"*.rs\""]).unwrap().content);
        let marker = &broken[0]["input"][crate::model::types::INVALID_TOOL_INPUT];
        assert!(marker.as_str().unwrap().contains("*.rs"), "{marker}");
        let not_object = json_of(&tool(&["[1]"]).unwrap().content);
        assert!(not_object[0]["input"][crate::model::types::INVALID_TOOL_INPUT].is_string());
    }

    #[test]
    fn redacted_thinking_kept_verbatim_and_usage_fields_merged() {
        let redacted = json!({"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"});
        let bytes = events(&[
            start(),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block": redacted}),
            ),
            (
                "content_block_stop",
                json!({"type":"content_block_stop","index":0}),
            ),
            (
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9,"cache_read_input_tokens":null}}),
            ),
            (
                "message_delta",
                json!({"type":"message_delta","delta":{},"usage":{"output_tokens":12,"input_tokens":30}}),
            ),
            ("message_stop", json!({"type":"message_stop"})),
        ]);
        let reply = run(&[&bytes]).0.unwrap();
        assert_eq!(json_of(&reply.content), json!([redacted]));
        assert_eq!(reply.stop_reason.as_deref(), Some("end_turn"));
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 30,
                output_tokens: 12,
                ..Usage::default()
            }
        );
    }

    #[test]
    fn malformed_known_event_is_protocol_error_unknown_is_ignored() {
        let mut asm = MessageAssembler::new();
        let mut sink = |_: StreamDelta<'_>| {};
        let bad = SseEvent {
            event: "message_delta".into(),
            data: "{oops".into(),
        };
        assert!(matches!(
            asm.handle(&bad, &mut sink),
            Err(ModelError::Protocol { .. })
        ));
        let unknown = SseEvent {
            event: "brand_new".into(),
            data: "{oops".into(),
        };
        assert!(asm.handle(&unknown, &mut sink).is_ok());
        let orphan = SseEvent {
            event: "content_block_delta".into(),
            data: json!({"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}).to_string(),
        };
        assert!(matches!(
            asm.handle(&orphan, &mut sink),
            Err(ModelError::Protocol { .. })
        ));
    }
}
