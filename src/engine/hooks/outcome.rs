//! What the hooks of one event said, read the way Claude Code reads them.
//!
//! Per hook: exit 0 is success, and a JSON object on stdout is its answer; exit 2 is a
//! blocking error whose stderr is the reason; any other exit (a crash, a timeout, a
//! command that cannot start) is a non-blocking error that only the person is told
//! about. The answer's fields: `continue: false` (+ `stopReason`) stops the agent;
//! `decision: "block"` (+ `reason`) blocks what the event allows blocking;
//! `systemMessage` is shown to the person; `hookSpecificOutput` carries
//! `permissionDecision` (`allow`, `deny`, `ask`; PreToolUse, with the legacy
//! `decision: "approve"`) and `additionalContext`. For UserPromptSubmit and
//! SessionStart, plain (non-JSON) stdout of a successful hook is context too.

use super::command::{Ended, HookRun};
use super::config::HookEvent;
use crate::lenient::{Slot, UnknownKeys};
use serde::{Deserialize, Serialize};

/// What PreToolUse hooks decided about the permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionDecision {
    /// `allow` (or the legacy `approve`): no `ask` rule prompts for this call. It does
    /// not lift flower's deny rules or an agent's own allow list.
    Allow,
    /// `ask`: the person is asked, as for an `ask` rule.
    Ask(String),
}

/// The hooks of one event, run.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutcome {
    pub event: HookEvent,
    /// The tool name, source or trigger the matchers saw (empty for other events).
    pub subject: String,
    pub runs: Vec<HookRun>,
}

impl HookOutcome {
    /// The answers (JSON objects on stdout) of the hooks that exited 0.
    fn answers(&self) -> impl Iterator<Item = HookAnswer> + '_ {
        self.runs.iter().filter_map(answer)
    }

    /// Why the event's action is blocked, if a hook blocked it: the stderr of a hook
    /// that exited 2, a `decision: "block"`'s reason, PreToolUse's
    /// `permissionDecision: "deny"` reason. Several reasons are joined.
    pub fn block_reason(&self) -> Option<String> {
        let mut reasons = Vec::new();
        for run in &self.runs {
            if run.exit_code() == Some(2) {
                let stderr = run.stderr.trim();
                reasons.push(if stderr.is_empty() {
                    format!(
                        "hook `{}` exited 2 (no reason given on stderr)",
                        run.command
                    )
                } else {
                    stderr.to_string()
                });
            }
        }
        for answer in self.answers() {
            let reason = |first: Option<&String>| {
                first
                    .or(answer.reason.get())
                    .map_or("a hook blocked it (no reason given)", String::as_str)
                    .to_string()
            };
            if answer.decision() == Some("block") {
                reasons.push(reason(None));
            } else if self.event == HookEvent::PreToolUse
                && answer.permission_decision() == Some("deny")
            {
                let specific = answer.specific();
                reasons.push(reason(
                    specific.and_then(|s| s.permission_decision_reason.get()),
                ));
            }
        }
        (!reasons.is_empty()).then(|| reasons.join("\n"))
    }

    /// PreToolUse's `allow` / `ask` (a `deny` is a [`HookOutcome::block_reason`]);
    /// `ask` wins over `allow`.
    pub fn permission(&self) -> Option<PermissionDecision> {
        let mut decision = None;
        for answer in self.answers() {
            let said = answer.permission_decision().or_else(|| answer.decision());
            match said {
                Some("ask") => {
                    let why = answer
                        .specific()
                        .and_then(|s| s.permission_decision_reason.get())
                        .map_or("a hook asks for confirmation", String::as_str);
                    return Some(PermissionDecision::Ask(why.to_string()));
                }
                Some("allow" | "approve") => decision = Some(PermissionDecision::Allow),
                _ => {}
            }
        }
        decision
    }

    /// Text for the model: every `additionalContext`, and for UserPromptSubmit and
    /// SessionStart the plain stdout of hooks that exited 0.
    pub fn contexts(&self) -> Vec<String> {
        let plain_counts = matches!(
            self.event,
            HookEvent::UserPromptSubmit | HookEvent::SessionStart
        );
        let mut out = Vec::new();
        for run in &self.runs {
            if run.exit_code() != Some(0) {
                continue;
            }
            match answer(run) {
                Some(answer) => {
                    if let Some(context) =
                        answer.specific().and_then(|s| s.additional_context.get())
                        && !context.trim().is_empty()
                    {
                        out.push(context.trim().to_string());
                    }
                }
                None if plain_counts && !run.stdout.trim().is_empty() => {
                    out.push(run.stdout.trim().to_string());
                }
                None => {}
            }
        }
        out
    }

    /// The contexts as one note for the model (`PostToolUse:Edit hook additional
    /// context:` and the texts); `None` when there are none.
    pub fn context_note(&self) -> Option<String> {
        let contexts = self.contexts();
        (!contexts.is_empty()).then(|| {
            format!(
                "{} hook additional context:\n{}",
                self.label(),
                contexts.join("\n\n")
            )
        })
    }

    /// `continue: false`: the agent must stop; the `stopReason` (or a default).
    pub fn stop(&self) -> Option<String> {
        self.answers()
            .find(|a| a.proceed == Slot::Is(false))
            .map(|a| {
                a.stop_reason
                    .get()
                    .map_or("a hook said not to continue", String::as_str)
                    .to_string()
            })
    }

    /// Lines for the person: hooks that crashed, timed out, could not start or exited
    /// with an error status, a blocking stderr the model does not see, and every
    /// `systemMessage`.
    pub fn notices(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let label = self.label();
        for run in &self.runs {
            let stderr = first_lines(&run.stderr);
            match &run.ended {
                Ended::Exit(0) => {}
                Ended::Exit(2) if !self.event.feeds_model_on_block() => lines.push(format!(
                    "{label} hook `{}` 挡下(退出码 2):{stderr}",
                    run.command
                )),
                Ended::Exit(2) => {}
                // The shell's way of saying its last command died of signal code-128.
                Ended::Exit(code @ 129..=192) => lines.push(format!(
                    "{label} hook `{}` 崩溃了(信号 {},退出码 {code}),不影响继续:{stderr}",
                    run.command,
                    code - 128
                )),
                Ended::Exit(code) => lines.push(format!(
                    "{label} hook `{}` 出错(退出码 {code}),不影响继续:{stderr}",
                    run.command
                )),
                Ended::Signal(signal) => lines.push(format!(
                    "{label} hook `{}` 崩溃了(信号 {signal}),不影响继续:{stderr}",
                    run.command
                )),
                Ended::TimedOut(after) => lines.push(format!(
                    "{label} hook `{}` 超时({} 秒),已杀掉,不影响继续",
                    run.command,
                    after.as_secs_f64()
                )),
                Ended::Failed(why) => {
                    lines.push(format!("{label} hook `{}` 没能运行:{why}", run.command))
                }
            }
        }
        for answer in self.answers() {
            if let Some(message) = answer.system_message.get() {
                lines.push(format!("{label} hook:{message}"));
            }
        }
        lines
    }

    /// `PreToolUse:Bash`, `Stop`, `SessionStart:resume`.
    pub fn label(&self) -> String {
        if self.subject.is_empty() {
            self.event.name().to_string()
        } else {
            format!("{}:{}", self.event, self.subject)
        }
    }

    /// The `system` entry's content, level and fields that record this outcome in the
    /// transcript (see [`crate::transcript::Chain::system`]).
    pub fn record(&self) -> (String, &'static str, crate::transcript::Entry) {
        let failed = self
            .runs
            .iter()
            .any(|r| !matches!(r.ended, Ended::Exit(0) | Ended::Exit(2)));
        let blocked = self.block_reason();
        let (summary, level, outcome) = match (&blocked, failed) {
            (Some(reason), _) => (
                format!("{} hook blocked: {}", self.label(), first_lines(reason)),
                "warning",
                "blocked",
            ),
            (None, true) => (format!("{} hook failed", self.label()), "warning", "failed"),
            (None, false) => (format!("{} hook ran", self.label()), "info", "ran"),
        };
        let runs: Vec<RecordedRun> = self.runs.iter().map(RecordedRun::of).collect();
        let fields = crate::transcript::Entry {
            hook_event: Some(self.event.name().into()),
            hook_subject: (!self.subject.is_empty()).then(|| self.subject.clone()),
            hook_runs: Some(crate::transcript::Raw::of_tree(&runs)),
            // What happened, for a reader that words it itself (`flower show`).
            hook_outcome: Some(outcome.into()),
            ..crate::transcript::Entry::default()
        };
        (summary, level, fields)
    }
}

impl HookEvent {
    /// Whether a block (exit 2) of this event is fed to the model; for the others it
    /// is shown to the person only (Claude Code's table).
    pub fn feeds_model_on_block(self) -> bool {
        matches!(
            self,
            HookEvent::PreToolUse
                | HookEvent::PostToolUse
                | HookEvent::Stop
                | HookEvent::SubagentStop
        )
    }
}

/// The JSON object a hook prints on stdout when it exits 0, as Claude Code documents
/// it. A field of another type than documented is as if absent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HookAnswer {
    /// `false`: the agent stops.
    #[serde(rename = "continue")]
    pub proceed: Slot<bool>,
    pub stop_reason: Slot<String>,
    /// `block` (and, for PreToolUse, the legacy `approve`).
    pub decision: Slot<String>,
    pub reason: Slot<String>,
    /// Shown to the person.
    pub system_message: Slot<String>,
    /// Read, not acted on: flower never shows a hook's stdout in the first place.
    pub suppress_output: Slot<bool>,
    pub hook_specific_output: Slot<HookSpecificOutput>,
    /// Keys flower does not read.
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

/// An answer's `hookSpecificOutput`. `updatedInput` is not supported (one of the
/// unknown keys).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HookSpecificOutput {
    /// Not read: the event is the one that ran the hook.
    pub hook_event_name: Slot<String>,
    /// PreToolUse: `allow`, `deny` or `ask`.
    pub permission_decision: Slot<String>,
    pub permission_decision_reason: Slot<String>,
    /// Text for the model.
    pub additional_context: Slot<String>,
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

impl HookAnswer {
    /// Reads a hook's stdout: a JSON object, or `None` (plain text, or not an object).
    pub fn parse(stdout: &str) -> Option<HookAnswer> {
        let text = stdout.trim();
        if !text.starts_with('{') {
            return None;
        }
        // Value first: a key written twice is the last one, as before (a derived
        // struct would refuse the whole answer).
        let tree = serde_json::from_str::<serde_json::Value>(text).ok()?;
        HookAnswer::deserialize(&tree).ok()
    }

    fn decision(&self) -> Option<&str> {
        self.decision.get().map(String::as_str)
    }

    fn specific(&self) -> Option<&HookSpecificOutput> {
        self.hook_specific_output.get()
    }

    fn permission_decision(&self) -> Option<&str> {
        self.specific()?
            .permission_decision
            .get()
            .map(String::as_str)
    }
}

/// The answer of a hook that exited 0, if it printed one.
fn answer(run: &HookRun) -> Option<HookAnswer> {
    if run.exit_code() != Some(0) {
        return None;
    }
    HookAnswer::parse(&run.stdout)
}

/// One hook run as the transcript's `system` entry records it (`hookRuns`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecordedRun<'a> {
    command: &'a str,
    /// `exit`, `signal`, `timeout` or `failed`.
    outcome: &'static str,
    code: RecordedCode<'a>,
    duration_ms: u64,
    stdout: &'a str,
    stderr: &'a str,
}

/// The exit status, the signal, nothing (a timeout) or why it could not run.
#[derive(Serialize)]
#[serde(untagged)]
enum RecordedCode<'a> {
    Number(i32),
    Nothing,
    Why(&'a str),
}

impl<'a> RecordedRun<'a> {
    fn of(run: &'a HookRun) -> RecordedRun<'a> {
        let (outcome, code) = match &run.ended {
            Ended::Exit(code) => ("exit", RecordedCode::Number(*code)),
            Ended::Signal(signal) => ("signal", RecordedCode::Number(*signal)),
            Ended::TimedOut(_) => ("timeout", RecordedCode::Nothing),
            Ended::Failed(why) => ("failed", RecordedCode::Why(why)),
        };
        RecordedRun {
            command: &run.command,
            outcome,
            code,
            duration_ms: run.duration.as_millis() as u64,
            stdout: &run.stdout,
            stderr: &run.stderr,
        }
    }
}

/// The first few lines of a hook's output, for a one-line notice.
fn first_lines(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().take(3).collect();
    let mut out = lines.join(" / ");
    if out.chars().count() > 300 {
        out = out.chars().take(300).collect::<String>() + "…";
    }
    out
}
