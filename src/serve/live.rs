//! A run's live status line and current tool call, as its page shows them and its
//! event stream sends them: the summary's figures and the tail of the session written
//! last (its turns, and the call its last reply made, when no result came back yet).

use super::summary::RunSummary;
use crate::cli::format::{cost, tokens};
use crate::cli::show::call_summary;
use flower::inspect::Run;
use flower::transcript::Entry;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What the status element and the tool element show.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Live {
    /// The status line, as the terminal's reads.
    pub line: String,
    /// The current tool call (`Bash: cargo test`), or what the session waits for.
    pub tool: String,
    pub running: bool,
    /// Entries of the session at work: a change the page can count.
    pub entries: usize,
}

/// The tail of one session: its turns and what its last entry leaves open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tail {
    pub entries: usize,
    pub turns: usize,
    /// The calls of the last reply, when it is the last entry (their results not in).
    pub calls: Vec<String>,
    /// The last entry is a tool result or the prompt: the model is at work.
    pub awaiting_model: bool,
}

#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
}

/// Reads the session `session_id`'s rows once: counts its replies, keeps its last.
pub fn tail(run: &Run, session_id: &str) -> Tail {
    let mut turns = 0;
    let mut last: Vec<u8> = Vec::new();
    let entries = run
        .for_each_raw(&run.key(session_id), |row| {
            if serde_json::from_slice::<Kind>(row)
                .is_ok_and(|k| k.kind.as_deref() == Some("assistant"))
            {
                turns += 1;
            }
            last.clear();
            last.extend_from_slice(row);
        })
        .unwrap_or(0);
    let mut tail = Tail {
        entries,
        turns,
        ..Tail::default()
    };
    if let Ok(entry) = Entry::from_json(&last) {
        match entry.kind.as_deref() {
            Some("assistant") => {
                tail.calls = entry
                    .tool_uses()
                    .map(|call| {
                        let name = call.name.as_deref().unwrap_or("?");
                        format!(
                            "{name}: {}",
                            call_summary(name, call.input.as_ref().map(|input| input.raw()))
                        )
                    })
                    .collect();
            }
            Some("user") => tail.awaiting_model = true,
            _ => {}
        }
    }
    tail
}

/// The status of a run from its summary and its working session's tail.
pub fn live(summary: &RunSummary, tail: &Tail) -> Live {
    let step = summary.step.as_deref().unwrap_or("还没开始");
    let share = (summary.context_share * 100.0).round();
    let state = match (&summary.running, &summary.holder) {
        (true, Some(holder)) => format!("运行中({holder})"),
        (true, None) => "运行中".to_string(),
        (false, _) => "没在运行".to_string(),
    };
    // As the terminal's status line reads (`[干活] 第 3 轮 · 上下文 80.2K/200.0K · 第 2 代 · $0.0123`),
    // with the work round and who holds the run.
    let line = format!(
        "[{step}] 第 {} 轮 · 上下文 {}/{}({share}%)· 第 {} 代 · 第 {} 回合 · {} · {state}",
        tail.turns.max(1),
        tokens(summary.context),
        tokens(summary.window),
        summary.generation,
        summary.round,
        cost(Some(summary.cost_usd)),
    );
    let tool = if !summary.running {
        String::new()
    } else if !tail.calls.is_empty() {
        tail.calls.join(" · ")
    } else if tail.awaiting_model {
        "等模型回复…".to_string()
    } else {
        String::new()
    };
    Live {
        line,
        tool,
        running: summary.running,
        entries: tail.entries,
    }
}
