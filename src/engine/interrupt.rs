//! The cooperative interrupt (Ctrl-C once): the engine stops the stream or the running
//! tool at the next boundary, asks the user for a line, and carries on in the same session.

use tokio::sync::watch;

/// A shared interrupt flag. `trigger` from a signal handler; the engine waits on it at
/// every await point that may take long (a model stream, a tool) and clears it once the
/// user has answered.
#[derive(Debug, Clone)]
pub struct Interrupt {
    sender: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt {
            sender: std::sync::Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Interrupt {
    pub fn new() -> Self {
        Interrupt::default()
    }

    /// Requests an interrupt.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Whether an interrupt is requested and not yet handled.
    pub fn is_pending(&self) -> bool {
        *self.sender.borrow()
    }

    /// Marks the interrupt handled.
    pub fn clear(&self) {
        self.sender.send_replace(false);
    }

    /// Resolves once an interrupt is pending (at once if one already is).
    pub async fn wait(&self) {
        let mut receiver = self.sender.subscribe();
        // The sender lives as long as self, so this cannot fail; if it did, never resolve.
        if receiver.wait_for(|pending| *pending).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
