//! The Anthropic Messages API client (streaming).
//!
//! One request is one `POST {base}/v1/messages` with `"stream": true`, read as
//! server-sent events (see [`crate::model::sse`]). The client reports precisely what
//! happened and never retries: retrying belongs to `continuity::resilience`.
//!
//! Configuration is values, never the environment ([`ClientConfig`]; the settings
//! module reads the variables, `crate::settings`):
//! - the credential: a Bearer token (`ANTHROPIC_AUTH_TOKEN`, for gateways) or an API key
//!   (`ANTHROPIC_API_KEY`, sent as `x-api-key`); one is required;
//! - the base URL, default [`DEFAULT_BASE_URL`] (a gateway or the test server);
//! - extra headers (`ANTHROPIC_CUSTOM_HEADERS`, see [`parse_custom_headers`]) and betas
//!   (`ANTHROPIC_BETAS`, see [`parse_betas`]), sent as `anthropic-beta` with the betas
//!   flower adds itself: the 1M window for a `[1m]` model, interleaved thinking when
//!   thinking meets tools;
//! - the default model, aliases already resolved ([`crate::model::models`]);
//! - the idle timeout: without a byte from the server for that long (while waiting for
//!   the response headers, or inside the stream) the request fails as a
//!   [`ModelError::Connection`]; default 300 s. A server that stops answering must not
//!   hang a run forever.
//!
//! Requests must run inside a tokio runtime with I/O and time enabled.

use crate::future::BoxFuture;
use crate::model::sse::{MessageAssembler, SseParser, snippet};
use crate::model::{MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta};
use serde::Serialize;
use serde::ser::SerializeSeq;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// The model used when neither the caller nor `ANTHROPIC_MODEL` names one: the current
/// Sonnet, the balanced model for agentic coding.
pub const DEFAULT_MODEL: &str = crate::model::models::DEFAULT_MODEL;

/// The API's address when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";

/// The idle timeout when `FLOWER_STREAM_IDLE_TIMEOUT` is not set.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The API allows at most this many `cache_control` breakpoints per request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Error bodies longer than this are cut (they are only shown to a human).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// After `message_stop`, how long to wait for the end of the HTTP body, so that the
/// connection can be reused; the reply is complete either way.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How requests prove who sends them.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `x-api-key: …` (`ANTHROPIC_API_KEY`).
    ApiKey(String),
    /// `Authorization: Bearer …` (`ANTHROPIC_AUTH_TOKEN`: gateways, compatible vendors).
    Bearer(String),
}

impl fmt::Debug for Credential {
    // By hand, so that a credential never lands in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Credential::ApiKey(_) => "ApiKey(…)",
            Credential::Bearer(_) => "Bearer(…)",
        })
    }
}

/// Everything an [`AnthropicClient`] is built from (values, not environment). Its
/// `Debug` shows neither the credential nor header values.
#[derive(Clone, PartialEq)]
pub struct ClientConfig {
    pub base_url: String,
    pub credential: Credential,
    pub default_model: String,
    /// Extra headers sent with every request (`ANTHROPIC_CUSTOM_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// Beta names sent in `anthropic-beta` with every request (`ANTHROPIC_BETAS`).
    pub betas: Vec<String>,
    pub idle_timeout: Duration,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("credential", &self.credential)
            .field("default_model", &self.default_model)
            .field("headers", &header_names)
            .field("betas", &self.betas)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

/// A base URL as a client uses it: trimmed, without a trailing `/`; an error unless it
/// is an http(s) URL with a host.
pub fn check_base_url(base_url: &str) -> Result<String, ModelError> {
    let base_url = base_url.trim().trim_end_matches('/').to_string();
    let parsed = reqwest::Url::parse(&base_url).map_err(|e| {
        ModelError::Config(format!(
            "ANTHROPIC_BASE_URL {base_url:?} is not a URL ({e})"
        ))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ModelError::Config(format!(
            "ANTHROPIC_BASE_URL {base_url:?} must be an http:// or https:// URL"
        )));
    }
    Ok(base_url)
}

/// `ANTHROPIC_CUSTOM_HEADERS`: one `Name: value` per line; blank lines are skipped. A
/// line without a colon, with a name that is not a header name, or a value that cannot
/// be sent is an error naming the line (never its value: it may be a credential).
pub fn parse_custom_headers(text: &str) -> Result<Vec<(String, String)>, ModelError> {
    let mut headers = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| {
            ModelError::Config(format!(
                "ANTHROPIC_CUSTOM_HEADERS line {}: {why} (expected `Name: value`)",
                n + 1
            ))
        };
        let (name, value) = line.split_once(':').ok_or_else(|| bad("no colon"))?;
        let name = name.trim();
        let value = value.trim();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(bad("not a header name"));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(bad("the value has characters a header cannot carry"));
        }
        headers.push((name.to_string(), value.to_string()));
    }
    Ok(headers)
}

/// `ANTHROPIC_BETAS`: comma-separated names, blanks dropped.
pub fn parse_betas(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect()
}

/// A streaming client of the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    base_url: String,
    endpoint: String,
    credential: Credential,
    headers: Vec<(String, String)>,
    betas: Vec<String>,
    default_model: String,
    idle_timeout: Duration,
}

impl fmt::Debug for AnthropicClient {
    // By hand, so that the credential and header values never land in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("base_url", &self.base_url)
            .field("credential", &self.credential)
            .field("default_model", &self.default_model)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl AnthropicClient {
    /// A client for `base_url` (e.g. `https://api.anthropic.com`; a trailing `/` is
    /// tolerated) with the default idle timeout. Does no network I/O.
    ///
    /// Errors: [`ModelError::MissingApiKey`] for an empty key, [`ModelError::Config`]
    /// for a base URL that is not http(s).
    pub fn new(base_url: &str, api_key: &str, default_model: &str) -> Result<Self, ModelError> {
        AnthropicClient::with_config(ClientConfig {
            base_url: base_url.to_string(),
            credential: Credential::ApiKey(api_key.to_string()),
            default_model: default_model.to_string(),
            headers: Vec::new(),
            betas: Vec::new(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        })
    }

    /// A client from explicit values. Errors as [`AnthropicClient::new`].
    pub fn with_config(config: ClientConfig) -> Result<Self, ModelError> {
        let credential = match config.credential {
            Credential::ApiKey(key) if !key.trim().is_empty() => {
                Credential::ApiKey(key.trim().to_string())
            }
            Credential::Bearer(token) if !token.trim().is_empty() => {
                Credential::Bearer(token.trim().to_string())
            }
            _ => return Err(ModelError::MissingApiKey),
        };
        let base_url = check_base_url(&config.base_url)?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("flower/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelError::Config(format!("cannot set up HTTP: {}", error_chain(&e))))?;
        Ok(AnthropicClient {
            http,
            endpoint: format!("{base_url}/v1/messages"),
            base_url,
            credential,
            headers: config.headers,
            betas: config.betas,
            default_model: config.default_model.trim().to_string(),
            idle_timeout: config.idle_timeout,
        })
    }

    /// The `anthropic-beta` header of a request: the configured betas (`ANTHROPIC_BETAS`,
    /// then any `anthropic-beta` line of `ANTHROPIC_CUSTOM_HEADERS`), then those the
    /// request needs, each once.
    fn betas_for(&self, request: &MessagesRequest, model: &str) -> Vec<String> {
        let mut betas: Vec<String> = Vec::new();
        let mut add = |beta: &str| {
            let beta = beta.trim();
            if !beta.is_empty() && !betas.iter().any(|b| b == beta) {
                betas.push(beta.to_string());
            }
        };
        for beta in &self.betas {
            add(beta);
        }
        for (name, value) in &self.headers {
            if name.eq_ignore_ascii_case("anthropic-beta") {
                value.split(',').for_each(&mut add);
            }
        }
        if crate::model::models::wire_id(model).1 {
            add(crate::model::models::CONTEXT_1M_BETA);
        }
        // Adaptive thinking interleaves by itself; only a budget needs the beta.
        if matches!(request.thinking, Some(crate::model::Thinking::Budget(_)))
            && !(request.tools.is_empty() && request.server_tools.is_empty())
            && crate::model::models::info(model).interleaved_beta
        {
            add(crate::model::models::INTERLEAVED_THINKING_BETA);
        }
        for tool in &request.server_tools {
            if let Some(beta) = tool.beta() {
                add(beta);
            }
        }
        betas
    }

    /// Every header of a request, each name once: flower's own, then
    /// `ANTHROPIC_CUSTOM_HEADERS`, where a custom header replaces flower's of the same
    /// name (case-insensitive) and `anthropic-beta` values are merged into one header.
    fn headers_for(&self, betas: &[String]) -> reqwest::header::HeaderMap {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        let mut map = HeaderMap::new();
        let mut put = |name: &str, value: &str| {
            // Names and values were checked when the configuration was parsed.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                map.insert(name, value);
            }
        };
        match &self.credential {
            Credential::ApiKey(key) => put("x-api-key", key),
            Credential::Bearer(token) => put("authorization", &format!("Bearer {token}")),
        }
        put("anthropic-version", API_VERSION);
        put("content-type", "application/json");
        put("accept", "text/event-stream");
        for (name, value) in &self.headers {
            if !name.eq_ignore_ascii_case("anthropic-beta") {
                put(name, value);
            }
        }
        if !betas.is_empty() {
            put("anthropic-beta", &betas.join(","));
        }
        map
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// How long the client waits without a byte from the server.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Overrides the idle timeout (tests; callers with their own setting).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    async fn stream_impl(
        &self,
        request: &MessagesRequest,
        on_delta: &mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> Result<ModelReply, ModelError> {
        let model = if request.model.is_empty() {
            &self.default_model
        } else {
            &request.model
        };
        let body = body_with_model(request, model);
        let betas = self.betas_for(request, model);
        let send = self
            .http
            .post(&self.endpoint)
            .headers(self.headers_for(&betas))
            .body(body)
            .send();
        let mut response = match tokio::time::timeout(self.idle_timeout, send).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(ModelError::Connection(error_chain(&e))),
            Err(_) => {
                return Err(ModelError::Connection(format!(
                    "timed out after {} waiting for the response",
                    seconds(self.idle_timeout)
                )));
            }
        };
        if !response.status().is_success() {
            return Err(self.api_error(response).await);
        }
        if let Some(kind) = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            && !kind.contains("event-stream")
        {
            let kind = kind.to_string();
            let body = self.read_body(&mut response).await;
            return Err(ModelError::Protocol(format!(
                "expected text/event-stream, got {kind}: {}",
                snippet(&body)
            )));
        }

        let mut parser = SseParser::new();
        let mut assembler = MessageAssembler::new();
        let mut drained = 0usize;
        loop {
            // Once the reply is complete, only the end of the body is awaited, briefly.
            let wait = if assembler.is_complete() {
                DRAIN_TIMEOUT.min(self.idle_timeout)
            } else {
                self.idle_timeout
            };
            let chunk = match tokio::time::timeout(wait, response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    return assembler.finish(&format!("connection lost ({})", error_chain(&e)));
                }
                Err(_) if assembler.is_complete() => break,
                Err(_) => {
                    return Err(ModelError::Connection(format!(
                        "timed out: no data from the server for {} while streaming \
                         (after {} events)",
                        seconds(self.idle_timeout),
                        assembler.events_seen()
                    )));
                }
            };
            if assembler.is_complete() {
                // Bytes after `message_stop` are not part of this reply; a server that
                // keeps sending is not waited for.
                drained += chunk.len();
                if drained > MAX_ERROR_BODY {
                    break;
                }
                continue;
            }
            let mut failed = None;
            parser.feed_with(&chunk, |event| {
                if failed.is_none() && !assembler.is_complete() {
                    failed = assembler.handle(&event, on_delta).err();
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
        assembler.finish("the stream ended")
    }

    /// `POST {base}/v1/messages/count_tokens` with the request's prompt (model,
    /// system, messages, tools, thinking: what the model would read); its
    /// `input_tokens`. Bounded by the idle timeout like a message request.
    async fn count_impl(&self, request: &MessagesRequest) -> Result<u64, ModelError> {
        let model = if request.model.is_empty() {
            &self.default_model
        } else {
            &request.model
        };
        let body = count_body(request, model);
        let betas = self.betas_for(request, model);
        let mut headers = self.headers_for(&betas);
        headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        let send = self
            .http
            .post(format!("{}/v1/messages/count_tokens", self.base_url))
            .headers(headers)
            .body(body)
            .send();
        let mut response = match tokio::time::timeout(self.idle_timeout, send).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(ModelError::Connection(error_chain(&e))),
            Err(_) => {
                return Err(ModelError::Connection(format!(
                    "timed out after {} waiting for the token count",
                    seconds(self.idle_timeout)
                )));
            }
        };
        if !response.status().is_success() {
            return Err(self.api_error(response).await);
        }
        let text = self.read_body(&mut response).await;
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("input_tokens").and_then(Value::as_u64))
            .ok_or_else(|| {
                ModelError::Protocol(format!("count_tokens answered {}", snippet(&text)))
            })
    }

    /// The typed error for a non-2xx response.
    async fn api_error(&self, mut response: reqwest::Response) -> ModelError {
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let body = self.read_body(&mut response).await;
        let parsed: Option<Value> = serde_json::from_str(&body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        let field = |k: &str| error.and_then(|e| e.get(k)).and_then(Value::as_str);
        let kind = field("type")
            .map(str::to_string)
            .unwrap_or_else(|| documented_kind(status.as_u16()).to_string());
        let message = match field("message") {
            Some(m) => m.to_string(),
            None if !body.trim().is_empty() => snippet(&body),
            None => status
                .canonical_reason()
                .unwrap_or("no error body")
                .to_string(),
        };
        ModelError::Api {
            status: Some(status.as_u16()),
            kind,
            message,
            retry_after,
        }
    }

    /// Reads a (short) body as text, up to [`MAX_ERROR_BODY`] bytes; best effort.
    async fn read_body(&self, response: &mut reqwest::Response) -> String {
        let mut bytes = Vec::new();
        while bytes.len() < MAX_ERROR_BODY {
            match tokio::time::timeout(self.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
                _ => break,
            }
        }
        bytes.truncate(MAX_ERROR_BODY);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl ModelClient for AnthropicClient {
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        on_delta: &'a mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.stream_impl(request, on_delta))
    }

    fn count_tokens<'a>(
        &'a self,
        request: &'a MessagesRequest,
    ) -> BoxFuture<'a, Result<u64, ModelError>> {
        Box::pin(self.count_impl(request))
    }

    fn default_model(&self) -> &str {
        &self.default_model
    }

    fn base_url(&self) -> Option<&str> {
        Some(&self.base_url)
    }
}

/// The exact JSON body sent for `request` (`"stream": true`, with the prompt-caching
/// breakpoints). Deterministic: the same request gives the same bytes in any process,
/// so a resumed session reads the same cached prefix. The caller's messages are not
/// modified.
///
/// Breakpoints (`cache_control: {"type": "ephemeral"}`), at most
/// [`MAX_CACHE_BREAKPOINTS`] in all: the last tool, the system prompt, the last
/// cacheable block of the newest message (a string content becomes one text block for
/// that; thinking blocks and empty text cannot carry one), and, when the newest turn has
/// [`CACHE_LOOKBACK_BLOCKS`] blocks or more, the end of the previous turn. Breakpoints already present
/// in the messages are kept, except the oldest ones when the total would pass the limit.
pub fn request_body(request: &MessagesRequest) -> Vec<u8> {
    body_with_model(request, &request.model)
}

fn body_with_model(request: &MessagesRequest, model: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        model: &'a str,
        max_tokens: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        system: Option<[Value; 1]>,
        messages: Messages<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<Tools<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        thinking: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_config: Option<Value>,
        stream: bool,
    }
    // `claude-…[1m]` is asked for with a beta header; the id goes out without it.
    let model = crate::model::models::wire_id(model).0;

    let system = (!request.system.is_empty())
        .then(|| [json!({"type": "text", "text": request.system, "cache_control": ephemeral()})]);
    let tools = (!request.tools.is_empty() || !request.server_tools.is_empty())
        .then_some(Tools(&request.tools, &request.server_tools));
    let own = usize::from(system.is_some()) + usize::from(tools.is_some());
    let body = Body {
        model,
        max_tokens: request.max_tokens,
        system,
        messages: Messages::new(&request.messages, MAX_CACHE_BREAKPOINTS - own),
        tools,
        thinking: request.thinking.map(crate::model::Thinking::to_json),
        output_config: request
            .effort
            .map(|effort| json!({"effort": effort.as_str()})),
        stream: true,
    };
    // Serializing `Value`s and plain structs into a Vec cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The body of a count_tokens request: the prompt part of a message request (no
/// `max_tokens`, `stream` or `output_config`), with the same cache breakpoints so that
/// the counted prompt is the one that would be sent.
pub fn count_body(request: &MessagesRequest, model: &str) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        model: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        system: Option<[Value; 1]>,
        messages: Messages<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<Tools<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        thinking: Option<Value>,
    }
    let model = crate::model::models::wire_id(model).0;
    let system = (!request.system.is_empty())
        .then(|| [json!({"type": "text", "text": request.system, "cache_control": ephemeral()})]);
    let tools = (!request.tools.is_empty() || !request.server_tools.is_empty())
        .then_some(Tools(&request.tools, &request.server_tools));
    let own = usize::from(system.is_some()) + usize::from(tools.is_some());
    let body = Body {
        model,
        system,
        messages: Messages::new(&request.messages, MAX_CACHE_BREAKPOINTS - own),
        tools,
        thinking: request.thinking.map(crate::model::Thinking::to_json),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The tools, borrowed, then the server tools, with a breakpoint on the last one.
struct Tools<'a>(&'a [crate::model::ToolDef], &'a [crate::model::ServerTool]);

impl Serialize for Tools<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<Value>,
        }
        let total = self.0.len() + self.1.len();
        let mut seq = s.serialize_seq(Some(total))?;
        for (i, tool) in self.0.iter().enumerate() {
            seq.serialize_element(&Tool {
                name: &tool.name,
                description: &tool.description,
                input_schema: &tool.input_schema,
                cache_control: (i + 1 == total).then(ephemeral),
            })?;
        }
        for (i, tool) in self.1.iter().enumerate() {
            let mut json = tool.to_json();
            if self.0.len() + i + 1 == total
                && let Some(obj) = json.as_object_mut()
            {
                obj.insert("cache_control".into(), ephemeral());
            }
            seq.serialize_element(&json)?;
        }
        seq.end()
    }
}

/// The messages as sent: borrowed, except the few that get a breakpoint added or an
/// old one removed (so a long history is not copied on every turn).
struct Messages<'a>(Vec<Cow<'a, Value>>);

/// The API looks for an earlier cache entry at most this many blocks before a
/// breakpoint.
pub const CACHE_LOOKBACK_BLOCKS: usize = 20;

/// The message that ended the previous request (the one before the newest assistant
/// turn), when the newest turn is too long for the cache's lookback to reach back to
/// it from the newest breakpoint (many parallel tool calls): marking it too makes the
/// cache entry the previous request wrote there a hit.
fn previous_turn_end(messages: &[Value]) -> Option<usize> {
    let n = messages.len();
    if n < 3 || messages[n - 2].get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let blocks = |m: &Value| {
        m.get("content")
            .and_then(Value::as_array)
            .map_or(1, Vec::len)
    };
    let between = blocks(&messages[n - 2]) + blocks(&messages[n - 1]);
    (between >= CACHE_LOOKBACK_BLOCKS).then_some(n - 3)
}

impl<'a> Messages<'a> {
    fn new(messages: &'a [Value], budget: usize) -> Self {
        let previous = previous_turn_end(messages)
            .filter(|&i| budget >= 2 && with_breakpoint(&messages[i]).is_some());
        let budget = budget - usize::from(previous.is_some());
        let mut out: Vec<Cow<'a, Value>> = messages.iter().map(Cow::Borrowed).collect();
        let mut used = 0;
        if let Some(last) = out.last_mut()
            && let Some(marked) = with_breakpoint(last.as_ref())
        {
            *last = Cow::Owned(marked);
            used = 1;
        }
        // Breakpoints the caller put in the history: drop the oldest past the budget.
        // The newest message's block marked above is counted once, by `used`.
        let last_index = out.len().saturating_sub(1);
        let existing: usize = out
            .iter()
            .enumerate()
            .map(|(i, m)| count_breakpoints(m, i == last_index && used == 1))
            .sum();
        let mut excess = (existing + used).saturating_sub(budget);
        for (i, message) in out.iter_mut().enumerate() {
            if excess == 0 {
                break;
            }
            let skip_last = i == last_index && used == 1;
            if count_breakpoints(message, skip_last) == 0 {
                continue;
            }
            excess -= strip_breakpoints(message.to_mut(), excess, skip_last);
        }
        if let Some(i) = previous
            && let Some(marked) = with_breakpoint(out[i].as_ref())
        {
            // Its own old marks were counted against the budget above; one more block
            // marked on top of them stays within four only if none was there, so any
            // other mark in it goes.
            let mut marked = marked;
            let keep = breakpoint_blocks(&marked).len().saturating_sub(1);
            strip_breakpoints(&mut marked, keep, true);
            out[i] = Cow::Owned(marked);
        }
        Messages(out)
    }
}

impl Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for message in &self.0 {
            seq.serialize_element(message.as_ref())?;
        }
        seq.end()
    }
}

/// A copy of `message` with a breakpoint on its last cacheable content block, or
/// `None` when it has none.
fn with_breakpoint(message: &Value) -> Option<Value> {
    let mut message = message.clone();
    let obj = message.as_object_mut()?;
    match obj.get_mut("content")? {
        Value::String(text) if !text.is_empty() => {
            let text = std::mem::take(text);
            obj.insert(
                "content".into(),
                json!([{"type": "text", "text": text, "cache_control": ephemeral()}]),
            );
        }
        Value::Array(blocks) => {
            let block = blocks.iter_mut().rev().find(|b| cacheable(b))?;
            block
                .as_object_mut()?
                .insert("cache_control".into(), ephemeral());
        }
        _ => return None,
    }
    Some(message)
}

fn cacheable(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking" | "redacted_thinking") | None => false,
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        Some(_) => block.is_object(),
    }
}

/// The blocks of a message that carry a breakpoint, including blocks nested in a
/// `tool_result`, in document order.
fn breakpoint_blocks(message: &Value) -> Vec<(usize, Option<usize>)> {
    let mut found = Vec::new();
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        return found;
    };
    for (i, block) in blocks.iter().enumerate() {
        if let Some(inner) = block.get("content").and_then(Value::as_array) {
            for (j, nested) in inner.iter().enumerate() {
                if nested.get("cache_control").is_some() {
                    found.push((i, Some(j)));
                }
            }
        }
        if block.get("cache_control").is_some() {
            found.push((i, None));
        }
    }
    found
}

/// The marked block of the newest message is its last breakpoint; `skip_last` leaves it
/// out of the count.
///
/// Counts what [`breakpoint_blocks`] lists, but by scanning each object's few keys
/// rather than looking names up: this runs over every block of every message on every
/// turn, and hashing the names made it half of the cost of building a request body.
fn count_breakpoints(message: &Value, skip_last: bool) -> usize {
    fn field<'v>(value: &'v Value, name: &str) -> Option<&'v Value> {
        let object = value.as_object()?;
        object.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
    let Some(Value::Array(blocks)) = field(message, "content") else {
        return 0;
    };
    let mut n = 0;
    for block in blocks.iter().filter_map(Value::as_object) {
        for (key, value) in block {
            match (key.as_str(), value) {
                ("cache_control", _) => n += 1,
                ("content", Value::Array(inner)) => {
                    n += inner
                        .iter()
                        .filter(|b| field(b, "cache_control").is_some())
                        .count();
                }
                _ => {}
            }
        }
    }
    if skip_last { n.saturating_sub(1) } else { n }
}

/// Removes up to `max` breakpoints from `message`, oldest first; returns how many.
fn strip_breakpoints(message: &mut Value, max: usize, skip_last: bool) -> usize {
    let mut found = breakpoint_blocks(message);
    if skip_last {
        found.pop();
    }
    found.truncate(max);
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let mut removed = 0;
    for (i, nested) in found {
        let target = match nested {
            None => blocks.get_mut(i),
            Some(j) => blocks
                .get_mut(i)
                .and_then(|b| b.get_mut("content"))
                .and_then(Value::as_array_mut)
                .and_then(|inner| inner.get_mut(j)),
        };
        if let Some(Value::Object(block)) = target
            && block.shift_remove("cache_control").is_some()
        {
            removed += 1;
        }
    }
    removed
}

/// The error type the API documents for a status, for error bodies without one
/// (a proxy's HTML page, an empty body).
fn documented_kind(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        500 => "api_error",
        529 => "overloaded_error",
        _ => "http_error",
    }
}

/// An error and its sources, joined: reqwest's own text ("error sending request") says
/// nothing about why; the cause (connection refused, DNS) is in the chain.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// The model's reply text (all text blocks, concatenated): a convenience for callers.
pub fn reply_text(reply: &ModelReply) -> String {
    reply
        .content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect()
}
