//! The runtime's side of checkpoints (`crate::checkpoint`): one before each step
//! attempt, one after each turn of a main session that ran a tool which may change
//! files (Write, Edit, Bash, a sub-agent's tools, an MCP tool: anything but the
//! read-only tools), taken when that session sends its next request, or when the
//! attempt ends; and one when a background command ends (its writes after the turn
//! that started it; its start is that turn's checkpoint). A checkpoint that fails is
//! a warning; the run goes on.

use crate::checkpoint::{CheckpointKind, Checkpoints};
use crate::events::{Event, EventSink};
use crate::transcript::tools::{ASK_USER, GLOB, GREP, READ};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct State {
    /// The attempt's row name.
    row: String,
    session: Option<String>,
    turn: u32,
    /// A tool that may change files ran since the last checkpoint.
    dirty: bool,
}

/// Takes the checkpoints of a runtime.
pub struct Watch {
    checkpoints: Checkpoints,
    state: Mutex<State>,
    events: EventSink,
}

impl Watch {
    pub fn new(checkpoints: Checkpoints, events: EventSink) -> Arc<Watch> {
        Arc::new(Watch {
            checkpoints,
            state: Mutex::new(State::default()),
            events,
        })
    }

    pub fn checkpoints(&self) -> &Checkpoints {
        &self.checkpoints
    }

    /// Before a step attempt (`row` is its manifest row name).
    pub fn before_attempt(&self, row: &str) {
        let mut state = super::guard::lock(&self.state);
        *state = State {
            row: row.to_string(),
            ..State::default()
        };
        self.take(&mut state, CheckpointKind::Attempt);
    }

    /// After a step attempt: the last turn's changes, if not taken yet.
    pub fn after_attempt(&self) {
        let mut state = super::guard::lock(&self.state);
        if state.dirty {
            self.take(&mut state, CheckpointKind::Turn);
        }
    }

    fn take(&self, state: &mut State, kind: CheckpointKind) {
        self.take_after(state, kind, None);
    }

    fn take_after(&self, state: &mut State, kind: CheckpointKind, command: Option<&str>) {
        state.dirty = false;
        let taken = self.checkpoints.record_after(
            kind,
            &state.row,
            state.session.as_deref(),
            state.turn,
            command,
        );
        if let Err(e) = taken {
            (self.events)(&Event::Warning {
                message: crate::error::chain(&e),
            });
        }
    }

    /// The engine's event sink around `inner`: it sees which tools ran and when a main
    /// session sends its next request.
    pub fn sink(self: &Arc<Self>, inner: EventSink) -> EventSink {
        let watch = Arc::clone(self);
        Arc::new(move |event: &Event| {
            match event {
                Event::SessionStarted {
                    session_id,
                    depth: 0,
                    ..
                } => {
                    let mut state = super::guard::lock(&watch.state);
                    state.session = Some(session_id.clone());
                    state.turn = 0;
                }
                Event::TurnDone { depth: 0, .. } => super::guard::lock(&watch.state).turn += 1,
                Event::ToolDone { name, .. } if !is_read_only(name) => {
                    super::guard::lock(&watch.state).dirty = true;
                }
                // A sub-agent's too: its commands ran for the main session's Task.
                Event::BackgroundEnded { id, .. } => {
                    let mut state = super::guard::lock(&watch.state);
                    watch.take_after(&mut state, CheckpointKind::Background, Some(id));
                }
                Event::Requesting { depth: 0 } => {
                    let mut state = super::guard::lock(&watch.state);
                    if state.dirty {
                        watch.take(&mut state, CheckpointKind::Turn);
                    }
                }
                _ => {}
            }
            inner(event);
        })
    }
}

fn is_read_only(tool: &str) -> bool {
    [READ, GLOB, GREP, ASK_USER].contains(&tool)
}
