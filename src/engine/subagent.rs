//! The tools that need the engine itself: `Task` (a sub-agent session) and `AskUser`.

use super::recovery::{RESUME_PROMPT, agent_id_for, retried_text};
use super::session::{is_hook_context, is_the_prompt};
use super::{
    AgentSpec, Conversation, Engine, EngineError, Event, Retried, Totals, ends_with_prompt,
};
use crate::content::Raw;
use crate::model::ToolDef;
use crate::model::classify::{ErrorClass, classify_error};
use crate::tools::ToolOutput;
use crate::tools::input::Field;
use crate::transcript::{self, Chain, Entry, Kind, Messages, ToolInput};
use serde::Deserialize;
use serde_json::json;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::tools::names::{ASK_USER, TASK};

/// What `AskUser` returns when nobody can answer (stdin is not a terminal).
pub const NOBODY_TO_ASK: &str =
    "没有人在终端前回答(标准输入不是终端)。不要再问了:按最合理的理解继续,并把你做的假设写下来。";

/// The name of the sub-agent used when `subagent_type` is absent or unknown and no
/// sub-agents were configured.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// The default sub-agent (`subagent_type` absent) when none were configured.
pub fn general_purpose() -> AgentSpec {
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
    let mut description = format!(
        "Launch a sub-agent to handle a task on its own, in a fresh context. It \
         cannot see this conversation: the prompt must say everything it needs. It \
         returns its final report. Available agent types: {}.",
        names.join(", ")
    );
    // The team's own agents (`.claude/agents`) say what they are for.
    for spec in subagents {
        if let Some(what) = &spec.description {
            description.push_str(&format!("\n- {}: {}", spec.name, what));
        }
    }
    ToolDef {
        name: TASK.into(),
        description,
        input_schema: Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
                "prompt": {"type": "string", "description": "The task for the agent to perform"},
                "subagent_type": {"type": "string", "description": "The type of agent to use", "enum": names}
            },
            "required": ["description", "prompt"],
            "additionalProperties": false
        })),
    }
}

/// What a `Task` call's input holds (a field of another type counts as absent).
#[derive(Deserialize, Default)]
struct TaskInput {
    #[serde(default)]
    prompt: Field<String>,
    #[serde(default)]
    subagent_type: Field<String>,
}

pub fn ask_user_definition() -> ToolDef {
    ToolDef {
        name: ASK_USER.into(),
        description: "Ask the user one question and wait for the typed answer. Ask one \
                      thing at a time, concretely; offer your best guess so the user can \
                      just confirm."
            .into(),
        input_schema: Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question to ask the user"}
            },
            "required": ["question"],
            "additionalProperties": false
        })),
    }
}

impl Engine {
    /// Runs the sub-agent of `Task` call `tool_use_id`, whose transcript lives under
    /// `subagents/agent-<id>` of the parent session ([`agent_id_for`]); returns its final
    /// text. A session that already exists there (the call was cut short by a kill or a
    /// retry of the coordinator) is continued, not started over. A failed request is
    /// retried by resuming the sub-agent's own session, as the [`Recovery`] says; only a
    /// sub-agent that truly failed ends the call with an error.
    // Long because a sub-agent's run (its key, a continued or new session, the retries
    // its `Recovery` allows, the totals it adds) is one piece; see the doc above.
    pub(super) async fn run_subagent(
        &self,
        parent: &Parent<'_>,
        tool_use_id: &str,
        input: &ToolInput,
        totals: &mut Totals,
    ) -> ToolOutput {
        let task: TaskInput = input.parse().unwrap_or_default();
        let Field::Given(prompt) = &task.prompt else {
            return ToolOutput::error("Task: missing required field `prompt`");
        };
        let wanted = match &task.subagent_type {
            Field::Given(name) => Some(name.as_str()),
            _ => None,
        };
        let default = general_purpose();
        let spec = match self.subagent_spec(wanted, &default) {
            Ok(spec) => spec.bound_by(parent.spec),
            Err(refused) => return refused,
        };
        let (sub, mut resume) = match self.subagent_place(parent, tool_use_id, &spec, prompt) {
            Ok(place) => place,
            Err(e) => return ToolOutput::error(format!("Task: {e}")),
        };
        let mut tries = 1;
        loop {
            let error = match self.subagent_try(parent, &sub, resume, totals).await {
                Ok(output) => return output,
                Err(EngineError::Interrupted) => {
                    return ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT);
                }
                Err(error) => error,
            };
            resume = true;
            let Some(recovery) = &self.config.recovery else {
                return self.subagent_failed(error, totals);
            };
            if !recovery.retry(&sub.agent_id, &error, tries).await {
                return ToolOutput::error(format!("sub-agent failed: {}", error.for_model()));
            }
            totals.subagent_retries.push(Retried {
                text: retried_text(&sub.agent_id, &error),
                kind: error.kind(),
            });
            tries += 1;
        }
    }

    /// The agent a `Task` call asks for (`subagent_type`), or the default one.
    fn subagent_spec<'a>(
        &'a self,
        wanted: Option<&str>,
        default: &'a AgentSpec,
    ) -> Result<&'a AgentSpec, ToolOutput> {
        let spec = match wanted {
            Some(name) => self.config.subagents.iter().find(|s| s.name == name),
            None => None,
        }
        .or(self.config.subagents.first())
        .unwrap_or(default);
        match wanted {
            Some(name) if name != spec.name && name != GENERAL_PURPOSE => Err(ToolOutput::error(
                format!("Task: unknown subagent_type {name:?}"),
            )),
            _ => Ok(spec),
        }
    }

    /// Where the sub-agent of call `tool_use_id` lives, and whether a session of it is
    /// already there to continue: a sub-agent cut short, when it was given this same
    /// task. A store that cannot say is asked again by the first try.
    fn subagent_place<'a>(
        &self,
        parent: &Parent<'_>,
        tool_use_id: &str,
        spec: &'a AgentSpec,
        prompt: &'a str,
    ) -> Result<(Sub<'a>, bool), crate::stores::StoreError> {
        let mut agent_id = agent_id_for(tool_use_id);
        let mut key = parent.key.sub(&format!("subagents/agent-{agent_id}"))?;
        let resume = match self.config.store.load_raw(&key) {
            Ok(Some(entries)) if first_prompt_is(&entries, prompt) => true,
            Ok(Some(_)) => {
                // Another task under the same id (a client that reuses call ids): a
                // sub-agent of its own.
                let salt = uuid::Uuid::new_v4().simple().to_string();
                agent_id = format!("{agent_id}-{}", &salt[..8]);
                key = parent.key.sub(&format!("subagents/agent-{agent_id}"))?;
                false
            }
            Ok(None) => false,
            Err(_) => true,
        };
        let session_id = format!("{}/{}", parent.session_id, agent_id);
        let sub = Sub {
            spec,
            prompt,
            task: tool_use_id.to_owned(),
            agent_id,
            key,
            session_id,
        };
        Ok((sub, resume))
    }

    /// One try of a sub-agent: new, or (`resume`) its session continued, pruned as a
    /// main session's is, with the resume prompt. Its final text, or why it failed.
    async fn subagent_try(
        &self,
        parent: &Parent<'_>,
        sub: &Sub<'_>,
        resume: bool,
        totals: &mut Totals,
    ) -> Result<ToolOutput, EngineError> {
        let fresh = || (Vec::new(), Some(sub.prompt.to_string()));
        let (entries, next) = match resume {
            false => fresh(),
            true => match self.load_for_resume(&sub.key) {
                // Nothing was stored before it failed: it starts as it would have.
                Err(EngineError::NoSession(_)) => fresh(),
                Err(error) => return Err(error),
                Ok(entries) => {
                    // A try that failed before any answer is repeated as it was.
                    let unanswered = ends_with_prompt(&entries, RESUME_PROMPT)
                        || ends_with_prompt(&entries, sub.prompt);
                    let next = (!unanswered).then(|| RESUME_PROMPT.to_string());
                    (entries, next)
                }
            },
        };
        self.emit(Event::SessionStarted {
            agent: sub.spec.name.clone(),
            session_id: sub.session_id.clone(),
            resumed: !entries.is_empty(),
            depth: parent.depth + 1,
        });
        let leaf = entries
            .iter()
            .rev()
            .find_map(|e| e.json.entry().and_then(|e| e.uuid));
        let chain = Chain::sidechain(&parent.session_id, &self.config.workspace, &sub.agent_id)
            .with_leaf(leaf);
        // A sub-agent sees the memory its parent session was started with.
        let mut conv = Conversation {
            depth: parent.depth + 1,
            context_limit: parent.context_limit,
            memory: parent.memory.clone(),
            mcp_tools: parent.mcp_tools.clone(),
            stop_on_interrupt: parent.together,
            task: Some(sub.task.clone()),
            messages: Messages::from_loaded(entries),
            ..Conversation::new(sub.spec, sub.key.clone(), chain)
        };
        let result = self.drive_from(&mut conv, next, Instant::now()).await;
        totals.usage.add(&result.usage);
        totals.add_cost(result.cost_usd);
        totals
            .denials
            .extend(result.permission_denials.iter().cloned());
        match result.outcome {
            Ok(_) => Ok(ToolOutput::ok(result.text)),
            Err(error @ EngineError::MaxTurns(_)) if !result.text.is_empty() => {
                Ok(ToolOutput::ok(format!(
                    "{}\n\n[sub-agent stopped: {}]",
                    result.text,
                    error.for_model()
                )))
            }
            Err(error) => Err(error),
        }
    }

    /// A sub-agent failed and nobody retries it here: an error that only the network or
    /// the server can fix is handed up (the step's retry continues this sub-agent's
    /// session); a fatal one (e.g. its prompt is too long) is the caller's to handle.
    pub(super) fn subagent_failed(&self, error: EngineError, totals: &mut Totals) -> ToolOutput {
        if self.config.recovery.is_none()
            && let Some(model_error) = error.model_error()
            && classify_error(model_error) != ErrorClass::Fatal
        {
            totals.subagent_error = Some(model_error.clone());
        }
        ToolOutput::error(format!("sub-agent failed: {}", error.for_model()))
    }

    pub(super) async fn ask_user(&self, input: &ToolInput) -> ToolOutput {
        #[derive(Deserialize, Default)]
        struct AskUserInput {
            #[serde(default)]
            question: Field<String>,
        }
        let asked: AskUserInput = input.parse().unwrap_or_default();
        let Field::Given(question) = &asked.question else {
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

/// Whether the first prompt of a stored sub-agent transcript is `prompt`.
fn first_prompt_is(entries: &[Entry], prompt: &str) -> bool {
    entries
        .iter()
        .find(|e| e.kind() == Kind::User && !is_hook_context(e))
        .is_some_and(|first| is_the_prompt(first, prompt))
}

/// What a sub-agent takes from the conversation that started it, copied out so that
/// several sub-agents can run while the parent records their results.
pub(super) struct Parent<'a> {
    pub(super) spec: &'a AgentSpec,
    pub(super) key: crate::stores::SessionKey,
    pub(super) session_id: String,
    pub(super) depth: u32,
    pub(super) context_limit: Option<u64>,
    pub(super) memory: std::sync::Arc<str>,
    pub(super) mcp_tools: std::sync::Arc<[crate::tools::mcp::McpTool]>,
    /// Its sub-agents run alongside others: a Ctrl-C stops them, and the parent asks
    /// the person once for all.
    pub(super) together: bool,
}

impl<'a> Parent<'a> {
    pub(super) fn of(conv: &Conversation<'a>) -> Self {
        Parent {
            spec: conv.spec,
            key: conv.key.clone(),
            session_id: conv.chain.session_id().to_string(),
            depth: conv.depth,
            context_limit: conv.context_limit,
            memory: conv.memory.clone(),
            mcp_tools: conv.mcp_tools.clone(),
            together: false,
        }
    }
}

/// A `Task` call's sub-agent: what it runs as, its task, and where it lives.
struct Sub<'a> {
    spec: &'a AgentSpec,
    prompt: &'a str,
    /// The `Task` call's id, as its events name it.
    task: String,
    agent_id: String,
    key: crate::stores::SessionKey,
    /// `<parent session>/<agent id>`, as the events name it.
    session_id: String,
}
