//! What a stored reply means for the conversation: its stop reason decides whether the
//! run stops, continues the same turn (`max_tokens`, `pause_turn`) or answers tool calls.

use super::{
    CUT_BY_MAX_TOKENS, Conversation, Engine, EngineError, Event, Stop, Totals, WINDOW_EXCEEDED_STOP,
};
use crate::content::{Block, ToolInput, text_of};
use crate::model::ModelReply;
use serde::Deserialize;

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
    ) -> Result<(), EngineError> {
        let entry = conv.chain.assistant(reply);
        // Tool results follow a reply with calls; the last of them flushes both (see
        // `SessionStore::append_deferred`).
        let deferred = reply.content.iter().any(|b| b.as_tool_use().is_some());
        self.record_with(conv, entry, deferred)?;
        self.report_server_tools(&reply.content, conv.depth, conv.task.as_deref());
        conv.measure.measured(reply.usage.context_tokens());
        totals.num_turns += 1;
        totals.usage.add(&reply.usage);
        totals.add_cost(crate::model::prices::request_cost_usd(model, &reply.usage));
        if conv.depth == 0 {
            totals.context = reply.usage.context_tokens();
        }
        let text = text_of(&reply.content);
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
            model: model.to_string(),
            depth: conv.depth,
        });
        Ok(())
    }

    /// Reports the server tool calls a reply carries (the API ran them) as tool calls.
    fn report_server_tools(&self, content: &[Block], depth: u32, task: Option<&str>) {
        /// What a call's summary shows of its input.
        #[derive(Deserialize)]
        struct Subject {
            query: Option<String>,
            url: Option<String>,
        }
        /// A server tool result's content: an error's `type` ends in `_error`.
        #[derive(Deserialize)]
        struct Outcome {
            #[serde(rename = "type")]
            kind: Option<String>,
        }
        for (i, block) in content.iter().enumerate() {
            let Block::ServerToolUse(call) = block else {
                continue;
            };
            let api_name = call.name.as_deref().unwrap_or_default();
            let Some(name) = crate::transcript::tools::server_tool_rule_name(api_name) else {
                continue;
            };
            let input = call.input.as_ref().map_or("null", ToolInput::text);
            let subject = serde_json::from_str::<Subject>(input).ok();
            let summary = subject
                .and_then(|s| s.query.or(s.url))
                .unwrap_or_else(|| input.to_string());
            self.emit(Event::ToolCall {
                name: name.to_string(),
                summary,
                depth,
                id: call.id.clone().unwrap_or_default(),
                task: task.map(str::to_owned),
            });
            let failed = content[i + 1..]
                .iter()
                .find_map(|b| match b {
                    Block::ServerToolResult(r) if r.tool_use_id == call.id => r.content.as_ref(),
                    _ => None,
                })
                .and_then(|raw| raw.parse::<Outcome>().ok())
                .and_then(|outcome| outcome.kind)
                .is_some_and(|t| t.ends_with("_error"));
            self.emit(Event::ToolDone {
                name: name.to_string(),
                is_error: failed,
                interrupted: false,
                depth,
                id: call.id.clone().unwrap_or_default(),
                task: task.map(str::to_owned),
            });
        }
    }

    /// What the stop reason of a stored reply means for the conversation.
    pub(super) fn after_reply(
        &self,
        reply: &ModelReply,
        model: &str,
        no_calls: bool,
        continuations: &mut Continuations,
    ) -> Result<Next, EngineError> {
        match reply.stop_reason.as_deref() {
            // The window is full whatever the reply holds: the caller hands off.
            Some(WINDOW_EXCEEDED_STOP) => Err(EngineError::ContextWindowFull {
                model: model.to_string(),
            }),
            // A reply cut inside a tool call still gets its calls answered (the cut
            // call with an error result, see `cut_last_call`).
            _ if !no_calls => Ok(Next::Tools),
            Some("max_tokens") => {
                continuations.max_tokens += 1;
                if continuations.max_tokens > MAX_CONTINUATIONS {
                    return Ok(Next::Stop(Stop::MaxTokens));
                }
                Ok(Next::Continue { cut: true })
            }
            Some("pause_turn") => {
                continuations.pause += 1;
                if continuations.pause > MAX_PAUSE_CONTINUATIONS {
                    return Ok(Next::Stop(Stop::EndTurn));
                }
                // Sent back as it is: the API resumes a paused server-tool turn.
                Ok(Next::Continue { cut: false })
            }
            Some("refusal") => Err(EngineError::Refusal(reply.stop_details.clone())),
            None | Some("end_turn" | "stop_sequence" | "tool_use") => Ok(Next::Stop(Stop::EndTurn)),
            Some(other) => {
                self.emit(Event::Warning {
                    message: format!("API 回了不认识的 stop_reason {other:?};当作这一轮结束"),
                });
                Ok(Next::Stop(Stop::EndTurn))
            }
        }
    }
}

/// What comes after a stored reply.
pub(super) enum Next {
    Stop(Stop),
    /// The model continues its own turn: a paused turn is sent back as it is; a reply
    /// `cut` by `max_tokens` too where a prefill is allowed, else followed by
    /// [`super::CONTINUE_AFTER_MAX_TOKENS`].
    Continue {
        cut: bool,
    },
    /// Answer the reply's tool calls, then ask again.
    Tools,
}

/// Continuations in a row, by cause; reset once tools run.
#[derive(Default)]
pub(super) struct Continuations {
    max_tokens: u32,
    pause: u32,
}

/// A reply cut by `max_tokens` that is sent back as the start of the assistant turn (a
/// prefill, where the model allows one): the API refuses a final assistant block that
/// ends in whitespace, so that is trimmed before the reply is stored (the stored and the
/// sent turn stay the same bytes).
pub(super) fn trim_for_continuation(mut reply: ModelReply) -> ModelReply {
    if reply.stop_reason.as_deref() != Some("max_tokens") {
        return reply;
    }
    if let Some(Block::Text(last)) = reply.content.last_mut()
        && let Some(text) = &mut last.text
    {
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        if trimmed == 0 {
            reply.content.pop();
        }
    }
    reply
}

/// The calls of a reply to answer; a call cut by `max_tokens` (the last block of a
/// reply that stopped there) gets the marker input instead of what arrived of it, so
/// that it is answered with an error and never run, even when that part parses.
pub(super) fn cut_last_call(reply: &ModelReply, mut calls: Vec<super::Call>) -> Vec<super::Call> {
    let cut = reply.stop_reason.as_deref() == Some("max_tokens")
        && matches!(reply.content.last(), Some(Block::ToolUse(_)));
    if cut && let Some((_, _, input)) = calls.last_mut() {
        // What the stream made of the cut input (a parse error), kept after the cause.
        let why = match input.str_field(crate::model::types::INVALID_TOOL_INPUT) {
            Some(parse) => format!("{CUT_BY_MAX_TOKENS}: {parse}"),
            None => CUT_BY_MAX_TOKENS.to_string(),
        };
        let marker = [(crate::model::types::INVALID_TOOL_INPUT, why)];
        *input = ToolInput::of(&std::collections::BTreeMap::from(marker))
            .unwrap_or_else(|_| ToolInput::empty());
    }
    calls
}

/// The tool calls of a reply: id, name and input (`{}` when it has none).
pub(super) fn calls_of(content: &[Block]) -> Vec<super::Call> {
    content
        .iter()
        .filter_map(Block::as_tool_use)
        .map(|call| {
            let input = call.input.clone().unwrap_or_default();
            (
                call.id.clone().unwrap_or_default(),
                call.name.clone().unwrap_or_default(),
                input,
            )
        })
        .collect()
}
