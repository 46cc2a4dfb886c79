//! The one way the continuity files take a mutex: a file of its own, so that the
//! runtime's helpers (retries, checkpointing) need nothing from the runtime itself.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`; a poisoned one is used anyway.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take continuation down with it: use the data anyway.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
