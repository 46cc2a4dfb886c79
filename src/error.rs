//! Printing an error with its causes. Library errors keep their cause as a typed
//! `source()`; their one-line `Display` is what the spec prints, and may already
//! quote the cause. [`chain`] gives the whole story without saying a cause twice.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// `error` and each of its sources, joined by `": "`; a source whose text an earlier
/// level already says is skipped, and so is one that only puts a label of its own in
/// front of what was said (PostgreSQL's `FATAL: …` after the message it quotes).
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        let said = |t: &str| parts.iter().any(|p| p.contains(t));
        let labelled = text
            .split_once(": ")
            .is_some_and(|(_, rest)| !rest.is_empty() && said(rest));
        if !said(&text) && !labelled {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// A cause kept as its typed error inside an error that must stay `Clone` and
/// `PartialEq` (a configuration error is compared in tests; a model error is copied
/// into retry records). Two causes are equal when they say the same.
///
/// It is not an `Error` itself but derefs to the one it holds: as a thiserror
/// `#[source]`, the outer error's `source()` is then the typed cause itself, which a
/// caller can `downcast_ref` (`reqwest::Error`, `std::io::Error`, …).
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

impl std::ops::Deref for Cause {
    type Target = dyn Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
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

    #[derive(Debug, thiserror::Error)]
    #[error("too many connections (53300)")]
    struct Described(#[source] std::io::Error);

    #[test]
    fn a_cause_that_only_labels_what_was_said_is_skipped() {
        let labelled = Described(std::io::Error::other("FATAL: too many connections"));
        assert_eq!(chain(&labelled), "too many connections (53300)");
    }

    #[derive(Debug, Clone, thiserror::Error)]
    #[error("bad value")]
    struct Kept(#[source] super::Cause);

    #[test]
    fn a_kept_cause_is_the_source_itself() {
        let kept = Kept(super::Cause::new(std::io::Error::other("disk full")));
        let source = std::error::Error::source(&kept).map(|s| s.is::<std::io::Error>());
        assert_eq!(source, Some(true));
        assert_eq!(chain(&kept), "bad value: disk full");
    }
}
