//! The agent engine: the loop of model turns and tool calls that makes one session.
//!
//! One [`Engine::run`] is one session. Its id is minted (or taken from the session being
//! resumed) before the first request and reported at once through `on_session`, so the
//! caller can persist it before anything else happens. Every transcript entry is
//! appended to the store the moment it exists: the prompt, each assistant message when
//! its stream completes, each tool result when its tool finishes. A SIGKILL loses at most
//! the reply still streaming.

pub mod bash_rules;
pub mod interrupt;
pub mod permissions;
pub mod spec;
mod subagent;

pub use crate::events::{Event, EventSink};
pub use interrupt::Interrupt;
pub use spec::AgentSpec;

use crate::BoxFuture;
use crate::model::{MessagesRequest, ModelClient, ModelError, StreamDelta, ToolDef, Usage};
use crate::stores::{PruningSessionStore, SessionKey, SessionStore};
use crate::tools::{ProcessGroups, Tool, ToolContext, ToolOutput};
use crate::transcript::{self, Chain, Messages};
use permissions::{Decision, Permissions};
use serde::Serialize;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Default `max_tokens` of a request; `FLOWER_MAX_TOKENS` overrides it.
pub const DEFAULT_MAX_TOKENS: u32 = 16_384;

/// What is sent when the user interrupted a reply and then just pressed Enter.
pub const CONTINUE_AFTER_INTERRUPT: &str = "继续。";

/// Answers an agent's question (the `AskUser` tool). `None`: nobody is there to answer.
pub trait Asker: Send + Sync {
    fn ask<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<String>>;
}

/// After a Ctrl-C, asks the user for a line: `Some(text)` is sent as the next user
/// message, `Some("")` just continues, `None` means nobody answered (continue too).
pub type InterruptPrompt = Arc<dyn Fn() -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// Everything an engine needs.
pub struct EngineConfig {
    pub model: Arc<dyn ModelClient>,
    pub store: Arc<PruningSessionStore>,
    pub project_key: String,
    /// Canonical workspace path.
    pub workspace: PathBuf,
    /// Canonical run directory.
    pub run_dir: PathBuf,
    pub events: EventSink,
    pub max_tokens: u32,
    /// Agents the `Task` tool can start, by name (`subagent_type`); the first is the
    /// default. Empty: a general-purpose agent with the file and shell tools.
    pub subagents: Vec<AgentSpec>,
    pub asker: Option<Arc<dyn Asker>>,
    pub interrupt: Interrupt,
    pub on_interrupt: Option<InterruptPrompt>,
    /// Where the Bash tool registers running commands (killed on a fatal signal).
    pub processes: ProcessGroups,
    /// The sandbox of Bash commands; each agent gets it narrowed by its rights
    /// ([`Permissions::sandbox`]).
    pub sandbox: crate::tools::sandbox::SandboxPolicy,
}

/// How a run gets its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStart {
    /// A new session id.
    New,
    /// Continue this session: same id, same chain.
    Resume(String),
    /// Copy this session's history into a new session id and continue there; the
    /// original is untouched.
    Fork(String),
}

/// One run of an agent.
pub struct RunRequest<'a> {
    pub spec: &'a AgentSpec,
    /// The user message that starts (or continues) the session.
    pub prompt: String,
    pub start: SessionStart,
    /// Called with the session id the moment it exists in the store (its first prompt
    /// written), before any model request.
    pub on_session: Option<&'a (dyn Fn(&str) + Send + Sync)>,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model ended its turn without tool calls.
    EndTurn,
    /// `max_turns` was reached.
    MaxTurns,
    /// A model request failed; `RunResult::model_error` says how.
    ModelError,
    /// Something else made the run impossible (store, bad rules, unknown session).
    Fatal,
}

/// A tool call the permission rules refused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Denial {
    pub tool_name: String,
    pub tool_use_id: String,
    pub tool_input: Value,
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub session_id: String,
    /// The final assistant text (of the last turn that had text).
    pub text: String,
    pub ok: bool,
    pub error: Option<String>,
    pub model_error: Option<ModelError>,
    pub stop: Stop,
    pub num_turns: u32,
    /// Summed over all turns, sub-agents included.
    pub usage: Usage,
    /// `None` when a model's price is unknown.
    pub cost_usd: Option<f64>,
    /// Context size of the last turn of the main agent, tokens.
    pub context: u64,
    pub permission_denials: Vec<Denial>,
    pub duration: Duration,
    /// Whether an existing session was continued.
    pub resumed: bool,
}

impl RunResult {
    fn failed(session_id: &str, stop: Stop, error: String, started: Instant) -> Self {
        RunResult {
            session_id: session_id.to_string(),
            text: String::new(),
            ok: false,
            error: Some(error),
            model_error: None,
            stop,
            num_turns: 0,
            usage: Usage::default(),
            cost_usd: Some(0.0),
            context: 0,
            permission_denials: Vec::new(),
            duration: started.elapsed(),
            resumed: false,
        }
    }
}

/// The agent engine. Cheap to share: wrap it in an `Arc`.
pub struct Engine {
    config: EngineConfig,
    tools: Vec<Box<dyn Tool>>,
}

/// One conversation being driven: the main session or a sub-agent's side chain.
struct Conversation<'a> {
    spec: &'a AgentSpec,
    key: SessionKey,
    chain: Chain,
    messages: Messages,
    depth: u32,
    /// Told the session id once the first prompt is stored: a session id in lineage
    /// then always names a session that exists in the store.
    announce: Option<&'a (dyn Fn(&str) + Send + Sync)>,
}

/// Running totals of a run.
struct Totals {
    num_turns: u32,
    usage: Usage,
    cost_usd: Option<f64>,
    context: u64,
    denials: Vec<Denial>,
    text: String,
    /// A sub-agent's request failed with an error worth retrying (the network, an
    /// overload): the whole run stops with it, so that the step's retry resumes the
    /// session instead of the caller being fed "sub-agent failed: API Error …".
    subagent_error: Option<ModelError>,
}

impl Totals {
    fn new() -> Self {
        Totals {
            num_turns: 0,
            usage: Usage::default(),
            cost_usd: Some(0.0),
            context: 0,
            denials: Vec::new(),
            text: String::new(),
            subagent_error: None,
        }
    }

    fn add_cost(&mut self, cost: Option<f64>) {
        self.cost_usd = match (self.cost_usd, cost) {
            (Some(total), Some(cost)) => Some(total + cost),
            _ => None,
        };
    }
}

impl Engine {
    pub fn new(config: EngineConfig) -> Self {
        Engine {
            config,
            tools: crate::tools::builtin(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The store (pruning on load) this engine writes to.
    pub fn store(&self) -> &Arc<PruningSessionStore> {
        &self.config.store
    }

    fn emit(&self, event: Event) {
        (self.config.events)(&event);
    }

    /// Runs one session to its end. Never panics; every failure is in the result.
    pub async fn run(&self, request: RunRequest<'_>) -> RunResult {
        let started = Instant::now();
        let (session_id, history, resumed) = match self.open_session(&request.start) {
            Ok(opened) => opened,
            Err(error) => {
                let id = match &request.start {
                    SessionStart::Resume(id) | SessionStart::Fork(id) => id.clone(),
                    SessionStart::New => String::new(),
                };
                return RunResult::failed(&id, Stop::Fatal, error, started);
            }
        };
        self.emit(Event::SessionStarted {
            agent: request.spec.name.clone(),
            session_id: session_id.clone(),
            resumed,
            depth: 0,
        });
        let key = SessionKey::main(&self.config.project_key, &session_id);
        let leaf = transcript::resume_leaf(&history).map(str::to_string);
        let mut conversation = Conversation {
            spec: request.spec,
            key,
            chain: Chain::new(&session_id, &self.config.workspace).with_leaf(leaf),
            messages: Messages::from_entries(&history),
            depth: 0,
            announce: request.on_session,
        };
        let mut result = self
            .drive(&mut conversation, Value::String(request.prompt), started)
            .await;
        result.resumed = resumed;
        result
    }

    /// Finds or creates the session: its id, the (pruned) history to continue from, and
    /// whether it is a continuation.
    fn open_session(&self, start: &SessionStart) -> Result<(String, Vec<Value>, bool), String> {
        let project = &self.config.project_key;
        match start {
            SessionStart::New => Ok((uuid::Uuid::new_v4().to_string(), Vec::new(), false)),
            SessionStart::Resume(id) => {
                let key = SessionKey::main(project, id);
                let history = self.load_for_resume(&key)?;
                Ok((id.clone(), history, true))
            }
            SessionStart::Fork(id) => {
                let source = SessionKey::main(project, id);
                let raw = self
                    .config
                    .store
                    .load_raw(&source)
                    .map_err(|e| format!("cannot read session {id}: {e}"))?
                    .ok_or_else(|| format!("no session {id} to fork in the store"))?;
                let new_id = uuid::Uuid::new_v4().to_string();
                let copied: Vec<Value> = raw
                    .into_iter()
                    .map(|mut entry| {
                        if let Some(obj) = entry.as_object_mut() {
                            obj.insert("sessionId".into(), new_id.clone().into());
                            obj.insert("forkedFrom".into(), id.clone().into());
                        }
                        entry
                    })
                    .collect();
                let key = SessionKey::main(project, &new_id);
                self.config
                    .store
                    .append(&key, &copied)
                    .map_err(|e| format!("cannot write the fork: {e}"))?;
                let history = self.load_for_resume(&key)?;
                Ok((new_id, history, false))
            }
        }
    }

    /// Loads what a resumed session is fed. Entries the pruning layer had to add (a
    /// result for a tool call that never got one) become part of the conversation now,
    /// so they are written, and the chain continues from them.
    fn load_for_resume(&self, key: &SessionKey) -> Result<Vec<Value>, String> {
        let store = &self.config.store;
        // One pass: parsing and pruning fused in the store, no copy of the raw transcript.
        let pruned = store
            .load(key)
            .map_err(|e| format!("cannot read session {}: {e}", key.session_id))?
            .ok_or_else(|| format!("no session {} in the store", key.session_id))?;
        let added: Vec<Value> = pruned
            .iter()
            .filter(|e| crate::stores::prune::is_synthesized_result(e))
            .cloned()
            .collect();
        // Their uuids are idempotency keys: appending one that is already stored is a no-op.
        if !added.is_empty() {
            store
                .append(key, &added)
                .map_err(|e| format!("cannot write session {}: {e}", key.session_id))?;
        }
        Ok(pruned)
    }

    /// Drives a conversation from a user message until the model ends its turn, the
    /// turn limit is reached, or a request fails. Boxed because sub-agents recurse.
    fn drive<'a>(
        &'a self,
        conv: &'a mut Conversation<'_>,
        prompt: Value,
        started: Instant,
    ) -> BoxFuture<'a, RunResult> {
        Box::pin(self.drive_inner(conv, prompt, started))
    }

    async fn drive_inner(
        &self,
        conv: &mut Conversation<'_>,
        prompt: Value,
        started: Instant,
    ) -> RunResult {
        let session_id = conv.chain.session_id().to_string();
        let permissions = match conv.spec.permissions() {
            Ok(p) => p,
            Err(e) => {
                return RunResult::failed(&session_id, Stop::Fatal, e.to_string(), started);
            }
        };
        let model = conv
            .spec
            .model
            .clone()
            .unwrap_or_else(|| self.config.model.default_model().to_string());
        // Built once: each turn lends it the history (moved in and back out, see below),
        // so no turn copies the tools, the system prompt or the whole conversation.
        let mut request = MessagesRequest {
            model: model.clone(),
            max_tokens: self.config.max_tokens,
            system: conv.spec.instructions.clone(),
            messages: Vec::new(),
            tools: self.offered_tools(&permissions, conv.depth),
        };
        let mut totals = Totals::new();
        let finish = |totals: Totals, stop: Stop, error: Option<String>, model_error| RunResult {
            session_id: session_id.clone(),
            text: totals.text,
            ok: error.is_none(),
            error,
            model_error,
            stop,
            num_turns: totals.num_turns,
            usage: totals.usage,
            cost_usd: totals.cost_usd,
            context: totals.context,
            permission_denials: totals.denials,
            duration: started.elapsed(),
            resumed: false,
        };

        let entry = conv.chain.user(prompt);
        if let Err(e) = self.record(conv, entry) {
            return finish(totals, Stop::Fatal, Some(e), None);
        }
        if let Some(announce) = conv.announce.take() {
            announce(&session_id);
        }
        loop {
            if let Some(max) = conv.spec.max_turns
                && totals.num_turns >= max
            {
                let error = format!("max_turns reached ({max})");
                return finish(totals, Stop::MaxTurns, Some(error), None);
            }
            // The history is moved into the request, not cloned: a deep copy of every
            // message on every turn made a long session quadratic (most of the harness's
            // CPU time per turn at 200 turns). It goes back before anything else happens;
            // if this future is dropped mid-request, the conversation is dropped with it.
            request.messages = conv.messages.take();
            let turn = self.request(&request, conv.depth).await;
            conv.messages.restore(std::mem::take(&mut request.messages));
            let reply = match turn {
                Turn::Reply(reply) => reply,
                Turn::Interrupted => {
                    let entry = conv
                        .chain
                        .user(Value::String(transcript::INTERRUPTED_TURN.to_string()));
                    if let Err(e) = self.record(conv, entry) {
                        return finish(totals, Stop::Fatal, Some(e), None);
                    }
                    let line = self.ask_after_interrupt().await;
                    let text = if line.is_empty() {
                        CONTINUE_AFTER_INTERRUPT.to_string()
                    } else {
                        line
                    };
                    let entry = conv.chain.user(Value::String(text));
                    if let Err(e) = self.record(conv, entry) {
                        return finish(totals, Stop::Fatal, Some(e), None);
                    }
                    continue;
                }
                Turn::Failed(error) => {
                    let text = error.to_string();
                    let entry = conv.chain.api_error(&text);
                    // The failure is what we report; a store error on top changes nothing.
                    let _ = self.record(conv, entry);
                    return finish(totals, Stop::ModelError, Some(text), Some(error));
                }
            };
            let entry = conv.chain.assistant(&reply);
            if let Err(e) = self.record(conv, entry) {
                return finish(totals, Stop::Fatal, Some(e), None);
            }
            totals.num_turns += 1;
            totals.usage.add(&reply.usage);
            totals.add_cost(crate::model::prices::cost_usd(&model, &reply.usage));
            if conv.depth == 0 {
                totals.context = reply.usage.context_tokens();
            }
            let text = transcript::text_of(&reply.content);
            if !text.is_empty() {
                totals.text = text;
            }
            self.emit(Event::TurnDone {
                turn: totals.num_turns,
                usage: reply.usage,
                context: reply.usage.context_tokens(),
                cost_usd: totals.cost_usd,
                depth: conv.depth,
            });

            let calls = transcript::tool_uses(&reply.content);
            if calls.is_empty() {
                return finish(totals, Stop::EndTurn, None, None);
            }
            let mut interrupted = false;
            for (id, name, input) in calls {
                let output = if interrupted {
                    ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT)
                } else {
                    let output = self
                        .call_tool(conv, &permissions, &id, &name, &input, &mut totals)
                        .await;
                    // The call stays unanswered in the store; pruning answers it neutrally
                    // when the retry resumes the session.
                    if let Some(error) = totals.subagent_error.take() {
                        let text = format!("sub-agent failed: {error}");
                        return finish(totals, Stop::ModelError, Some(text), Some(error));
                    }
                    if self.config.interrupt.is_pending() {
                        interrupted = true;
                    }
                    output
                };
                let entry = conv
                    .chain
                    .tool_result(&id, &output.content, output.is_error);
                if let Err(e) = self.record(conv, entry) {
                    return finish(totals, Stop::Fatal, Some(e), None);
                }
            }
            if interrupted {
                let line = self.ask_after_interrupt().await;
                if !line.is_empty() {
                    let entry = conv.chain.user(Value::String(line));
                    if let Err(e) = self.record(conv, entry) {
                        return finish(totals, Stop::Fatal, Some(e), None);
                    }
                }
            }
        }
    }

    /// Appends an entry to the store and to the conversation's messages.
    fn record(&self, conv: &mut Conversation<'_>, entry: Value) -> Result<(), String> {
        self.config
            .store
            .append(&conv.key, std::slice::from_ref(&entry))
            .map_err(|e| format!("cannot write the transcript: {e}"))?;
        conv.messages.push(&entry);
        Ok(())
    }

    /// One model request, streaming deltas out as events; a Ctrl-C stops it cleanly.
    async fn request(&self, request: &MessagesRequest, depth: u32) -> Turn {
        let events = self.config.events.clone();
        let mut on_delta = move |delta: StreamDelta<'_>| {
            let event = match delta {
                StreamDelta::Text(text) => Event::TextDelta {
                    text: text.to_string(),
                    depth,
                },
                StreamDelta::Thinking(text) => Event::ThinkingDelta {
                    text: text.to_string(),
                    depth,
                },
                StreamDelta::ToolUseStart { .. } => return,
            };
            events(&event);
        };
        let interrupt = &self.config.interrupt;
        tokio::select! {
            biased;
            _ = interrupt.wait() => Turn::Interrupted,
            result = self.config.model.stream(request, &mut on_delta) => match result {
                Ok(reply) => Turn::Reply(reply),
                Err(error) => Turn::Failed(error),
            },
        }
    }

    /// Asks the user what to say after a Ctrl-C, then clears the interrupt.
    async fn ask_after_interrupt(&self) -> String {
        let line = match &self.config.on_interrupt {
            Some(prompt) => prompt().await.unwrap_or_default(),
            None => String::new(),
        };
        self.config.interrupt.clear();
        line.trim().to_string()
    }

    /// The tool definitions an agent is offered. `Task` only at the top level (no
    /// nested sub-agents); `AskUser` only when a rule names it explicitly and there is
    /// someone to ask.
    fn offered_tools(&self, permissions: &Permissions, depth: u32) -> Vec<ToolDef> {
        let mut defs: Vec<ToolDef> = self
            .tools
            .iter()
            .filter(|tool| permissions.offers(tool.name()))
            .map(|tool| tool.definition())
            .collect();
        if depth == 0 && permissions.offers(subagent::TASK) {
            defs.push(subagent::task_definition(&self.config.subagents));
        }
        // Only when someone can answer: a tool that can never work is noise.
        if self.config.asker.is_some() && permissions.names(subagent::ASK_USER) {
            defs.push(subagent::ask_user_definition());
        }
        defs
    }

    /// Checks and runs one tool call. Never fails: every problem becomes an error result.
    async fn call_tool(
        &self,
        conv: &Conversation<'_>,
        permissions: &Permissions,
        id: &str,
        name: &str,
        input: &Value,
        totals: &mut Totals,
    ) -> ToolOutput {
        let depth = conv.depth;
        if let Some(why) = input
            .get(crate::model::types::INVALID_TOOL_INPUT)
            .and_then(Value::as_str)
        {
            return ToolOutput::error(format!(
                "The input of this {name} call was not valid JSON ({why}); nothing was run. \
                 Send the call again with a complete JSON object."
            ));
        }
        if let Decision::Deny { message } = permissions.check(name, input, &self.config.workspace) {
            self.emit(Event::ToolDenied {
                name: name.to_string(),
                message: message.clone(),
                depth,
            });
            totals.denials.push(Denial {
                tool_name: name.to_string(),
                tool_use_id: id.to_string(),
                tool_input: input.clone(),
            });
            return ToolOutput::error(message);
        }
        self.emit(Event::ToolCall {
            name: name.to_string(),
            summary: summarize_input(name, input),
            depth,
        });
        let output = match name {
            subagent::TASK if depth == 0 => self.run_subagent(conv, input, totals).await,
            subagent::ASK_USER => self.ask_user(input).await,
            _ => match self.tools.iter().find(|tool| tool.name() == name) {
                Some(tool) => {
                    let sandbox = permissions.sandbox(&self.config.sandbox, &self.config.workspace);
                    self.run_tool(tool.as_ref(), input, sandbox).await
                }
                None => ToolOutput::error(format!("No such tool available: {name}")),
            },
        };
        self.emit(Event::ToolDone {
            name: name.to_string(),
            is_error: output.is_error,
            depth,
        });
        output
    }

    /// Runs a built-in tool; a Ctrl-C cancels it and its result says so.
    async fn run_tool(
        &self,
        tool: &dyn Tool,
        input: &Value,
        sandbox: crate::tools::sandbox::SandboxPolicy,
    ) -> ToolOutput {
        let cancel = CancellationToken::new();
        let ctx = ToolContext {
            workspace: self.config.workspace.clone(),
            run_dir: self.config.run_dir.clone(),
            cancel: cancel.clone(),
            processes: self.config.processes.clone(),
            sandbox,
        };
        self.until_interrupted(tool.call(input, &ctx), &cancel)
            .await
    }

    /// Runs a tool call until it finishes or the user presses Ctrl-C. On an interrupt,
    /// `cancel` fires and the call gets a moment to clean up (kill its process group);
    /// its result then says it was interrupted. Sub-agents (Task) are not wrapped: their
    /// own model requests and tools see the interrupt.
    async fn until_interrupted(
        &self,
        call: impl std::future::Future<Output = ToolOutput>,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        tokio::pin!(call);
        tokio::select! {
            biased;
            _ = self.config.interrupt.wait() => {
                cancel.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut call).await;
                ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT)
            }
            output = &mut call => output,
        }
    }
}

enum Turn {
    Reply(crate::model::ModelReply),
    Interrupted,
    Failed(ModelError),
}

/// A short, one-line description of a tool call for progress output.
pub fn summarize_input(name: &str, input: &Value) -> String {
    let field = crate::tools::names::info_of(name).map_or("", |t| t.summary_field);
    let text = input
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| json!(input).to_string());
    let line = text.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(100).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}
