//! What a run reports while it goes: the engine (text, tools, turns), the runtime
//! (retries, outages) and the workflow (steps). The CLI renders these; nothing below it
//! prints anything itself. Its own module, below all of them, so none imports another
//! for its vocabulary.

use crate::model::Usage;
use serde::Serialize;
use std::sync::Arc;

/// Serialized as `{"type": …, fields…}` (what the Python package hands `on_event`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A session id exists (minted, resumed or forked). Reported before the first request.
    #[serde(rename = "session")]
    SessionStarted {
        agent: String,
        session_id: String,
        resumed: bool,
        /// Depth of sub-agent nesting (0 for the main agent).
        depth: u32,
    },
    /// A model request is sent (its reply streams as deltas, then `TurnDone`).
    Requesting { depth: u32 },
    #[serde(rename = "text")]
    TextDelta { text: String, depth: u32 },
    #[serde(rename = "thinking")]
    ThinkingDelta { text: String, depth: u32 },
    /// A tool call is about to run (after the permission check).
    ToolCall {
        name: String,
        summary: String,
        depth: u32,
        /// The call's `tool_use` id.
        id: String,
        /// Made by a sub-agent: the id of the `Task` call it works for (several may run
        /// at once; this tells whose call it is). `None` in a step's own session.
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<String>,
    },
    /// A tool call that was not run. `message` is what the model is told; `summary` the
    /// call as the person sees it (the command, the path); `by` what stopped it.
    ToolDenied {
        name: String,
        message: String,
        summary: String,
        by: DeniedBy,
        depth: u32,
    },
    ToolDone {
        name: String,
        is_error: bool,
        /// A Ctrl-C stopped it (its result is the interruption marker): not a failure.
        interrupted: bool,
        depth: u32,
        /// As in [`Event::ToolCall`].
        id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<String>,
    },
    /// A model turn finished.
    #[serde(rename = "turn")]
    TurnDone {
        turn: u32,
        usage: Usage,
        /// Context size of this turn, tokens.
        context: u64,
        /// Cost of the whole run so far, when the model's price is known.
        cost_usd: Option<f64>,
        /// The model that answered (the request's model id).
        model: String,
        depth: u32,
    },
    /// Resilience: a request failed and will be retried.
    Retrying {
        attempt: u32,
        max_attempts: u32,
        delay_s: f64,
        error: String,
        /// Whose run: 0 for a step's main session, 1 for a sub-agent.
        depth: u32,
    },
    /// Resilience: the endpoint is unreachable; waiting. Reported at each probe.
    Offline {
        waited_s: f64,
        endpoint: String,
        /// What is away: the store's database (`true`) or the model's API.
        database: bool,
    },
    /// Resilience: the endpoint answers again; `database` as in [`Event::Offline`].
    Online { database: bool },
    /// Resilience: Ctrl-C stopped an outage wait after `waited_s`; the session is tried
    /// again at once (and the person asked, as after an interrupted reply).
    OfflineWaitInterrupted { waited_s: f64, database: bool },
    /// Something the user should know that does not stop the run (an unknown
    /// `stop_reason`, a model without a price).
    Warning { message: String },
    /// Engine: a background command started (Bash `run_in_background`); `depth` 0 is
    /// the main session's. Running ones: `tools::background::Background::running`.
    BackgroundStarted {
        id: String,
        command: String,
        depth: u32,
    },
    /// Engine: a background command ended; `how` as its record says (`exited`,
    /// `stopped`, `session-ended`, `interrupted`).
    BackgroundEnded { id: String, how: String, depth: u32 },
    /// Workflow: a step (or a gate round of it) begins. `index`/`total` count the
    /// workflow's steps (0/0 for a round). `resumed`: it continues its own earlier session.
    #[serde(rename = "step")]
    StepStarted {
        step: String,
        index: usize,
        total: usize,
        resumed: bool,
        woke: u64,
    },
    /// Runtime: a step's session hands off to a successor (换代). Reported when the
    /// handoff begins; `generation` is the successor's (2 for the first handoff),
    /// `context` the retiring session's context, tokens. `mechanical`: the window was
    /// hit, so the handoff document is written without asking the session.
    Handoff {
        step: String,
        generation: u32,
        context: u64,
        mechanical: bool,
    },
    /// Runtime: a step attempt ended and its manifest row was written. `step` is the
    /// row's name (`干活#retry1`, `干活·判定#1`, …); `attempts` the engine runs it took.
    AttemptDone {
        step: String,
        ok: bool,
        error: Option<String>,
        attempts: u32,
    },
    /// Workflow: a gate's verdict on `step`, round `round` of the `rounds` this wake may run.
    Judged {
        step: String,
        round: u32,
        rounds: u32,
        passed: bool,
    },
    /// Workflow: a step was skipped because its output is already frozen on disk.
    StepSkipped {
        step: String,
        index: usize,
        total: usize,
    },
}

/// What stopped a tool call ([`Event::ToolDenied`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeniedBy {
    /// A permission rule, as written (`Bash(rm:*)`); `None`: no rule allows the call.
    Rule { rule: Option<String> },
    /// An `ask` rule or hook wanted the person's yes and did not get it.
    Person,
    /// A `PreToolUse` hook blocked it; `reason` is what the hook said.
    Hook { reason: String },
}

/// Receives engine events. Must be cheap: it is called for every streamed delta.
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// A sink that drops everything.
pub fn discard() -> EventSink {
    Arc::new(|_| {})
}
