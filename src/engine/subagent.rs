//! The tools that need the engine itself: `Task` (a sub-agent session) and `AskUser`.

use super::{AgentSpec, Conversation, Engine, Event, RunError, Totals};
use crate::model::ToolDef;
use crate::model::classify::{ErrorClass, classify_error};
use crate::tools::ToolOutput;
use crate::transcript::Chain;
use serde_json::{Value, json};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::tools::names::{ASK_USER, TASK};

/// What `AskUser` returns when nobody can answer (stdin is not a terminal).
pub const NOBODY_TO_ASK: &str =
    "没有人在终端前回答(标准输入不是终端)。不要再问了:按最合理的理解继续,并把你做的假设写下来。";

/// The name of the sub-agent used when `subagent_type` is absent or unknown and no
/// sub-agents were configured.
pub const GENERAL_PURPOSE: &str = "general-purpose";

pub(super) fn general_purpose() -> AgentSpec {
    AgentSpec::new(
        GENERAL_PURPOSE,
        "You are a sub-agent of a coding harness. Do the task you are given in the \
         workspace with the tools you have, check your work, and end with a short report \
         of what you did and what you found: it is all the caller will see.",
    )
    .disallowed_tools([TASK, ASK_USER])
}

pub fn task_definition(subagents: &[AgentSpec]) -> ToolDef {
    let names: Vec<String> = if subagents.is_empty() {
        vec![GENERAL_PURPOSE.to_string()]
    } else {
        subagents.iter().map(|s| s.name.clone()).collect()
    };
    ToolDef {
        name: TASK.into(),
        description: format!(
            "Launch a sub-agent to handle a task on its own, in a fresh context. It \
             cannot see this conversation: the prompt must say everything it needs. It \
             returns its final report. Available agent types: {}.",
            names.join(", ")
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
                "prompt": {"type": "string", "description": "The task for the agent to perform"},
                "subagent_type": {"type": "string", "description": "The type of agent to use", "enum": names}
            },
            "required": ["description", "prompt"],
            "additionalProperties": false
        }),
    }
}

pub fn ask_user_definition() -> ToolDef {
    ToolDef {
        name: ASK_USER.into(),
        description: "Ask the user one question and wait for the typed answer. Ask one \
                      thing at a time, concretely; offer your best guess so the user can \
                      just confirm."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question to ask the user"}
            },
            "required": ["question"],
            "additionalProperties": false
        }),
    }
}

impl Engine {
    /// Runs a sub-agent whose transcript lives under `subagents/agent-<id>` of the
    /// parent session; returns its final text.
    pub(super) async fn run_subagent(
        &self,
        parent: &Conversation<'_>,
        input: &Value,
        totals: &mut Totals,
    ) -> ToolOutput {
        let Some(prompt) = input.get("prompt").and_then(Value::as_str) else {
            return ToolOutput::error("Task: missing required field `prompt`");
        };
        let wanted = input.get("subagent_type").and_then(Value::as_str);
        let default = general_purpose();
        let spec = match wanted {
            Some(name) => self.config.subagents.iter().find(|s| s.name == name),
            None => None,
        }
        .or(self.config.subagents.first())
        .unwrap_or(&default);
        if let Some(name) = wanted
            && name != spec.name
            && name != GENERAL_PURPOSE
        {
            return ToolOutput::error(format!("Task: unknown subagent_type {name:?}"));
        }
        let agent_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
        let key = match parent.key.sub(&format!("subagents/agent-{agent_id}")) {
            Ok(key) => key,
            Err(e) => return ToolOutput::error(format!("Task: {e}")),
        };
        self.emit(Event::SessionStarted {
            agent: spec.name.clone(),
            session_id: format!("{}/{}", parent.chain.session_id(), agent_id),
            resumed: false,
            depth: parent.depth + 1,
        });
        let chain = Chain::sidechain(parent.chain.session_id(), &self.config.workspace, &agent_id);
        // A sub-agent sees the memory its parent session was started with.
        let mut conv = Conversation {
            depth: parent.depth + 1,
            context_limit: parent.context_limit,
            memory: parent.memory.clone(),
            mcp_tools: parent.mcp_tools.clone(),
            ..Conversation::new(spec, key, chain)
        };
        let result = self
            .drive(&mut conv, Value::String(prompt.to_string()), Instant::now())
            .await;
        totals.usage.add(&result.usage);
        totals.add_cost(result.cost_usd);
        totals
            .denials
            .extend(result.permission_denials.iter().cloned());
        match &result.outcome {
            Ok(_) => ToolOutput::ok(result.text),
            Err(error @ RunError::MaxTurns(_)) if !result.text.is_empty() => {
                ToolOutput::ok(format!("{}\n\n[sub-agent stopped: {error}]", result.text))
            }
            Err(error) => {
                // A failed request is the step's to retry (resuming this session): an
                // error that only the network or the server can fix is handed up rather
                // than reported to the caller as the sub-agent's answer. A fatal one
                // (e.g. the sub-agent's prompt is too long) is the caller's to handle.
                if let Some(model_error) = error.model_error()
                    && classify_error(model_error) != ErrorClass::Fatal
                {
                    totals.subagent_error = Some(model_error.clone());
                }
                ToolOutput::error(format!("sub-agent failed: {error}"))
            }
        }
    }

    pub(super) async fn ask_user(&self, input: &Value) -> ToolOutput {
        let Some(question) = input.get("question").and_then(Value::as_str) else {
            return ToolOutput::error("AskUser: missing required field `question`");
        };
        let Some(asker) = &self.config.asker else {
            return ToolOutput::ok(NOBODY_TO_ASK);
        };
        // A Ctrl-C cancels the question like any running tool; the line reader is
        // cancel-safe, so the next line goes to the after-interrupt prompt.
        let ask = async {
            match asker.ask(question).await {
                Some(answer) => ToolOutput::ok(answer),
                None => ToolOutput::ok(NOBODY_TO_ASK),
            }
        };
        self.until_interrupted(ask, &CancellationToken::new()).await
    }
}
