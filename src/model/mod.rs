//! Model clients. The engine talks to a model only through [`ModelClient`], so that
//! other providers (an OpenAI-compatible client for local models) can plug in later.

pub mod anthropic;
pub mod body;
pub mod classify;
pub mod error;
pub mod models;
pub mod prices;
pub mod sse;
pub mod types;

pub use error::ModelError;
pub use types::{History, MessagesRequest, ModelReply, StreamDelta, Thinking, ToolDef, Usage};

use crate::future::BoxFuture;

/// One streamed request to a model.
///
/// `on_delta` is called as the reply streams in (text, thinking, tool-call starts), so a
/// front end can show progress; the finished message comes back as [`ModelReply`] only
/// once the stream has ended properly (`message_stop`). Anything else is an error.
pub trait ModelClient: Send + Sync {
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        on_delta: &'a mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;

    /// The model used when a request names none.
    fn default_model(&self) -> &str;

    /// The base URL requests go to, so that an outage can be probed where the requests
    /// actually go (a gateway, not api.anthropic.com). `None`: nothing to probe.
    fn base_url(&self) -> Option<&str> {
        None
    }
}
