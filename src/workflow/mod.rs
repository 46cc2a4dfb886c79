//! Steps and workflows: the layer that makes a run continue across processes.
//!
//! A [`Workflow`] runs its [`Step`]s in order on a [`Runtime`]. With `continuous` (the
//! default), each step's session id is written to `runs/lineage.json` the moment it
//! exists, and the next process resumes that same session instead of starting afresh:
//!
//! | `Step` field            | within one run                  | across processes (continuous)          |
//! |-------------------------|---------------------------------|----------------------------------------|
//! | `resume_from = None`    | a new session                   | the session lineage has for this name  |
//! | `resume_from = "prev"`  | continue `prev`'s session       | same                                   |
//! | `… + fork`              | branch from it, original intact | same                                   |
//!
//! `continuous = false` makes every process start clean.

pub mod flower;
pub mod gate;

pub use gate::{Gate, Verdict};

use crate::continuity::lineage::is_plain_step_name;
use crate::continuity::manifest::{StepResult, retry_name, round_name};
use crate::continuity::resilience::RESUME_PROMPT;
use crate::continuity::runtime::Runtime;
use crate::engine::{AgentSpec, Event, SessionStart};
use crate::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A prompt computed from what earlier steps produced.
pub type PromptFn = Arc<dyn Fn(&Context) -> String + Send + Sync>;

/// What a step says to its agent.
#[derive(Clone)]
pub enum Prompt {
    Text(String),
    Dynamic(PromptFn),
}

impl Prompt {
    pub fn render(&self, ctx: &Context) -> String {
        match self {
            Prompt::Text(text) => text.clone(),
            Prompt::Dynamic(f) => f(ctx),
        }
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::Text(text.to_string())
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Prompt::Text(text)
    }
}

/// Decides whether a step is already done (its output frozen on disk). `Some(text)`
/// skips the step and puts `text` into the context as its output.
pub type SkipFn = Arc<dyn Fn(&Context) -> Option<String> + Send + Sync>;

/// One step of a workflow. Its `name` is the key of lineage across processes: renaming
/// a step silently starts it fresh next time.
#[derive(Clone)]
pub struct Step {
    pub name: String,
    pub agent: AgentSpec,
    pub prompt: Prompt,
    /// Continue an earlier step's session instead of starting one.
    pub resume_from: Option<String>,
    /// With `resume_from`: branch the session instead of continuing it.
    pub fork: bool,
    /// What is sent when this step's own session is resumed in a later process;
    /// `None` sends `prompt` again.
    pub resume_prompt: Option<Prompt>,
    /// Extra attempts after a failed one (`<name>#retry<N>`), each resuming the session.
    pub retries: u32,
    /// A check after the step (the judge); a failed verdict sends the step back.
    pub gate: Option<Arc<dyn Gate>>,
    pub skip: Option<SkipFn>,
}

impl Step {
    pub fn new(name: impl Into<String>, agent: AgentSpec, prompt: impl Into<Prompt>) -> Self {
        Step {
            name: name.into(),
            agent,
            prompt: prompt.into(),
            resume_from: None,
            fork: false,
            resume_prompt: None,
            retries: 0,
            gate: None,
            skip: None,
        }
    }

    pub fn resume_from(mut self, step: impl Into<String>) -> Self {
        self.resume_from = Some(step.into());
        self
    }

    pub fn fork(mut self) -> Self {
        self.fork = true;
        self
    }

    pub fn resume_prompt(mut self, prompt: impl Into<Prompt>) -> Self {
        self.resume_prompt = Some(prompt.into());
        self
    }

    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    pub fn gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    pub fn skip_when(mut self, skip: SkipFn) -> Self {
        self.skip = Some(skip);
        self
    }
}

/// What a workflow run produced: the spec's `ctx`.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Which wake this is (`ctx["_woke"]`): 1 on the first run in a directory.
    pub woke: u64,
    /// Step name → session id (`ctx["_sessions"]`).
    pub sessions: BTreeMap<String, String>,
    /// Step name → its output text (a skipped step's frozen text).
    pub outputs: BTreeMap<String, String>,
    /// Every step attempt of this run, in order (the manifest rows of this process).
    pub results: Vec<StepResult>,
    /// Gated steps: whether the gate passed in the end.
    pub passed: BTreeMap<String, bool>,
}

impl Context {
    /// A step's output.
    pub fn get(&self, step: &str) -> Option<&str> {
        self.outputs.get(step).map(String::as_str)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    #[error("步骤 {step} 失败了:{error}")]
    StepFailed {
        step: String,
        error: String,
        context: Box<Context>,
    },
    #[error("步骤 {step}:resume_from 指的 {from:?} 还没有会话")]
    NoSessionToResume { step: String, from: String },
    #[error("步骤 {step}:{source}")]
    BadRule {
        step: String,
        #[source]
        source: crate::engine::permissions::RuleError,
    },
}

/// Steps run in order on a runtime.
#[derive(Clone)]
pub struct Workflow {
    pub steps: Vec<Step>,
    /// Continue each step's session across processes (default `true`).
    pub continuous: bool,
}

impl Workflow {
    pub fn new(steps: Vec<Step>) -> Self {
        Workflow {
            steps,
            continuous: true,
        }
    }

    pub fn continuous(mut self, continuous: bool) -> Self {
        self.continuous = continuous;
        self
    }

    /// Runs every step. A step that fails (after its retries) ends the run with
    /// [`WorkflowError::StepFailed`], carrying the context so far.
    pub fn run<'a>(&'a self, rt: &'a Runtime) -> BoxFuture<'a, Result<Context, WorkflowError>> {
        Box::pin(self.run_inner(rt))
    }

    async fn run_inner(&self, rt: &Runtime) -> Result<Context, WorkflowError> {
        // Every agent's rules parse before the first step starts.
        for step in &self.steps {
            step.agent
                .permissions_in(rt.home())
                .map_err(|source| WorkflowError::BadRule {
                    step: step.name.clone(),
                    source,
                })?;
        }
        let mut ctx = Context {
            woke: if self.continuous { rt.wake() } else { 1 },
            ..Context::default()
        };
        let total = self.steps.len();
        for (index, step) in self.steps.iter().enumerate() {
            let remembered = self.remembered(rt, &step.name);
            if let Some(skip) = &step.skip
                && let Some(text) = skip(&ctx)
            {
                ctx.outputs.insert(step.name.clone(), text);
                if let Some(id) = remembered {
                    ctx.sessions.insert(step.name.clone(), id);
                }
                rt.emit(Event::StepSkipped {
                    step: step.name.clone(),
                    index: index + 1,
                    total,
                });
                continue;
            }
            let (start, prompt) = self.start_of(step, &ctx, remembered)?;
            rt.emit(Event::StepStarted {
                step: step.name.clone(),
                index: index + 1,
                total,
                resumed: matches!(start, SessionStart::Resume(_)) && step.resume_from.is_none(),
                woke: ctx.woke,
            });
            self.run_step(rt, step, start, &prompt, &mut ctx).await?;
        }
        Ok(ctx)
    }

    /// The session lineage remembers for a step, when running continuously.
    fn remembered(&self, rt: &Runtime, step: &str) -> Option<String> {
        if !self.continuous {
            return None;
        }
        rt.lineage().session(step).map(str::to_string)
    }

    /// How a step starts and what it is told, per the table in the module docs.
    fn start_of(
        &self,
        step: &Step,
        ctx: &Context,
        remembered: Option<String>,
    ) -> Result<(SessionStart, String), WorkflowError> {
        if let Some(from) = &step.resume_from {
            let id = ctx.sessions.get(from).cloned().ok_or_else(|| {
                WorkflowError::NoSessionToResume {
                    step: step.name.clone(),
                    from: from.clone(),
                }
            })?;
            let start = if step.fork {
                SessionStart::Fork(id)
            } else {
                SessionStart::Resume(id)
            };
            return Ok((start, step.prompt.render(ctx)));
        }
        match remembered {
            Some(id) => {
                let prompt = step.resume_prompt.as_ref().unwrap_or(&step.prompt);
                Ok((SessionStart::Resume(id), prompt.render(ctx)))
            }
            None => Ok((SessionStart::New, step.prompt.render(ctx))),
        }
    }

    /// Runs a step: its attempt, its retries, and its gate rounds.
    async fn run_step(
        &self,
        rt: &Runtime,
        step: &Step,
        start: SessionStart,
        prompt: &str,
        ctx: &mut Context,
    ) -> Result<(), WorkflowError> {
        let mut result = self.attempt(rt, step, &step.name, prompt, start, ctx).await;
        let mut retry = 0;
        while !result.ok && retry < step.retries {
            retry += 1;
            let (start, prompt) = match &result.session_id {
                Some(id) => (SessionStart::Resume(id.clone()), RESUME_PROMPT.to_string()),
                None => (SessionStart::New, step.prompt.render(ctx)),
            };
            let name = retry_name(&step.name, retry);
            result = self.attempt(rt, step, &name, &prompt, start, ctx).await;
        }
        if !result.ok {
            return Err(WorkflowError::StepFailed {
                step: result.step.clone(),
                error: result.error.clone().unwrap_or_default(),
                context: Box::new(ctx.clone()),
            });
        }
        let Some(gate) = step.gate.clone() else {
            return Ok(());
        };
        let mut round = 1;
        loop {
            let verdict = gate.check(rt, step, round, ctx).await;
            rt.emit(Event::Judged {
                step: step.name.clone(),
                round,
                rounds: gate.rounds(),
                passed: matches!(verdict, Verdict::Pass),
            });
            match verdict {
                Verdict::Pass => {
                    ctx.passed.insert(step.name.clone(), true);
                    return Ok(());
                }
                Verdict::Fail { feedback } => {
                    if round >= gate.rounds() {
                        ctx.passed.insert(step.name.clone(), false);
                        return Ok(());
                    }
                    round += 1;
                    let Some(id) = ctx.sessions.get(&step.name).cloned() else {
                        ctx.passed.insert(step.name.clone(), false);
                        return Ok(());
                    };
                    let name = round_name(&step.name, round);
                    rt.emit(Event::StepStarted {
                        step: name.clone(),
                        index: 0,
                        total: 0,
                        resumed: true,
                        woke: ctx.woke,
                    });
                    let result = self
                        .attempt(rt, step, &name, &feedback, SessionStart::Resume(id), ctx)
                        .await;
                    if !result.ok {
                        return Err(WorkflowError::StepFailed {
                            step: name,
                            error: result.error.unwrap_or_default(),
                            context: Box::new(ctx.clone()),
                        });
                    }
                }
            }
        }
    }

    /// One recorded attempt of a step. The on-session hook that writes lineage covers
    /// exactly this run and is removed before anything else (a gate) uses the runtime.
    async fn attempt(
        &self,
        rt: &Runtime,
        step: &Step,
        row_name: &str,
        prompt: &str,
        start: SessionStart,
        ctx: &mut Context,
    ) -> StepResult {
        if self.continuous && is_plain_step_name(&step.name) {
            let name = step.name.clone();
            let lineage = rt.lineage_handle();
            rt.set_on_session(Some(Arc::new(move |id: &str| {
                lineage.remember(&name, id);
            })));
        }
        // The step's main session hands off (换代) near the end of its window; its
        // documents are named by the plain step name, whatever this attempt's row is.
        let result = rt
            .run_step_handing_off(row_name, &step.name, &step.agent, prompt, start)
            .await;
        rt.set_on_session(None);
        if let Some(id) = &result.session_id {
            ctx.sessions.insert(step.name.clone(), id.clone());
        }
        ctx.outputs.insert(step.name.clone(), result.text.clone());
        ctx.results.push(result.clone());
        result
    }
}
