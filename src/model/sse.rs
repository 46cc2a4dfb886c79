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

use crate::content::{Block, Order, Raw, TextBlock, ThinkingBlock, ToolInput, ToolUseBlock};
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
                block.input = Some(ToolInput::from_raw(input.map_err(serialize)?));
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

/// An error response's body: `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    /// Not an object: no error fields.
    #[serde(default, deserialize_with = "object_or_none")]
    pub(crate) error: Option<ErrorFields>,
}

/// An object read as `T`, or `None` for a value of any other type.
fn object_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ErrorFields>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Fields(ErrorFields),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Either::deserialize(d)? {
        Either::Fields(fields) => Some(fields),
        Either::Other(_) => None,
    })
}

#[derive(Deserialize)]
pub(crate) struct ErrorFields {
    #[serde(rename = "type", default, deserialize_with = "string_or_none")]
    pub(crate) kind: Option<String>,
    #[serde(default, deserialize_with = "string_or_none")]
    pub(crate) message: Option<String>,
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
mod tests;
