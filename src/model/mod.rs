//! Model clients. The engine talks to a model only through [`ModelClient`], so that
//! other providers (an OpenAI-compatible client for local models) can plug in later.

pub mod anthropic;
pub mod body;
pub mod canonical;
pub mod classify;
pub mod error;
mod marks;
pub mod message;
pub mod models;
pub mod prices;
pub mod sse;
pub mod types;

pub use error::ModelError;
pub use message::{RequestMessage, Role};
pub use types::{
    Effort, History, MessagesRequest, ModelReply, ServerTool, ServerToolKind, ServerToolUsage,
    StreamDelta, Thinking, ToolDef, Usage, WebLimits,
};

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

    /// How many input tokens `request` would be (`POST /v1/messages/count_tokens`):
    /// the prompt as the model would read it, without sending it. A client that cannot
    /// count says so with an error; callers then go on without the figure.
    fn count_tokens<'a>(
        &'a self,
        request: &'a MessagesRequest,
    ) -> BoxFuture<'a, Result<u64, ModelError>> {
        let _ = request;
        Box::pin(async { Err(ModelError::config("这个客户端不会数 token")) })
    }

    /// The model used when a request names none.
    fn default_model(&self) -> &str;

    /// The base URL requests go to, so that an outage can be probed where the requests
    /// actually go (a gateway, not api.anthropic.com). `None`: nothing to probe.
    fn base_url(&self) -> Option<&str> {
        None
    }
}
