//! Where the engine fires hooks (see [`super::hooks`] for what they are) and asks the
//! person about calls an `ask` rule names.
//!
//! | event              | fired                                   | a block (exit 2 / `decision: block`) |
//! |--------------------|-----------------------------------------|--------------------------------------|
//! | `SessionStart`     | a main session's run begins             | shown to the person                  |
//! | `UserPromptSubmit` | before a prompt is stored and sent      | prompt dropped, run fails, person told|
//! | `PreToolUse`       | before the permission check of a call   | call not run, reason is its result   |
//! | `PostToolUse`      | after a call that succeeded             | reason fed to the model              |
//! | `Stop`             | the main agent ends its turn            | agent goes on with the reason        |
//! | `SubagentStop`     | a sub-agent ends its turn               | sub-agent goes on with the reason    |
//! | `SessionEnd`       | a main session's run ends               | shown to the person                  |
//! | `PreCompact`       | before a 换代 (the runtime fires it)    | shown to the person; 换代 goes on     |
//!
//! Context for the model (`additionalContext`, and for `SessionStart` and
//! `UserPromptSubmit` plain stdout) is stored as a user entry marked as a hook's
//! ([`crate::transcript::Chain::hook_context`]): after the prompt, or after the last
//! tool result of the turn, so the API's alternation of user and assistant messages
//! holds and no text comes between tool results.

use super::hooks::{
    EventFields, Firing, Handoff, HookEvent, HookOutcome, Launch, PermissionDecision,
};
use super::permissions::Permissions;
use super::{
    AgentSpec, Conversation, Engine, EngineError, Event, Origin, Pending, SessionStart, Totals,
};
use crate::stores::SessionKey;
use crate::tools::ToolOutput;
use crate::tools::sandbox::SandboxPolicy;
use crate::transcript::ToolInput;
use std::sync::Arc;

/// How many times Stop (or SubagentStop) hooks may send one run back to work before
/// flower stops listening to them: a hook that always blocks would otherwise spend
/// money for ever on an unattended run.
pub const MAX_STOP_BLOCKS: u32 = 8;

/// Answers that allow a call an `ask` rule asked about (anything else denies it).
const YES: [&str; 6] = ["y", "yes", "是", "允许", "好", "ok"];

impl Engine {
    /// Variables a Bash command gets on top of flower's environment.
    pub(super) fn tool_env(&self) -> Arc<Vec<(String, String)>> {
        match &self.hooks {
            Some(hooks) => hooks.env(),
            None => Arc::new(self.config.conventions.env.clone()),
        }
    }

    /// The sandbox an agent's hooks run in: that of its Bash commands (the judge's
    /// hooks cannot write the workspace either).
    fn hook_sandbox(&self, permissions: Option<&Permissions>) -> SandboxPolicy {
        match permissions {
            Some(p) => p.sandbox(&self.config.sandbox, &self.config.workspace),
            None => SandboxPolicy {
                workspace_writable: false,
                ..self.config.sandbox.clone()
            },
        }
    }

    /// Runs the hooks of `event` for `conv`'s session; `None` when none matches. Every
    /// notice (a crash, a timeout, a `systemMessage`) is told to the person.
    async fn fire(
        &self,
        conv: &Conversation<'_>,
        permissions: Option<&Permissions>,
        event: HookEvent,
        subject: &str,
        fields: EventFields,
    ) -> Option<HookOutcome> {
        let hooks = self.hooks.as_ref()?;
        if !hooks.wants(event, subject) {
            return None;
        }
        let session_id = conv.chain.session_id();
        let key = SessionKey::main(&self.config.project_key, session_id);
        let transcript_path = hooks.exports.ensure(&self.config.store, &key);
        let outcome = hooks
            .fire(Firing {
                event,
                subject,
                session_id,
                transcript_path: &transcript_path,
                fields,
                launch: Launch {
                    workspace: self.config.workspace.clone(),
                    sandbox: self.hook_sandbox(permissions),
                    env: hooks.env(),
                    processes: self.config.processes.clone(),
                },
            })
            .await?;
        for notice in outcome.notices() {
            self.emit(Event::Warning { message: notice });
        }
        Some(outcome)
    }

    /// [`Engine::fire`] in the sandbox of the conversation's agent.
    async fn fire_as_agent(
        &self,
        conv: &Conversation<'_>,
        event: HookEvent,
        subject: &str,
        fields: EventFields,
    ) -> Option<HookOutcome> {
        let permissions = self.permissions_of(conv.spec).ok();
        self.fire(conv, permissions.as_ref(), event, subject, fields)
            .await
    }

    /// Stores what hooks did, as a `system` entry of the conversation.
    pub(super) fn record_hooks(
        &self,
        conv: &mut Conversation<'_>,
        outcome: &HookOutcome,
    ) -> Result<(), EngineError> {
        let (content, level, fields) = outcome.record();
        let entry = conv.chain.system(
            crate::transcript::markers::HOOK_SUBTYPE,
            &content,
            level,
            fields,
        );
        self.record(conv, entry)
    }

    /// `SessionStart`: its record and its context wait for the prompt (see `Pending`).
    pub(super) async fn session_start(
        &self,
        conv: &mut Conversation<'_>,
        start: &SessionStart,
        origin: Origin,
    ) {
        let source = match (start, origin) {
            (SessionStart::New, Origin::Successor) => "compact",
            (SessionStart::New, _) => "startup",
            _ => "resume",
        };
        let fields = EventFields::SessionStart {
            source,
            agent_type: conv.spec.name.clone(),
        };
        let Some(outcome) = self
            .fire_as_agent(conv, HookEvent::SessionStart, source, fields)
            .await
        else {
            return;
        };
        let note = outcome.context_note();
        conv.opening.push(Pending::Hook(outcome));
        conv.opening.extend(note.map(Pending::Context));
    }

    /// `UserPromptSubmit` for a prompt about to be stored: `Err` when a hook blocked
    /// it (or said not to continue); its record and context are queued around it.
    pub(super) async fn prompt_submit(
        &self,
        conv: &mut Conversation<'_>,
        prompt: &str,
    ) -> Result<(), EngineError> {
        let fields = EventFields::UserPromptSubmit {
            prompt: prompt.to_string(),
        };
        let Some(outcome) = self
            .fire_as_agent(conv, HookEvent::UserPromptSubmit, "", fields)
            .await
        else {
            return Ok(());
        };
        let verdict = match (outcome.stop(), outcome.block_reason()) {
            (Some(reason), _) => Err(EngineError::HookStopped(reason)),
            (None, Some(reason)) => Err(EngineError::PromptBlocked(reason)),
            (None, None) => Ok(()),
        };
        let note = outcome.context_note().filter(|_| verdict.is_ok());
        conv.opening.push(Pending::Hook(outcome));
        conv.after_prompt.extend(note.map(Pending::Context));
        verdict
    }

    /// `SessionEnd` after a main session's run, recorded in it (when it exists).
    pub(super) async fn session_end(&self, conv: &mut Conversation<'_>) {
        if conv.chain.leaf().is_none() {
            return;
        }
        let fields = EventFields::SessionEnd { reason: "other" };
        if let Some(outcome) = self
            .fire_as_agent(conv, HookEvent::SessionEnd, "", fields)
            .await
        {
            let _ = self.record_hooks(conv, &outcome);
        }
    }

    /// `Stop` (`SubagentStop` for a sub-agent) when the agent ends its turn: the
    /// feedback to go on with when a hook blocked the stop, `None` to stop.
    pub(super) async fn stop_hooks(
        &self,
        conv: &mut Conversation<'_>,
        totals: &Totals,
    ) -> Result<Option<String>, EngineError> {
        if conv.internal {
            return Ok(None);
        }
        let event = if conv.depth == 0 {
            HookEvent::Stop
        } else {
            HookEvent::SubagentStop
        };
        let fields = EventFields::Stop {
            stop_hook_active: conv.stop_blocks > 0,
            last_assistant_message: totals.text.clone(),
            agent_type: (conv.depth > 0).then(|| conv.spec.name.clone()),
        };
        let Some(outcome) = self.fire_as_agent(conv, event, "", fields).await else {
            return Ok(None);
        };
        self.record_hooks(conv, &outcome)?;
        if let Some(reason) = outcome.stop() {
            return Err(EngineError::HookStopped(reason));
        }
        let Some(reason) = outcome.block_reason() else {
            return Ok(None);
        };
        if conv.stop_blocks >= MAX_STOP_BLOCKS {
            self.warn_once(&format!(
                "{event} hook 已经 {MAX_STOP_BLOCKS} 次不让 {} 停下,这次不再听它的",
                conv.spec.name
            ));
            return Ok(None);
        }
        conv.stop_blocks += 1;
        Ok(Some(format!("{event} hook feedback:\n{reason}")))
    }

    /// `PreToolUse`: `Err((result, reason))` when a hook blocked the call (the result
    /// the model gets, and the hook's words for the person); else what the hooks said
    /// about the permission check.
    pub(super) async fn pre_tool_use(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        id: &str,
        name: &str,
        input: &ToolInput,
    ) -> Result<Option<PermissionDecision>, (ToolOutput, String)> {
        let fields = EventFields::PreToolUse {
            tool_name: name.to_string(),
            tool_input: input.clone(),
            tool_use_id: id.to_string(),
        };
        let Some(outcome) = self
            .fire(conv, Some(permissions), HookEvent::PreToolUse, name, fields)
            .await
        else {
            return Ok(None);
        };
        // A failed write of the record only loses the record: the call goes on.
        let _ = self.record_hooks(conv, &outcome);
        conv.hook_notes.extend(outcome.context_note());
        if let Some(reason) = outcome.stop() {
            conv.hook_stop = Some(reason.clone());
            let result = ToolOutput::error(format!(
                "A PreToolUse hook stopped the agent before this {name} call ran: {reason}"
            ));
            return Err((result, reason));
        }
        if let Some(reason) = outcome.block_reason() {
            let result = ToolOutput::error(format!(
                "A PreToolUse hook blocked this {name} call; it was not run. The hook said:\n{reason}"
            ));
            return Err((result, reason));
        }
        Ok(outcome.permission())
    }

    /// `PostToolUse` after a call that succeeded: a block's reason and any context go
    /// to the model after the turn's last tool result.
    pub(super) async fn post_tool_use(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        id: &str,
        name: &str,
        input: &ToolInput,
        output: &ToolOutput,
    ) {
        if output.is_error {
            return;
        }
        let fields = EventFields::PostToolUse {
            tool_name: name.to_string(),
            tool_input: input.clone(),
            tool_use_id: id.to_string(),
            tool_response: output.content.clone(),
        };
        let Some(outcome) = self
            .fire(
                conv,
                Some(permissions),
                HookEvent::PostToolUse,
                name,
                fields,
            )
            .await
        else {
            return;
        };
        let _ = self.record_hooks(conv, &outcome);
        if let Some(reason) = outcome.block_reason() {
            conv.hook_notes
                .push(format!("PostToolUse:{name} hook feedback:\n{reason}"));
        }
        conv.hook_notes.extend(outcome.context_note());
        if let Some(reason) = outcome.stop() {
            conv.hook_stop = Some(reason);
        }
    }

    /// Asks the person whether a call may run (an `ask` rule, or a hook's `ask`),
    /// through the same asker as `AskUser`: `None` when allowed, else the denial the
    /// model gets. Nobody at the terminal: denied, and the model is told why.
    pub(super) async fn confirm(
        &self,
        spec: &AgentSpec,
        name: &str,
        input: &ToolInput,
        why: &str,
    ) -> Option<String> {
        let denied = |reason: &str| {
            Some(format!(
                "{}{name} has been denied: {reason}. The call was not run.",
                super::permissions::DENIAL_PREFIX
            ))
        };
        let Some(asker) = &self.config.asker else {
            return denied(&format!(
                "{why}, which needs the user's approval, and nobody is at the terminal to give it; \
                 do without this call or leave it for the user"
            ));
        };
        let question = format!(
            "{} 想调用 {name}:{}\n({why})\n允许吗?输入 y 允许,其他拒绝",
            spec.name,
            super::summarize_input(name, input)
        );
        let ask = async {
            match asker.ask(&question).await {
                Some(answer) => ToolOutput::ok(answer),
                None => ToolOutput::error(String::new()),
            }
        };
        let answer = self
            .until_interrupted(ask, &tokio_util::sync::CancellationToken::new())
            .await;
        let said = answer.content.trim().to_lowercase();
        if !answer.is_error && YES.contains(&said.as_str()) {
            return None;
        }
        if answer.is_error {
            return denied(&format!("{why}, and the user did not answer"));
        }
        denied(&format!("{why}, and the user declined it"))
    }

    /// `PreCompact` before session `session_id` of `spec` hands off (换代): run with
    /// `trigger: "auto"` and the handoff's step, generation and reason, recorded in
    /// the retiring session. It cannot stop the handoff (the context would only grow).
    pub async fn pre_compact(
        &self,
        spec: &AgentSpec,
        session_id: &str,
        step: &str,
        generation: u32,
        reason: Option<&str>,
    ) {
        let Some(hooks) = &self.hooks else { return };
        if !hooks.wants(HookEvent::PreCompact, "auto") {
            return;
        }
        let key = SessionKey::main(&self.config.project_key, session_id);
        let entries = self
            .config
            .store
            .load_raw(&key)
            .ok()
            .flatten()
            .unwrap_or_default();
        let leaf = crate::transcript::resume_leaf(&entries).map(str::to_string);
        let chain =
            crate::transcript::Chain::new(session_id, &self.config.workspace).with_leaf(leaf);
        let mut conv = Conversation::new(spec, key, chain);
        let fields = EventFields::PreCompact {
            trigger: "auto",
            custom_instructions: String::new(),
            handoff: Handoff {
                step: step.to_string(),
                generation: generation + 1,
                reason: reason.map(str::to_string),
            },
        };
        if let Some(outcome) = self
            .fire_as_agent(&conv, HookEvent::PreCompact, "auto", fields)
            .await
        {
            let _ = self.record_hooks(&mut conv, &outcome);
        }
    }
}
