//! STUB with the agreed API; replaced by branch wt-model.
use super::{MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta};
use crate::BoxFuture;
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
pub struct AnthropicClient;
impl AnthropicClient {
    pub fn from_env(_model: Option<&str>) -> Result<Self, ModelError> {
        Err(ModelError::MissingApiKey)
    }
    pub fn base_url(&self) -> &str {
        ""
    }
}
impl ModelClient for AnthropicClient {
    fn stream<'a>(
        &'a self,
        _r: &'a MessagesRequest,
        _d: &'a mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async { Err(ModelError::MissingApiKey) })
    }
    fn default_model(&self) -> &str {
        DEFAULT_MODEL
    }
}
