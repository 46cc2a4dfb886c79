//! A message of a request (`{"role": …, "content": …}`), typed: the transcript's
//! content blocks ([`crate::content`]) under a role. JSON only where bytes go out
//! ([`canonical_json`]).

use crate::content::{Block, Content};
use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    /// `user` or `assistant`; any other role is none the API takes.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

/// One message of a conversation as sent: a role and its content (a string or blocks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMessage {
    pub role: Role,
    pub content: Content,
}

impl RequestMessage {
    /// A message of these blocks.
    pub fn blocks(role: Role, blocks: Vec<Block>) -> Self {
        RequestMessage {
            role,
            content: Content::Blocks(blocks),
        }
    }

    /// A user message saying `text` (a string content).
    pub fn user_text(text: &str) -> Self {
        RequestMessage {
            role: Role::User,
            content: Content::Text(text.to_string()),
        }
    }

    /// Content blocks it has (1 for a string content).
    pub(crate) fn block_count(&self) -> usize {
        match &self.content {
            Content::Text(_) => 1,
            Content::Blocks(blocks) => blocks.len(),
        }
    }
}

/// `value` as JSON, byte for byte what serializing the `serde_json::Value` it parses to
/// gives (the bytes every request has sent since the history was kept as text: a
/// resumed session's requests must be the live ones' to hit the prompt cache). Values
/// carried as written ([`crate::content::Raw`]: a tool's input, a server tool's result)
/// may hold whitespace or other escapes; only those go through a `Value`.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Serializing typed blocks (and the `Raw`s in them) cannot fail.
    let json = serde_json::to_string(value).unwrap_or_default();
    if super::canonical::is_canonical(&json) {
        return json;
    }
    serde_json::from_str::<serde_json::Value>(&json)
        .and_then(|tree| serde_json::to_string(&tree))
        .unwrap_or(json)
}
