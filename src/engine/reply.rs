//! What a stored reply means for the conversation: its stop reason decides whether the
//! run stops, continues the same turn (`max_tokens`, `pause_turn`) or answers tool calls.

use super::{Conversation, Engine, Event, RunError, Stop, Totals, WINDOW_EXCEEDED_STOP};
use crate::model::ModelReply;
use crate::transcript;
use serde_json::Value;

/// How many times in a row a reply cut by `max_tokens` is continued (each
/// continuation is its own stored turn) before the run ends with what it has.
pub const MAX_CONTINUATIONS: u32 = 3;

/// How many `pause_turn` stops in a row are sent back to continue.
pub const MAX_PAUSE_CONTINUATIONS: u32 = 10;

impl Engine {
    /// Stores a finished reply and counts it.
    pub(super) fn record_reply(
        &self,
        conv: &mut Conversation<'_>,
        model: &str,
        reply: &ModelReply,
        totals: &mut Totals,
    ) -> Result<(), RunError> {
        let entry = conv.chain.assistant(reply);
        // Tool results follow a reply with calls; the last of them flushes both (see
        // `SessionStore::append_deferred`).
        let deferred = !transcript::tool_uses(&reply.content).is_empty();
        self.record_with(conv, entry, deferred)?;
        totals.num_turns += 1;
        totals.usage.add(&reply.usage);
        totals.add_cost(crate::model::prices::request_cost_usd(model, &reply.usage));
        if conv.depth == 0 {
            totals.context = reply.usage.context_tokens();
        }
        let text = transcript::text_of(&reply.content);
        if std::mem::take(&mut totals.continuing) {
            totals.text.push_str(&text);
        } else if !text.is_empty() {
            totals.text = text;
        }
        totals.stop_reason = reply.stop_reason.clone();
        self.emit(Event::TurnDone {
            turn: totals.num_turns,
            usage: reply.usage,
            context: reply.usage.context_tokens(),
            cost_usd: totals.cost_usd,
            depth: conv.depth,
        });
        Ok(())
    }

    /// What the stop reason of a stored reply means for the conversation.
    pub(super) fn after_reply(
        &self,
        reply: &ModelReply,
        model: &str,
        no_calls: bool,
        continuations: &mut Continuations,
    ) -> Result<Next, RunError> {
        match reply.stop_reason.as_deref() {
            // The window is full whatever the reply holds: the caller hands off.
            Some(WINDOW_EXCEEDED_STOP) => Err(RunError::ContextWindowFull {
                model: model.to_string(),
            }),
            // A reply cut inside a tool call still gets its calls answered (the cut
            // input is answered with an error result, see `call_tool`).
            _ if !no_calls => Ok(Next::Tools),
            Some("max_tokens") => {
                continuations.max_tokens += 1;
                if continuations.max_tokens > MAX_CONTINUATIONS {
                    return Ok(Next::Stop(Stop::MaxTokens));
                }
                Ok(Next::Continue)
            }
            Some("pause_turn") => {
                continuations.pause += 1;
                if continuations.pause > MAX_PAUSE_CONTINUATIONS {
                    return Ok(Next::Stop(Stop::EndTurn));
                }
                Ok(Next::Continue)
            }
            Some("refusal") => Err(RunError::Refusal(reply.stop_details.clone())),
            None | Some("end_turn" | "stop_sequence" | "tool_use") => Ok(Next::Stop(Stop::EndTurn)),
            Some(other) => {
                self.emit(Event::Warning {
                    message: format!(
                        "unknown stop_reason {other:?} from the API; treated as the end of the turn"
                    ),
                });
                Ok(Next::Stop(Stop::EndTurn))
            }
        }
    }
}

/// What comes after a stored reply.
pub(super) enum Next {
    Stop(Stop),
    /// Send the conversation back as it is: the model continues its own turn.
    Continue,
    /// Answer the reply's tool calls, then ask again.
    Tools,
}

/// Continuations in a row, by cause; reset once tools run.
#[derive(Default)]
pub(super) struct Continuations {
    max_tokens: u32,
    pause: u32,
}

/// A reply cut by `max_tokens` is sent back as the start of the assistant turn; the API
/// refuses a final assistant block that ends in whitespace, so that is trimmed before
/// the reply is stored (the stored and the sent turn stay the same bytes).
pub(super) fn trim_for_continuation(mut reply: ModelReply) -> ModelReply {
    if reply.stop_reason.as_deref() != Some("max_tokens") {
        return reply;
    }
    if let Some(Value::Object(last)) = reply.content.last_mut()
        && last.get("type").and_then(Value::as_str) == Some("text")
        && let Some(Value::String(text)) = last.get_mut("text")
    {
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        if trimmed == 0 {
            reply.content.pop();
        }
    }
    reply
}
