//! Errors a model request can end with. Retrying is not decided here (see
//! `continuity::resilience`); these only report precisely what happened, and keep
//! the error behind it (the HTTP client's, a JSON parser's) as a typed `source()`.

use crate::error::Cause;
use std::time::Duration;

/// `PartialEq` compares causes by what they say ([`Cause`]): only tests compare errors.
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

    /// The request never got an answer: DNS, connect, TLS, reset, timeout. The cause
    /// is the HTTP client's error (`reqwest::Error`), or a `std::io::Error` of kind
    /// `TimedOut` when the server stopped answering within the idle timeout.
    #[error("API Error: Can't reach the API server ({})", said(.0))]
    Connection(#[source] Cause),

    /// The stream ended (or was cut) before `message_stop`; `cause` is the HTTP
    /// client's error when the connection broke.
    #[error("API Error: the stream ended before message_stop ({why})")]
    Incomplete {
        why: String,
        #[source]
        cause: Option<Cause>,
    },

    /// The server sent something that is not the Messages API protocol; `cause` is
    /// the parser's error when there is one.
    #[error("API Error: malformed response: {why}")]
    Protocol {
        why: String,
        #[source]
        cause: Option<Cause>,
    },

    /// flower's own configuration cannot work (e.g. `ANTHROPIC_BASE_URL` is not an
    /// http(s) URL). Like [`ModelError::MissingApiKey`], retrying cannot help.
    #[error("配置不对:{why}")]
    Config {
        why: String,
        #[source]
        cause: Option<Cause>,
    },
}

fn api_error_text(status: Option<u16>, kind: &str, message: &str) -> String {
    match status {
        Some(status) => format!("API Error: {status} {kind}: {message}"),
        None => format!("API Error: {kind}: {message}"),
    }
}

/// A cause with its own causes: the HTTP client's top line ("error sending request")
/// says nothing about why; the reason (connection refused, DNS) is further down.
fn said(cause: &Cause) -> String {
    crate::error::chain(cause.get())
}

impl ModelError {
    /// The request never got an answer, because of `cause`.
    pub fn connection(cause: impl std::error::Error + Send + Sync + 'static) -> ModelError {
        ModelError::Connection(Cause::new(cause))
    }

    /// No answer in time, `what` saying for what: a [`ModelError::Connection`] whose
    /// cause is a `std::io::Error` of kind `TimedOut`.
    pub fn timed_out(what: String) -> ModelError {
        ModelError::connection(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
    }

    /// A response that is not the protocol, `why` saying how.
    pub fn protocol(why: impl Into<String>) -> ModelError {
        ModelError::Protocol {
            why: why.into(),
            cause: None,
        }
    }

    /// A response that is not the protocol; `why` quotes the parser's `cause`.
    pub fn protocol_because(
        why: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> ModelError {
        ModelError::Protocol {
            why: why.into(),
            cause: Some(Cause::new(cause)),
        }
    }

    /// flower's configuration cannot work, `why` saying how.
    pub fn config(why: impl Into<String>) -> ModelError {
        ModelError::Config {
            why: why.into(),
            cause: None,
        }
    }

    /// flower's configuration cannot work; `why` quotes `cause`.
    pub fn config_because(
        why: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> ModelError {
        ModelError::Config {
            why: why.into(),
            cause: Some(Cause::new(cause)),
        }
    }

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
