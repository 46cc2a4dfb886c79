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
use crate::model::sse::ErrorBody;
use crate::model::sse::{MessageAssembler, SseParser, snippet};
use crate::model::{MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta};
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

pub use crate::model::body::{CACHE_LOOKBACK_BLOCKS, MAX_CACHE_BREAKPOINTS};

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
        ModelError::config_because(format!("ANTHROPIC_BASE_URL {base_url:?} 不是 URL({e})"), e)
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ModelError::config(format!(
            "ANTHROPIC_BASE_URL {base_url:?} 要是 http:// 或 https:// 开头的 URL"
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
            ModelError::config(format!(
                "ANTHROPIC_CUSTOM_HEADERS 第 {} 行:{why}(要写成 `Name: value`)",
                n + 1
            ))
        };
        let (name, value) = line.split_once(':').ok_or_else(|| bad("没有冒号"))?;
        let name = name.trim();
        let value = value.trim();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(bad("不是合法的头名"));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(bad("值里有头里放不了的字符"));
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
    /// Parsed once: parsing it for every request (IDNA and all) was a measurable part
    /// of a turn's own work (#46).
    endpoint: reqwest::Url,
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
            .map_err(|e| {
                let why = format!("HTTP 客户端建不起来({})", crate::error::chain(&e));
                ModelError::config_because(why, e)
            })?;
        let endpoint = reqwest::Url::parse(&format!("{base_url}/v1/messages")).map_err(|e| {
            ModelError::config_because(format!("ANTHROPIC_BASE_URL {base_url:?} 不是 URL({e})"), e)
        })?;
        Ok(AnthropicClient {
            http,
            endpoint,
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

    // Long because one request's lifecycle (send under the connect timeout, the status,
    // the SSE read under the idle timeout) shares its timers and its error mapping.
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
        let body = crate::model::body::body_with_model(request, model);
        let betas = self.betas_for(request, model);
        let send = self
            .http
            .post(self.endpoint.clone())
            .headers(self.headers_for(&betas))
            .body(body);
        let mut response = self.send_within(send, "the response").await?;
        if let Some(kind) = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            && !kind.contains("event-stream")
        {
            let kind = kind.to_string();
            let body = self.read_body(&mut response).await;
            return Err(ModelError::protocol(format!(
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
                    let why = format!("connection lost ({})", crate::error::chain(&e));
                    return assembler.finish_broken(&why, e);
                }
                Err(_) if assembler.is_complete() => break,
                Err(_) => {
                    return Err(ModelError::timed_out(format!(
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
        let body = crate::model::body::count_body(request, model);
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
            .body(body);
        let mut response = self.send_within(send, "the token count").await?;
        let text = self.read_body(&mut response).await;
        #[derive(serde::Deserialize)]
        struct Counted {
            input_tokens: Option<u64>,
        }
        serde_json::from_str::<Counted>(&text)
            .ok()
            .and_then(|counted| counted.input_tokens)
            .ok_or_else(|| {
                ModelError::protocol(format!("count_tokens answered {}", snippet(&text)))
            })
    }

    /// Sends `request` and waits at most the idle timeout for its status line: a
    /// request that gets no answer is a connection error naming `waiting_for`, an
    /// error status is the API's error.
    async fn send_within(
        &self,
        request: reqwest::RequestBuilder,
        waiting_for: &str,
    ) -> Result<reqwest::Response, ModelError> {
        let response = match tokio::time::timeout(self.idle_timeout, request.send()).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(ModelError::connection(e)),
            Err(_) => {
                return Err(ModelError::timed_out(format!(
                    "timed out after {} waiting for {waiting_for}",
                    seconds(self.idle_timeout)
                )));
            }
        };
        if !response.status().is_success() {
            return Err(self.api_error(response).await);
        }
        Ok(response)
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
        let error = serde_json::from_str::<ErrorBody>(&body)
            .ok()
            .and_then(|parsed| parsed.error);
        let (kind, message) = error.map_or((None, None), |e| (e.kind, e.message));
        let kind = kind.unwrap_or_else(|| documented_kind(status.as_u16()).to_string());
        let message = match message {
            Some(m) => m,
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
/// [`MAX_CACHE_BREAKPOINTS`] in all: the last tool, the system prompt (its shared
/// block when it has one, see [`MessagesRequest::system_shared`]), the last
/// cacheable block of the newest message (a string content becomes one text block for
/// that; thinking blocks and empty text cannot carry one), and, when the newest turn has
/// [`CACHE_LOOKBACK_BLOCKS`] blocks or more, the end of the previous turn. Breakpoints already present
/// in the messages are kept, except the oldest ones when the total would pass the limit.
pub fn request_body(request: &MessagesRequest) -> Vec<u8> {
    crate::model::body::body_with_model(request, &request.model)
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

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// The model's reply text (all text blocks, concatenated): a convenience for callers.
pub fn reply_text(reply: &ModelReply) -> String {
    crate::content::text_of(&reply.content)
}
