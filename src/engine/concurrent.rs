//! Answering a reply's tool calls, several at once where they cannot interfere.
//!
//! Calls that only read (Read, Glob, Grep, the MCP tools the settings name as safe) and
//! `Task` sub-agents (each works in a session of its own) run at the same time, up to
//! [`EngineConfig::max_tool_concurrency`](super::EngineConfig) of them. A call that
//! writes or asks (Write, Edit, Bash, AskUser, any other tool) is a barrier: the calls
//! before it finish first, and the ones after it start only when it is done. So
//! `Read Read Edit Read Task Task` runs as `{Read Read}`, `Edit`, `{Read Task Task}`.
//!
//! The checks before a call (hooks, permission rules, a question to the person) run
//! one after another in the order of the calls; then the calls that passed run
//! together. Each result is stored durably the moment its call finishes (a kill loses
//! nothing that finished), so the store holds them in the order they finished; the
//! conversation's next request carries them in the order of the calls. `PostToolUse`
//! hooks of a concurrent group fire after the group, in the order of the calls.

use super::permissions::Permissions;
use super::subagent::{self, Parent};
use super::{Call, Conversation, Engine, EngineError, Event, Totals, count};
use crate::stores::SessionStore;
use crate::tools::ToolOutput;
use crate::transcript;
use crate::transcript::Entry;
use futures_util::StreamExt;

/// The default of `FLOWER_MAX_TOOL_USE_CONCURRENCY`: Claude Code's
/// (`CLAUDE_CODE_MAX_TOOL_USE_CONCURRENCY`, 10).
pub const DEFAULT_MAX_TOOL_CONCURRENCY: usize = 10;

impl Engine {
    /// Appends an entry to the store only; its message is added by the caller
    /// (concurrent results are stored as they finish, sent in the order of the calls).
    pub(super) fn store_entry(
        &self,
        conv: &mut Conversation<'_>,
        entry: &Entry,
        deferred: bool,
    ) -> Result<(), EngineError> {
        let store = &self.config.store;
        let entries = std::slice::from_ref(entry);
        if deferred {
            store.append_deferred(&conv.key, entries)
        } else {
            store.append(&conv.key, entries)
        }
        .map_err(EngineError::Transcript)?;
        if let Some(hooks) = &self.hooks {
            hooks.exports.append(&conv.key, entry);
        }
        conv.measure.pending_bytes = conv
            .measure
            .pending_bytes
            .saturating_add(count::content_bytes(entry));
        Ok(())
    }

    /// Whether a call of `name` may run at the same time as its neighbours.
    pub(super) fn runs_concurrently(&self, conv: &Conversation<'_>, name: &str) -> bool {
        use crate::transcript::tools::{GLOB, GREP, READ};
        match name {
            READ | GLOB | GREP => true,
            subagent::TASK => conv.depth == 0,
            _ => {
                conv.mcp_tools.iter().any(|tool| tool.name == name)
                    && self.config.concurrent_mcp_tools.iter().any(|n| n == name)
            }
        }
    }

    /// Runs a reply's tool calls and stores each result. After a Ctrl-C the remaining
    /// calls are answered as interrupted and the user is asked (once) what to say.
    pub(super) async fn answer_calls(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        calls: Vec<Call>,
        totals: &mut Totals,
    ) -> Result<(), EngineError> {
        let mut interrupted = false;
        let count = calls.len();
        let mut calls = calls.into_iter().enumerate().peekable();
        while let Some((n, (id, name, input))) = calls.next() {
            if interrupted {
                let output = ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT);
                let entry = self.result_entry(conv, &id, &name, &output);
                self.record_with(conv, entry, n + 1 < count)?;
                continue;
            }
            if self.config.max_tool_concurrency > 1
                && self.runs_concurrently(conv, &name)
                && calls
                    .peek()
                    .is_some_and(|(_, (_, next, _))| self.runs_concurrently(conv, next))
            {
                let mut group = vec![(id, name, input)];
                while let Some((_, call)) =
                    calls.next_if(|(_, (_, next, _))| self.runs_concurrently(conv, next))
                {
                    group.push(call);
                }
                self.answer_together(conv, permissions, group, totals)
                    .await?;
            } else {
                let call = (id, name, input);
                let output = self.call_tool(conv, permissions, &call, totals).await;
                let (id, name, _) = call;
                // The call stays unanswered in the store; pruning answers it neutrally
                // when the retry resumes the session.
                if let Some(error) = totals.subagent_error.take() {
                    return Err(EngineError::SubAgent(error));
                }
                let entry = self.result_entry(conv, &id, &name, &output);
                // The turn's last result is durable, and flushes the ones before it.
                self.record_with(conv, entry, n + 1 < count)?;
            }
            interrupted = self.config.interrupt.is_pending();
        }
        if !conv.hook_notes.is_empty() {
            let text = std::mem::take(&mut conv.hook_notes).join("\n\n");
            let entry = conv.chain.hook_context(&text);
            self.record(conv, entry)?;
        }
        if interrupted {
            if conv.stop_on_interrupt {
                return Err(EngineError::Interrupted);
            }
            let line = self.ask_after_interrupt().await;
            if !line.is_empty() {
                let entry = conv.chain.user_text(&line);
                self.record(conv, entry)?;
            }
        }
        Ok(())
    }

    /// Runs a group of calls that may run at the same time (see the module doc). A
    /// sub-agent that failed with an error worth retrying leaves its call unanswered
    /// and fails the turn, once the others have finished and their results are stored.
    // Long because the group's three phases (checks in order, the calls together with
    // each result stored as it comes, the messages and hooks in order) share its state.
    async fn answer_together(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        group: Vec<Call>,
        totals: &mut Totals,
    ) -> Result<(), EngineError> {
        // Stored as they come, sent in the order of the calls.
        let mut stored: Vec<(usize, Entry)> = Vec::with_capacity(group.len());
        let mut cleared = Vec::with_capacity(group.len());
        for (i, call) in group.iter().enumerate() {
            match self.check_call(conv, permissions, call, totals).await {
                Some(refused) => {
                    let (id, name, _) = call;
                    let entry = self.result_entry(conv, id, name, &refused);
                    self.store_entry(conv, &entry, false)?;
                    stored.push((i, entry));
                }
                None => cleared.push(i),
            }
        }
        let parent = Parent {
            together: true,
            ..Parent::of(conv)
        };
        let depth = conv.depth;
        let task = conv.task.clone();
        let runs: Vec<_> = cleared
            .iter()
            .copied()
            .map(|i| {
                let call = &group[i];
                let parent = &parent;
                async move {
                    let mut own = Totals::new();
                    let output = self.execute(parent, permissions, call, &mut own).await;
                    (i, output, own)
                }
            })
            .collect();
        let mut running =
            futures_util::stream::iter(runs).buffer_unordered(self.config.max_tool_concurrency);
        let mut failed = None;
        let mut finished = Vec::with_capacity(cleared.len());
        while let Some((i, output, mut own)) = running.next().await {
            let (id, name, _) = &group[i];
            self.emit_done(task.as_deref(), id, name, &output, depth);
            let error = own.subagent_error.take();
            totals.absorb(own);
            if let Some(error) = error {
                failed.get_or_insert(error);
                continue;
            }
            let entry = self.result_entry(conv, id, name, &output);
            self.store_entry(conv, &entry, false)?;
            stored.push((i, entry));
            finished.push((i, output));
        }
        drop(running);
        stored.sort_by_key(|(i, _)| *i);
        for (_, entry) in stored {
            conv.messages.push_entry(entry);
        }
        finished.sort_by_key(|(i, _)| *i);
        for (i, output) in finished {
            let (id, name, input) = &group[i];
            self.post_tool_use(conv, permissions, id, name, input, &output)
                .await;
        }
        match failed {
            Some(error) => Err(EngineError::SubAgent(error)),
            None => Ok(()),
        }
    }

    /// Finishes the calls of a resumed session's last turn: a `Task` goes on in its
    /// sub-agent's session (several at once, as when they began), every other call is
    /// answered as interrupted (as pruning would have). Each result is stored as it
    /// comes; the messages follow the order of the calls.
    pub(super) async fn continue_calls(
        &self,
        conv: &mut Conversation<'_>,
        calls: Vec<Call>,
        totals: &mut Totals,
    ) -> Result<(), EngineError> {
        if calls.is_empty() {
            return Ok(());
        }
        let parent = Parent {
            together: true,
            ..Parent::of(conv)
        };
        let depth = conv.depth;
        let mut stored: Vec<(usize, Entry)> = Vec::with_capacity(calls.len());
        let mut tasks = Vec::new();
        for (i, (id, name, input)) in calls.iter().enumerate() {
            if name == subagent::TASK && depth == 0 {
                self.emit(Event::ToolCall {
                    name: name.clone(),
                    summary: super::summarize_input(name, input),
                    depth,
                    id: id.clone(),
                    task: conv.task.clone(),
                });
                tasks.push(i);
            } else {
                let output = ToolOutput::error(transcript::markers::INTERRUPTED_BODY);
                let entry = self.result_entry(conv, id, name, &output);
                self.store_entry(conv, &entry, false)?;
                stored.push((i, entry));
            }
        }
        let runs: Vec<_> = tasks
            .iter()
            .copied()
            .map(|i| {
                let (id, _, input) = &calls[i];
                let parent = &parent;
                async move {
                    let mut own = Totals::new();
                    let output = self.run_subagent(parent, id, input, &mut own).await;
                    (i, output, own)
                }
            })
            .collect();
        let limit = self.config.max_tool_concurrency.max(1);
        let mut running = futures_util::stream::iter(runs).buffer_unordered(limit);
        let mut failed = None;
        while let Some((i, output, mut own)) = running.next().await {
            let (id, name, _) = &calls[i];
            let error = own.subagent_error.take();
            totals.absorb(own);
            if let Some(error) = error {
                failed.get_or_insert(error);
                continue;
            }
            self.emit_done(conv.task.as_deref(), id, name, &output, depth);
            let entry = self.result_entry(conv, id, name, &output);
            self.store_entry(conv, &entry, false)?;
            stored.push((i, entry));
        }
        drop(running);
        stored.sort_by_key(|(i, _)| *i);
        for (_, entry) in stored {
            conv.messages.push_entry(entry);
        }
        match failed {
            Some(error) => Err(EngineError::SubAgent(error)),
            None => Ok(()),
        }
    }
}

impl Totals {
    /// Adds what a call run on its own totals spent (a sub-agent's usage, cost,
    /// denials and retries).
    pub(super) fn absorb(&mut self, other: Totals) {
        self.usage.add(&other.usage);
        self.add_cost(other.cost_usd);
        self.denials.extend(other.denials);
        self.subagent_retries.extend(other.subagent_retries);
        if self.subagent_error.is_none() {
            self.subagent_error = other.subagent_error;
        }
    }
}
