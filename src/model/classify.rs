//! Error classes: what an error means for the retry loop. Transient (wait and retry),
//! fatal (stop and tell the user what to fix), unknown. Fatal is checked first: a 401
//! text often mentions "connection" too. The numbers and the retry loop itself belong
//! to `continuity::resilience`; this only says what an error is.

use super::ModelError;
use std::fmt;

/// What to do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The network or the server will likely recover: wait, back off, retry.
    Transient,
    /// Retrying cannot help (a bad key, no credit, a request that is too large): stop
    /// and tell the user what to fix.
    Fatal,
    /// Neither; retried only if `retry_unknown`.
    Unknown,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Fatal => "fatal",
            ErrorClass::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure an error is, beyond its retry class: what the layers above act
/// on by kind (a full window hands off, or fails the judge's round) instead of reading
/// the error's text again. Decided here, once, from the typed error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorKind {
    /// The request did not fit the model's context window: the API's 400 "prompt is
    /// too long", or a reply cut with `stop_reason: model_context_window_exceeded`.
    ContextWindowFull,
    /// Anything else.
    #[default]
    Other,
}

/// The API's `stop_reason` when a reply was cut because the context window is full.
pub const WINDOW_EXCEEDED_STOP: &str = "model_context_window_exceeded";

/// Phrases (lowercase) of an error saying the request did not fit the context window.
/// Such an error is also fatal: the same request cannot fit on a retry.
const WINDOW_PHRASES: &[&str] = &[
    "prompt is too long",
    WINDOW_EXCEEDED_STOP,
    "context length",
    "context_length",
    "context window",
];

/// What kind of failure a model error is (see [`ErrorKind`]), by its variant: only
/// the API's own error can say the window is full, and the API says it only in its
/// message (a 400 `invalid_request_error` "prompt is too long: … tokens > …
/// maximum"), so that message is read; flower's own errors (a lost connection, a
/// malformed stream) never are, whatever their causes say.
pub fn error_kind(err: &ModelError) -> ErrorKind {
    match err {
        ModelError::Api { message, .. }
            if WINDOW_PHRASES
                .iter()
                .any(|p| message.to_lowercase().contains(p)) =>
        {
            ErrorKind::ContextWindowFull
        }
        _ => ErrorKind::Other,
    }
}

/// Phrases (lowercase) that mean retrying cannot help (besides [`WINDOW_PHRASES`]).
const FATAL_PHRASES: &[&str] = &[
    "authentication",
    "invalid x-api-key",
    "x-api-key",
    "api key",
    "api_key",
    "unauthorized",
    "permission",
    "forbidden",
    "invalid_request_error",
    "bad request",
    "not_found",
    "model not found",
    "billing",
    "credit balance",
    "request_too_large",
    "request too large",
    "payload too large",
];

/// HTTP statuses that are fatal when they stand as a number of their own in a text.
const FATAL_CODES: &[&str] = &["400", "401", "403", "404", "413"];

/// Phrases (lowercase) of errors the network or the server recovers from.
const TRANSIENT_PHRASES: &[&str] = &[
    "connection refused",
    "connection reset",
    "connection closed",
    "connection aborted",
    "connection error",
    "closed connection",
    "close_notify",
    "broken pipe",
    "econnrefused",
    "econnreset",
    "econnaborted",
    "epipe",
    "ehostunreach",
    "enetunreach",
    "enetdown",
    "host is unreachable",
    "no route to host",
    "network is unreachable",
    "network is down",
    "enotfound",
    "eai_again",
    "failed to lookup address",
    "dns error",
    "name resolution",
    "name or service not known",
    "timed out",
    "timeout",
    "etimedout",
    "deadline has elapsed",
    "can't reach the api server",
    "cannot reach the api server",
    "error sending request",
    "rate_limit_error",
    "rate limit",
    "too many requests",
    "api_error",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
    "overloaded",
    "message_stop",
    "incomplete",
    "unexpected eof",
    "unexpected end of file",
    "error decoding response body",
];

/// HTTP statuses that are transient when they stand as a number of their own.
const TRANSIENT_CODES: &[&str] = &["408", "409", "429", "500", "502", "503", "504", "529"];

/// Classifies an error by its text, case-insensitively. Fatal is checked before
/// transient: an authentication failure's text often says "connection" as well, and
/// waiting on it would wait forever.
pub fn classify(text: &str) -> ErrorClass {
    let lower = text.to_lowercase();
    let matches = |phrases: &[&str], codes: &[&str]| {
        phrases.iter().any(|p| lower.contains(p)) || codes.iter().any(|c| has_code(&lower, c))
    };
    if matches(WINDOW_PHRASES, &[]) || matches(FATAL_PHRASES, FATAL_CODES) {
        ErrorClass::Fatal
    } else if matches(TRANSIENT_PHRASES, TRANSIENT_CODES) {
        ErrorClass::Transient
    } else {
        ErrorClass::Unknown
    }
}

/// Whether `code` occurs in `text` as a number of its own: not inside a longer number or
/// an id (`req_011C4013…`, port `5000`, `30400ms`).
fn has_code(text: &str, code: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(code).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + code.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// Classifies a model error by its variant, and an API error by its status and kind;
/// only an API error whose status and kind both say nothing is classified by the
/// API's text ([`classify`]). A cause kept inside flower's own errors is never read
/// as text: a connection that failed is transient whatever its cause says.
pub fn classify_error(err: &ModelError) -> ErrorClass {
    match err {
        ModelError::MissingApiKey | ModelError::Config { .. } => ErrorClass::Fatal,
        ModelError::Connection(_) | ModelError::Incomplete { .. } => ErrorClass::Transient,
        ModelError::Protocol { .. } => ErrorClass::Unknown,
        ModelError::Api { status, kind, .. } => {
            if let Some(class) = status.and_then(classify_status) {
                return class;
            }
            match kind.as_str() {
                "authentication_error"
                | "permission_error"
                | "invalid_request_error"
                | "not_found_error"
                | "request_too_large"
                | "billing_error" => ErrorClass::Fatal,
                "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error" => {
                    ErrorClass::Transient
                }
                _ => classify(&err.to_string()),
            }
        }
    }
}

/// What the user has to fix after a fatal error, when flower can tell: a rejected key, a
/// key without access, an exhausted balance, an unknown model or endpoint.
pub fn fatal_hint(err: &ModelError) -> Option<&'static str> {
    let ModelError::Api {
        status,
        kind,
        message,
        ..
    } = err
    else {
        return None;
    };
    // The API names billing trouble only in its message when the kind is generic.
    let text = message.to_lowercase();
    if *status == Some(401) || kind == "authentication_error" {
        Some(
            "API 不认这个 key:检查 ANTHROPIC_API_KEY(写错了、被吊销了,或者不是 Anthropic 的 key),export 一个有效的(例如 `export ANTHROPIC_API_KEY=sk-ant-…`)再跑 flower。",
        )
    } else if kind == "billing_error" || text.contains("credit balance") || text.contains("billing")
    {
        Some("ANTHROPIC_API_KEY 的账户付不起请求了:充值(或换一个 key)再跑 flower。")
    } else if *status == Some(403) || kind == "permission_error" {
        Some("ANTHROPIC_API_KEY 没有这个权限:检查 key 的权限和模型(--model / ANTHROPIC_MODEL)。")
    } else if *status == Some(404) || kind == "not_found_error" {
        Some("找不到:检查模型名(--model / ANTHROPIC_MODEL)和 ANTHROPIC_BASE_URL。")
    } else {
        None
    }
}

fn classify_status(status: u16) -> Option<ErrorClass> {
    match status {
        400 | 401 | 403 | 404 | 413 => Some(ErrorClass::Fatal),
        408 | 409 | 429 | 500..=599 => Some(ErrorClass::Transient),
        _ => None,
    }
}
