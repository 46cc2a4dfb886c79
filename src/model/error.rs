//! Errors a model request can end with. Retrying is not decided here (see
//! `continuity::resilience`); these only report precisely what happened.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// No `ANTHROPIC_API_KEY` in the environment.
    #[error(
        "没有设置 ANTHROPIC_API_KEY:先 export 你的 Anthropic API key,例如 `export ANTHROPIC_API_KEY=sk-ant-…`"
    )]
    MissingApiKey,

    /// The API answered with an error: an HTTP error status with an error body, or an
    /// `event: error` inside a 200 stream (then `status` is `None`).
    #[error("{}", api_error_text(*.status, .kind, .message))]
    Api {
        status: Option<u16>,
        /// The API's error `type`, e.g. `overloaded_error`.
        kind: String,
        message: String,
        /// From the `retry-after` header, when the server sent one.
        retry_after: Option<Duration>,
    },

    /// The request never got an answer: DNS, connect, TLS, reset, timeout.
    #[error("API Error: Can't reach the API server ({0})")]
    Connection(String),

    /// The stream ended (or was cut) before `message_stop`.
    #[error("API Error: the stream ended before message_stop ({0})")]
    Incomplete(String),

    /// The server sent something that is not the Messages API protocol.
    #[error("API Error: malformed response: {0}")]
    Protocol(String),

    /// flower's own configuration cannot work (e.g. `ANTHROPIC_BASE_URL` is not an
    /// http(s) URL). Like [`ModelError::MissingApiKey`], retrying cannot help.
    #[error("配置不对:{0}")]
    Config(String),
}

fn api_error_text(status: Option<u16>, kind: &str, message: &str) -> String {
    match status {
        Some(status) => format!("API Error: {status} {kind}: {message}"),
        None => format!("API Error: {kind}: {message}"),
    }
}

impl ModelError {
    /// The HTTP status, when the error came with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ModelError::Api { status, .. } => *status,
            _ => None,
        }
    }

    /// The server's `retry-after`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
