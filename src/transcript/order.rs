//! Tool results in the order of their calls. Calls of one reply that run at the same
//! time are stored as they finish (a kill loses none that finished), so a transcript
//! may hold a turn's results in another order than its calls; every request sends them
//! in the order of the calls, live and after a resume alike, so that both are the same
//! bytes (and the prompt cache holds).

use serde::Deserialize;

/// The fields of a content block this module reads, borrowed from its JSON.
#[derive(Deserialize)]
struct BlockIds<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_use_id: Option<std::borrow::Cow<'a, str>>,
}

fn ids_of(block: &str) -> Option<BlockIds<'_>> {
    serde_json::from_str(block).ok()
}

impl<'a> BlockIds<'a> {
    /// The call id of a `tool_use` block.
    fn call_id(self) -> Option<String> {
        (self.kind.as_deref() == Some("tool_use"))
            .then_some(self.id)
            .flatten()
            .map(|id| id.into_owned())
    }

    /// The call id a `tool_result` block answers.
    fn result_id(self) -> Option<std::borrow::Cow<'a, str>> {
        (self.kind.as_deref() == Some("tool_result"))
            .then_some(self.tool_use_id)
            .flatten()
    }
}

/// The call id of a `tool_use` block given as JSON text.
pub(super) fn call_id_of_text(block: &str) -> Option<String> {
    if !block.contains("\"tool_use\"") {
        return None;
    }
    ids_of(block)?.call_id()
}

/// The call id a `tool_result` block given as JSON text answers.
fn result_id_of_text(block: &str) -> Option<String> {
    if !block.contains("\"tool_result\"") {
        return None;
    }
    ids_of(block)?.result_id().map(|id| id.into_owned())
}

/// Where a result answering `id` goes: its call's place, unknown ones last.
fn rank(calls: &[String], id: Option<&str>) -> usize {
    id.and_then(|id| calls.iter().position(|c| c == id))
        .unwrap_or(usize::MAX)
}

/// Puts the leading results among `items` (those `result_id` names a call for) in
/// the order of `calls` (stable; what follows them, e.g. a hook's text, stays after).
pub(super) fn order_results<T>(
    items: &mut Vec<T>,
    calls: &[String],
    result_id: impl Fn(&T) -> Option<String>,
) {
    if items.len() < 2 || calls.len() < 2 {
        return;
    }
    let ranks: Vec<Option<usize>> = items
        .iter()
        .map(|b| result_id(b).map(|id| rank(calls, Some(&id))))
        .collect();
    let leading = ranks.iter().take_while(|r| r.is_some()).count();
    let key = |i: usize| ranks[i].unwrap_or(usize::MAX);
    if leading < 2 || (1..leading).all(|i| key(i - 1) <= key(i)) {
        return;
    }
    let mut order: Vec<usize> = (0..leading).collect();
    order.sort_by_key(|&i| key(i));
    let rest = items.split_off(leading);
    let mut taken: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(order.into_iter().filter_map(|from| taken[from].take()));
    items.extend(rest);
}

/// [`order_results`] for blocks held as JSON text (`text`, comma-separated, each block
/// at its range in `parts`): the reordered text, or `None` when it is in order already.
pub(super) fn order_result_texts(
    text: &str,
    parts: &[(usize, usize)],
    calls: &[String],
) -> Option<String> {
    if parts.len() < 2 || calls.len() < 2 {
        return None;
    }
    let ranked: Vec<(usize, Option<usize>)> = parts
        .iter()
        .map(|&(start, end)| {
            let id = result_id_of_text(&text[start..end]);
            (start, id.map(|id| rank(calls, Some(&id))))
        })
        .collect();
    let leading = ranked.iter().take_while(|(_, r)| r.is_some()).count();
    let key = |i: usize| ranked[i].1.unwrap_or(usize::MAX);
    if leading < 2 || (1..leading).all(|i| key(i - 1) <= key(i)) {
        return None;
    }
    let mut order: Vec<usize> = (0..leading).collect();
    order.sort_by_key(|&i| key(i));
    order.extend(leading..parts.len());
    let mut out = String::with_capacity(text.len());
    for (n, i) in order.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        let (start, end) = parts[i];
        out.push_str(&text[start..end]);
    }
    Some(out)
}
