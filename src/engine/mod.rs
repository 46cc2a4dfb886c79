//! The agent engine: the loop of model turns and tool calls that makes one session.
//!
//! One [`Engine::run`] is one session. Its id is minted (or taken from the session being
//! resumed) before the first request and reported at once through `on_session`, so the
//! caller can persist it before anything else happens. Every transcript entry is
//! appended to the store the moment it exists: the prompt, each assistant message when
//! its stream completes, each tool result when its tool finishes. A SIGKILL loses at most
//! the reply still streaming.

mod background;
pub mod bash_rules;
mod calls;
mod concurrent;
pub mod conventions;
pub mod count;
pub mod hooks;
pub mod interrupt;
mod mcp;
pub mod memory;
mod pause;
pub mod permissions;
pub mod recovery;
mod reply;
mod resume;
mod session;
mod session_hooks;
pub mod skills;
pub mod spec;
mod subagent;
mod turn;
mod web;

pub use crate::events::{Event, EventSink};
pub use conventions::Conventions;
pub use interrupt::Interrupt;
pub use pause::Pause;
pub use recovery::{RESUME_PROMPT, Recovery, Retried};
pub use spec::AgentSpec;
pub use subagent::{GENERAL_PURPOSE, general_purpose};

pub use calls::summarize_input;
pub use concurrent::DEFAULT_MAX_TOOL_CONCURRENCY;
use reply::{Continuations, Next, calls_of, cut_last_call, trim_for_continuation};
pub use reply::{MAX_CONTINUATIONS, MAX_PAUSE_CONTINUATIONS};
use session::ends_with_prompt;
use turn::Turn;

use crate::future::BoxFuture;
use crate::model::{MessagesRequest, ModelClient, ModelError, Thinking, Usage};
use crate::stores::{PruningSessionStore, SessionKey, StoreError};
use crate::tools::{ProcessGroups, Tool};
use crate::transcript::{self, Chain, Entry, Loaded, Messages, Raw, ToolInput};
use permissions::Permissions;
use serde::Serialize;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default `max_tokens` of a request; `FLOWER_MAX_TOKENS` overrides it.
pub const DEFAULT_MAX_TOKENS: u32 = 16_384;

/// Said to a sub-agent whose context reached the limit: it does not hand off, it wraps up.
pub const SUBAGENT_FINISH_NOW: &str = "上下文快满了。不要再开新的活:现在就停下,简短报告做了什么、改了哪些文件、验证结果、还有什么没做完。";

pub use crate::model::classify::WINDOW_EXCEEDED_STOP;

/// Whether a reply says the model's context window is full. One small function, so
/// that a typed stop reason from the model layer can replace it.
pub fn window_exceeded(reply: &crate::model::ModelReply) -> bool {
    reply.stop_reason.as_deref() == Some(WINDOW_EXCEEDED_STOP)
}

/// Said to the model after a reply cut by `max_tokens`, on models that refuse an
/// assistant prefill (Claude 4.6 and later) and whenever thinking is on.
pub const CONTINUE_AFTER_MAX_TOKENS: &str = "你上一条回复写到长度上限被截断了。从截断的地方直接接着写:不要重复已经写过的内容,不要重新开头,也不要解释。";

/// [`CONTINUE_AFTER_MAX_TOKENS`] for a reply cut while the model was still thinking:
/// it wrote nothing, and its thinking is not sent back (the API refuses an assistant
/// message that ends with a thinking block).
pub const CONTINUE_AFTER_THINKING_CUT: &str =
    "你上一条回复还在思考时就写到了长度上限,什么都没写出来。这次少想一些,直接作答。";

/// The marker a tool call cut by `max_tokens` gets in place of its input: it is never
/// run, its result says so.
const CUT_BY_MAX_TOKENS: &str = "the reply was cut by max_tokens inside this call";

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
    /// Extended thinking budget (tokens, ≥ 1024, below `max_tokens`); `None`: off. A
    /// model that only thinks adaptively is asked to think adaptively instead.
    pub thinking_budget: Option<u32>,
    /// `output_config.effort` of agents whose spec names none; `None`: not sent.
    pub effort: Option<crate::model::Effort>,
    /// `max_uses` of the web tools an agent's rules give it (WebSearch, WebFetch: run
    /// by the API, see [`Permissions::web_access`]).
    pub web: crate::model::WebLimits,
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
    /// The home directory `~/` permission rules mean; `None`: such rules are refused.
    pub home: Option<PathBuf>,
    /// What the project's memory and settings files add to every agent (memory in
    /// the system prompt, deny and ask rules, hooks, variables).
    pub conventions: Conventions,
    /// How a failed sub-agent is retried (the runtime's `Resilience`); `None`: its
    /// error is handed up to the caller's retry, which continues the sub-agent.
    pub recovery: Option<Arc<dyn Recovery>>,
    /// How many of a reply's calls may run at once (`FLOWER_MAX_TOOL_USE_CONCURRENCY`,
    /// default [`DEFAULT_MAX_TOOL_CONCURRENCY`]); 1: one after another.
    pub max_tool_concurrency: usize,
    /// MCP tools (by their full name) that only read: they run alongside the other
    /// concurrent calls ([`concurrent`]).
    pub concurrent_mcp_tools: Vec<String>,
    /// Held by a `429` with `retry-after` or an outage: every request waits it out.
    pub pause: Pause,
    /// The output kept of one background command, bytes (`FLOWER_BACKGROUND_OUTPUT_CAP`).
    pub background_output_cap: u64,
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

/// Why a session is being run: what its `SessionStart` hooks are told, and whether
/// hooks fire at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// A step's prompt (or a resume, a retry, a gate round's feedback): `SessionStart`
    /// says `startup` for a new session, `resume` for a continued one.
    #[default]
    Step,
    /// The successor of a 换代, started from the handoff document: `SessionStart`
    /// says `compact`, as after a compaction in Claude Code.
    Successor,
    /// flower's own request inside a session (asking it for its handoff document):
    /// no `SessionStart`, `UserPromptSubmit` or `SessionEnd`.
    Internal,
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
    /// This run retries a failed attempt of the same session with the same prompt: when
    /// the history still ends with that prompt unanswered, it is reused instead of
    /// stacked again (so the retry repeats the failed request byte for byte).
    pub retry: bool,
    /// Context size (tokens) at which the run stops at the next clean boundary (after a
    /// model turn whose tool calls all have their results stored) with
    /// [`Stop::ContextFull`], so that the caller can hand the session off. Sub-agents
    /// that reach it are asked once to finish and report now. `None`: no limit.
    pub context_limit: Option<u64>,
    /// Why the session runs (see [`Origin`]).
    pub origin: Origin,
}

/// How a run ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model ended its turn without tool calls.
    EndTurn,
    /// The reply was still cut by `max_tokens` after [`MAX_CONTINUATIONS`]
    /// continuations; the text so far is the result.
    MaxTokens,
    /// The main session's context reached `RunRequest::context_limit`; it stopped at a
    /// clean boundary (every tool call answered) and can be handed off.
    ContextFull,
}

/// Why one agent session could not end well. Each variant keeps its source. (The
/// run's own error, one layer up, is `crate::run::RunError`; the runtime's step
/// records and retries decide on this one.)
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `max_turns` was reached.
    #[error("到了 max_turns({0})")]
    MaxTurns(u32),
    /// A model request failed.
    #[error(transparent)]
    Model(ModelError),
    /// A sub-agent's request failed with an error worth retrying: the whole run stops
    /// with it, so that the step's retry resumes the session.
    #[error("子代理失败了:{0}")]
    SubAgent(ModelError),
    /// The agent's permission rules do not parse.
    #[error(transparent)]
    Rules(#[from] permissions::RuleError),
    #[error("transcript 写不进去:{0}")]
    Transcript(#[source] StoreError),
    #[error("读不了会话 {id}:{source}")]
    ReadSession { id: String, source: StoreError },
    #[error("写不了会话 {id}:{source}")]
    WriteSession { id: String, source: StoreError },
    #[error("存储里没有会话 {0}")]
    NoSession(String),
    #[error("存储里没有要分叉的会话 {0}")]
    NoForkSource(String),
    #[error("分叉写不进去:{0}")]
    WriteFork(#[source] StoreError),
    /// The model declined (`stop_reason: refusal`). Retrying the same request on the
    /// same model gives the same answer, so this is never retried; the refusal is
    /// pruned from what a resume feeds.
    #[error("模型拒绝回答(stop_reason refusal){}", refusal_details(.0))]
    Refusal(Option<crate::content::Raw>),
    /// The context window is full (`stop_reason: model_context_window_exceeded`): the
    /// conversation cannot go on in this session.
    #[error(
        "{model} 的上下文窗口满了(stop_reason model_context_window_exceeded);\
         用 `flower --new` 开一条新会话"
    )]
    ContextWindowFull { model: String },
    /// A `UserPromptSubmit` hook blocked the prompt: it was not sent (nor stored).
    #[error("UserPromptSubmit 钩子拦下了这句话:{0}")]
    PromptBlocked(String),
    /// A hook answered `continue: false`: the agent stopped (its `stopReason`).
    #[error("钩子让代理停下了:{0}")]
    HookStopped(String),
    /// Ctrl-C stopped a sub-agent that ran alongside others: the caller asks the
    /// person once for all of them.
    #[error("被 Ctrl-C 打断了")]
    Interrupted,
}

/// A model error for the model: the API's own words (`API Error: …`) as they are; the
/// variants worded for the person (a missing key, a configuration) in English.
fn model_error_for_model(error: &ModelError) -> String {
    match error {
        ModelError::MissingApiKey => "no API key is set (ANTHROPIC_API_KEY)".into(),
        ModelError::Config { .. } => "the model client is misconfigured".into(),
        other => other.to_string(),
    }
}

fn refusal_details(details: &Option<crate::content::Raw>) -> String {
    match details {
        Some(details) => format!(": {}", details.get()),
        None => String::new(),
    }
}

impl EngineError {
    /// The failure in the model's language (English), for a tool result: the `Display`
    /// is the person's (Chinese).
    pub fn for_model(&self) -> String {
        match self {
            EngineError::MaxTurns(n) => format!("it reached max_turns ({n})"),
            EngineError::Model(error) => model_error_for_model(error),
            EngineError::SubAgent(error) => {
                format!("a sub-agent failed: {}", model_error_for_model(error))
            }
            EngineError::Rules(_) => "its permission rules do not parse".into(),
            EngineError::Transcript(_) => "its transcript could not be written".into(),
            EngineError::ReadSession { id, .. } => format!("session {id} could not be read"),
            EngineError::WriteSession { id, .. } => format!("session {id} could not be written"),
            EngineError::NoSession(id) => format!("there is no session {id} in the store"),
            EngineError::NoForkSource(id) => format!("there is no session {id} to fork"),
            EngineError::WriteFork(_) => "the fork could not be written".into(),
            EngineError::Refusal(_) => "the model refused to answer (stop_reason refusal)".into(),
            EngineError::ContextWindowFull { model } => format!(
                "the context window of {model} is full (stop_reason model_context_window_exceeded)"
            ),
            EngineError::PromptBlocked(why) => {
                format!("a UserPromptSubmit hook blocked the prompt: {why}")
            }
            EngineError::HookStopped(why) => format!("a hook stopped the agent: {why}"),
            EngineError::Interrupted => "the user interrupted it (Ctrl-C)".into(),
        }
    }

    /// What kind of failure this is, for the layers that act on it by kind (decided by
    /// `model::classify` for a model error).
    pub fn kind(&self) -> crate::model::classify::ErrorKind {
        use crate::model::classify::{ErrorKind, error_kind};
        match self {
            EngineError::ContextWindowFull { .. } => ErrorKind::ContextWindowFull,
            EngineError::Model(error) | EngineError::SubAgent(error) => error_kind(error),
            _ => ErrorKind::Other,
        }
    }

    /// The model error behind this failure, if a model request failed.
    pub fn model_error(&self) -> Option<&ModelError> {
        match self {
            EngineError::Model(error) | EngineError::SubAgent(error) => Some(error),
            _ => None,
        }
    }

    /// The store's error, when the transcript could not be read or written.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            EngineError::Transcript(error)
            | EngineError::WriteFork(error)
            | EngineError::ReadSession { source: error, .. }
            | EngineError::WriteSession { source: error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A tool call the permission rules refused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Denial {
    pub tool_name: String,
    pub tool_use_id: String,
    pub tool_input: ToolInput,
}

/// The outcome of one run.
#[derive(Debug)]
pub struct RunResult {
    pub session_id: String,
    /// The final assistant text (of the last turn that had text).
    pub text: String,
    pub outcome: Result<Stop, EngineError>,
    /// The API's `stop_reason` of the last reply (`None` before any reply).
    pub stop_reason: Option<String>,
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
    /// Errors sub-agents got past by retrying, oldest first: each is one more try.
    pub subagent_retries: Vec<Retried>,
}

impl RunResult {
    /// Whether the run ended well.
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// The error, when the run failed.
    pub fn error(&self) -> Option<&EngineError> {
        self.outcome.as_ref().err()
    }

    fn failed(session_id: &str, error: EngineError, started: Instant) -> Self {
        RunResult {
            session_id: session_id.to_string(),
            text: String::new(),
            outcome: Err(error),
            stop_reason: None,
            num_turns: 0,
            usage: Usage::default(),
            cost_usd: Some(0.0),
            context: 0,
            permission_denials: Vec::new(),
            duration: started.elapsed(),
            resumed: false,
            subagent_retries: Vec::new(),
        }
    }
}

/// The agent engine. Cheap to share: wrap it in an `Arc`.
pub struct Engine {
    config: EngineConfig,
    tools: Vec<Box<dyn Tool>>,
    /// The settings files' hooks; `None` when there are none.
    hooks: Option<hooks::Hooks>,
    /// Warnings already reported (memory over its cap, …): each is said once.
    warned: Mutex<HashSet<String>>,
    /// The MCP servers of this process; `None` when none is configured.
    mcp: Option<Arc<crate::tools::mcp::McpHub>>,
    /// Commands running in the background (Bash `run_in_background`).
    background: crate::tools::background::Background,
}

/// Something recorded around the prompt when a session's run begins (in this order):
/// the memory pin, what `SessionStart` and `UserPromptSubmit` hooks did and added.
enum Pending {
    Memory { text: String, files: Vec<String> },
    McpTools { tools: Raw, failures: Raw },
    Hook(hooks::HookOutcome),
    Context(String),
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
    /// See [`RunRequest::context_limit`].
    context_limit: Option<u64>,
    /// The memory block of its system prompt (pinned when the session began).
    memory: Arc<str>,
    /// The MCP tools it may be offered (pinned when the session began).
    mcp_tools: Arc<[crate::tools::mcp::McpTool]>,
    /// Recorded before the prompt, then after it (see [`Pending`]).
    opening: Vec<Pending>,
    after_prompt: Vec<Pending>,
    /// What hooks said about this turn's tool calls, for the model: recorded as one
    /// user entry after the last tool result (text may not come between results).
    hook_notes: Vec<String>,
    /// A hook answered `continue: false` during the tool calls: why.
    hook_stop: Option<String>,
    /// How many times Stop hooks sent this run back to work.
    stop_blocks: u32,
    /// flower's own request inside the session ([`Origin::Internal`]): its turn's end
    /// is not the agent stopping, so no Stop hook runs.
    internal: bool,
    /// Its size between replies, for counting before a request ([`count`]).
    measure: count::Measure,
    /// A sub-agent running alongside others: a Ctrl-C stops it (its caller asks the
    /// person once) instead of asking on its own.
    stop_on_interrupt: bool,
    /// A sub-agent's: the id of the `Task` call it works for (its events name it).
    task: Option<String>,
}

impl<'a> Conversation<'a> {
    /// A conversation on `chain` with nothing yet: no history, no memory, top level.
    fn new(spec: &'a AgentSpec, key: SessionKey, chain: Chain) -> Self {
        Conversation {
            spec,
            key,
            chain,
            messages: Messages::default(),
            depth: 0,
            announce: None,
            context_limit: None,
            memory: Arc::from(""),
            mcp_tools: Arc::from(Vec::new()),
            opening: Vec::new(),
            after_prompt: Vec::new(),
            hook_notes: Vec::new(),
            hook_stop: None,
            stop_blocks: 0,
            internal: false,
            measure: count::Measure::default(),
            stop_on_interrupt: false,
            task: None,
        }
    }
}

/// A tool call of a reply: its id, tool name and input.
type Call = (String, String, ToolInput);

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
    /// Errors sub-agents got past by retrying.
    subagent_retries: Vec<Retried>,
    /// The last reply's `stop_reason`.
    stop_reason: Option<String>,
    /// The next reply continues the last one (after `max_tokens` or `pause_turn`): its
    /// text is appended to the result, not a new result.
    continuing: bool,
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
            subagent_retries: Vec::new(),
            stop_reason: None,
            continuing: false,
        }
    }

    fn into_result(
        self,
        session_id: &str,
        outcome: Result<Stop, EngineError>,
        started: Instant,
    ) -> RunResult {
        RunResult {
            session_id: session_id.to_string(),
            text: self.text,
            outcome,
            stop_reason: self.stop_reason,
            num_turns: self.num_turns,
            usage: self.usage,
            cost_usd: self.cost_usd,
            context: self.context,
            permission_denials: self.denials,
            duration: started.elapsed(),
            resumed: false,
            subagent_retries: self.subagent_retries,
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
    pub fn new(mut config: EngineConfig) -> Self {
        // The run's record is protected from every agent's writes (the write policy).
        config.sandbox.protect.record = Some(config.run_dir.clone());
        // So are the files a hook runs: its `allow` answer skips `ask` rules.
        let roots: Vec<PathBuf> = std::iter::once(&config.workspace)
            .chain(&config.sandbox.additional_dirs)
            .map(|d| crate::tools::paths::root(d))
            .collect();
        config.sandbox.protect.hook_files =
            hooks::files::named_files(&config.conventions.hooks, &roots);
        let conventions = &config.conventions;
        let hooks = (!conventions.hooks.is_empty()).then(|| {
            hooks::Hooks::new(
                conventions.hooks.clone(),
                &config.workspace,
                &conventions.env,
                crate::run_dir::RunDir::new(&config.run_dir).transcripts(),
            )
        });
        let mcp = (!conventions.mcp.is_empty()).then(|| {
            Arc::new(crate::tools::mcp::McpHub::new(
                conventions.mcp.clone(),
                crate::tools::mcp::Launch {
                    workspace: config.workspace.clone(),
                    sandbox: config.sandbox.clone(),
                    env: conventions.env.clone(),
                    processes: config.processes.clone(),
                    spill_dir: crate::run_dir::RunDir::new(&config.run_dir).trimmed(),
                },
            ))
        });
        let background = crate::tools::background::Background::new(
            crate::run_dir::RunDir::new(&config.run_dir).background(),
            config.background_output_cap,
            config.events.clone(),
        );
        Engine {
            background,
            config,
            tools: crate::tools::builtin(),
            hooks,
            warned: Mutex::new(HashSet::new()),
            mcp,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The MCP servers this engine starts (none configured: `None`).
    pub fn mcp(&self) -> Option<&Arc<crate::tools::mcp::McpHub>> {
        self.mcp.as_ref()
    }

    /// The store (pruning on load) this engine writes to.
    pub fn store(&self) -> &Arc<PruningSessionStore> {
        &self.config.store
    }

    fn emit(&self, event: Event) {
        (self.config.events)(&event);
    }

    /// Runs one session to its end. Never panics; every failure is in the result.
    // Long because a session's start has its phases in order (open, announce, memory,
    // the calls a cut turn left, hooks, then the loop), each failing its own way.
    pub async fn run(&self, request: RunRequest<'_>) -> RunResult {
        let started = Instant::now();
        let (session_id, history, resumed, unanswered) = match self.open_session(&request.start) {
            Ok(opened) => opened,
            Err(error) => {
                let id = match &request.start {
                    SessionStart::Resume(id) | SessionStart::Fork(id) => id.clone(),
                    SessionStart::New => String::new(),
                };
                return RunResult::failed(&id, error, started);
            }
        };
        self.emit(Event::SessionStarted {
            agent: request.spec.name.clone(),
            session_id: session_id.clone(),
            resumed,
            depth: 0,
        });
        let key = SessionKey::main(&self.config.project_key, &session_id);
        let leaf = transcript::resume_leaf_loaded(&history);
        let (memory, pin) = self.session_memory(&request.start, &history);
        // So are the MCP tools (see `mcp`).
        let (mcp_tools, mcp_pin) = match request.start {
            SessionStart::New => self.list_mcp_tools(request.spec).await,
            _ => (Self::pinned_mcp_tools(&history), None),
        };
        let chain = Chain::new(&session_id, &self.config.workspace).with_leaf(leaf);
        // A retry resumes with the prompt the failed attempt left unanswered: it is
        // already the tail of the history, so it is not stacked again (and the request
        // stays byte-identical to the failed one, whose prefix the cache holds).
        let reuse = request.retry && resumed && ends_with_prompt(&history, &request.prompt);
        let measure = count::Measure {
            tokens: last_context(&history),
            pending_bytes: 0,
            // Once per resume or wake: what it adds was never measured.
            count_next: !history.is_empty(),
        };
        let mut conversation = Conversation {
            // Moved, not copied: the entries are not needed after this.
            messages: Messages::from_loaded(history),
            announce: request.on_session,
            context_limit: request.context_limit,
            memory: memory.into(),
            mcp_tools,
            opening: pin.into_iter().chain(mcp_pin).collect(),
            internal: request.origin == Origin::Internal,
            measure,
            ..Conversation::new(request.spec, key, chain)
        };
        let prompt = (!reuse).then_some(request.prompt);
        // A `Task` call cut short goes on in its sub-agent's session before anything else.
        let mut carried = Totals::new();
        if let Err(error) = self
            .continue_calls(&mut conversation, unanswered, &mut carried)
            .await
        {
            return RunResult::failed(&session_id, error, started).carrying(resumed, carried);
        }
        let hooked = request.origin != Origin::Internal;
        if hooked {
            self.session_start(&mut conversation, &request.start, request.origin)
                .await;
            if let Some(prompt) = &prompt
                && let Err(error) = self.prompt_submit(&mut conversation, prompt).await
            {
                // Nothing of a new session is stored; a resumed one keeps the record.
                if resumed {
                    self.record_opening_hooks(&mut conversation);
                }
                let mut result = RunResult::failed(&session_id, error, started);
                result.resumed = resumed;
                return result;
            }
        }
        let mut result = self.drive_from(&mut conversation, prompt, started).await;
        result.resumed = resumed;
        result.add_carried(carried);
        if hooked {
            self.session_end(&mut conversation).await;
        }
        result
    }

    /// The memory of a session's system prompt, and the entry pinning it. Read once,
    /// when the session begins, and pinned in its transcript: a resumed session sends
    /// exactly what it began with (see `memory`).
    fn session_memory(
        &self,
        start: &SessionStart,
        history: &[Loaded],
    ) -> (String, Option<Pending>) {
        match start {
            SessionStart::New => self.read_memory(),
            _ => (transcript::pinned_memory(history).unwrap_or_default(), None),
        }
    }

    /// Records what the opening hooks did (their outcomes only).
    fn record_opening_hooks(&self, conversation: &mut Conversation<'_>) {
        for item in std::mem::take(&mut conversation.opening) {
            if let Pending::Hook(outcome) = item {
                let _ = self.record_hooks(conversation, &outcome);
            }
        }
    }

    /// Drives a conversation from a user message (`None`: the history already ends
    /// with the prompt) until the model ends its turn, the turn limit is reached, or a
    /// request fails. Boxed because sub-agents recurse.
    fn drive_from<'a>(
        &'a self,
        conv: &'a mut Conversation<'_>,
        prompt: Option<String>,
        started: Instant,
    ) -> BoxFuture<'a, RunResult> {
        Box::pin(async move {
            let mut totals = Totals::new();
            self.note_ended_background(conv);
            let outcome = self.converse(conv, prompt, &mut totals).await;
            self.end_background(conv).await;
            totals.into_result(conv.chain.session_id(), outcome, started)
        })
    }

    /// The conversation loop: one model turn, then its tool calls, until the model
    /// ends its turn or something stops the run.
    // Long because the loop reads as one state machine: the request is built once, then
    // each outcome of a turn (`Next`) is a few lines of its match.
    async fn converse(
        &self,
        conv: &mut Conversation<'_>,
        prompt: Option<String>,
        totals: &mut Totals,
    ) -> Result<Stop, EngineError> {
        let permissions = self.permissions_of(conv.spec)?;
        let model = conv
            .spec
            .model
            .clone()
            .unwrap_or_else(|| self.config.model.default_model().to_string());
        // Built once: each turn lends it the history (moved in and back out, see
        // `take_turn`), so no turn copies the tools, the system prompt or the whole
        // conversation.
        let system = memory::system_prompt(&conv.spec.instructions, &conv.memory);
        let mut request = MessagesRequest {
            model: model.clone(),
            max_tokens: self.config.max_tokens,
            system_shared: system.shared,
            system: system.own,
            messages: crate::model::History::new(),
            tools: self.offered_tools(&permissions, conv),
            thinking: self.config.thinking_budget.map(|budget| {
                if crate::model::models::adaptive_thinking(&model) {
                    Thinking::Adaptive
                } else {
                    Thinking::Budget(budget)
                }
            }),
            effort: conv.spec.effort.or(self.config.effort),
            server_tools: self.server_tools(&permissions, &conv.spec.offer),
        };
        // A reply cut by max_tokens is continued by sending it back as the start of
        // the assistant turn only where the API allows that: never with thinking, never
        // on models from 4.6 on (they answer 400); elsewhere a user turn asks for the rest.
        let prefill = crate::model::models::info(&model).prefill && request.thinking.is_none();
        for item in std::mem::take(&mut conv.opening) {
            self.record_pending(conv, item)?;
        }
        if let Some(prompt) = prompt {
            let entry = conv.chain.user_text(&prompt);
            self.record(conv, entry)?;
        }
        for item in std::mem::take(&mut conv.after_prompt) {
            self.record_pending(conv, item)?;
        }
        if let Some(announce) = conv.announce.take() {
            announce(conv.chain.session_id());
        }
        let mut continuations = Continuations::default();
        loop {
            if let Some(max) = conv.spec.max_turns
                && totals.num_turns >= max
            {
                return Err(EngineError::MaxTurns(max));
            }
            if let Some(counted) = self.counted_over_limit(conv, &mut request).await {
                // A clean boundary (every call answered): hand off before sending a
                // request over the limit, rather than after the API refused it.
                totals.context = counted;
                return Ok(Stop::ContextFull);
            }
            let reply = match self.take_turn(conv, &mut request).await {
                Turn::Reply(reply) => reply,
                Turn::Interrupted if conv.stop_on_interrupt => {
                    let entry = conv.chain.user_text(transcript::INTERRUPTED_TURN);
                    self.record(conv, entry)?;
                    return Err(EngineError::Interrupted);
                }
                Turn::Interrupted => {
                    self.after_interrupted_reply(conv).await?;
                    continue;
                }
                Turn::Failed(error) => {
                    let entry = conv.chain.api_error(&error.to_string());
                    // The failure is what we report; a store error on top changes nothing.
                    let _ = self.record(conv, entry);
                    return Err(EngineError::Model(error));
                }
            };
            let reply = if prefill {
                trim_for_continuation(reply)
            } else {
                reply
            };
            self.record_reply(conv, &model, &reply, totals)?;
            let calls = cut_last_call(&reply, calls_of(&reply.content));
            match self.after_reply(&reply, &model, calls.is_empty(), &mut continuations)? {
                Next::Stop(Stop::EndTurn) => {
                    // Stop hooks may send the agent back to work, with their reason.
                    match self.stop_hooks(conv, totals).await? {
                        Some(feedback) => {
                            let entry = conv.chain.hook_context(&feedback);
                            self.record(conv, entry)?;
                        }
                        None => return Ok(Stop::EndTurn),
                    }
                }
                Next::Stop(stop) => return Ok(stop),
                Next::Continue { cut } => {
                    totals.continuing = true;
                    if cut && !prefill {
                        let text = if crate::content::is_thinking_only(&reply.content) {
                            CONTINUE_AFTER_THINKING_CUT
                        } else {
                            CONTINUE_AFTER_MAX_TOKENS
                        };
                        let entry = conv.chain.continuation(text);
                        self.record(conv, entry)?;
                    }
                }
                Next::Tools => {
                    continuations = Continuations::default();
                    let context = reply.usage.context_tokens();
                    let full = conv.context_limit.is_some_and(|limit| context >= limit);
                    self.answer_calls(conv, &permissions, calls, totals).await?;
                    if let Some(reason) = conv.hook_stop.take() {
                        return Err(EngineError::HookStopped(reason));
                    }
                    if full {
                        if conv.depth == 0 {
                            // A clean boundary: every call of this turn has its result stored.
                            return Ok(Stop::ContextFull);
                        }
                        // Sub-agents do not hand off: asked once to wrap up, then on their own.
                        conv.context_limit = None;
                        let entry = conv.chain.user_text(SUBAGENT_FINISH_NOW);
                        self.record(conv, entry)?;
                    }
                }
            }
        }
    }

    /// Appends an entry to the store and to the conversation's messages.
    fn record(&self, conv: &mut Conversation<'_>, entry: Entry) -> Result<(), EngineError> {
        self.record_with(conv, entry, false)
    }

    /// [`Engine::record`]; `deferred`: a durable append of this conversation follows
    /// before anything relies on it ([`crate::stores::SessionStore::append_deferred`]).
    fn record_with(
        &self,
        conv: &mut Conversation<'_>,
        entry: Entry,
        deferred: bool,
    ) -> Result<(), EngineError> {
        self.store_entry(conv, &entry, deferred)?;
        conv.messages.push_entry(entry);
        Ok(())
    }

    /// Records what was waiting for the session's first entries (see [`Pending`]).
    fn record_pending(
        &self,
        conv: &mut Conversation<'_>,
        item: Pending,
    ) -> Result<(), EngineError> {
        let entry = match item {
            Pending::Memory { text, files } => conv.chain.memory(&text, &files),
            Pending::McpTools { tools, failures } => conv.chain.mcp_tools(tools, failures),
            Pending::Hook(outcome) => return self.record_hooks(conv, &outcome),
            Pending::Context(text) => conv.chain.hook_context(&text),
        };
        self.record(conv, entry)
    }

    /// The permission rules of `spec` with the project's deny and ask rules added.
    fn permissions_of(&self, spec: &AgentSpec) -> Result<Permissions, permissions::RuleError> {
        let conventions = &self.config.conventions;
        let home = self.config.home.as_deref();
        if conventions.deny.is_empty() && conventions.ask.is_empty() {
            return spec.permissions_in(home);
        }
        let deny: Vec<String> = spec
            .disallowed_tools
            .iter()
            .chain(&conventions.deny)
            .cloned()
            .collect();
        Permissions::with_home(&spec.allowed_tools, &deny, home)?.with_ask(&conventions.ask, home)
    }

    /// Reads the project's memory for a new session: its text and the entry pinning
    /// it (none when there is no memory). Its warnings are reported once a process.
    /// The skills' listing comes after the memory, pinned with it.
    fn read_memory(&self) -> (String, Option<Pending>) {
        let memory = match &self.config.conventions.memory {
            Some(source) => source.load(),
            None => memory::Memory::default(),
        };
        for warning in &memory.warnings {
            self.warn_once(warning);
        }
        let files = memory
            .files
            .iter()
            .map(|f| f.path.to_string_lossy().into_owned())
            .collect();
        let (text, files) =
            skills::with_listing(memory.text, files, &self.config.conventions.skills);
        if text.is_empty() {
            return (String::new(), None);
        }
        let pin = Pending::Memory {
            text: text.clone(),
            files,
        };
        (text, Some(pin))
    }

    /// Reports a warning the first time it is seen in this process.
    fn warn_once(&self, message: &str) {
        let new = self
            .warned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(message.to_string());
        if new {
            self.emit(Event::Warning {
                message: message.to_string(),
            });
        }
    }
}

/// The context of the last turn the model answered in `history`, tokens.
fn last_context(history: &[Loaded]) -> Option<u64> {
    history
        .iter()
        .rev()
        .filter(|e| e.kind == transcript::Kind::Assistant)
        .filter_map(|e| e.json.entry())
        .find_map(|e| e.turn_usage().map(transcript::MessageUsage::to_model))
        .map(|usage| usage.context_tokens())
}
