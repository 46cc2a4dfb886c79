//! flower's Python package: the library's `Workflow`, `Step`, `AgentSpec`, `Runtime`,
//! `wake_state`, `Lineage`, `Resilience` and session stores, on the Rust core.
//!
//! Nothing here decides anything about a run: the settings are resolved by
//! `Settings::resolve`, the run opened by `Run::prepare → lock → start`, the workflow
//! run by `Workflow::run`. This layer converts values, calls Python callables, and maps
//! errors to exceptions.
//!
//! Threads: a workflow runs on the tokio runtime of `pyo3-async-runtimes`, never holding
//! the GIL; Python callables (a step's prompt, `on_event`, `on_session`) are called on
//! that runtime's threads with the GIL taken for the call only. An exception raised by
//! one stops the run as a cancellation does and is raised by `run`.

mod convert;
mod errors;
mod rewind;
mod store;
mod valid;

use convert::serialized;
use errors::{ConfigError, FlowerError, LockedError, StepFailedError};
use flower::continuity::resilience::{RESUME_PROMPT, Resilience};
use flower::continuity::rewind::RewindOptions;
use flower::continuity::runtime::FrontEnd;
use flower::events::Event;
use flower::run::{Begin, Run, RunHooks};
use flower::settings::{Environment, FileLayer, Flags};
use flower::stores::SessionStore;
use flower::workflow::{Context, Prompt, WorkflowError};
use flower::{AgentSpec, Settings, Step, Workflow};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------
// AgentSpec, Step, Workflow
// ---------------------------------------------------------------------------------

/// An agent: its name, instructions (system prompt), the tools it may use
/// (permission rules such as `"Read"`, `"Bash(git status)"`), a turn limit and a model.
#[pyclass(module = "flower", name = "AgentSpec", get_all, set_all)]
#[derive(Clone)]
struct PyAgentSpec {
    name: String,
    instructions: String,
    allowed_tools: Vec<String>,
    disallowed_tools: Vec<String>,
    max_turns: Option<u32>,
    model: Option<String>,
}

#[pymethods]
impl PyAgentSpec {
    /// Every value is checked here, so that a bad one is a `TypeError` or `ValueError`
    /// naming it before anything runs or is written.
    #[new]
    #[pyo3(signature = (name, instructions, allowed_tools = None, disallowed_tools = None, max_turns = None, model = None))]
    fn new(
        name: String,
        instructions: String,
        allowed_tools: Option<&Bound<'_, PyAny>>,
        disallowed_tools: Option<&Bound<'_, PyAny>>,
        max_turns: Option<&Bound<'_, PyAny>>,
        model: Option<String>,
    ) -> PyResult<Self> {
        let spec = PyAgentSpec {
            allowed_tools: valid::strings("allowed_tools", allowed_tools)?,
            disallowed_tools: valid::strings("disallowed_tools", disallowed_tools)?,
            max_turns: valid::max_turns(max_turns)?,
            name,
            instructions,
            model,
        };
        spec.check_rules()?;
        Ok(spec)
    }

    fn __repr__(&self) -> String {
        format!(
            "AgentSpec(name={:?}, allowed_tools={:?}, max_turns={:?})",
            self.name, self.allowed_tools, self.max_turns
        )
    }
}

impl PyAgentSpec {
    /// Each permission rule parses (`ValueError` naming the first that does not).
    fn check_rules(&self) -> PyResult<()> {
        valid::rules("allowed_tools", &self.allowed_tools)?;
        valid::rules("disallowed_tools", &self.disallowed_tools)
    }

    fn to_rust(&self) -> AgentSpec {
        let mut spec = AgentSpec::new(self.name.clone(), self.instructions.clone())
            .allowed_tools(self.allowed_tools.clone())
            .disallowed_tools(self.disallowed_tools.clone());
        spec.max_turns = self.max_turns;
        spec.model = self.model.clone();
        spec
    }
}

/// One step: its `name` (the key of lineage across processes: renaming a step starts
/// it fresh), its agent, and its prompt, a string or a function of the context.
/// `resume_from` continues an earlier step's session (`fork=True` branches it);
/// `resume_prompt` is what is said when this step's own session is continued in a
/// later process (default: `prompt` again); `retries` extra attempts after a failure.
#[pyclass(module = "flower", name = "Step", get_all, set_all)]
struct PyStep {
    name: String,
    agent: Py<PyAgentSpec>,
    prompt: Py<PyAny>,
    resume_from: Option<String>,
    fork: bool,
    resume_prompt: Option<Py<PyAny>>,
    retries: u32,
}

#[pymethods]
impl PyStep {
    #[new]
    #[pyo3(signature = (name, agent, prompt, *, resume_from = None, fork = false, resume_prompt = None, retries = None))]
    fn new(
        name: String,
        agent: Py<PyAgentSpec>,
        prompt: Py<PyAny>,
        resume_from: Option<String>,
        fork: bool,
        resume_prompt: Option<Py<PyAny>>,
        retries: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let retries = match retries {
            Some(value) => valid::count("retries", value, 0, "")?,
            None => 0,
        };
        Ok(PyStep {
            name,
            agent,
            prompt,
            resume_from,
            fork,
            resume_prompt,
            retries,
        })
    }

    fn __repr__(&self) -> String {
        format!("Step({:?})", self.name)
    }
}

/// Steps run in order on a `Runtime`. `continuous` (default True): each step continues
/// across processes the session lineage remembers for its name; False: every process
/// starts clean.
#[pyclass(module = "flower", name = "Workflow", get_all, set_all)]
struct PyWorkflow {
    steps: Vec<Py<PyStep>>,
    continuous: bool,
}

/// What a callable raised, first one wins; the run stops at its next await point.
#[derive(Default)]
struct Failure {
    error: Mutex<Option<PyErr>>,
    set: AtomicBool,
    notify: Notify,
}

impl Failure {
    fn fail(&self, error: PyErr) {
        let mut slot = lock(&self.error);
        if slot.is_none() {
            *slot = Some(error);
        }
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Stops the run without an error of its own (the runtime is being closed).
    fn stop(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    fn take(&self) -> Option<PyErr> {
        lock(&self.error).take()
    }
}

/// A Python prompt: a string, or a callable taking the context dict.
enum PyPrompt {
    Text(String),
    Call(Py<PyAny>),
}

impl PyPrompt {
    fn of(py: Python<'_>, prompt: &Py<PyAny>) -> PyResult<PyPrompt> {
        let bound = prompt.bind(py);
        if let Ok(text) = bound.extract::<String>() {
            return Ok(PyPrompt::Text(text));
        }
        if bound.is_callable() {
            return Ok(PyPrompt::Call(prompt.clone_ref(py)));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a prompt is a str or a function of the context",
        ))
    }
}

/// Computed prompts of the current step, by (step, which), computed once before the
/// step starts (see [`rust_step`]).
type PromptCache = Arc<Mutex<HashMap<(String, bool), String>>>;

fn call_prompt(f: &Py<PyAny>, ctx: &Context) -> PyResult<String> {
    Python::attach(|py| {
        let dict = ctx_dict(py, ctx)?;
        f.call1(py, (dict,))?.extract::<String>(py)
    })
}

/// A callable prompt as the library's `Prompt::Dynamic`: the value computed before the
/// step started, else computed now (a retry); an exception stops the run.
fn dynamic(
    f: &Py<PyAny>,
    py: Python<'_>,
    key: (String, bool),
    cache: &PromptCache,
    failure: &Arc<Failure>,
) -> Prompt {
    let f = f.clone_ref(py);
    let cache = cache.clone();
    let failure = failure.clone();
    Prompt::Dynamic(Arc::new(move |ctx: &Context| {
        if let Some(text) = lock(&cache).remove(&key) {
            return text;
        }
        match call_prompt(&f, ctx) {
            Ok(text) => text,
            Err(e) => {
                failure.fail(e);
                String::new()
            }
        }
    }))
}

/// The library's step for a Python one. Callable prompts are computed in the step's
/// skip check, which the workflow calls just before it renders the prompt: an exception
/// there (or earlier, anywhere) skips this and every later step, so that nothing is
/// sent with a prompt that could not be computed, and `run` raises it.
fn rust_step(
    py: Python<'_>,
    step: &PyStep,
    cache: &PromptCache,
    failure: &Arc<Failure>,
) -> PyResult<Step> {
    let agent = step.agent.borrow(py).to_rust();
    let prompt = PyPrompt::of(py, &step.prompt)?;
    let resume = step
        .resume_prompt
        .as_ref()
        .map(|p| PyPrompt::of(py, p))
        .transpose()?;
    let name = step.name.clone();
    let mut calls: Vec<(bool, Py<PyAny>)> = Vec::new();
    let mut rust = Step::new(
        name.clone(),
        agent,
        match &prompt {
            PyPrompt::Text(text) => Prompt::Text(text.clone()),
            PyPrompt::Call(f) => {
                calls.push((false, f.clone_ref(py)));
                dynamic(f, py, (name.clone(), false), cache, failure)
            }
        },
    );
    rust.resume_prompt = match &resume {
        None => None,
        Some(PyPrompt::Text(text)) => Some(Prompt::Text(text.clone())),
        Some(PyPrompt::Call(f)) => {
            calls.push((true, f.clone_ref(py)));
            Some(dynamic(f, py, (name.clone(), true), cache, failure))
        }
    };
    rust.resume_from = step.resume_from.clone();
    rust.fork = step.fork;
    rust.retries = step.retries;
    let cache = cache.clone();
    let failure = failure.clone();
    rust.skip = Some(Arc::new(move |ctx: &Context| {
        if failure.is_set() {
            return Some(String::new());
        }
        for (resume, f) in &calls {
            match call_prompt(f, ctx) {
                Ok(text) => {
                    lock(&cache).insert((name.clone(), *resume), text);
                }
                Err(e) => {
                    failure.fail(e);
                    return Some(String::new());
                }
            }
        }
        None
    }));
    Ok(rust)
}

/// The spec's `ctx`: `_woke`, `_sessions`, each step's output by its name, and
/// `_results` (this process's manifest rows) and `_passed` (gated steps).
fn ctx_dict<'py>(py: Python<'py>, ctx: &Context) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (step, text) in &ctx.outputs {
        dict.set_item(step, text)?;
    }
    dict.set_item("_woke", ctx.woke)?;
    let sessions = PyDict::new(py);
    for (step, id) in &ctx.sessions {
        sessions.set_item(step, id)?;
    }
    dict.set_item("_sessions", sessions)?;
    let results = PyList::empty(py);
    for result in &ctx.results {
        results.append(serialized(py, result)?)?;
    }
    dict.set_item("_results", results)?;
    let passed = PyDict::new(py);
    for (step, ok) in &ctx.passed {
        passed.set_item(step, ok)?;
    }
    dict.set_item("_passed", passed)?;
    Ok(dict)
}

/// Stops what a dropped (cancelled) run left running, like the CLI on a double Ctrl-C,
/// and writes the in-flight step's manifest row (lineage is on disk already). It owns
/// the run, so that `Runtime.close()`, which waits for the last owner, returns after.
struct StopGuard {
    run: Arc<Run>,
    armed: AtomicBool,
}

impl StopGuard {
    fn stop(&self, why: &str) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let runtime = self.run.runtime();
            runtime.rescuer().rescue_with(why);
            runtime.processes().kill_all();
        }
    }
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.stop("cancelled");
    }
}

impl PyWorkflow {
    /// The run as a future that owns everything it needs.
    fn future(
        &self,
        py: Python<'_>,
        rt: &PyRuntime,
    ) -> PyResult<impl Future<Output = PyResult<Py<PyAny>>> + Send + 'static> {
        let run = rt.open_run()?;
        // The runtime's own reference and this one: anything more is a run still going
        // (the library's runtime runs one workflow at a time).
        if Arc::strong_count(&run) > 2 {
            return Err(FlowerError::new_err(
                "a workflow is already running on this runtime",
            ));
        }
        let failure = Arc::new(Failure::default());
        *lock(&rt.hooks.failure) = failure.clone();
        let cache: PromptCache = Arc::default();
        let steps = self
            .steps
            .iter()
            .map(|s| rust_step(py, &s.borrow(py), &cache, &failure))
            .collect::<PyResult<Vec<_>>>()?;
        let workflow = Workflow::new(steps).continuous(self.continuous);
        Ok(async move {
            let guard = StopGuard {
                run,
                armed: AtomicBool::new(true),
            };
            let runtime = guard.run.runtime();
            let outcome = tokio::select! {
                biased;
                _ = failure.notify.notified() => None,
                outcome = workflow.run(runtime) => Some(outcome),
            };
            if failure.is_set() {
                // A callable's exception names the row's end; closing is a cancellation.
                let error = failure.take();
                guard.stop(&match &error {
                    Some(e) => format!("stopped: {e}"),
                    None => "cancelled".to_string(),
                });
                return Err(error.unwrap_or_else(|| {
                    FlowerError::new_err("the runtime was closed while the run was going")
                }));
            }
            guard.armed.store(false, Ordering::SeqCst);
            match outcome {
                Some(Ok(ctx)) => Python::attach(|py| Ok(ctx_dict(py, &ctx)?.into_any().unbind())),
                Some(Err(WorkflowError::StepFailed {
                    step,
                    error,
                    context,
                })) => Python::attach(|py| {
                    let e = StepFailedError::new_err(format!("步骤 {step} 没跑完:{error}"));
                    let value = e.value(py);
                    value.setattr("step", step)?;
                    value.setattr("error", error)?;
                    value.setattr("context", ctx_dict(py, &context)?)?;
                    Err(e)
                }),
                Some(Err(other)) => Err(FlowerError::new_err(other.to_string())),
                None => Err(FlowerError::new_err("a callback failed")),
            }
        })
    }
}

#[pymethods]
impl PyWorkflow {
    /// At least one step, each a `Step`, their names unique (lineage is keyed by the
    /// name: two steps of one name would share a session), their agents' rules valid.
    #[new]
    #[pyo3(signature = (steps, continuous = true))]
    fn new(py: Python<'_>, steps: &Bound<'_, PyAny>, continuous: bool) -> PyResult<Self> {
        let steps = valid::steps(steps)?;
        let mut names: Vec<String> = Vec::new();
        for step in &steps {
            let step = step.borrow(py);
            if names.contains(&step.name) {
                return Err(PyValueError::new_err(format!(
                    "Workflow: two steps are named {:?}; step names must be unique (a step's session is remembered across processes by its name)",
                    step.name
                )));
            }
            names.push(step.name.clone());
            step.agent.borrow(py).check_rules()?;
        }
        Ok(PyWorkflow { steps, continuous })
    }

    /// Runs every step on `rt`; awaitable on the running asyncio loop, which is never
    /// blocked. Returns the context dict. Cancelling the awaiting task stops the run
    /// (running commands killed, the in-flight step's manifest row written with
    /// `error="cancelled"`); lineage is on disk from the moment each session existed.
    fn run<'py>(&self, py: Python<'py>, rt: &PyRuntime) -> PyResult<Bound<'py, PyAny>> {
        let future = self.future(py, rt)?;
        pyo3_async_runtimes::tokio::future_into_py(py, future)
    }

    /// `run` for a script without an event loop: blocks (without the GIL) until the
    /// run ends. Ctrl-C stops it as cancellation does and raises KeyboardInterrupt.
    fn run_sync(&self, py: Python<'_>, rt: &PyRuntime) -> PyResult<Py<PyAny>> {
        rt.open_run()?;
        // Blocking here would block that loop (and every task on it) for the whole run.
        if py
            .import("asyncio")?
            .call_method0("get_running_loop")
            .is_ok()
        {
            return Err(PyRuntimeError::new_err(
                "Workflow.run_sync() cannot be called from a running event loop (it would block the loop for the whole run); use `await workflow.run(rt)` there",
            ));
        }
        let future = self.future(py, rt)?;
        let tokio = pyo3_async_runtimes::tokio::get_runtime();
        // On the runtime's workers, as `run` is: polled from here, every I/O event of
        // the run would be a wake-up across threads.
        let mut task = tokio.spawn(future);
        py.detach(|| {
            tokio.block_on(async move {
                let signals = async {
                    loop {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Python::attach(|py| py.check_signals())?;
                    }
                };
                let interrupted: PyResult<()> = tokio::select! {
                    done = &mut task => return done.unwrap_or_else(|e| {
                        Err(FlowerError::new_err(format!("运行的任务异常结束({e})")))
                    }),
                    interrupted = signals => interrupted,
                };
                // Stopped as a cancellation is: the run is dropped on its worker, and
                // that is waited for.
                task.abort();
                let _ = task.await;
                interrupted.map(|()| Python::attach(|py| py.None()))
            })
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let names: Vec<String> = self
            .steps
            .iter()
            .map(|s| s.borrow(py).name.clone())
            .collect();
        format!(
            "Workflow({names:?}, continuous={})",
            if self.continuous { "True" } else { "False" }
        )
    }
}

// ---------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------

/// What the event sink (built once, when the runtime opens) reaches.
struct Hooks {
    on_event: Option<Py<PyAny>>,
    on_session: Option<Py<PyAny>>,
    /// The current workflow run's failure slot.
    failure: Mutex<Arc<Failure>>,
    /// The step that runs now (for `on_session`).
    step: Mutex<String>,
}

impl Hooks {
    fn deliver(&self, event: &Event) {
        let failure = lock(&self.failure).clone();
        if failure.is_set() {
            return;
        }
        if let Event::StepStarted { step, .. } = event {
            *lock(&self.step) = step.clone();
        }
        let session = match event {
            Event::SessionStarted {
                session_id,
                depth: 0,
                ..
            } => Some(session_id),
            _ => None,
        };
        let session_call = self.on_session.as_ref().zip(session);
        if self.on_event.is_none() && session_call.is_none() {
            return;
        }
        let result = Python::attach(|py| -> PyResult<()> {
            if let Some(f) = &self.on_event {
                f.call1(py, (event_dict(py, event)?,))?;
            }
            if let Some((f, id)) = session_call {
                let step = lock(&self.step).clone();
                f.call1(py, (step, id))?;
            }
            Ok(())
        });
        if let Err(e) = result {
            failure.fail(e);
        }
    }
}

/// An event as a dict: `{"type": ..., fields}`, as [`Event`] serializes.
fn event_dict<'py>(py: Python<'py>, event: &Event) -> PyResult<Bound<'py, PyAny>> {
    serialized(py, event)
}

/// Retry and offline-wait numbers; `Resilience.resume_prompt` is what a retry that
/// continues its session says. Each number is kept only when given (to the constructor
/// or set later): a `Runtime` lays the given ones over what its settings resolved
/// (`FLOWER_MAX_ATTEMPTS` …, else the core's default), so a variable wins over a
/// default and an explicit number over a variable. Read, a number not given is the
/// core's default.
#[pyclass(module = "flower", name = "Resilience")]
#[derive(Clone, Default)]
struct PyResilience {
    max_attempts: Option<u32>,
    base_delay: Option<f64>,
    max_delay: Option<f64>,
    probe_timeout: Option<f64>,
    probe_interval: Option<f64>,
    max_offline_wait: Option<f64>,
    retry_unknown: Option<bool>,
}

#[pymethods]
impl PyResilience {
    #[classattr]
    #[pyo3(name = "resume_prompt")]
    const RESUME_PROMPT: &'static str = RESUME_PROMPT;

    /// What is left out is not given: the settings' value (a variable's, else the
    /// core's default, `Resilience::default()`, not a copy).
    #[new]
    #[pyo3(signature = (*, max_attempts = None, base_delay = None, max_delay = None, probe_timeout = None, probe_interval = None, max_offline_wait = None, retry_unknown = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_attempts: Option<&Bound<'_, PyAny>>,
        base_delay: Option<f64>,
        max_delay: Option<f64>,
        probe_timeout: Option<f64>,
        probe_interval: Option<f64>,
        max_offline_wait: Option<f64>,
        retry_unknown: Option<bool>,
    ) -> PyResult<Self> {
        let max_attempts = max_attempts
            .filter(|v| !v.is_none())
            .map(|value| valid::count("max_attempts", value, 1, " (or None for the default)"))
            .transpose()?;
        Ok(PyResilience {
            max_attempts,
            base_delay,
            max_delay,
            probe_timeout,
            probe_interval,
            max_offline_wait,
            retry_unknown,
        })
    }

    #[getter]
    fn max_attempts(&self) -> u32 {
        self.over(&Resilience::default()).max_attempts
    }
    #[setter]
    fn set_max_attempts(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.max_attempts = Some(valid::count("max_attempts", value, 1, "")?);
        Ok(())
    }
    #[getter]
    fn base_delay(&self) -> f64 {
        self.over(&Resilience::default()).base_delay
    }
    #[setter]
    fn set_base_delay(&mut self, value: f64) {
        self.base_delay = Some(value);
    }
    #[getter]
    fn max_delay(&self) -> f64 {
        self.over(&Resilience::default()).max_delay
    }
    #[setter]
    fn set_max_delay(&mut self, value: f64) {
        self.max_delay = Some(value);
    }
    #[getter]
    fn probe_timeout(&self) -> f64 {
        self.over(&Resilience::default()).probe_timeout
    }
    #[setter]
    fn set_probe_timeout(&mut self, value: f64) {
        self.probe_timeout = Some(value);
    }
    #[getter]
    fn probe_interval(&self) -> f64 {
        self.over(&Resilience::default()).probe_interval
    }
    #[setter]
    fn set_probe_interval(&mut self, value: f64) {
        self.probe_interval = Some(value);
    }
    #[getter]
    fn max_offline_wait(&self) -> f64 {
        self.over(&Resilience::default()).max_offline_wait
    }
    #[setter]
    fn set_max_offline_wait(&mut self, value: f64) {
        self.max_offline_wait = Some(value);
    }
    #[getter]
    fn retry_unknown(&self) -> bool {
        self.over(&Resilience::default()).retry_unknown
    }
    #[setter]
    fn set_retry_unknown(&mut self, value: bool) {
        self.retry_unknown = Some(value);
    }
}

impl PyResilience {
    /// The numbers given laid over `base` (what the settings resolved).
    fn over(&self, base: &Resilience) -> Resilience {
        Resilience {
            max_attempts: self.max_attempts.unwrap_or(base.max_attempts),
            base_delay: self.base_delay.unwrap_or(base.base_delay),
            max_delay: self.max_delay.unwrap_or(base.max_delay),
            probe_timeout: self.probe_timeout.unwrap_or(base.probe_timeout),
            probe_interval: self.probe_interval.unwrap_or(base.probe_interval),
            max_offline_wait: self.max_offline_wait.unwrap_or(base.max_offline_wait),
            retry_unknown: self.retry_unknown.unwrap_or(base.retry_unknown),
        }
    }

    /// Every number given: what a runtime used, as read back.
    fn given_all(r: &Resilience) -> PyResilience {
        PyResilience {
            max_attempts: Some(r.max_attempts),
            base_delay: Some(r.base_delay),
            max_delay: Some(r.max_delay),
            probe_timeout: Some(r.probe_timeout),
            probe_interval: Some(r.probe_interval),
            max_offline_wait: Some(r.max_offline_wait),
            retry_unknown: Some(r.retry_unknown),
        }
    }
}

/// One open run of `workspace` with `run_dir` (relative to the current directory, not
/// to the workspace): the run lock is taken here and held until `close()`. Settings
/// come from the environment as for `flower` (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
/// FLOWER_* …); a bad value raises ConfigError, a run held by another process
/// LockedError. `trim`, `ephemeral`, `keep_denials`: what a resumed session is fed.
#[pyclass(module = "flower", name = "Runtime")]
struct PyRuntime {
    run: Mutex<Option<Arc<Run>>>,
    hooks: Arc<Hooks>,
    #[pyo3(get)]
    workspace: PathBuf,
    #[pyo3(get)]
    run_dir: PathBuf,
    /// The retry numbers this runtime uses (given, else the variables', else the
    /// defaults).
    #[pyo3(get)]
    resilience: PyResilience,
}

impl PyRuntime {
    fn open_run(&self) -> PyResult<Arc<Run>> {
        lock(&self.run)
            .clone()
            .ok_or_else(|| FlowerError::new_err("the runtime is closed"))
    }
}

#[pymethods]
impl PyRuntime {
    #[new]
    // What is left out (`trim`, `ephemeral`, `keep_denials`, `resilience`) is what the
    // settings build for the CLI too: the core's defaults, not copies of them.
    #[pyo3(signature = (workspace = PathBuf::from("."), run_dir = PathBuf::from(flower::settings::DEFAULT_RUN_DIR), *, trim = None, ephemeral = None, keep_denials = None, on_session = None, on_event = None, resilience = None, wait = false, setting_sources = None, accept_settings = false, enable_file_checkpointing = true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        workspace: PathBuf,
        run_dir: PathBuf,
        trim: Option<bool>,
        ephemeral: Option<bool>,
        keep_denials: Option<&Bound<'_, PyAny>>,
        on_session: Option<Py<PyAny>>,
        on_event: Option<Py<PyAny>>,
        resilience: Option<PyRef<'_, PyResilience>>,
        wait: bool,
        setting_sources: Option<Vec<String>>,
        accept_settings: bool,
        enable_file_checkpointing: bool,
    ) -> PyResult<Self> {
        let sources = setting_sources
            .map(|s| valid::setting_sources(&s))
            .transpose()?;
        let keep_denials = match keep_denials.filter(|v| !v.is_none()) {
            Some(value) => {
                Some(valid::count("keep_denials", value, 0, " (or None for the default)")? as usize)
            }
            None => None,
        };
        if !workspace.is_dir() {
            let why = match std::fs::metadata(&workspace) {
                Ok(_) => "is not a directory".to_string(),
                Err(e) => format!("cannot be used ({e})"),
            };
            return Err(ConfigError::new_err(format!(
                "Runtime(workspace={:?}): the workspace {why}",
                workspace.display().to_string()
            )));
        }
        // Waiting for this very process would never end.
        if let flower::continuity::lock::Probe::Held(Some(holder)) =
            flower::continuity::lock::probe_run(&run_dir)
            && errors::is_this_process(&holder)
        {
            return Err(errors::held_here(&run_dir));
        }
        // The Agent SDK's `setting_sources`: no files at all unless asked (its default),
        // memory included; else the files of those sources, as the CLI reads them.
        let env = Environment::from_process();
        let files = match &sources {
            None => FileLayer::default(),
            Some(sources) => FileLayer::load_from(&workspace, env.home(), sources)
                .map_err(|e| ConfigError::new_err(e.to_string()))?,
        };
        // Everything the constructor says is a flag of the one settings resolution.
        let mut flags = Flags {
            workspace: Some(workspace.clone()),
            run_dir: Some(run_dir.clone()),
            wait,
            no_memory: sources.is_none(),
            accept_settings,
            trim,
            ephemeral,
            keep_denials,
            checkpoints: Some(enable_file_checkpointing),
            ..Flags::default()
        };
        let mut settings = Settings::resolve(&flags, &env, &files)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        // The numbers given win over the variables, which win over the defaults: laid
        // over what the settings resolved, then resolved again with them.
        if let Some(given) = resilience {
            flags.resilience = Some(given.over(settings.resilience()));
            settings = Settings::resolve(&flags, &env, &files)
                .map_err(|e| ConfigError::new_err(e.to_string()))?;
        }
        let used = PyResilience::given_all(settings.resilience());
        // The team's sub-agents beside the default one, as `flower once` offers them.
        let subagents = match settings.files().agents.agents.is_empty() {
            true => Vec::new(),
            false => settings.subagents_for(&flower::engine::general_purpose()).0,
        };
        settings.install_prices();
        let hooks = Arc::new(Hooks {
            on_event,
            on_session,
            failure: Mutex::new(Arc::new(Failure::default())),
            step: Mutex::new(String::new()),
        });
        let sink_hooks = hooks.clone();
        // Opening may wait for the lock (`wait=True`): without the GIL.
        let run = py
            .detach(move || {
                Run::prepare(&settings)?
                    .lock(Begin::Continue, RunHooks::default())?
                    .start(
                        subagents,
                        FrontEnd {
                            events: Arc::new(move |event: &Event| sink_hooks.deliver(event)),
                            ..FrontEnd::default()
                        },
                    )
            })
            .map_err(|e| errors::run_error(e, &run_dir))?;
        Ok(PyRuntime {
            run: Mutex::new(Some(Arc::new(run))),
            hooks,
            workspace,
            run_dir,
            resilience: used,
        })
    }

    /// Whether `session_id` is still in the run's store (lineage is checked this way).
    fn has_session(&self, py: Python<'_>, session_id: String) -> PyResult<bool> {
        let run = self.open_run()?;
        py.detach(move || run.runtime().store().has_session(&session_id))
            .map_err(errors::store_error)
    }

    /// What the CLI's SIGTERM/SIGHUP handler does before the process dies: writes the
    /// in-flight step's manifest row (`error="killed-by-signal"`) and kills the running
    /// commands. For a handler of the script's own (`signal.signal`); the package
    /// installs none.
    fn rescue(&self, py: Python<'_>) -> PyResult<()> {
        let run = self.open_run()?;
        py.detach(move || {
            run.runtime().rescue();
            run.runtime().processes().kill_all();
        });
        Ok(())
    }

    /// The workspace's checkpoints, oldest first: `n`, `kind`, `step`, `session_id`,
    /// `turn`, `time`, `tree` (as `flower rewind` lists them).
    fn checkpoints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let run = self.open_run()?;
        rewind::list(py, &run)
    }

    /// `flower rewind POINT`: the files and (unless `files_only`) the conversation.
    #[pyo3(signature = (point, *, files_only = false, discard = false))]
    fn rewind<'py>(
        &self,
        py: Python<'py>,
        point: &Bound<'py, PyAny>,
        files_only: bool,
        discard: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (run, point) = (self.open_run()?, rewind::point_text(point)?);
        let options = RewindOptions {
            files_only,
            discard,
            ..RewindOptions::default()
        };
        let result = py.detach(move || run.runtime().rewind(&point, &options));
        rewind::outcome(py, result)
    }

    /// The Agent SDK's name: the files as they were when that message was written.
    #[pyo3(signature = (user_message_id, *, discard = false))]
    fn rewind_files<'py>(
        &self,
        py: Python<'py>,
        user_message_id: String,
        discard: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let run = self.open_run()?;
        let options = RewindOptions {
            discard,
            ..RewindOptions::default()
        };
        let result = py.detach(move || run.runtime().rewind_files(&user_message_id, &options));
        rewind::outcome(py, result)
    }

    /// The key the run's sessions are stored under (the store's `project_key`).
    #[getter]
    fn project_key(&self) -> PyResult<String> {
        let run = self.open_run()?;
        let workspace = run.runtime().lineage().workspace().to_string();
        Ok(flower::stores::project_key(std::path::Path::new(
            &workspace,
        )))
    }

    /// The wake state the run was opened with (see `wake_state`).
    #[getter]
    fn wake<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let run = self.open_run()?;
        serialized(py, run.wake())
    }

    /// The run's session store, as an Agent SDK `SessionStore` (pruning on `load`).
    #[getter]
    fn store(&self, py: Python<'_>) -> PyResult<Py<store::PySessionStore>> {
        let run = self.open_run()?;
        let store: Arc<dyn SessionStore> = run.runtime().store().clone();
        Py::new(py, store::PySessionStore { store })
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.run).is_none()
    }

    /// Ends the run: releases the run lock. A run still going on it (one whose task
    /// was just cancelled, whose stop may wait for the event loop) is stopped as a
    /// cancellation stops it, and waited for (a few seconds at most).
    fn close(&self, py: Python<'_>) {
        let Some(run) = lock(&self.run).take() else {
            return;
        };
        if Arc::strong_count(&run) > 1 {
            lock(&self.hooks.failure).stop();
        }
        py.detach(move || {
            let mut run = run;
            for _ in 0..500 {
                match Arc::try_unwrap(run) {
                    Ok(run) => return run.close(),
                    Err(shared) => run = shared,
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _a: Py<PyAny>, _b: Py<PyAny>, _c: Py<PyAny>) {
        self.close(py);
    }
}

// ---------------------------------------------------------------------------------
// wake_state, Lineage
// ---------------------------------------------------------------------------------

/// The read-only wake probe: `{"waking", "brief", "goal", "checks", "woke", "steps"}`.
/// Writes not one byte.
#[pyfunction]
#[pyo3(signature = (workspace = PathBuf::from("."), run_dir = PathBuf::from("runs")))]
fn wake_state(py: Python<'_>, workspace: PathBuf, run_dir: PathBuf) -> PyResult<Bound<'_, PyAny>> {
    let state = py.detach(move || flower::wake_state(&workspace, &run_dir));
    serialized(py, &state)
}

/// `run_dir/lineage.json`: step name → session id, and how many times the directory was
/// woken. Read as the runtime reads it (another workspace's file or a corrupt one reads
/// as empty); `remember` writes at once; `archive` moves it (and `extra` files) into a
/// directory and starts over.
#[pyclass(module = "flower", name = "Lineage")]
struct PyLineage {
    inner: Mutex<flower::Lineage>,
}

#[pymethods]
impl PyLineage {
    #[new]
    #[pyo3(signature = (run_dir = PathBuf::from("runs"), workspace = PathBuf::from(".")))]
    fn new(run_dir: PathBuf, workspace: PathBuf) -> PyResult<Self> {
        let workspace = workspace.canonicalize().map_err(|e| {
            FlowerError::new_err(format!("工作区 {} 用不了({e})", workspace.display()))
        })?;
        Ok(PyLineage {
            inner: Mutex::new(flower::Lineage::load(&run_dir, &workspace, |_| true)),
        })
    }

    /// Records that `step` uses `session_id` and writes the file; suffixed attempt
    /// names (`#retry`, `#round`, `·判定#`) never enter. Whether the file holds it now.
    fn remember(&self, step: &str, session_id: &str) -> bool {
        lock(&self.inner).remember(step, session_id)
    }

    /// `/new`: moves lineage.json and each existing `extra` file into `into`, then
    /// resets steps and woke. Nothing is deleted.
    #[pyo3(signature = (into, extra = Vec::new()))]
    fn archive(&self, into: PathBuf, extra: Vec<PathBuf>) -> PyResult<()> {
        lock(&self.inner)
            .archive(&into, &extra)
            .map_err(|e| FlowerError::new_err(e.to_string()))
    }

    #[getter]
    fn woke(&self) -> u64 {
        lock(&self.inner).woke()
    }

    #[getter]
    fn steps(&self) -> std::collections::BTreeMap<String, String> {
        lock(&self.inner).steps().clone()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        lock(&self.inner).path().to_path_buf()
    }
}

#[pymodule]
#[pyo3(name = "_flower")]
fn flower_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();

    m.add_class::<PyAgentSpec>()?;
    m.add_class::<PyStep>()?;
    m.add_class::<PyWorkflow>()?;
    m.add_class::<PyRuntime>()?;
    m.add_class::<PyResilience>()?;
    m.add_class::<PyLineage>()?;
    m.add_class::<store::PySessionStore>()?;
    m.add_class::<store::PySqliteStore>()?;
    m.add_class::<store::PyPostgresStore>()?;
    m.add_class::<store::PyPruningStore>()?;
    m.add_function(wrap_pyfunction!(wake_state, m)?)?;
    m.add("FlowerError", py.get_type::<FlowerError>())?;
    m.add("LockedError", py.get_type::<LockedError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("StepFailedError", py.get_type::<StepFailedError>())?;
    m.add("RESUME_PROMPT", RESUME_PROMPT)?;
    Ok(())
}
