//! One pause for every model request of a run: a `429` with `retry-after`, or an outage,
//! holds the next request of every agent (the main session and each sub-agent running
//! at the same time) until it is over, instead of each finding out on its own and
//! waiting on its own schedule. The runtime's retrier sets it; the engine waits on it
//! before each request.

use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    /// No request before this moment (a `retry-after`).
    until: Option<Instant>,
    /// The endpoint is away: no request until it is back.
    offline: bool,
}

/// Shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Pause {
    held: Arc<watch::Sender<Held>>,
}

impl Pause {
    pub fn new() -> Self {
        Pause::default()
    }

    /// No request before `at` (a later pause already set stays).
    pub fn until(&self, at: Instant) {
        self.held.send_modify(|held| {
            held.until = Some(held.until.map_or(at, |until| until.max(at)));
        });
    }

    /// The endpoint went away (`true`) or came back.
    pub fn offline(&self, offline: bool) {
        self.held.send_modify(|held| held.offline = offline);
    }

    /// Whether a request would wait now.
    pub fn is_held(&self) -> bool {
        let held = *self.held.borrow();
        held.offline || held.until.is_some_and(|until| until > Instant::now())
    }

    /// Resolves when no pause holds requests (at once when none does).
    pub async fn wait(&self) {
        let mut receiver = self.held.subscribe();
        loop {
            let held = *receiver.borrow_and_update();
            let until = held.until.filter(|until| *until > Instant::now());
            match (held.offline, until) {
                (false, None) => return,
                (false, Some(until)) => {
                    let deadline = tokio::time::Instant::from_std(until);
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        changed = receiver.changed() => if changed.is_err() { return },
                    }
                }
                (true, _) => {
                    if receiver.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
