//! How a sub-agent gets past a blip: the engine asks a [`Recovery`] (the continuity
//! layer's `Resilience`, handed down by the runtime) whether and when to try again, and
//! resumes the sub-agent's own session, exactly as a step's main session is resumed.
//!
//! A sub-agent's id is derived from the `tool_use` id of the `Task` call that started
//! it ([`agent_id_for`]), so a coordinator woken after a kill (or retried) knows which
//! session its unanswered `Task` call was running, without anything having been written
//! for it: the call's id is in the coordinator's transcript. A finished `Task` result
//! also records it, as Claude Code does (`toolUseResult.agentId`).

use super::EngineError;
use crate::future::BoxFuture;

/// Sent when a retry resumes the session of an interrupted run (a step's main session or
/// a sub-agent's). Exactly this text: it names no error (spec 接续.md, 韧性).
pub const RESUME_PROMPT: &str =
    "上一轮在中途被打断,没有跑完。检查一下工作台里已经落盘的东西,从中断处接着做,不要重头来过。";

/// An error a sub-agent got past by retrying (resuming its session).
#[derive(Debug, Clone, PartialEq)]
pub struct Retried {
    /// `sub-agent <id>: <error>`.
    pub text: String,
    pub kind: crate::model::classify::ErrorKind,
}

/// Decides whether a failed sub-agent run is tried again.
pub trait Recovery: Send + Sync {
    /// Try number `tries` (1-based) of a sub-agent ended with `error`. Waits as the
    /// retry policy says (an outage waited out, then the backoff) and returns true to
    /// try again, or false at once when the error is not worth a retry or the attempts
    /// are spent: the sub-agent has then truly failed.
    fn retry<'a>(
        &'a self,
        agent_id: &'a str,
        error: &'a EngineError,
        tries: u32,
    ) -> BoxFuture<'a, bool>;
}

/// How an error a sub-agent got past is recorded (`errors[]` of the step's row).
pub fn retried_text(agent_id: &str, error: &EngineError) -> String {
    format!("sub-agent {agent_id}: {error}")
}

/// The id of the sub-agent a `Task` call runs: the call's `tool_use` id, kept to the
/// characters a store key takes (`[A-Za-z0-9_-]`, as the API's ids are).
pub fn agent_id_for(tool_use_id: &str) -> String {
    let id: String = tool_use_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    if id.is_empty() {
        // A call without a usable id: nobody can find this sub-agent again anyway.
        uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
    } else {
        id
    }
}
