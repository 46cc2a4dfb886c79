//! One model turn: the request over the conversation so far, streamed out as events,
//! and what happens when a Ctrl-C interrupts it.

use super::{CONTINUE_AFTER_INTERRUPT, Conversation, Engine, EngineError, Event};
use crate::model::{MessagesRequest, ModelError, ModelReply, StreamDelta};
use crate::transcript;

impl Engine {
    /// One model request over the conversation so far.
    pub(super) async fn take_turn(
        &self,
        conv: &mut Conversation<'_>,
        request: &mut MessagesRequest,
    ) -> Turn {
        // The history is moved into the request, not cloned: a deep copy of every
        // message on every turn made a long session quadratic (most of the harness's
        // CPU time per turn at 200 turns). It goes back before anything else happens;
        // if this future is dropped mid-request, the conversation is dropped with it.
        request.messages = conv.messages.take();
        let turn = self.request(request, conv.depth).await;
        conv.messages.restore(std::mem::take(&mut request.messages));
        turn
    }

    /// A reply was interrupted: record that, then what the user said (or "continue").
    pub(super) async fn after_interrupted_reply(
        &self,
        conv: &mut Conversation<'_>,
    ) -> Result<(), EngineError> {
        let entry = conv.chain.user_text(transcript::INTERRUPTED_TURN);
        self.record(conv, entry)?;
        let line = self.ask_after_interrupt().await;
        let text = if line.is_empty() {
            CONTINUE_AFTER_INTERRUPT.to_string()
        } else {
            line
        };
        let entry = conv.chain.user_text(&text);
        self.record(conv, entry)
    }

    /// One model request, streaming deltas out as events; a Ctrl-C stops it cleanly.
    pub(super) async fn request(&self, request: &MessagesRequest, depth: u32) -> Turn {
        self.emit(Event::Requesting { depth });
        let events = self.config.events.clone();
        let mut on_delta = move |delta: StreamDelta<'_>| {
            let event = match delta {
                StreamDelta::Text(text) => Event::TextDelta {
                    text: text.to_string(),
                    depth,
                },
                StreamDelta::Thinking(text) => Event::ThinkingDelta {
                    text: text.to_string(),
                    depth,
                },
                StreamDelta::ToolUseStart { .. } => return,
            };
            events(&event);
        };
        let interrupt = &self.config.interrupt;
        // One pause for the whole run (a `retry-after`, an outage): no line of its own,
        // whoever set it said why.
        tokio::select! {
            biased;
            _ = interrupt.wait() => return Turn::Interrupted,
            () = self.config.pause.wait() => {}
        }
        tokio::select! {
            biased;
            _ = interrupt.wait() => Turn::Interrupted,
            result = self.config.model.stream(request, &mut on_delta) => match result {
                Ok(reply) => Turn::Reply(reply),
                Err(error) => Turn::Failed(error),
            },
        }
    }

    /// Asks the user what to say after a Ctrl-C, then clears the interrupt.
    pub(super) async fn ask_after_interrupt(&self) -> String {
        // Ctrl-C stops what runs in the background too.
        self.background().stop_all("interrupted").await;
        let line = match &self.config.on_interrupt {
            Some(prompt) => prompt().await.unwrap_or_default(),
            None => String::new(),
        };
        self.config.interrupt.clear();
        line.trim().to_string()
    }
}

pub(super) enum Turn {
    Reply(ModelReply),
    Interrupted,
    Failed(ModelError),
}
