//! The turn series of a session: what a transcript's `assistant` entries say, read
//! without building the entries (context per turn, cost, retries and outages marked).

use super::{Mark, MarkKind, Session, Tokens, Turn};
use crate::model::Usage;
use crate::stores::summary::iso_to_epoch_ms;
use crate::transcript::{Block, Entry, markers};

/// The turn series of one transcript.
pub fn session_of(id: &str, step: &str, entries: &[Entry]) -> Session {
    series(
        id,
        step,
        entries.len(),
        entries.iter().filter_map(AssistantFacts::of),
    )
}

/// What the turn series reads of one `assistant` entry.
pub(super) struct AssistantFacts {
    at: Option<i64>,
    /// A synthetic API error's text (`None`: a model turn).
    error: Option<String>,
    /// `message` is present.
    message: bool,
    model: String,
    usage: Option<Usage>,
}

/// The few fields of an entry [`AssistantFacts`] needs, borrowed from its JSON text;
/// everything else is skipped unparsed.
#[derive(serde::Deserialize)]
pub(super) struct LiteEntry<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    timestamp: Option<&'a str>,
    #[serde(rename = "isApiErrorMessage")]
    api_error: Option<bool>,
    #[serde(borrow)]
    message: Option<LiteMessage<'a>>,
}

#[derive(serde::Deserialize)]
pub(super) struct LiteMessage<'a> {
    #[serde(borrow)]
    model: Option<&'a str>,
    #[serde(borrow)]
    usage: Option<&'a serde_json::value::RawValue>,
}

impl AssistantFacts {
    /// `None` when the entry is not an `assistant` entry.
    fn of(entry: &Entry) -> Option<AssistantFacts> {
        if entry.kind.as_deref() != Some("assistant") {
            return None;
        }
        let at = entry.timestamp.as_deref().and_then(iso_to_epoch_ms);
        let message = entry.message.as_ref();
        if entry.is_synthetic_error() {
            let text = entry
                .blocks()
                .first()
                .and_then(Block::text)
                .unwrap_or_default();
            return Some(AssistantFacts {
                at,
                error: Some(text.to_owned()),
                message: message.is_some(),
                model: String::new(),
                usage: None,
            });
        }
        Some(AssistantFacts {
            at,
            error: None,
            message: message.is_some(),
            model: message
                .and_then(|m| m.model.as_deref())
                .unwrap_or("")
                .to_owned(),
            usage: message
                .and_then(|m| m.usage.as_ref())
                .and_then(|u| serde_json::to_string(u).ok())
                .and_then(|json| usage_of(&json)),
        })
    }

    /// From an entry's JSON text: the few fields only, unless the entry is a synthetic
    /// error or does not fit the light shape (then parsed whole, as [`Self::of`]).
    pub(super) fn of_json(text: &[u8]) -> Option<AssistantFacts> {
        let whole = || {
            Entry::from_json(text)
                .ok()
                .and_then(|e| AssistantFacts::of(&e))
        };
        let Ok(lite) = serde_json::from_slice::<LiteEntry>(text) else {
            return whole();
        };
        if lite.kind != Some("assistant") {
            return None;
        }
        let model = lite.message.as_ref().and_then(|m| m.model);
        if lite.api_error == Some(true) || model == Some(markers::SYNTHETIC_MODEL) {
            return whole();
        }
        let usage = lite
            .message
            .as_ref()
            .and_then(|m| m.usage)
            .and_then(|raw| usage_of(raw.get()));
        Some(AssistantFacts {
            at: lite.timestamp.and_then(iso_to_epoch_ms),
            error: None,
            message: lite.message.is_some(),
            model: model.unwrap_or("").to_owned(),
            usage,
        })
    }
}

/// A message's `usage` as the model layer reads it; `None` if it is not one.
fn usage_of(json: &str) -> Option<Usage> {
    serde_json::from_str::<Usage>(json).ok().or_else(|| {
        // A repeated key: read as serde_json reads it, the last one (a tree only for
        // that rare case).
        serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|u| serde_json::from_value::<Usage>(u).ok())
    })
}

/// The turn series of a transcript of `entries` entries, from its assistant entries.
pub(super) fn series(
    id: &str,
    step: &str,
    entries: usize,
    assistants: impl Iterator<Item = AssistantFacts>,
) -> Session {
    let mut s = Session {
        session_id: id.to_owned(),
        step: step.to_owned(),
        entries,
        ..Session::default()
    };
    let mut pending_error: Option<(usize, Option<i64>, String)> = None;
    for facts in assistants {
        let at = facts.at;
        if let Some(text) = facts.error {
            if let Some(mark) = close_error(&mut pending_error, at, s.turns.len()) {
                s.marks.push(mark);
            }
            pending_error = Some((s.turns.len(), at, text));
            continue;
        }
        if !facts.message {
            continue;
        }
        let Some(usage) = facts.usage else {
            continue;
        };
        if let Some(mark) = close_error(&mut pending_error, at, s.turns.len()) {
            s.marks.push(mark);
        }
        let model = facts.model.as_str();
        if s.model.as_deref() != Some(model) && !model.is_empty() {
            s.model = Some(facts.model.clone());
        }
        let cost = crate::model::prices::cost_usd(model, &usage);
        if let Some(c) = cost {
            *s.cost_usd.get_or_insert(0.0) += c;
        }
        let context = usage.context_tokens();
        s.peak_context = s.peak_context.max(context);
        let mut tokens = Tokens::default();
        tokens.add(&usage);
        s.tokens.add(&usage);
        s.turns.push(Turn {
            at_ms: at,
            context,
            usage: tokens,
            cost_usd: cost,
        });
    }
    if let Some(mark) = close_error(&mut pending_error, None, s.turns.len()) {
        s.marks.push(mark);
    }
    s
}

/// Phrases of an error text that mean the endpoint was unreachable.
const OUTAGE_PHRASES: &[&str] = &[
    "connect",
    "network",
    "dns",
    "unreachable",
    "timed out",
    "timeout",
    "broken pipe",
    "reset by peer",
];

/// Turns a pending synthetic error into a mark once the next entry's time is known.
pub(super) fn close_error(
    pending: &mut Option<(usize, Option<i64>, String)>,
    next_at: Option<i64>,
    _turn: usize,
) -> Option<Mark> {
    let (turn, at, text) = pending.take()?;
    let lower = text.to_lowercase();
    let outage = OUTAGE_PHRASES.iter().any(|p| lower.contains(p));
    let waited_s = match (at, next_at) {
        (Some(a), Some(b)) if b > a => (b - a) as f64 / 1000.0,
        _ => 0.0,
    };
    Some(Mark {
        kind: if outage {
            MarkKind::Outage
        } else {
            MarkKind::Retry
        },
        at_ms: at,
        turn,
        waited_s: if outage { waited_s } else { 0.0 },
        text,
    })
}
