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
use serde_json::{Map, Value, json};

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
    fn answers(&self) -> impl Iterator<Item = Map<String, Value>> + '_ {
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
            let reason = |keys: &[&str]| {
                keys.iter()
                    .find_map(|k| answer_str(&answer, k))
                    .unwrap_or("a hook blocked it (no reason given)")
                    .to_string()
            };
            if answer.get("decision").and_then(Value::as_str) == Some("block") {
                reasons.push(reason(&["reason"]));
            } else if self.event == HookEvent::PreToolUse
                && specific(&answer, "permissionDecision") == Some("deny")
            {
                reasons.push(reason(&[
                    "hookSpecificOutput.permissionDecisionReason",
                    "reason",
                ]));
            }
        }
        (!reasons.is_empty()).then(|| reasons.join("\n"))
    }

    /// PreToolUse's `allow` / `ask` (a `deny` is a [`HookOutcome::block_reason`]);
    /// `ask` wins over `allow`.
    pub fn permission(&self) -> Option<PermissionDecision> {
        let mut decision = None;
        for answer in self.answers() {
            let said = specific(&answer, "permissionDecision")
                .or_else(|| answer.get("decision").and_then(Value::as_str));
            match said {
                Some("ask") => {
                    let why = answer_str(&answer, "hookSpecificOutput.permissionDecisionReason")
                        .unwrap_or("a hook asks for confirmation");
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
                    if let Some(context) = specific(&answer, "additionalContext")
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
            .find(|a| a.get("continue") == Some(&Value::Bool(false)))
            .map(|a| {
                a.get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("a hook said not to continue")
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
            if let Some(message) = answer.get("systemMessage").and_then(Value::as_str) {
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
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|run| {
                let (outcome, code) = match &run.ended {
                    Ended::Exit(code) => ("exit", json!(code)),
                    Ended::Signal(signal) => ("signal", json!(signal)),
                    Ended::TimedOut(_) => ("timeout", Value::Null),
                    Ended::Failed(why) => ("failed", json!(why)),
                };
                json!({
                    "command": run.command,
                    "outcome": outcome,
                    "code": code,
                    "durationMs": run.duration.as_millis() as u64,
                    "stdout": run.stdout,
                    "stderr": run.stderr,
                })
            })
            .collect();
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

/// The JSON object a hook that exited 0 printed, if it printed one.
fn answer(run: &HookRun) -> Option<Map<String, Value>> {
    if run.exit_code() != Some(0) {
        return None;
    }
    let text = run.stdout.trim();
    if !text.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

fn specific<'a>(answer: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    answer
        .get("hookSpecificOutput")
        .and_then(|h| h.get(key))
        .and_then(Value::as_str)
}

/// A string at a dotted path of the answer (`hookSpecificOutput.x` or a top-level key).
fn answer_str<'a>(answer: &'a Map<String, Value>, path: &str) -> Option<&'a str> {
    match path.split_once('.') {
        Some((outer, inner)) => answer.get(outer)?.get(inner)?.as_str(),
        None => answer.get(path)?.as_str(),
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
