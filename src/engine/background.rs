//! The engine's side of background commands ([`crate::tools::background`]): Bash's
//! `run_in_background` and the tools that read and stop them, offered only to agents
//! that have Bash; a session's commands ending with its run; the session told, in its
//! next request, which of its commands no longer run.

use super::permissions::Permissions;
use super::subagent::Parent;
use super::{Conversation, Engine, Pending};
use crate::content::ToolInput;
use crate::model::ToolDef;
use crate::stores::SessionKey;
use crate::tools::ToolOutput;
use crate::tools::background::{self, Owner, Record};
use crate::tools::names::BASH;
use tokio_util::sync::CancellationToken;

/// The owner a session's commands are recorded under.
pub(super) fn owner_of(key: &SessionKey) -> Owner {
    Owner {
        session_id: key.session_id.clone(),
        subpath: key.subpath.clone(),
    }
}

/// What the model is told about its commands that ended unseen.
fn ended_note(ended: &[Record]) -> String {
    let list: Vec<String> = ended
        .iter()
        .map(|r| format!("- {} ({}): {}", r.id, r.command, how(r)))
        .collect();
    format!(
        "These background commands of this session no longer run; do not wait on their \
         task IDs, and start them again if you still need them (what they printed is kept \
         in {}):\n{}",
        ended
            .first()
            .and_then(|r| r.output.parent())
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        list.join("\n")
    )
}

fn how(record: &Record) -> &'static str {
    match record.end.as_ref().map(|e| e.how.as_str()) {
        Some("killed-on-start" | "gone") => "killed when flower was stopped",
        Some("session-ended") => "killed when the session's last run ended",
        Some("interrupted") => "killed by the user's Ctrl-C",
        Some("stopped") => "stopped with TaskStop",
        _ => "ended",
    }
}

impl Engine {
    /// The background commands of this engine (for the status line, and for a
    /// checkpoint when one ends: [`crate::tools::background::Background::on_end`]).
    pub fn background(&self) -> &background::Background {
        &self.background
    }

    /// Whether an agent is offered `TaskOutput` and `TaskStop`: when it is offered
    /// Bash (a pipeline agent is, whatever its rules: one tool list for every role) and
    /// no deny rule withholds the tool itself. Calling them takes a rule that lets it
    /// run Bash at all ([`super::calls`]).
    fn offers_background(
        &self,
        permissions: &Permissions,
        conv: &Conversation<'_>,
        name: &str,
    ) -> bool {
        let offer = &conv.spec.offer;
        let bash = if offer.is_empty() {
            permissions.offers(BASH)
        } else {
            offer.iter().any(|o| o == BASH) && !permissions.withholds(BASH)
        };
        bash && !permissions.withholds(name)
    }

    /// The background tools' definitions for an agent that has Bash.
    pub(super) fn background_definitions(
        &self,
        permissions: &Permissions,
        conv: &Conversation<'_>,
    ) -> Vec<ToolDef> {
        background::tools::definitions()
            .into_iter()
            .filter(|def| self.offers_background(permissions, conv, &def.name))
            .collect()
    }

    /// Starts a Bash call with `run_in_background` (its checks passed as any Bash
    /// call's), sandboxed as the agent's foreground commands are.
    pub(super) fn start_background(
        &self,
        parent: &Parent<'_>,
        permissions: &Permissions,
        input: &ToolInput,
    ) -> ToolOutput {
        #[derive(serde::Deserialize)]
        struct Command {
            #[serde(default)]
            command: crate::tools::input::Field<String>,
        }
        let command = match crate::tools::input::parse::<Command>(BASH, input)
            .and_then(|c| c.command.required(BASH, "command"))
        {
            Ok(command) if !command.trim().is_empty() => command,
            Ok(_) => return ToolOutput::error("Invalid input for Bash: \"command\" is empty."),
            Err(refused) => return refused,
        };
        let sandbox = permissions.sandbox(&self.config.sandbox, &self.config.workspace);
        let ctx = self.tool_context(CancellationToken::new(), sandbox);
        self.background
            .start(&command, &ctx, owner_of(&parent.key), parent.depth)
    }

    /// A call of `TaskOutput` or `TaskStop` (or their older names); a Ctrl-C ends a
    /// wait.
    pub(super) async fn background_call(&self, name: &str, input: &ToolInput) -> ToolOutput {
        let call = self.background.call(name, input);
        self.until_interrupted(call, &CancellationToken::new())
            .await
    }

    /// Before a session's run: what its next request tells the model about its
    /// commands that ended without it knowing.
    pub(super) fn note_ended_background(&self, conv: &mut Conversation<'_>) {
        let ended = self.background.take_unreported(&owner_of(&conv.key));
        if !ended.is_empty() {
            conv.after_prompt.push(Pending::Context(ended_note(&ended)));
        }
    }

    /// After a session's run: its commands end with it.
    pub(super) async fn end_background(&self, conv: &Conversation<'_>) {
        self.background
            .end_owner(&owner_of(&conv.key), "session-ended")
            .await;
    }
}
