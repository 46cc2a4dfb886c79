//! Attempt names: how a manifest row says which attempt of which step it is.
//!
//! A step's rows carry one of four names (spec 接续.md): `<step>` (the first attempt),
//! `<step>#retry<N>` (a plain retry), `<step>#round<N>` (sent back after a failed
//! verdict) and `<step>·判定#<N>` (the judge's round N). Only the first form is a step
//! name; lineage never remembers the others. The forms are built and recognised here
//! and nowhere else.

use std::fmt;

/// Which attempt of a step a row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    /// The step itself: its first attempt.
    First,
    /// The N-th plain retry.
    Retry(u32),
    /// Round N after a failed verdict.
    Round(u32),
    /// The judge's round N.
    Judge(u32),
}

/// A step name plus which attempt of it: parses and prints the four forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptName {
    step: String,
    kind: AttemptKind,
}

const RETRY: &str = "#retry";
const ROUND: &str = "#round";
const JUDGE: &str = "·判定#";

impl AttemptName {
    pub fn new(step: impl Into<String>, kind: AttemptKind) -> Self {
        AttemptName {
            step: step.into(),
            kind,
        }
    }

    /// Reads a row's name. A name without one of the suffixes (followed by a number) is
    /// a first attempt, whatever else it contains.
    pub fn parse(name: &str) -> Self {
        for (suffix, kind) in [
            (RETRY, AttemptKind::Retry as fn(u32) -> AttemptKind),
            (ROUND, AttemptKind::Round),
            (JUDGE, AttemptKind::Judge),
        ] {
            if let Some((step, number)) = name.rsplit_once(suffix)
                && !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit())
                && let Ok(n) = number.parse::<u32>()
            {
                return AttemptName::new(step, kind(n));
            }
        }
        AttemptName::new(name, AttemptKind::First)
    }

    /// The plain step name.
    pub fn step(&self) -> &str {
        &self.step
    }

    pub fn kind(&self) -> AttemptKind {
        self.kind
    }

    /// Whether this names the step itself (the only form lineage remembers).
    pub fn is_first(&self) -> bool {
        self.kind == AttemptKind::First
    }
}

impl fmt::Display for AttemptName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            AttemptKind::First => write!(f, "{}", self.step),
            AttemptKind::Retry(n) => write!(f, "{}{RETRY}{n}", self.step),
            AttemptKind::Round(n) => write!(f, "{}{ROUND}{n}", self.step),
            AttemptKind::Judge(n) => write!(f, "{}{JUDGE}{n}", self.step),
        }
    }
}
