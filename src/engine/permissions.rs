//! Permission rules: which tool calls an agent may make. A security boundary.
//! TODO (issue #2)

use serde_json::Value;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad permission rule {rule:?}: {why}")]
pub struct RuleError {
    pub rule: String,
    pub why: String,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// `message` is the tool_result text the model gets (starts with "Permission to use ").
    Deny { message: String },
}

/// Parsed allow and deny rules of one agent.
#[derive(Debug, Clone, Default)]
pub struct Permissions {}

impl Permissions {
    pub fn new(_allowed: &[String], _disallowed: &[String]) -> Result<Self, RuleError> {
        Ok(Permissions {})
    }

    /// Whether a tool is offered to the model at all.
    pub fn offers(&self, _tool: &str) -> bool {
        true
    }

    /// Checks one call. `workspace` resolves relative paths for path rules.
    pub fn check(&self, _tool: &str, _input: &Value, _workspace: &Path) -> Decision {
        Decision::Allow
    }
}
