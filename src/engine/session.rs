//! The session a run continues: a new one, a resumed one (what the pruning layer
//! feeds it), or a fork. Continuing a cut `Task` call is `resume.rs`'s.

use super::{Call, Engine, EngineError, SessionStart};
use crate::stores::{SessionKey, SessionStore};
use crate::transcript::{Content, Entry, Kind, Loaded};

/// An opened session: its id, the history to continue from, whether it is a
/// continuation, and the calls of its last turn still to finish.
pub(super) type Opened = (String, Vec<Loaded>, bool, Vec<Call>);

impl Engine {
    /// Finds or creates the session: its id, the (pruned) history to continue from,
    /// whether it is a continuation, and the calls of its last turn to finish first
    /// (see [`Engine::load_resumable`]).
    pub(super) fn open_session(&self, start: &SessionStart) -> Result<Opened, EngineError> {
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

    /// Copies session `id` into a new session; returns the new id.
    pub(super) fn fork(&self, id: &str) -> Result<String, EngineError> {
        let project = &self.config.project_key;
        let source = SessionKey::main(project, id);
        let raw = self
            .config
            .store
            .load_raw(&source)
            .map_err(|source| EngineError::ReadSession {
                id: id.to_string(),
                source,
            })?
            .ok_or_else(|| EngineError::NoForkSource(id.to_string()))?;
        let new_id = uuid::Uuid::new_v4().to_string();
        let copied: Vec<Entry> = raw
            .into_iter()
            .map(|entry| entry.forked(&new_id, id))
            .collect();
        let key = SessionKey::main(project, &new_id);
        self.config
            .store
            .append(&key, &copied)
            .map_err(EngineError::WriteFork)?;
        Ok(new_id)
    }

    /// Loads what a resumed session is fed. Entries the pruning layer had to add (a
    /// result for a tool call that never got one) become part of the conversation now,
    /// so they are written, and the chain continues from them.
    pub(super) fn load_for_resume(&self, key: &SessionKey) -> Result<Vec<Loaded>, EngineError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        // Entries stay their stored text: the history is made from it.
        let pruned = store
            .load_entries(key)
            .map_err(|source| EngineError::ReadSession { id: id(), source })?
            .ok_or_else(|| EngineError::NoSession(id()))?;
        self.store_synthesized(key, &pruned)?;
        Ok(pruned)
    }

    /// Stores the results pruning synthesized for calls that never got one.
    pub(super) fn store_synthesized(
        &self,
        key: &SessionKey,
        pruned: &[Loaded],
    ) -> Result<(), EngineError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        let added: Vec<Entry> = pruned
            .iter()
            .filter(|e| e.maybe_synthesized)
            .filter_map(|e| e.json.entry())
            .filter(crate::stores::prune::is_synthesized_entry)
            .collect();
        // Their uuids are idempotency keys: appending one that is already stored is a no-op.
        if !added.is_empty() {
            store
                .append(key, &added)
                .map_err(|source| EngineError::WriteSession { id: id(), source })?;
        }
        Ok(())
    }
}

/// Whether the last user or assistant entry of `history` is a user entry that says
/// exactly `prompt` (and so is still unanswered).
pub(super) fn ends_with_prompt(history: &[Loaded], prompt: &str) -> bool {
    // What hooks added after the prompt (context) is not an answer to it.
    let last = history
        .iter()
        .rev()
        .filter(|e| matches!(e.kind, Kind::User | Kind::Assistant))
        .map(|e| e.json.entry())
        .find(|e| !e.as_ref().is_some_and(is_hook_context));
    matches!(last, Some(Some(last)) if is_the_prompt(&last, prompt))
}

/// Whether a hook wrote the entry (context for the model), so it is never a prompt.
pub(super) fn is_hook_context(entry: &Entry) -> bool {
    entry.is_hook_context == Some(true)
}

/// Whether `entry` is a user entry whose message is `prompt` (as a string, or as its
/// one text block).
pub(super) fn is_the_prompt(entry: &Entry, prompt: &str) -> bool {
    entry.kind() == Kind::User
        && match entry.content() {
            Some(Content::Text(text)) => text == prompt,
            Some(Content::Blocks(blocks)) => {
                matches!(blocks.as_slice(), [block] if block.text() == Some(prompt))
            }
            None => false,
        }
}
