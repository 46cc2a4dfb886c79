//! A fake Anthropic Messages API server on loopback, for tests and benches.
//!
//! It speaks just enough HTTP/1.1 (keep-alive, `content-length` request bodies,
//! chunked `text/event-stream` responses) to be byte-for-byte in control of what the
//! client sees, and it replays a script:
//!
//! ```ignore
//! let server = FakeServer::start(vec![
//!     Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
//!     Reply::text("banana"),
//! ]);
//! // ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY; the rest of the model's settings cleared
//! let out = Flower::new(&["once", "读 seed.txt"]).server(&server).dir(&dir).output();
//! assert!(server.wait_for_requests(2, Duration::from_secs(10)));
//! let first = &server.requests()[0];
//! assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
//! ```
//!
//! The fake refuses what the API refuses before a model runs ([`refuse_request`]: a
//! prefill on models that do not allow it), answers `POST /v1/messages/count_tokens`
//! ([`CountTokens`]; those requests are kept apart, [`FakeServer::count_requests`]),
//! and streams server tool blocks ([`Reply::then_web_search`]).
//!
//! Or route by content with a handler: `FakeServer::with_handler(|req, i| …)`.
//! When a queue script runs out, the server answers `500 api_error` "fake server: script
//! exhausted", so a test that makes one request too many fails loudly.
//!
//! The server runs on its own thread with its own tokio runtime, so it serves sync tests
//! (which spawn the real `flower` binary) and async tests alike. Every request is
//! recorded *before* it is answered: when [`FakeServer::wait_for_requests`] returns
//! true, the request has arrived.
//!
//! # Streamed replies and event numbers
//!
//! A message reply streams like the real API: `message_start`, `ping`, then for each
//! content block `content_block_start`, its deltas (text in pieces of
//! [`Reply::chunk_chars`] characters, tool input as several `input_json_delta`s, thinking
//! then its `signature_delta`), `content_block_stop`; then `message_delta` (stop reason,
//! output tokens) and `message_stop`. Faults are placed by event count: `cut_after(n)`
//! closes the socket once `n` events were sent. With the ping, the first delta of the
//! first block is event number [`Reply::FIRST_DELTA`] (4).
//!
//! # Faults
//!
//! Error statuses with the API's error body ([`Reply::error`], `.retry_after`), a stream
//! cut ([`Reply::cut_after`]), `event: error` inside a 200 stream
//! ([`Reply::error_after`]), delays ([`Reply::delay`], [`Reply::event_delay`]), hangs
//! ([`Reply::hang`], [`Reply::hang_after`]), gates the test opens
//! ([`Reply::gate_before`], [`Reply::gate_after`], [`Gate`]), and a port that refuses
//! connections ([`FakeServer::stop_accepting`] / [`FakeServer::resume_accepting`]).

use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// The API key [`FakeServer::configure`] hands to the client.
pub const FAKE_API_KEY: &str = "sk-ant-fake-test-key";

/// The model named in replies when the request names none.
const FALLBACK_MODEL: &str = "claude-fake";

// ---------------------------------------------------------------------------------
// Recorded requests
// ---------------------------------------------------------------------------------

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// 0-based, in arrival order across all connections.
    pub index: usize,
    /// 0-based number of the connection it came on (keep-alive reuses one).
    pub connection: usize,
    pub method: String,
    /// The request target, e.g. `/v1/messages`.
    pub path: String,
    /// Header names lowercased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub body: Value,
    /// The body as received (lossy UTF-8).
    pub raw_body: String,
    /// With [`FakeServer::simulate_cache`]: how the prompt cache saw this request.
    pub cache: Option<CacheUsage>,
}

/// The fake's prompt-cache accounting of one request, tokens (≈ bytes / 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// The prompt read from the cache.
    pub read: u64,
    /// Written to the cache (from the read point to the last breakpoint).
    pub written: u64,
    /// The rest of the prompt, uncached.
    pub uncached: u64,
}

impl CacheUsage {
    pub fn prompt(&self) -> u64 {
        self.read + self.written + self.uncached
    }
}

/// A model of the API's prompt cache (documented on [`FakeServer::simulate_cache`]).
#[derive(Debug, Default)]
struct CacheModel {
    /// Hashes of the prefixes written so far (at every breakpoint of every answered
    /// request).
    entries: std::collections::HashSet<u64>,
    /// What each request would write, by request index, until it is answered.
    pending: HashMap<usize, Vec<u64>>,
}

/// The API's lookback from a breakpoint.
const CACHE_LOOKBACK: usize = 20;

impl CacheModel {
    /// A request was answered with a message: what it would write is now cached (an
    /// error answer, like the API's, writes nothing).
    fn commit(&mut self, index: usize) {
        if let Some(hashes) = self.pending.remove(&index) {
            self.entries.extend(hashes);
        }
    }

    /// Accounts request `index`'s body; what it writes waits for [`CacheModel::commit`].
    fn account(&mut self, index: usize, body: &Value) -> CacheUsage {
        use std::hash::{Hash, Hasher};
        // The prefix in the API's order: model, tools, system, messages; one unit per
        // tool, system block and message content block, without the marks themselves.
        let mut units: Vec<(String, bool)> = Vec::new();
        let strip = |v: &Value| -> (String, bool) {
            let mut v = v.clone();
            let marked = v
                .as_object_mut()
                .and_then(|o| o.remove("cache_control"))
                .is_some();
            (v.to_string(), marked)
        };
        units.push((format!("model:{}", body["model"]), false));
        for tool in body["tools"].as_array().into_iter().flatten() {
            units.push(strip(tool));
        }
        match &body["system"] {
            Value::Array(blocks) => blocks.iter().for_each(|b| units.push(strip(b))),
            Value::String(text) => units.push((text.clone(), false)),
            _ => {}
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            let role = message["role"].as_str().unwrap_or("");
            match &message["content"] {
                Value::Array(blocks) => {
                    for block in blocks {
                        let (text, marked) = strip(block);
                        units.push((format!("{role}:{text}"), marked));
                    }
                }
                other => units.push((format!("{role}:{other}"), false)),
            }
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        let mut hashes = Vec::with_capacity(units.len());
        let mut ends = Vec::with_capacity(units.len());
        let mut total = 0u64;
        for (text, _) in &units {
            text.hash(&mut hasher);
            hashes.push(hasher.finish());
            total += text.len() as u64;
            ends.push(total);
        }
        let marks: Vec<usize> = (0..units.len()).filter(|&i| units[i].1).collect();
        let mut read = 0;
        for &mark in &marks {
            for i in (mark.saturating_sub(CACHE_LOOKBACK - 1)..=mark).rev() {
                if self.entries.contains(&hashes[i]) {
                    read = read.max(ends[i]);
                    break;
                }
            }
        }
        let last_mark = marks.last().map_or(0, |&m| ends[m]);
        let written = last_mark.saturating_sub(read);
        self.pending
            .insert(index, marks.iter().map(|&m| hashes[m]).collect());
        CacheUsage {
            read: read / 4,
            written: written / 4,
            uncached: total.saturating_sub(read + written) / 4,
        }
    }
}

impl Recorded {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `model` of the body.
    pub fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }

    /// The system prompt: a string, or the text of its blocks joined.
    pub fn system(&self) -> String {
        match self.body.get("system") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// The text of the first message: its session's opening prompt (a string, or its
    /// text blocks joined with newlines).
    pub fn first_prompt(&self) -> String {
        match self.messages().first().map(|m| &m["content"]) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// The `messages` array (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The text of the newest user message: its text blocks and its tool results'
    /// text, joined with newlines. Handy to route on ("the model just read seed.txt").
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
            .unwrap_or_default()
    }

    /// The `tool_result` blocks of the newest message.
    pub fn tool_results(&self) -> Vec<Value> {
        self.messages()
            .last()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The text of a message's or a tool result's `content`: a string, or its text blocks
/// (and those of the tool results in it) joined by newlines.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_string),
                Some("tool_result") => Some(content_text(b.get("content").unwrap_or(&Value::Null))),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------
// Gates
// ---------------------------------------------------------------------------------

/// A latch a reply waits at until the test opens it: "hold the stream open after the
/// first delta until told", so that a crash test can kill the client mid-request.
///
/// Clones share the gate. [`Gate::wait_reached`] blocks until a reply has arrived at
/// the gate (the server is holding it); [`Gate::open`] releases every reply waiting at
/// it now or later.
#[derive(Clone)]
pub struct Gate(Arc<GateInner>);

struct GateInner {
    open: watch::Sender<bool>,
    reached: Mutex<usize>,
    arrived: Condvar,
    /// The same count as `reached`, for async waiters.
    reached_watch: watch::Sender<usize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("open", &self.is_open())
            .field("reached", &self.reached())
            .finish()
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(GateInner {
            open: watch::Sender::new(false),
            reached: Mutex::new(0),
            arrived: Condvar::new(),
            reached_watch: watch::Sender::new(0),
        }))
    }

    /// Releases the replies held here, and lets later ones pass without stopping.
    pub fn open(&self) {
        self.0.open.send_replace(true);
    }

    pub fn is_open(&self) -> bool {
        *self.0.open.borrow()
    }

    /// How many replies have arrived at the gate so far.
    pub fn reached(&self) -> usize {
        *lock(&self.0.reached)
    }

    /// Blocks until at least one reply has arrived at the gate; false on timeout.
    pub fn wait_reached(&self, timeout: Duration) -> bool {
        self.wait_reached_n(1, timeout)
    }

    /// Blocks until `n` replies have arrived at the gate; false on timeout.
    pub fn wait_reached_n(&self, n: usize, timeout: Duration) -> bool {
        let guard = lock(&self.0.reached);
        let (guard, _) = self
            .0
            .arrived
            .wait_timeout_while(guard, timeout, |reached| *reached < n)
            .unwrap_or_else(|e| e.into_inner());
        *guard >= n
    }

    /// Like [`Gate::wait_reached`], for async tests (which must not block the runtime
    /// their client runs on).
    pub async fn wait_reached_async(&self, timeout: Duration) -> bool {
        let mut reached = self.0.reached_watch.subscribe();
        tokio::time::timeout(timeout, reached.wait_for(|n| *n >= 1))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    async fn pass(&self) {
        {
            let mut reached = lock(&self.0.reached);
            *reached += 1;
            self.0.reached_watch.send_replace(*reached);
            self.0.arrived.notify_all();
        }
        let mut open = self.0.open.subscribe();
        // The sender lives in `self`, so this only ends when the gate opens.
        let _ = open.wait_for(|is_open| *is_open).await;
    }
}

// ---------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------

/// One content block of a scripted message.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking(String),
    /// `id: None` gets `toolu_fake_<request>_<block>`.
    ToolUse {
        id: Option<String>,
        name: String,
        input: Value,
    },
    /// A call of a tool the API runs (`web_search`, `web_fetch`): streamed like a tool
    /// call, typed `server_tool_use`, id `srvtoolu_fake_<request>_<block>`; counted in
    /// `usage.server_tool_use`.
    ServerToolUse {
        name: String,
        input: Value,
    },
    /// A server tool's result block (`web_search_tool_result`, `web_fetch_tool_result`),
    /// sent whole in its `content_block_start` as the API does; `tool_use_id` names the
    /// `server_tool_use` block just before it.
    ServerToolResult {
        kind: String,
        content: Value,
    },
    /// Text with its citations (`citations_delta`s before the text, as the API streams
    /// a text that cites web search results or a fetched document).
    CitedText {
        text: String,
        citations: Vec<Value>,
    },
}

#[derive(Debug, Clone)]
enum Fault {
    Cut,
    Hang,
    Gate(Gate),
    Error { kind: String, message: String },
}

#[derive(Debug, Clone)]
enum Body {
    Message(Message),
    /// An HTTP error with the API's JSON error body.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    /// Any status, content type and body (a proxy's HTML page…).
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
    /// A 200 event stream of exactly these bytes, sent as one chunk.
    RawSse(String),
    /// A 200 event stream of these `(event, data)` pairs, nothing added.
    Events(Vec<(String, String)>),
    /// Read the request, never answer.
    Hang,
}

#[derive(Debug, Clone, Default)]
struct Message {
    id: Option<String>,
    model: Option<String>,
    blocks: Vec<Block>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation: u64,
    cache_read: u64,
    full_usage_in_delta: bool,
    no_ping: bool,
}

/// A scripted answer to one request. Build one with a constructor ([`Reply::text`],
/// [`Reply::tool_use`], [`Reply::thinking`], [`Reply::error`] …), then chain blocks
/// (`then_*`), details and faults.
#[derive(Debug, Clone)]
pub struct Reply {
    body: Body,
    delay: Option<Duration>,
    event_delay: Option<Duration>,
    gate_before: Option<Gate>,
    faults: Vec<(usize, Fault)>,
    headers: Vec<(String, String)>,
    chunk_chars: usize,
}

impl Reply {
    /// The number of the first delta event of a message reply (message_start, ping,
    /// content_block_start come before it): `cut_after(Reply::FIRST_DELTA)` cuts right
    /// after the first piece of text.
    pub const FIRST_DELTA: usize = 4;

    fn with_body(body: Body) -> Reply {
        Reply {
            body,
            delay: None,
            event_delay: None,
            gate_before: None,
            faults: Vec::new(),
            headers: Vec::new(),
            chunk_chars: 8,
        }
    }

    /// A message of these blocks (stop reason `tool_use` if one is a tool call, else
    /// `end_turn`).
    pub fn blocks(blocks: Vec<Block>) -> Reply {
        Reply::with_body(Body::Message(Message {
            blocks,
            ..Message::default()
        }))
    }

    /// A text answer (`end_turn`).
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::blocks(vec![Block::Text(text.into())])
    }

    /// One tool call (`tool_use`), its input streamed in several `input_json_delta`s.
    pub fn tool_use(name: impl Into<String>, input: Value) -> Reply {
        Reply::blocks(Vec::new()).then_tool_use(name, input)
    }

    /// A thinking block with its signature; chain the answer after it.
    pub fn thinking(thinking: impl Into<String>, signature: impl Into<String>) -> Reply {
        Reply::blocks(Vec::new()).then_thinking(thinking, signature)
    }

    /// An HTTP error with the API's body
    /// `{"type":"error","error":{"type":kind,"message":message},"request_id":…}`.
    pub fn error(status: u16, kind: impl Into<String>, message: impl Into<String>) -> Reply {
        Reply::with_body(Body::Error {
            status,
            kind: kind.into(),
            message: message.into(),
        })
    }

    /// 529 overloaded_error, as the API sends it.
    pub fn overloaded() -> Reply {
        Reply::error(529, "overloaded_error", "Overloaded")
    }

    /// 429 rate_limit_error with a `retry-after`.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .retry_after(retry_after_secs)
    }

    /// Any status with any body (e.g. a gateway's HTML error page).
    pub fn raw(status: u16, content_type: impl Into<String>, body: impl Into<String>) -> Reply {
        Reply::with_body(Body::Raw {
            status,
            content_type: content_type.into(),
            body: body.into(),
        })
    }

    /// A 200 event stream made of exactly these bytes (one chunk).
    pub fn raw_sse(bytes: impl Into<String>) -> Reply {
        Reply::with_body(Body::RawSse(bytes.into()))
    }

    /// A 200 event stream of these `(event, data)` pairs, one chunk each; nothing is
    /// added (no message_stop unless listed).
    pub fn events<N: Into<String>, D: Into<String>>(events: Vec<(N, D)>) -> Reply {
        Reply::with_body(Body::Events(
            events
                .into_iter()
                .map(|(n, d)| (n.into(), d.into()))
                .collect(),
        ))
    }

    /// The request is read and recorded, and never answered (idle-timeout tests). The
    /// connection closes when the client gives up.
    pub fn hang() -> Reply {
        Reply::with_body(Body::Hang)
    }

    // --- blocks -----------------------------------------------------------------

    fn message_mut(&mut self) -> &mut Message {
        if !matches!(self.body, Body::Message(_)) {
            self.body = Body::Message(Message::default());
        }
        match &mut self.body {
            Body::Message(m) => m,
            _ => unreachable!("just set"),
        }
    }

    /// Appends a block (turns a non-message reply into a message).
    pub fn then_block(mut self, block: Block) -> Reply {
        self.message_mut().blocks.push(block);
        self
    }

    pub fn then_text(self, text: impl Into<String>) -> Reply {
        self.then_block(Block::Text(text.into()))
    }

    pub fn then_thinking(self, thinking: impl Into<String>, signature: impl Into<String>) -> Reply {
        self.then_block(Block::Thinking {
            thinking: thinking.into(),
            signature: signature.into(),
        })
    }

    pub fn then_redacted_thinking(self, data: impl Into<String>) -> Reply {
        self.then_block(Block::RedactedThinking(data.into()))
    }

    pub fn then_tool_use(self, name: impl Into<String>, input: Value) -> Reply {
        self.then_block(Block::ToolUse {
            id: None,
            name: name.into(),
            input,
        })
    }

    pub fn then_tool_use_with_id(
        self,
        id: impl Into<String>,
        name: impl Into<String>,
        input: Value,
    ) -> Reply {
        self.then_block(Block::ToolUse {
            id: Some(id.into()),
            name: name.into(),
            input,
        })
    }

    /// A `web_search` the API ran: its `server_tool_use` call and a
    /// `web_search_tool_result` with these `(url, title)` results.
    pub fn then_web_search(self, query: &str, results: &[(&str, &str)]) -> Reply {
        let content: Vec<Value> = results
            .iter()
            .map(|(url, title)| {
                json!({"type": "web_search_result", "url": url, "title": title,
                    "encrypted_content": format!("enc:{url}"), "page_age": null})
            })
            .collect();
        self.then_block(Block::ServerToolUse {
            name: "web_search".into(),
            input: json!({"query": query}),
        })
        .then_block(Block::ServerToolResult {
            kind: "web_search_tool_result".into(),
            content: Value::Array(content),
        })
    }

    /// A `web_fetch` the API ran: its call and a `web_fetch_tool_result` holding the
    /// page's text as a document.
    pub fn then_web_fetch(self, url: &str, text: &str) -> Reply {
        self.then_block(Block::ServerToolUse {
            name: "web_fetch".into(),
            input: json!({"url": url}),
        })
        .then_block(Block::ServerToolResult {
            kind: "web_fetch_tool_result".into(),
            content: json!({"type": "web_fetch_result", "url": url,
                "content": {"type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": text},
                    "title": url},
                "retrieved_at": "2026-12-05T06:00:00Z"}),
        })
    }

    /// The side request of a WebSearch or WebFetch call (flower's client web tools),
    /// answered as the API does: the server tool's call, its result, then a text
    /// citing it. `None` for any other request. The results name the query or URL,
    /// so a test can find them in the tool result.
    pub fn web_side(request: &Recorded) -> Option<Reply> {
        web_side_reply(request)
    }

    /// A server tool call without its result yet (what a `pause_turn` leaves).
    pub fn then_server_tool_use(self, name: &str, input: Value) -> Reply {
        self.then_block(Block::ServerToolUse {
            name: name.into(),
            input,
        })
    }

    // --- message details --------------------------------------------------------

    /// Any `stop_reason`, known to the API or not (`max_tokens` with a partial text
    /// makes a cut reply, `refusal`, `pause_turn`, `model_context_window_exceeded` …).
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Reply {
        self.message_mut().stop_reason = Some(reason.into());
        self
    }

    /// `stop_details` sent next to the stop reason in `message_delta`.
    pub fn stop_details(mut self, details: Value) -> Reply {
        self.message_mut().stop_details = Some(details);
        self
    }

    /// Input and output tokens. Without it: input = request body bytes / 4 (so the
    /// context grows as a real conversation does), output = content characters / 4.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Reply {
        let m = self.message_mut();
        m.input_tokens = Some(input_tokens);
        m.output_tokens = Some(output_tokens);
        self
    }

    /// Prompt-cache tokens reported in `message_start`.
    pub fn cache_usage(mut self, creation: u64, read: u64) -> Reply {
        let m = self.message_mut();
        m.cache_creation = creation;
        m.cache_read = read;
        self
    }

    /// Repeat all four usage fields in `message_delta` (as newer API versions do);
    /// by default it carries only `output_tokens`.
    pub fn full_usage_in_delta(mut self) -> Reply {
        self.message_mut().full_usage_in_delta = true;
        self
    }

    /// The message id (default `msg_fake_<request index>`).
    pub fn id(mut self, id: impl Into<String>) -> Reply {
        self.message_mut().id = Some(id.into());
        self
    }

    /// The model reported (default: the request's `model`).
    pub fn model(mut self, model: impl Into<String>) -> Reply {
        self.message_mut().model = Some(model.into());
        self
    }

    /// No `ping` after `message_start` (event numbers shift down by one).
    pub fn no_ping(mut self) -> Reply {
        self.message_mut().no_ping = true;
        self
    }

    /// Size of the text/thinking/JSON pieces streamed as deltas (characters; default 8).
    pub fn chunk_chars(mut self, n: usize) -> Reply {
        self.chunk_chars = n.max(1);
        self
    }

    // --- HTTP details and faults --------------------------------------------------

    /// Adds a `retry-after: <secs>` header.
    pub fn retry_after(self, secs: u64) -> Reply {
        self.header("retry-after", secs.to_string())
    }

    /// Adds a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Waits this long before answering (after recording the request).
    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = Some(delay);
        self
    }

    /// Waits this long before each event after the first.
    pub fn event_delay(mut self, delay: Duration) -> Reply {
        self.event_delay = Some(delay);
        self
    }

    /// Holds the answer (before the status line) until `gate` opens.
    pub fn gate_before(mut self, gate: &Gate) -> Reply {
        self.gate_before = Some(gate.clone());
        self
    }

    /// After `events` events, holds the stream open until `gate` opens.
    pub fn gate_after(mut self, events: usize, gate: &Gate) -> Reply {
        self.faults.push((events, Fault::Gate(gate.clone())));
        self
    }

    /// After `events` events, closes the socket mid-stream (no end of the chunked body).
    pub fn cut_after(mut self, events: usize) -> Reply {
        self.faults.push((events, Fault::Cut));
        self
    }

    /// After `events` events, stops sending and keeps the connection open (until the
    /// client closes it).
    pub fn hang_after(mut self, events: usize) -> Reply {
        self.faults.push((events, Fault::Hang));
        self
    }

    /// After `events` events, sends `event: error` with this error and ends the stream
    /// (as the API does when it overloads mid-answer).
    pub fn error_after(
        mut self,
        events: usize,
        kind: impl Into<String>,
        message: impl Into<String>,
    ) -> Reply {
        self.faults.push((
            events,
            Fault::Error {
                kind: kind.into(),
                message: message.into(),
            },
        ));
        self
    }

    /// The SSE events this reply streams for a request (for tests that count events).
    pub fn render_events(&self, request: &Recorded) -> Vec<(String, String)> {
        match &self.body {
            Body::Message(m) => render_message(m, request, self.chunk_chars),
            Body::Events(events) => events.clone(),
            _ => Vec::new(),
        }
    }
}

fn render_message(m: &Message, request: &Recorded, chunk: usize) -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, data: Value| events.push((name.to_string(), data.to_string()));
    let index = request.index;
    let model = m.model.clone().unwrap_or_else(|| {
        let model = request.model();
        if model.is_empty() {
            FALLBACK_MODEL.to_string()
        } else {
            model.to_string()
        }
    });
    // A simulated cache splits the prompt; scripted numbers win.
    let simulated = request
        .cache
        .filter(|_| m.input_tokens.is_none() && m.cache_creation == 0 && m.cache_read == 0);
    let input_tokens = match simulated {
        Some(cache) => cache.uncached,
        None => m
            .input_tokens
            .unwrap_or_else(|| (request.raw_body.len() as u64 / 4).max(1)),
    };
    let (cache_creation, cache_read) = match simulated {
        Some(cache) => (cache.written, cache.read),
        None => (m.cache_creation, m.cache_read),
    };
    let content_chars: usize = m
        .blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) | Block::CitedText { text: t, .. } => t.chars().count(),
            Block::Thinking { thinking, .. } => thinking.chars().count(),
            Block::RedactedThinking(d) => d.len(),
            Block::ToolUse { input, name, .. } | Block::ServerToolUse { input, name } => {
                input.to_string().len() + name.len()
            }
            Block::ServerToolResult { content, .. } => content.to_string().len(),
        })
        .sum();
    let output_tokens = m
        .output_tokens
        .unwrap_or_else(|| (content_chars as u64 / 4).max(1));
    let has_tool = m.blocks.iter().any(|b| matches!(b, Block::ToolUse { .. }));
    let server_uses = |tool: &str| {
        m.blocks
            .iter()
            .filter(|b| matches!(b, Block::ServerToolUse { name, .. } if name == tool))
            .count()
    };
    let (searches, fetches) = (server_uses("web_search"), server_uses("web_fetch"));
    let stop_reason = m
        .stop_reason
        .clone()
        .unwrap_or_else(|| if has_tool { "tool_use" } else { "end_turn" }.to_string());

    push(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": m.id.clone().unwrap_or_else(|| format!("msg_fake_{index:04}")),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_creation,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
            },
        }}),
    );
    if !m.no_ping {
        push("ping", json!({"type": "ping"}));
    }
    for (i, block) in m.blocks.iter().enumerate() {
        let delta =
            |delta: Value| json!({"type": "content_block_delta", "index": i, "delta": delta});
        match block {
            Block::Text(text) => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                for piece in pieces(text, chunk) {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "text_delta", "text": piece})),
                    );
                }
            }
            Block::CitedText { text, citations } => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": "", "citations": []}}),
                );
                for citation in citations {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "citations_delta", "citation": citation})),
                    );
                }
                for piece in pieces(text, chunk) {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "text_delta", "text": piece})),
                    );
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}),
                );
                for piece in pieces(thinking, chunk) {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "thinking_delta", "thinking": piece})),
                    );
                }
                push(
                    "content_block_delta",
                    delta(json!({"type": "signature_delta", "signature": signature})),
                );
            }
            Block::RedactedThinking(data) => push(
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": {"type": "redacted_thinking", "data": data}}),
            ),
            Block::ToolUse { id, name, input } => {
                let id = id
                    .clone()
                    .unwrap_or_else(|| format!("toolu_fake_{index:04}_{i}"));
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                );
                // The real API opens with an empty fragment.
                push(
                    "content_block_delta",
                    delta(json!({"type": "input_json_delta", "partial_json": ""})),
                );
                for piece in pieces(&input.to_string(), chunk) {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "input_json_delta", "partial_json": piece})),
                    );
                }
            }
            Block::ServerToolUse { name, input } => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "server_tool_use", "id": format!("srvtoolu_fake_{index:04}_{i}"), "name": name, "input": {}}}),
                );
                for piece in pieces(&input.to_string(), chunk) {
                    push(
                        "content_block_delta",
                        delta(json!({"type": "input_json_delta", "partial_json": piece})),
                    );
                }
            }
            Block::ServerToolResult { kind, content } => {
                let call = i.saturating_sub(1);
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": kind, "tool_use_id": format!("srvtoolu_fake_{index:04}_{call}"), "content": content}}),
                );
            }
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    let usage = if m.full_usage_in_delta {
        json!({
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output_tokens,
        })
    } else {
        json!({"output_tokens": output_tokens})
    };
    let mut usage = usage;
    if searches + fetches > 0 {
        usage["server_tool_use"] =
            json!({"web_search_requests": searches, "web_fetch_requests": fetches});
    }
    let mut delta = json!({"stop_reason": stop_reason, "stop_sequence": null});
    if let Some(details) = &m.stop_details {
        delta["stop_details"] = details.clone();
    }
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": delta, "usage": usage}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    events
}

/// `text` in pieces of `n` characters.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

// ---------------------------------------------------------------------------------
// The script
// ---------------------------------------------------------------------------------

type Handler = Arc<dyn Fn(&Recorded, usize) -> Reply + Send + Sync>;

enum Script {
    Queue(VecDeque<Reply>),
    Handler(Handler),
}

impl Script {
    fn next(this: &Mutex<Script>, request: &Recorded) -> Reply {
        let handler = {
            let mut script = lock(this);
            match &mut *script {
                Script::Queue(queue) => {
                    return queue.pop_front().unwrap_or_else(|| {
                        Reply::error(500, "api_error", "fake server: script exhausted")
                    });
                }
                Script::Handler(h) => h.clone(),
            }
        };
        // Called without the lock: a handler may inspect the server.
        handler(request, request.index)
    }
}

// ---------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------

struct Shared {
    /// Web side requests still to be answered `overloaded` ([`FakeServer::overload_side_requests`]).
    side_faults: AtomicUsize,
    /// Set by [`FakeServer::forget_bodies`].
    forget_bodies: AtomicBool,
    requests: Mutex<Vec<Recorded>>,
    arrived: Condvar,
    /// The number of requests, for async waiters.
    count: watch::Sender<usize>,
    script: Mutex<Script>,
    connections: AtomicUsize,
    /// Bumped by `stop_accepting`: idle keep-alive connections close on it.
    epoch: watch::Sender<u64>,
    /// Set by `simulate_cache`.
    cache: Mutex<Option<CacheModel>>,
    /// `count_tokens` request bodies, in arrival order (not in `requests`).
    counts: Mutex<Vec<Value>>,
    count_mode: Mutex<CountTokens>,
}

enum Control {
    Stop(std::sync::mpsc::Sender<()>),
    Resume(std::net::TcpListener, std::sync::mpsc::Sender<()>),
}

/// The variables a run must not inherit from the person running the tests: the
/// model's settings and proxies. [`FakeServer::configure`] sets its own.
pub const CLEARED: [&str; 13] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_BETAS",
    "MAX_THINKING_TOKENS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The fake Messages API server. Dropping it shuts it down.
pub struct FakeServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    control: Option<mpsc::UnboundedSender<Control>>,
    thread: Option<JoinHandle<()>>,
    accepting: Mutex<bool>,
}

impl fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServer")
            .field("url", &self.url())
            .field("requests", &lock(&self.shared.requests).len())
            .finish()
    }
}

impl FakeServer {
    /// Starts a server answering with `replies` in order (then "script exhausted").
    pub fn start(replies: Vec<Reply>) -> FakeServer {
        FakeServer::with_script(Script::Queue(replies.into()))
    }

    /// Starts a server answering each request with `handler(request, request_index)`.
    pub fn with_handler<F>(handler: F) -> FakeServer
    where
        F: Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    {
        FakeServer::with_script(Script::Handler(Arc::new(handler)))
    }

    fn with_script(script: Script) -> FakeServer {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("fake server: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("fake server: local addr");
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            count: watch::Sender::new(0),
            script: Mutex::new(script),
            connections: AtomicUsize::new(0),
            epoch: watch::Sender::new(0),
            cache: Mutex::new(None),
            counts: Mutex::new(Vec::new()),
            count_mode: Mutex::new(CountTokens::default()),
            side_faults: AtomicUsize::new(0),
            forget_bodies: AtomicBool::new(false),
        });
        let (control, control_rx) = mpsc::unbounded_channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fake-api-{}", addr.port()))
            .spawn(move || run(thread_shared, listener, control_rx))
            .expect("fake server: spawn thread");
        FakeServer {
            shared,
            addr,
            control: Some(control),
            thread: Some(thread),
            accepting: Mutex::new(true),
        }
    }

    /// The next `n` web side requests are answered `529 overloaded` (then as the API
    /// would): a blip in a WebSearch's own request.
    pub fn overload_side_requests(&self, n: usize) {
        self.shared.side_faults.store(n, Ordering::SeqCst);
    }

    /// Keep each request's headers but not its body once answered: a long session's
    /// bodies grow with its history, so keeping 3,000 of them costs gigabytes. The
    /// handler still sees the whole request.
    pub fn forget_bodies(&self) {
        self.shared.forget_bodies.store(true, Ordering::SeqCst);
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Points a `flower` command at this server: `ANTHROPIC_BASE_URL`,
    /// `ANTHROPIC_API_KEY` = [`FAKE_API_KEY`]; clears the rest of [`CLEARED`] so that
    /// the test does not depend on the caller's environment.
    pub fn configure<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for var in CLEARED {
            cmd.env_remove(var);
        }
        cmd.env("ANTHROPIC_BASE_URL", self.url())
            .env("ANTHROPIC_API_KEY", FAKE_API_KEY)
    }

    /// From now on, account the prompt cache like the API and report it in each reply's
    /// usage (unless the reply scripts its own numbers): every request writes a cache
    /// entry at each of its `cache_control` breakpoints (the prefix up to that block:
    /// model, tools, system, message blocks, marks ignored); a request reads the longest
    /// written prefix that ends within [`CACHE_LOOKBACK`] blocks before one of its
    /// breakpoints. Tokens are bytes / 4; entries never expire (tests are short).
    /// `cache_read_input_tokens` is the read prefix, `cache_creation_input_tokens` the
    /// rest up to the last breakpoint, `input_tokens` what follows it.
    pub fn simulate_cache(&self) {
        *lock(&self.shared.cache) = Some(CacheModel::default());
    }

    /// How `POST /v1/messages/count_tokens` is answered from now on.
    pub fn count_tokens(&self, mode: CountTokens) {
        *lock(&self.shared.count_mode) = mode;
    }

    /// The bodies of the count_tokens requests so far (they are not in
    /// [`FakeServer::requests`]: a count is not a model turn).
    pub fn count_requests(&self) -> Vec<Value> {
        lock(&self.shared.counts).clone()
    }

    /// A copy of every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// How many requests have arrived.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Blocks until `n` requests have arrived (recorded, not necessarily answered);
    /// false on timeout. Event-based, no polling.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        self.wait_for(|requests| requests.len() >= n, timeout)
    }

    /// Like [`FakeServer::wait_for_requests`], for async tests: blocking would stall a
    /// client running on the test's own runtime.
    pub async fn wait_for_requests_async(&self, n: usize, timeout: Duration) -> bool {
        let mut count = self.shared.count.subscribe();
        tokio::time::timeout(timeout, count.wait_for(|c| *c >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Blocks until `done(requests)` holds; false on timeout.
    pub fn wait_for(&self, mut done: impl FnMut(&[Recorded]) -> bool, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = lock(&self.shared.requests);
        loop {
            if done(guard.as_slice()) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            guard = self
                .shared
                .arrived
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Appends replies to a queue script (ignored with a handler script).
    pub fn push(&self, reply: Reply) {
        if let Script::Queue(queue) = &mut *lock(&self.shared.script) {
            queue.push_back(reply);
        }
    }

    /// Replies left in a queue script (0 with a handler).
    pub fn remaining(&self) -> usize {
        match &*lock(&self.shared.script) {
            Script::Queue(queue) => queue.len(),
            Script::Handler(_) => 0,
        }
    }

    /// Replaces the script with a handler.
    pub fn set_handler<F>(&self, handler: F)
    where
        F: Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    {
        *lock(&self.shared.script) = Script::Handler(Arc::new(handler));
    }

    /// Closes the listening socket: from the moment this returns, connecting to the
    /// port is refused. Idle keep-alive connections are closed too (a response in
    /// progress finishes first), so the client sees the outage on its next request.
    pub fn stop_accepting(&self) {
        let mut accepting = lock(&self.accepting);
        if !*accepting {
            return;
        }
        let (ack, done) = std::sync::mpsc::channel();
        self.send(Control::Stop(ack));
        let _ = done.recv();
        *accepting = false;
    }

    /// Listens again on the same port.
    pub fn resume_accepting(&self) {
        let mut accepting = lock(&self.accepting);
        if *accepting {
            return;
        }
        let listener = std::net::TcpListener::bind(self.addr)
            .expect("fake server: rebind the same port (taken meanwhile?)");
        let (ack, done) = std::sync::mpsc::channel();
        self.send(Control::Resume(listener, ack));
        let _ = done.recv();
        *accepting = true;
    }

    fn send(&self, control: Control) {
        if let Some(tx) = &self.control {
            let _ = tx.send(control);
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        // Closing the control channel ends the accept loop; the runtime then drops every
        // connection task (gated and hanging ones included).
        self.control = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding a lock must not hide its own failure behind
    // a poisoned-lock panic here.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    mut control: mpsc::UnboundedReceiver<Control>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("fake server: tokio runtime");
    runtime.block_on(async move {
        let mut listener = Some(into_tokio(listener));
        loop {
            tokio::select! {
                msg = control.recv() => match msg {
                    None => break,
                    Some(Control::Stop(ack)) => {
                        listener = None;
                        shared.epoch.send_modify(|e| *e += 1);
                        let _ = ack.send(());
                    }
                    Some(Control::Resume(l, ack)) => {
                        listener = Some(into_tokio(l));
                        let _ = ack.send(());
                    }
                },
                accepted = accept(&listener) => {
                    if let Ok((stream, _)) = accepted {
                        let id = shared.connections.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve_connection(shared.clone(), stream, id));
                    }
                }
            }
        }
    });
    // Dropping the runtime cancels the connection tasks and closes their sockets.
    drop(runtime);
}

fn into_tokio(listener: std::net::TcpListener) -> TcpListener {
    listener
        .set_nonblocking(true)
        .expect("fake server: nonblocking listener");
    TcpListener::from_std(listener).expect("fake server: tokio listener")
}

async fn accept(listener: &Option<TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

// ---------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

enum ReadOutcome {
    Request(Request),
    /// The client closed the connection between requests.
    Closed,
    Bad(String),
}

async fn serve_connection(shared: Arc<Shared>, mut stream: TcpStream, connection: usize) {
    let mut epoch = shared.epoch.subscribe();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let outcome = tokio::select! {
            outcome = read_request(&mut stream, &mut buf) => outcome,
            _ = epoch.changed() => return,
        };
        let request = match outcome {
            ReadOutcome::Request(r) => r,
            ReadOutcome::Closed => return,
            ReadOutcome::Bad(why) => {
                let body = error_body("invalid_request_error", &format!("fake server: {why}"), 0);
                let _ = write_simple(&mut stream, 400, "application/json", &body, &[], true).await;
                return;
            }
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if request.method == "POST"
            && request.path.split('?').next() == Some("/v1/messages/count_tokens")
        {
            let keep = count_tokens(&shared, &mut stream, &request, close).await;
            if !keep || close {
                let _ = stream.shutdown().await;
                return;
            }
            continue;
        }
        let recorded = {
            let mut requests = lock(&shared.requests);
            let recorded = Recorded {
                index: requests.len(),
                connection,
                method: request.method.clone(),
                path: request.path.clone(),
                headers: request.headers.clone(),
                body: serde_json::from_slice(&request.body).unwrap_or(Value::Null),
                raw_body: String::from_utf8_lossy(&request.body).into_owned(),
                cache: None,
            };
            let mut recorded = recorded;
            if let Some(model) = lock(&shared.cache).as_mut()
                && recorded.body.is_object()
            {
                recorded.cache = Some(model.account(recorded.index, &recorded.body));
            }
            if shared.forget_bodies.load(Ordering::SeqCst) {
                requests.push(Recorded {
                    body: Value::Null,
                    raw_body: String::new(),
                    ..recorded.clone()
                });
            } else {
                requests.push(recorded.clone());
            }
            shared.count.send_replace(requests.len());
            shared.arrived.notify_all();
            recorded
        };
        let route = request.path.split('?').next().unwrap_or("");
        let reply = if request.method == "POST" && route == "/v1/messages" {
            // The API refuses before the model runs: the script is not consumed.
            match refuse_request(&recorded.body) {
                Some(why) => Reply::error(400, "invalid_request_error", why),
                None => match web_side_reply(&recorded) {
                    // A web tool's side request is answered as the API would, whatever
                    // the script, after the faults a test asked for.
                    Some(reply) => {
                        let fault = shared
                            .side_faults
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if fault { Reply::overloaded() } else { reply }
                    }
                    None => Script::next(&shared.script, &recorded),
                },
            }
        } else {
            Reply::error(
                404,
                "not_found_error",
                format!("fake server: no route {} {}", request.method, request.path),
            )
        };
        if matches!(reply.body, Body::Message(_))
            && let Some(model) = lock(&shared.cache).as_mut()
        {
            model.commit(recorded.index);
        }
        let keep_alive = answer(&mut stream, reply, &recorded, close).await;
        if !keep_alive || close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// Models that answer a request ending with an assistant message with a 400 (Claude
/// 4.6 and later; Anthropic's migration guide).
pub const NO_PREFILL_MODELS: &[&str] = &[
    "claude-opus-4-6",
    "claude-sonnet-4-6",
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-opus-5",
    "claude-sonnet-5",
    "claude-haiku-5",
    "claude-fable-",
    "claude-mythos-",
];

/// The API's message for a prefill on those models.
pub const PREFILL_REFUSED: &str = "This model does not support assistant message prefill. The conversation must end with a user message.";

/// Why the API refuses this body before running the model, as it words it; `None`: it
/// does not. A request may end with an assistant message (a prefill the model
/// continues) only on models that allow it, and with thinking on only when that
/// message starts with a thinking block; a paused server-tool turn (its
/// `server_tool_use` sent back after `pause_turn`) continues on every model.
pub fn refuse_request(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    if let Some(why) = refuse_thinking_blocks(messages) {
        return Some(why);
    }
    let last = messages.last()?;
    if last["role"] != "assistant" {
        return None;
    }
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    if blocks.iter().any(|b| b["type"] == "server_tool_use") {
        return None;
    }
    let model = body["model"].as_str().unwrap_or("");
    if NO_PREFILL_MODELS.iter().any(|p| model.starts_with(p)) {
        return Some(PREFILL_REFUSED.to_string());
    }
    let thinking = body["thinking"]["type"].as_str();
    let first = blocks
        .first()
        .and_then(|b| b["type"].as_str())
        .unwrap_or("text");
    if matches!(thinking, Some("enabled" | "adaptive"))
        && !matches!(first, "thinking" | "redacted_thinking")
    {
        return Some(format!(
            "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
            messages.len() - 1
        ));
    }
    None
}

/// What the API refuses in the thinking blocks of any assistant message, as it words
/// it: one that ends with a thinking block (a reply of thinking only sent back), and a
/// thinking block without its signature.
fn refuse_thinking_blocks(messages: &[Value]) -> Option<String> {
    for (i, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        let Some(blocks) = message["content"].as_array() else {
            continue;
        };
        for (j, block) in blocks.iter().enumerate() {
            let unsigned = block["signature"].as_str().is_none_or(str::is_empty);
            if block["type"] == "thinking" && unsigned {
                return Some(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                ));
            }
        }
        let last = blocks.last().and_then(|b| b["type"].as_str());
        if matches!(last, Some("thinking" | "redacted_thinking")) {
            return Some(format!(
                "messages.{i}: The final block in an assistant message cannot be `thinking`."
            ));
        }
    }
    None
}

/// How the fake answers `POST /v1/messages/count_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CountTokens {
    /// `{"input_tokens": body bytes / 4}`, as the fake's replies estimate input.
    #[default]
    Estimate,
    /// Always this many.
    Fixed(u64),
    /// This HTTP status with the API's error body.
    Fail(u16),
}

/// Answers a count_tokens request and records it (apart from message requests).
async fn count_tokens(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    close: bool,
) -> bool {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let mode = *lock(&shared.count_mode);
    {
        let mut counts = lock(&shared.counts);
        counts.push(body.clone());
    }
    shared.arrived.notify_all();
    match mode {
        CountTokens::Fail(status) => {
            let body = error_body("api_error", "fake server: counting failed", 0);
            write_simple(stream, status, "application/json", &body, &[], close)
                .await
                .is_ok()
        }
        _ if !body.is_object() || body.get("messages").is_none() => {
            let body = error_body("invalid_request_error", "messages: Field required", 0);
            write_simple(stream, 400, "application/json", &body, &[], close)
                .await
                .is_ok()
        }
        mode => {
            let n = match mode {
                CountTokens::Fixed(n) => n,
                _ => (request.body.len() as u64 / 4).max(1),
            };
            let body = json!({"input_tokens": n}).to_string();
            write_simple(stream, 200, "application/json", &body, &[], close)
                .await
                .is_ok()
        }
    }
}

/// Reads one request (head and `content-length` body) from `stream`; `buf` keeps bytes
/// already read past it.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> ReadOutcome {
    const MAX_HEAD: usize = 64 * 1024;
    let head_end = loop {
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD {
            return ReadOutcome::Bad("request head too large".into());
        }
        match read_more(stream, buf).await {
            Ok(0) if buf.is_empty() => return ReadOutcome::Closed,
            Ok(0) => return ReadOutcome::Bad("connection closed inside the request head".into()),
            Ok(_) => {}
            Err(_) => return ReadOutcome::Closed,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return ReadOutcome::Bad(format!("bad request line {request_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return ReadOutcome::Bad(format!("unsupported version {version:?}"));
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return ReadOutcome::Bad(format!("bad header line {line:?}"));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut request = Request {
        method: method.to_string(),
        path: path.to_string(),
        headers,
        body: Vec::new(),
    };
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        return ReadOutcome::Bad("chunked request bodies are not supported".into());
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => match v.parse::<usize>() {
            Ok(n) => n,
            Err(_) => return ReadOutcome::Bad(format!("bad content-length {v:?}")),
        },
    };
    let body_start = head_end + 4;
    while buf.len() < body_start + length {
        match read_more(stream, buf).await {
            Ok(0) | Err(_) => {
                return ReadOutcome::Bad("connection closed inside the request body".into());
            }
            Ok(_) => {}
        }
    }
    request.body = buf[body_start..body_start + length].to_vec();
    buf.drain(..body_start + length);
    ReadOutcome::Request(request)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ => "Status",
    }
}

fn error_body(kind: &str, message: &str, index: usize) -> String {
    json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": format!("req_fake_{index:04}"),
    })
    .to_string()
}

async fn write_simple(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    extra: &[(String, String)],
    close: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    stream.write_all(out.as_bytes()).await
}

async fn write_chunk(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let framed = format!("{:x}\r\n{data}\r\n", data.len());
    stream.write_all(framed.as_bytes()).await
}

/// Waits until the client closes the connection (or it breaks).
async fn wait_for_close(stream: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Sends `reply`; returns whether the connection can serve another request.
async fn answer(stream: &mut TcpStream, reply: Reply, request: &Recorded, close: bool) -> bool {
    if let Some(gate) = &reply.gate_before {
        gate.pass().await;
    }
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut headers = vec![(
        "request-id".to_string(),
        format!("req_fake_{:04}", request.index),
    )];
    headers.extend(reply.headers.iter().cloned());
    let events = match &reply.body {
        Body::Hang => {
            wait_for_close(stream).await;
            return false;
        }
        Body::Error {
            status,
            kind,
            message,
        } => {
            let body = error_body(kind, message, request.index);
            return write_simple(stream, *status, "application/json", &body, &headers, close)
                .await
                .is_ok();
        }
        Body::Raw {
            status,
            content_type,
            body,
        } => {
            return write_simple(stream, *status, content_type, body, &headers, close)
                .await
                .is_ok();
        }
        Body::RawSse(bytes) => vec![bytes.clone()],
        Body::Message(_) | Body::Events(_) => reply
            .render_events(request)
            .into_iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect(),
    };

    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n\
         cache-control: no-cache\r\ntransfer-encoding: chunked\r\n",
    );
    for (k, v) in &headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for i in 0..=events.len() {
        for (at, fault) in &reply.faults {
            if *at != i {
                continue;
            }
            match fault {
                Fault::Cut => return false,
                Fault::Hang => {
                    wait_for_close(stream).await;
                    return false;
                }
                Fault::Gate(gate) => gate.pass().await,
                Fault::Error { kind, message } => {
                    let data =
                        json!({"type": "error", "error": {"type": kind, "message": message}});
                    let event = format!("event: error\ndata: {data}\n\n");
                    return write_chunk(stream, &event).await.is_ok()
                        && stream.write_all(b"0\r\n\r\n").await.is_ok();
                }
            }
        }
        let Some(event) = events.get(i) else { break };
        if i > 0
            && let Some(delay) = reply.event_delay
        {
            tokio::time::sleep(delay).await;
        }
        if write_chunk(stream, event).await.is_err() {
            return false;
        }
    }
    stream.write_all(b"0\r\n\r\n").await.is_ok()
}

/// See [`Reply::web_side`].
fn web_side_reply(request: &Recorded) -> Option<Reply> {
    use flower::tools::web::{FETCH_SYSTEM, SEARCH_SYSTEM};
    let system = request.system();
    let asked = request.last_user_text();
    if system.contains(SEARCH_SYSTEM) {
        let query = asked
            .strip_prefix("Perform a web search for the query: ")?
            .to_string();
        let slug: String = query
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let url = format!("https://example.com/{slug}");
        let title = format!("About {query}");
        let citation = json!({"type": "web_search_result_location", "url": url, "title": title,
            "encrypted_index": "enc", "cited_text": format!("{query} explained")});
        return Some(
            Reply::blocks(Vec::new())
                .then_web_search(
                    &query,
                    &[(&url, &title), ("https://example.org/more", "More")],
                )
                .then_block(Block::CitedText {
                    text: format!("{query} is explained at example.com."),
                    citations: vec![citation],
                }),
        );
    }
    if system.contains(FETCH_SYSTEM) {
        let rest = asked.strip_prefix("Fetch ")?;
        let url = rest.split_whitespace().next()?.to_string();
        let text = format!("The page at {url} says hello.");
        let citation = json!({"type": "char_location", "document_index": 0,
            "document_title": url, "start_char_index": 0, "end_char_index": 5, "cited_text": "hello"});
        return Some(
            Reply::blocks(Vec::new())
                .then_web_fetch(&url, &text)
                .then_block(Block::CitedText {
                    text: format!("It says hello ({url})."),
                    citations: vec![citation],
                }),
        );
    }
    None
}
