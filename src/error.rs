//! Printing an error with its causes. Library errors keep their cause as a typed
//! `source()`; their one-line `Display` is what the spec prints, and may already
//! quote the cause. [`chain`] gives the whole story without saying a cause twice.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// `error` and each of its sources, joined by `": "`; a source whose text an earlier
/// level already says is skipped.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// A cause kept as its typed error inside an error that must stay `Clone` and
/// `PartialEq` (a configuration error is compared in tests, copied into results).
/// Two causes are equal when they say the same.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync>);

impl Cause {
    pub fn new(error: impl Error + Send + Sync + 'static) -> Cause {
        Cause(Arc::new(error))
    }

    /// The typed error, to look at its kind (`downcast_ref`).
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open the store: {0}")]
    struct Quoting(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open the store")]
    struct Silent(#[source] std::io::Error);

    #[test]
    fn a_cause_is_said_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(chain(&Quoting(io())), "cannot open the store: disk full");
        assert_eq!(chain(&Silent(io())), "cannot open the store: disk full");
    }
}
