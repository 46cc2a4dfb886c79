//! Hooks: the commands Claude Code's settings files attach to an agent's life
//! (`docs/conventions.md` has the whole contract).
//!
//! - [`config`]: the `hooks` key, parsed and checked ([`HookSet`]);
//! - [`command`]: one command hook run in the agent's sandbox, with a timeout;
//! - [`outcome`]: what the hooks of one event said ([`HookOutcome`]);
//! - [`export`]: the `transcript_path` a hook reads.
//!
//! The engine fires the events of a session (`PreToolUse`, `PostToolUse`,
//! `UserPromptSubmit`, `Stop`, `SubagentStop`, `SessionStart`, `SessionEnd`); the
//! runtime fires `PreCompact` before a 换代. Every firing that ran a hook is recorded
//! in the transcript as a `system` entry (subtype `hook`), which the model never sees.

pub mod command;
pub mod config;
pub mod export;
pub mod files;
pub mod outcome;
pub mod payload;

pub use command::{Ended, HookRun, Launch};
pub use config::{
    DEFAULT_TIMEOUT, GroupEntry, HookCommand, HookConfigError, HookEntry, HookEvent, HookGroup,
    HookSet, HooksSection, Matcher,
};
pub use outcome::{HookAnswer, HookOutcome, HookSpecificOutput, PermissionDecision};
pub use payload::{EventFields, Handoff};

use std::path::Path;
use std::sync::Arc;

/// The hooks of an engine: what is configured and how its commands are started.
#[derive(Debug)]
pub struct Hooks {
    set: Arc<HookSet>,
    /// Added to every hook's environment: `CLAUDE_PROJECT_DIR` and the settings'
    /// `env` variables the process environment does not set.
    env: Arc<Vec<(String, String)>>,
    pub(crate) exports: export::Exports,
}

/// One firing of an event.
pub struct Firing<'a> {
    pub event: HookEvent,
    /// What the matchers see: the tool name, the source (`startup`, `resume`,
    /// `compact`) or the trigger (`auto`); empty for the other events.
    pub subject: &'a str,
    pub session_id: &'a str,
    pub transcript_path: &'a Path,
    /// The event's own fields (`tool_name`, `tool_input`, `prompt`, …).
    pub fields: EventFields,
    /// How the hook's process runs (the sandbox of the agent whose event it is).
    pub launch: Launch,
}

impl Hooks {
    /// `set` for `workspace`, with `env` added to each hook's environment;
    /// transcripts exported under `transcripts_dir`.
    pub fn new(
        set: HookSet,
        workspace: &Path,
        env: &[(String, String)],
        transcripts_dir: std::path::PathBuf,
    ) -> Hooks {
        let mut all = vec![(
            "CLAUDE_PROJECT_DIR".to_string(),
            workspace.to_string_lossy().into_owned(),
        )];
        all.extend(env.iter().cloned());
        Hooks {
            set: Arc::new(set),
            env: Arc::new(all),
            exports: export::Exports::new(transcripts_dir),
        }
    }

    pub fn set(&self) -> &HookSet {
        &self.set
    }

    /// The variables every hook gets on top of flower's environment.
    pub fn env(&self) -> Arc<Vec<(String, String)>> {
        self.env.clone()
    }

    /// Whether some hook would run for `event` on `subject`.
    pub fn wants(&self, event: HookEvent, subject: &str) -> bool {
        !self.set.matching(event, subject).is_empty()
    }

    /// Runs the hooks `firing` matches, all at once; `None` when none matches. Each
    /// gets the event as JSON on stdin (Claude Code's field names).
    pub async fn fire(&self, firing: Firing<'_>) -> Option<HookOutcome> {
        let commands = self.set.matching(firing.event, firing.subject);
        if commands.is_empty() {
            return None;
        }
        let input = payload::Stdin {
            session_id: firing.session_id,
            transcript_path: firing.transcript_path.to_string_lossy().into_owned(),
            cwd: firing.launch.workspace.to_string_lossy().into_owned(),
            permission_mode: "default",
            hook_event_name: firing.event.name(),
            fields: &firing.fields,
        }
        .to_bytes();
        let input = Arc::new(input);
        let handles: Vec<_> = commands
            .into_iter()
            .map(|hook| {
                let hook = hook.clone();
                let input = input.clone();
                let launch = Launch {
                    env: self.env.clone(),
                    ..firing.launch.clone()
                };
                let command = hook.command.clone();
                (
                    command,
                    tokio::spawn(async move { command::run(&hook, &input, &launch).await }),
                )
            })
            .collect();
        let mut runs = Vec::with_capacity(handles.len());
        for (command, handle) in handles {
            runs.push(handle.await.unwrap_or_else(|e| HookRun {
                command,
                ended: Ended::Failed(format!("the hook's task failed: {e}")),
                stdout: String::new(),
                stderr: String::new(),
                duration: std::time::Duration::ZERO,
            }));
        }
        Some(HookOutcome {
            event: firing.event,
            subject: firing.subject.to_string(),
            runs,
        })
    }
}
