//! The sub-agents of a main session as a timeline: when each ran (its transcript's
//! first and last entry), what its `Task` call asked, and which ran at the same time
//! as which (a reply's `Task` calls run at once, see `engine/concurrent.rs`). For
//! `flower log`, `show --subagents` and the report's lanes.

use super::{Run, iso_to_epoch_ms};
use crate::engine::recovery::agent_id_for;
use crate::stores::SessionKey;
use crate::tools::names::TASK;
use crate::transcript::{Block, Entry};
use serde::{Deserialize, Serialize};

/// One sub-agent's session under a main session.
#[derive(Debug, Clone, Serialize)]
pub struct SubagentSpan {
    /// The main session it worked for.
    pub session_id: String,
    /// Its subpath under the main session (`subagents/agent-<id>`).
    pub subpath: String,
    /// The `Task` call it answered (`None`: the parent's transcript has no such call).
    pub call_id: Option<String>,
    /// The call's `description` and `subagent_type`.
    pub description: Option<String>,
    pub agent: Option<String>,
    /// Its first and last entry's timestamps (RFC 3339, as stored) and epoch ms.
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    /// Its replies (assistant entries).
    pub turns: usize,
    /// The subpaths of the session's other sub-agents that ran while it ran.
    pub overlapped: Vec<String>,
    /// The lane it is drawn in: sub-agents one after another share lane 0, each one
    /// running alongside another takes the lowest lane free at its start.
    pub lane: usize,
}

impl SubagentSpan {
    /// How it is named for a person: the task's description, else its subpath.
    pub fn name(&self) -> &str {
        self.description.as_deref().unwrap_or(&self.subpath)
    }

    /// Whether it ran alongside another sub-agent of its session.
    pub fn concurrent(&self) -> bool {
        !self.overlapped.is_empty()
    }

    /// Seconds from its first to its last entry, when both are known.
    pub fn duration_s(&self) -> Option<f64> {
        Some((self.ended_ms? - self.started_ms?) as f64 / 1000.0)
    }
}

/// The few fields read of each entry.
#[derive(Deserialize)]
struct Stamp<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    timestamp: Option<&'a str>,
}

/// What a `Task` call's input says of its sub-agent.
#[derive(Deserialize, Default)]
struct TaskInput {
    description: Option<String>,
    subagent_type: Option<String>,
}

impl Run {
    /// The sub-agents of main session `session_id`, in the order they started (a
    /// sub-agent without a timestamp last), each with the ones it overlapped.
    pub fn subagent_spans(&self, session_id: &str) -> Vec<SubagentSpan> {
        let key = self.key(session_id);
        let subpaths = self.subagents(&key);
        if subpaths.is_empty() {
            return Vec::new();
        }
        let calls = self.task_calls(&key);
        let mut spans: Vec<SubagentSpan> = subpaths
            .into_iter()
            .filter_map(|subpath| {
                let sub = key.sub(&subpath).ok()?;
                Some(self.span_of(&sub, subpath, &calls))
            })
            .collect();
        spans.sort_by_key(|s| (s.started_ms.is_none(), s.started_ms, s.subpath.clone()));
        mark_overlaps(&mut spans);
        spans
    }

    fn span_of(
        &self,
        key: &SessionKey,
        subpath: String,
        calls: &[(String, TaskInput)],
    ) -> SubagentSpan {
        let mut first: Option<String> = None;
        let mut last: Option<String> = None;
        let mut turns = 0;
        let _ = self.for_each_raw(key, |raw| {
            let Ok(stamp) = serde_json::from_slice::<Stamp>(raw) else {
                return;
            };
            if stamp.kind == Some("assistant") {
                turns += 1;
            }
            if let Some(at) = stamp.timestamp {
                if first.is_none() {
                    first = Some(at.to_owned());
                }
                last = Some(at.to_owned());
            }
        });
        let agent_id = subpath.strip_prefix("subagents/agent-").unwrap_or(&subpath);
        // A sub-agent whose call id was taken already has a salt after it.
        let call = calls.iter().find(|(id, _)| {
            let own = agent_id_for(id);
            agent_id == own || agent_id.starts_with(&format!("{own}-"))
        });
        SubagentSpan {
            session_id: key.session_id.clone(),
            call_id: call.map(|(id, _)| id.clone()),
            description: call.and_then(|(_, input)| input.description.clone()),
            agent: call.and_then(|(_, input)| input.subagent_type.clone()),
            started_ms: first.as_deref().and_then(iso_to_epoch_ms),
            ended_ms: last.as_deref().and_then(iso_to_epoch_ms),
            started_at: first,
            ended_at: last,
            turns,
            subpath,
            overlapped: Vec::new(),
            lane: 0,
        }
    }

    /// The `Task` calls of a main session's replies: their ids and inputs.
    fn task_calls(&self, key: &SessionKey) -> Vec<(String, TaskInput)> {
        let needle = format!("\"{TASK}\"");
        let mut calls = Vec::new();
        let Some(store) = &self.store else {
            return calls;
        };
        let _ = store.scan_type(key, "assistant", |raw| {
            // Most replies make no Task call: only those that name it are parsed.
            if !contains(raw, needle.as_bytes()) {
                return;
            }
            let Ok(entry) = Entry::from_json(raw) else {
                return;
            };
            for block in entry.blocks() {
                if let Block::ToolUse(call) = block
                    && call.name.as_deref() == Some(TASK)
                    && let Some(id) = &call.id
                {
                    let input = call
                        .input
                        .as_ref()
                        .and_then(|raw| raw.parse::<TaskInput>().ok())
                        .unwrap_or_default();
                    calls.push((id.clone(), input));
                }
            }
        });
        calls
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Fills each span's `overlapped` (the others whose time intersects its own; a span
/// without both times overlaps nothing) and its lane.
fn mark_overlaps(spans: &mut [SubagentSpan]) {
    let times: Vec<Option<(i64, i64)>> = spans
        .iter()
        .map(|s| Some((s.started_ms?, s.ended_ms?)))
        .collect();
    let names: Vec<String> = spans.iter().map(|s| s.subpath.clone()).collect();
    // When each lane is free again (spans come in order of start).
    let mut lanes_free_at: Vec<i64> = Vec::new();
    for (i, span) in spans.iter_mut().enumerate() {
        let Some((start, end)) = times[i] else {
            continue;
        };
        span.overlapped = times
            .iter()
            .enumerate()
            .filter(|&(j, other)| j != i && other.is_some_and(|(s, e)| s < end && start < e))
            .map(|(j, _)| names[j].clone())
            .collect();
        span.lane = match lanes_free_at.iter().position(|free| *free <= start) {
            Some(lane) => lane,
            None => {
                lanes_free_at.push(end);
                lanes_free_at.len() - 1
            }
        };
        lanes_free_at[span.lane] = end;
    }
}
