//! The runtime's side of 换代 (generation handoff): when a step's main session
//! reaches its threshold (or hits the window), the session is asked for its handoff
//! document (gated, at most [`handoff::MAX_ASKS`] times, else a mechanical document
//! written without a model), and the attempt goes on in a successor session of the
//! next generation with the document as its prompt. A wake into a session already over
//! the threshold hands off before any run.
//!
//! The pieces without I/O policy (threshold, document sections, prompts, the mechanical
//! document, generation counting) are [`super::handoff`]'s; the retry loop that calls
//! into this is [`super::runtime`]'s.

use super::guard::lock;
use super::handoff::{self, MechanicalInput};
use super::manifest::{StepError, StepResult};
use super::runtime::{Attempt, Runtime};
use crate::engine::{
    AgentSpec, EngineError, Event, Origin, RunRequest, RunResult, SessionStart, Stop,
};
use crate::model::Usage;
use crate::model::classify::ErrorKind;
use crate::transcript::Entry;
use std::path::Path;
use std::time::Duration;

/// Said to a successor that reached the threshold before doing anything: handing off
/// again cannot help, so it goes on.
pub const CONTINUE_WITHOUT_HANDOFF: &str = "继续。";

impl Runtime {
    /// The handoff threshold for an agent, tokens.
    pub(super) fn handoff_limit(&self, spec: &AgentSpec) -> u64 {
        let model = spec
            .model
            .as_deref()
            .unwrap_or_else(|| self.engine.config().model.default_model());
        self.handoff.limit_for_agent(model)
    }

    /// A wake into a session already over the threshold hands off before any run: the
    /// session is not asked anything.
    pub(super) async fn hand_off_on_wake(
        &self,
        step: &str,
        spec: &AgentSpec,
        attempt: &mut Attempt,
    ) {
        let (Some(limit), SessionStart::Resume(id)) = (attempt.limit, &attempt.start) else {
            return;
        };
        let Some(context) = self.session_context(id).filter(|c| *c >= limit) else {
            return;
        };
        let id = id.clone();
        attempt.result.session_id = Some(id.clone());
        let reason =
            format!("唤醒时这条会话的上下文已经到了 {context} tokens,过了换代阈值 {limit}");
        self.hand_off_to_successor(step, spec, id, context, Some(reason), attempt)
            .await;
    }

    /// A run that reached the threshold (or hit the window) hands off to a successor;
    /// `reason` as from [`handoff_needed`].
    pub(super) async fn hand_off_when_full(
        &self,
        step: &str,
        spec: &AgentSpec,
        run: &RunResult,
        reason: Option<String>,
        attempt: &mut Attempt,
    ) {
        let old = run.session_id.clone();
        // A successor that is full before it got anything done would hand off
        // forever (a threshold below what a fresh session needs): it goes on
        // without a threshold instead; the window's own limit still applies.
        if reason.is_none()
            && matches!(attempt.start, SessionStart::New)
            && attempt.generation > 1
            && run.num_turns <= 1
        {
            attempt.limit = None;
            attempt.start = SessionStart::Resume(old);
            attempt.prompt = CONTINUE_WITHOUT_HANDOFF.to_string();
            return;
        }
        if let Some(reason) = &reason {
            attempt.result.errors.push(run.error().map_or_else(
                || StepError::new(reason.clone(), ErrorKind::ContextWindowFull),
                StepError::of_run,
            ));
        }
        let context = if run.context > 0 {
            run.context
        } else {
            self.session_context(&old).unwrap_or(0)
        };
        self.hand_off_to_successor(step, spec, old, context, reason, attempt)
            .await;
        self.set_in_flight(Some(attempt.result.clone()));
    }

    /// Writes the handoff document for `old` and points the attempt at a new session of
    /// the next generation, with the document as its prompt.
    async fn hand_off_to_successor(
        &self,
        step: &str,
        spec: &AgentSpec,
        old: String,
        context: u64,
        mechanical: Option<String>,
        attempt: &mut Attempt,
    ) {
        attempt.prompt = self
            .hand_off(
                step,
                spec,
                &old,
                attempt.generation,
                context,
                mechanical,
                &attempt.step_prompt,
                &mut attempt.result,
                &mut attempt.usage,
            )
            .await;
        attempt.start = SessionStart::New;
        attempt.generation += 1;
        attempt.retiring = Some(old);
    }

    /// The generation of a step's session, counted from the manifest's `retired[]`.
    pub(super) fn generation_of(&self, session_id: &str) -> u32 {
        let rows = lock(&self.manifest).all_rows().unwrap_or_default();
        super::manifest::generation_of(&rows, session_id)
    }

    /// The context of a session's last turn, from the store; `None` when unknown.
    fn session_context(&self, session_id: &str) -> Option<u64> {
        let config = self.engine.config();
        let key = crate::stores::SessionKey::main(&config.project_key, session_id);
        super::wake::context_in(config.store.inner().as_ref(), &key)
    }

    /// Writes the handoff document of `generation` for the session `old` and returns the
    /// successor's first prompt. `mechanical = Some(reason)`: the session is not asked
    /// (it is over-long); otherwise it is asked, gated, at most [`handoff::MAX_ASKS`]
    /// times, then the mechanical fallback. A complete document already written for this
    /// generation (since `old` began) is reused as it is.
    #[allow(clippy::too_many_arguments)]
    async fn hand_off(
        &self,
        step: &str,
        spec: &AgentSpec,
        old: &str,
        generation: u32,
        context: u64,
        mechanical: Option<String>,
        step_prompt: &str,
        result: &mut StepResult,
        usage: &mut Usage,
    ) -> String {
        self.emit(Event::Handoff {
            step: step.to_string(),
            generation: generation + 1,
            context,
            mechanical: mechanical.is_some(),
        });
        // The nearest thing to a compaction: `PreCompact` hooks see the session first.
        self.engine
            .pre_compact(spec, old, step, generation, mechanical.as_deref())
            .await;
        let config = self.engine.config();
        let rel = handoff::doc_rel(step, generation);
        let path = handoff::doc_path(&config.workspace, step, generation);
        let key = crate::stores::SessionKey::main(&config.project_key, old);
        let entries = config
            .store
            .load_raw(&key)
            .ok()
            .flatten()
            .unwrap_or_default();
        let began = entries.first().and_then(entry_time);
        if let Some(doc) = reusable_doc(&path, began) {
            return handoff::successor_prompt(generation + 1, &rel, &doc);
        }
        let reason = match mechanical {
            Some(reason) => reason,
            None => match self
                .ask_for_handoff_doc(spec, step, old, generation, result, usage)
                .await
            {
                Ok(doc) => return handoff::successor_prompt(generation + 1, &rel, &doc),
                Err(reason) => reason.to_string(),
            },
        };
        let input = MechanicalInput {
            step,
            generation,
            session_id: old,
            reason: &reason,
            prompt: step_prompt,
            brief: super::notes::read(&super::notes::brief_path(&config.workspace)),
            goal: super::notes::read(&super::notes::goal_path(&config.workspace)),
            entries: &entries,
            subagents: &self.subagent_entries(&key),
        };
        let doc = handoff::mechanical_doc(&input);
        // The successor gets the document in its prompt either way; a failed write only
        // costs the person the file.
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = crate::atomic::write(&path, doc.as_bytes()) {
            lock(&self.warnings).push(format!("写交接书 {rel} 失败:{e}"));
        }
        handoff::successor_prompt(generation + 1, &rel, &doc)
    }

    /// Asks the session `old` to write its handoff document, gated, at most
    /// [`handoff::MAX_ASKS`] times: `Ok(doc)` once it is complete, else `Err(why)` for
    /// the mechanical fallback (the window was hit, or the asks ran out).
    async fn ask_for_handoff_doc(
        &self,
        spec: &AgentSpec,
        step: &str,
        old: &str,
        generation: u32,
        result: &mut StepResult,
        usage: &mut Usage,
    ) -> Result<String, NoDoc> {
        let rel = handoff::doc_rel(step, generation);
        let path = handoff::doc_path(&self.engine.config().workspace, step, generation);
        let mut writer = spec.clone();
        writer.max_turns = Some(handoff::ASK_TURNS);
        for ask in 0..handoff::MAX_ASKS {
            let prompt = if ask == 0 {
                handoff::handoff_prompt(&rel, generation)
            } else {
                let text = super::notes::read(&path).unwrap_or_default();
                handoff::retry_prompt(&rel, &handoff::missing_sections(&text))
            };
            let run = self
                .engine
                .run(RunRequest {
                    spec: &writer,
                    prompt,
                    start: SessionStart::Resume(old.to_string()),
                    on_session: None,
                    context_limit: None,
                    retry: false,
                    origin: Origin::Internal,
                })
                .await;
            result.num_turns += run.num_turns;
            result.cost_usd = match (result.cost_usd, run.cost_usd) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            usage.add(&run.usage);
            if let Some(text) = super::notes::read(&path).filter(|t| handoff::doc_complete(t)) {
                return Ok(text);
            }
            if let Some(error) = run.error()
                && error.kind() == ErrorKind::ContextWindowFull
            {
                result.errors.push(StepError::of_run(error));
                return Err(NoDoc::WindowFull);
            }
        }
        Err(NoDoc::AsksRanOut)
    }

    /// The stored transcripts of a session's sub-agents, for the mechanical document.
    fn subagent_entries(&self, key: &crate::stores::SessionKey) -> Vec<Vec<Entry>> {
        let store = &self.engine.config().store;
        store
            .inner()
            .list_subkeys(key)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|sub| key.sub(&sub).ok())
            .filter_map(|sub| store.load_raw(&sub).ok().flatten())
            .collect()
    }
}

/// Whether a run ended in a way that calls for a handoff: `Some(None)` at the threshold
/// (the session is asked to write the document), `Some(Some(why))` when the window was
/// hit anyway (mechanical: the over-long session is not asked anything).
pub(super) fn handoff_needed(run: &RunResult) -> Option<Option<String>> {
    match &run.outcome {
        Ok(Stop::ContextFull) => Some(None),
        Err(EngineError::ContextWindowFull { .. }) => Some(Some(
            "模型的回复因上下文窗口已满被截断(model_context_window_exceeded)".into(),
        )),
        Err(error) if error.kind() == ErrorKind::ContextWindowFull => Some(Some(
            "请求超出了模型的上下文窗口(prompt is too long)".into(),
        )),
        _ => None,
    }
}

/// A complete handoff document at `path` written since the session `began`: a wake
/// after the document was written reuses it instead of asking again.
fn reusable_doc(path: &Path, began: Option<std::time::SystemTime>) -> Option<String> {
    let text = super::notes::read(path).filter(|t| handoff::doc_complete(t))?;
    let written = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    match began {
        Some(began) if written < began => None,
        _ => Some(text),
    }
}

/// When a transcript entry was written.
fn entry_time(entry: &Entry) -> Option<std::time::SystemTime> {
    let stamp = entry.timestamp.as_deref()?;
    let time = chrono::DateTime::parse_from_rfc3339(stamp).ok()?;
    let millis = u64::try_from(time.timestamp_millis()).ok()?;
    // Transcript stamps have millisecond precision: compare at that grain.
    Some(std::time::UNIX_EPOCH + Duration::from_millis(millis))
}

/// Why the session gave no complete handoff document: the reason the mechanical
/// fallback document states.
#[derive(Debug, thiserror::Error)]
enum NoDoc {
    #[error("写交接书时上下文撞到了窗口")]
    WindowFull,
    #[error("问了 {} 次,交接书还是不完整", handoff::MAX_ASKS)]
    AsksRanOut,
}
