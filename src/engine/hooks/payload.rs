//! What a hook reads on stdin (Claude Code's field names): the fields every event has,
//! then the event's own ([`EventFields`]), in that order.

use crate::transcript::ToolInput;
use serde::Serialize;

/// An event's own fields, in the order they are written.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum EventFields {
    SessionStart {
        /// `startup`, `resume` or `compact`.
        source: &'static str,
        agent_type: String,
    },
    UserPromptSubmit {
        prompt: String,
    },
    SessionEnd {
        reason: &'static str,
    },
    /// `Stop`, or `SubagentStop` (with the sub-agent's `agent_type`).
    Stop {
        stop_hook_active: bool,
        last_assistant_message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_type: Option<String>,
    },
    PreToolUse {
        tool_name: String,
        /// The call's input as the model wrote it.
        tool_input: ToolInput,
        tool_use_id: String,
    },
    PostToolUse {
        tool_name: String,
        tool_input: ToolInput,
        tool_use_id: String,
        tool_response: String,
    },
    PreCompact {
        /// Always `auto`: flower hands off on its own.
        trigger: &'static str,
        custom_instructions: String,
        handoff: Handoff,
    },
}

/// The handoff (换代) a `PreCompact` hook is told about.
#[derive(Debug, Clone, Serialize)]
pub struct Handoff {
    pub step: String,
    /// The generation the successor will be.
    pub generation: u32,
    pub reason: Option<String>,
}

/// The whole stdin of one firing.
#[derive(Serialize)]
pub(super) struct Stdin<'a> {
    pub session_id: &'a str,
    pub transcript_path: String,
    pub cwd: String,
    pub permission_mode: &'static str,
    pub hook_event_name: &'static str,
    #[serde(flatten)]
    pub fields: &'a EventFields,
}

impl Stdin<'_> {
    /// The JSON a hook reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Strings, numbers and JSON text: writing them cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}
