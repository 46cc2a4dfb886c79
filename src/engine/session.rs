//! The session a run continues: a new one, a resumed one (what the pruning layer
//! feeds it, and the calls its last turn left to finish), or a fork.

use super::{
    Call, Conversation, Engine, Opened, Pending, RunError, SessionStart, recovery, subagent,
};
use crate::stores::{SessionKey, SessionStore};
use crate::transcript;
use serde_json::Value;

impl SessionStart {
    /// The session id it names; empty for a new session.
    pub(super) fn named(&self) -> &str {
        match self {
            SessionStart::Resume(id) | SessionStart::Fork(id) => id,
            SessionStart::New => "",
        }
    }
}

impl Engine {
    /// Records what the opening hooks did (their outcomes only).
    pub(super) fn record_opening_hooks(&self, conversation: &mut Conversation<'_>) {
        for item in std::mem::take(&mut conversation.opening) {
            if let Pending::Hook(outcome) = item {
                let _ = self.record_hooks(conversation, &outcome);
            }
        }
    }

    /// Finds or creates the session: its id, the (pruned) history to continue from,
    /// whether it is a continuation, and the calls of its last turn to finish first
    /// (see [`Engine::load_resumable`]).
    pub(super) fn open_session(&self, start: &SessionStart) -> Result<Opened, RunError> {
        let project = &self.config.project_key;
        match start {
            SessionStart::New => Ok((
                uuid::Uuid::new_v4().to_string(),
                Vec::new(),
                false,
                Vec::new(),
            )),
            SessionStart::Resume(id) => {
                let key = SessionKey::main(project, id);
                let (history, unanswered) = self.load_resumable(&key)?;
                Ok((id.clone(), history, true, unanswered))
            }
            SessionStart::Fork(id) => {
                let new_id = self.fork(id)?;
                let key = SessionKey::main(project, &new_id);
                let history = self.load_for_resume(&key)?;
                Ok((new_id, history, false, Vec::new()))
            }
        }
    }

    /// [`Engine::load_for_resume`] for a main session whose last turn's calls never got
    /// their results because the process died (or the run was retried) while a `Task`
    /// call's sub-agent was working: those calls are returned, in order, instead of the
    /// neutral answers pruning made up, so that the sub-agent is continued in its own
    /// session ([`Engine::continue_calls`]) rather than the task sent out again.
    pub(super) fn load_resumable(
        &self,
        key: &SessionKey,
    ) -> Result<(Vec<Value>, Vec<Call>), RunError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        let mut pruned = store
            .load(key)
            .map_err(|source| RunError::ReadSession { id: id(), source })?
            .ok_or_else(|| RunError::NoSession(id()))?;
        let calls = self.continuable_calls(key, &pruned);
        if calls.is_empty() {
            self.store_synthesized(key, &pruned)?;
        } else {
            pruned.truncate(pruned.len() - calls.len());
        }
        Ok((pruned, calls))
    }

    /// The calls answered by the synthesized results that end `pruned`, when one of
    /// them is a `Task` whose sub-agent session exists; none otherwise.
    pub(super) fn continuable_calls(&self, key: &SessionKey, pruned: &[Value]) -> Vec<Call> {
        use crate::stores::prune::is_synthesized_result;
        let tail = pruned
            .iter()
            .rev()
            .take_while(|e| is_synthesized_result(e))
            .count();
        if tail == 0 || pruned.iter().filter(|e| is_synthesized_result(e)).count() != tail {
            return Vec::new();
        }
        let (before, synthesized) = pruned.split_at(pruned.len() - tail);
        let Some(turn) = before
            .iter()
            .rev()
            .find(|e| e.get("type").and_then(Value::as_str) == Some("assistant"))
        else {
            return Vec::new();
        };
        let content = turn
            .pointer("/message/content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let uses = transcript::tool_uses(content);
        let mut calls = Vec::new();
        for entry in synthesized {
            let Some(call_id) = entry
                .pointer("/message/content/0/tool_use_id")
                .and_then(Value::as_str)
            else {
                return Vec::new();
            };
            match uses.iter().find(|(id, _, _)| id == call_id) {
                Some(call) => calls.push(call.clone()),
                None => return Vec::new(),
            }
        }
        let continuable = calls.iter().any(|(id, name, _)| {
            name == subagent::TASK
                && key
                    .sub(&format!("subagents/agent-{}", recovery::agent_id_for(id)))
                    .ok()
                    .and_then(|sub| self.config.store.load_raw(&sub).ok().flatten())
                    .is_some()
        });
        if continuable { calls } else { Vec::new() }
    }

    /// Copies session `id` into a new session; returns the new id.
    pub(super) fn fork(&self, id: &str) -> Result<String, RunError> {
        let project = &self.config.project_key;
        let source = SessionKey::main(project, id);
        let raw = self
            .config
            .store
            .load_raw(&source)
            .map_err(|source| RunError::ReadSession {
                id: id.to_string(),
                source,
            })?
            .ok_or_else(|| RunError::NoForkSource(id.to_string()))?;
        let new_id = uuid::Uuid::new_v4().to_string();
        let copied: Vec<Value> = raw
            .into_iter()
            .map(|mut entry| {
                if let Some(obj) = entry.as_object_mut() {
                    obj.insert("sessionId".into(), new_id.clone().into());
                    obj.insert("forkedFrom".into(), id.into());
                }
                entry
            })
            .collect();
        let key = SessionKey::main(project, &new_id);
        self.config
            .store
            .append(&key, &copied)
            .map_err(RunError::WriteFork)?;
        Ok(new_id)
    }

    /// Loads what a resumed session is fed. Entries the pruning layer had to add (a
    /// result for a tool call that never got one) become part of the conversation now,
    /// so they are written, and the chain continues from them.
    pub(super) fn load_for_resume(&self, key: &SessionKey) -> Result<Vec<Value>, RunError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        // One pass: parsing and pruning fused in the store, no copy of the raw transcript.
        let pruned = store
            .load(key)
            .map_err(|source| RunError::ReadSession { id: id(), source })?
            .ok_or_else(|| RunError::NoSession(id()))?;
        self.store_synthesized(key, &pruned)?;
        Ok(pruned)
    }

    /// Stores the results pruning synthesized for calls that never got one.
    pub(super) fn store_synthesized(
        &self,
        key: &SessionKey,
        pruned: &[Value],
    ) -> Result<(), RunError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        let added: Vec<Value> = pruned
            .iter()
            .filter(|e| crate::stores::prune::is_synthesized_result(e))
            .cloned()
            .collect();
        // Their uuids are idempotency keys: appending one that is already stored is a no-op.
        if !added.is_empty() {
            store
                .append(key, &added)
                .map_err(|source| RunError::WriteSession { id: id(), source })?;
        }
        Ok(())
    }
}

/// Whether the last user or assistant entry of `history` is a user entry that says
/// exactly `prompt` (and so is still unanswered).
pub(super) fn ends_with_prompt(history: &[Value], prompt: &str) -> bool {
    // What hooks added after the prompt (context) is not an answer to it.
    let last = history.iter().rev().find(|e| {
        matches!(
            e.get("type").and_then(Value::as_str),
            Some("user" | "assistant")
        ) && !transcript::markers::is_hook_context(e)
    });
    let Some(last) = last else { return false };
    if last.get("type").and_then(Value::as_str) != Some("user") {
        return false;
    }
    match last.pointer("/message/content") {
        Some(Value::String(text)) => text == prompt,
        Some(Value::Array(blocks)) => {
            matches!(blocks.as_slice(), [block] if block.get("type").and_then(Value::as_str) == Some("text")
                && block.get("text").and_then(Value::as_str) == Some(prompt))
        }
        _ => false,
    }
}
