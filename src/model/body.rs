//! The request body, built by concatenation: the history is kept as each message's
//! serialized JSON ([`History`]), so a turn costs the same at turn 10 and at turn
//! 10,000 (re-serializing every message on every request was most of a long session's
//! CPU). The messages are typed ([`RequestMessage`]) until they are written; the bytes
//! are those of [`canonical_json`], cache marks placed by the rules of
//! [`request_body`](super::anthropic::request_body) ([`super::marks`]).

use super::MessagesRequest;
use super::marks::{self, EPHEMERAL, Ephemeral};
use super::message::{RequestMessage, Role, canonical_json};
use serde::Serialize;
use serde::ser::SerializeSeq;
use std::borrow::Cow;

/// The API allows at most this many `cache_control` breakpoints per request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The API looks for an earlier cache entry at most this many blocks before a
/// breakpoint.
pub const CACHE_LOOKBACK_BLOCKS: usize = 20;

/// The messages of a conversation, append-only (but for the newest, which
/// [`History::drop_last`] may take back). Every message but the newest is sealed:
/// kept only as its JSON text and the few facts the cache marks need. The newest stays
/// typed, since the next entry of the same role joins it ([`History::last_mut`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    sealed: Vec<Sealed>,
    /// The sealed messages' JSON, one after another with a comma between: a request
    /// copies the messages it sends unchanged as one slice, so a turn's own work does
    /// not grow with the number of messages (#46 item 2).
    text: String,
    open: Option<RequestMessage>,
    /// Indices of the sealed messages that carry cache marks of their own (rare: an
    /// imported transcript), ascending.
    marked: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
struct Sealed {
    /// Where its JSON is in [`History::text`].
    start: usize,
    end: usize,
    assistant: bool,
    /// Content blocks (1 for a string content).
    blocks: usize,
    /// Cache marks it carries.
    marks: usize,
}

impl History {
    pub fn new() -> Self {
        History::default()
    }

    /// Appends a message; the one before it is sealed.
    pub fn push(&mut self, message: RequestMessage) {
        if let Some(previous) = self.open.replace(message) {
            self.seal(previous);
        }
    }

    fn seal(&mut self, message: RequestMessage) {
        let json = canonical_json(&message);
        // A mark is a key of that name: a text without one has none.
        let marks = if json.contains("\"cache_control\"") {
            marks::count(&message, false)
        } else {
            0
        };
        let assistant = message.role == Role::Assistant;
        self.append_sealed(&json, assistant, message.block_count(), marks);
    }

    fn append_sealed(&mut self, json: &str, assistant: bool, blocks: usize, marks: usize) {
        if marks > 0 {
            self.marked.push(self.sealed.len());
        }
        if !self.sealed.is_empty() {
            self.text.push(',');
        }
        let start = self.text.len();
        self.text.push_str(json);
        self.sealed.push(Sealed {
            start,
            end: self.text.len(),
            assistant,
            blocks,
            marks,
        });
    }

    /// Sealed message `i`'s JSON.
    fn sealed_json(&self, i: usize) -> Option<&str> {
        let sealed = self.sealed.get(i)?;
        self.text.get(sealed.start..sealed.end)
    }

    /// Sealed messages `from..to`'s JSON with the commas between them, as sent.
    fn sealed_run(&self, from: usize, to: usize) -> &str {
        match (
            self.sealed.get(from),
            to.checked_sub(1).and_then(|l| self.sealed.get(l)),
        ) {
            (Some(first), Some(last)) if from < to => {
                self.text.get(first.start..last.end).unwrap_or_default()
            }
            _ => "",
        }
    }

    /// Appends a message already serialized: `json` must be exactly what
    /// [`canonical_json`] gives for it (`{"role":…,"content":[…]}`, see
    /// [`super::canonical::is_canonical`]), with `blocks` content blocks. It is sealed
    /// at once, and so is the message before it.
    pub fn push_sealed(&mut self, json: String, assistant: bool, blocks: usize) {
        if let Some(previous) = self.open.take() {
            self.seal(previous);
        }
        let marks = if json.contains("\"cache_control\"") {
            serde_json::from_str::<RequestMessage>(&json).map_or(0, |m| marks::count(&m, false))
        } else {
            0
        };
        self.append_sealed(&json, assistant, blocks, marks);
    }

    /// Forgets the newest message (never a sealed one): what is sent next follows the
    /// one before it.
    pub fn drop_last(&mut self) {
        self.open = None;
    }

    /// The newest message, to add blocks to.
    pub fn last_mut(&mut self) -> Option<&mut RequestMessage> {
        self.open.as_mut()
    }

    /// The newest message.
    pub fn last(&self) -> Option<&RequestMessage> {
        self.open.as_ref()
    }

    pub fn len(&self) -> usize {
        self.sealed.len() + usize::from(self.open.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Message `i` (sealed ones are parsed again).
    pub fn get(&self, i: usize) -> Option<Cow<'_, RequestMessage>> {
        match self.sealed_json(i) {
            Some(json) => serde_json::from_str(json).ok().map(Cow::Owned),
            None if i == self.sealed.len() => self.open.as_ref().map(Cow::Borrowed),
            None => None,
        }
    }

    /// Every message (a copy).
    pub fn to_messages(&self) -> Vec<RequestMessage> {
        (0..self.len())
            .filter_map(|i| self.get(i).map(Cow::into_owned))
            .collect()
    }

    /// Bytes of JSON held for the messages (the newest not counted).
    pub fn sealed_bytes(&self) -> usize {
        self.text.len()
    }

    fn is_assistant(&self, i: usize) -> bool {
        match self.sealed.get(i) {
            Some(s) => s.assistant,
            None => self.open.as_ref().map(|m| m.role) == Some(Role::Assistant),
        }
    }

    fn blocks(&self, i: usize) -> usize {
        match self.sealed.get(i) {
            Some(s) => s.blocks,
            None => self.open.as_ref().map_or(1, RequestMessage::block_count),
        }
    }
}

impl FromIterator<RequestMessage> for History {
    fn from_iter<I: IntoIterator<Item = RequestMessage>>(messages: I) -> Self {
        let mut history = History::new();
        for message in messages {
            history.push(message);
        }
        history
    }
}

impl From<Vec<RequestMessage>> for History {
    fn from(messages: Vec<RequestMessage>) -> Self {
        messages.into_iter().collect()
    }
}

/// The body of `request` sent to `model` (see
/// [`request_body`](super::anthropic::request_body)): the fields in the order and the
/// bytes `serde_json` gives a struct of them.
pub(crate) fn body_with_model(request: &MessagesRequest, model: &str) -> Vec<u8> {
    body_of(request, model, false)
}

/// The body of a count_tokens request for `request`: its prompt (model, system,
/// messages with the same cache marks, tools, thinking), without `max_tokens`,
/// `output_config` or `stream`.
pub fn count_body(request: &MessagesRequest, model: &str) -> Vec<u8> {
    body_of(request, model, true)
}

fn body_of(request: &MessagesRequest, model: &str, counting: bool) -> Vec<u8> {
    // `claude-…[1m]` is asked for with a beta header; the id goes out without it.
    let model = crate::model::models::wire_id(model).0;
    let history = &request.messages;
    let mut out = Vec::with_capacity(history.sealed_bytes() + 16 * 1024);
    // Writing `Value`s and plain structs into a Vec cannot fail.
    let put = |out: &mut Vec<u8>, field: &str, value: &dyn erased::Json| {
        out.push(if out.is_empty() { b'{' } else { b',' });
        let _ = serde_json::to_writer(&mut *out, field);
        out.push(b':');
        value.write(out);
    };
    put(&mut out, "model", &model);
    if !counting {
        put(&mut out, "max_tokens", &request.max_tokens);
    }
    // One breakpoint for the system prompt: after the shared part when there is one
    // (every agent's first request reads it; the agent's own text is short and is
    // reached by the messages' breakpoint), else after the agent's text.
    let has_system = !request.system.is_empty() || !request.system_shared.is_empty();
    if has_system {
        let mut system = Vec::with_capacity(2);
        if !request.system_shared.is_empty() {
            system.push(SystemBlock::new(&request.system_shared, true));
        }
        if !request.system.is_empty() {
            let marked = request.system_shared.is_empty();
            system.push(SystemBlock::new(&request.system, marked));
        }
        put(&mut out, "system", &system);
    }
    let has_tools = !request.tools.is_empty() || !request.server_tools.is_empty();
    let own = usize::from(has_system) + usize::from(has_tools);
    out.extend_from_slice(b",\"messages\":");
    write_messages(&mut out, history, MAX_CACHE_BREAKPOINTS - own);
    if has_tools {
        put(
            &mut out,
            "tools",
            &Tools(&request.tools, &request.server_tools),
        );
    }
    if let Some(thinking) = request.thinking {
        put(&mut out, "thinking", &thinking);
    }
    if counting {
        // The prompt only: what the model would read, not how it answers.
        out.push(b'}');
        return out;
    }
    if let Some(effort) = request.effort {
        #[derive(Serialize)]
        struct OutputConfig {
            effort: &'static str,
        }
        let effort = effort.as_str();
        put(&mut out, "output_config", &OutputConfig { effort });
    }
    put(&mut out, "stream", &true);
    out.push(b'}');
    out
}

/// Serializing a field's value without naming its type.
mod erased {
    pub(super) trait Json {
        fn write(&self, out: &mut Vec<u8>);
    }

    impl<T: serde::Serialize + ?Sized> Json for T {
        fn write(&self, out: &mut Vec<u8>) {
            let _ = serde_json::to_writer(out, self);
        }
    }
}

/// A text block of the system prompt, with a cache mark or not.
#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
}

impl<'a> SystemBlock<'a> {
    fn new(text: &'a str, marked: bool) -> Self {
        SystemBlock {
            kind: "text",
            text,
            cache_control: marked.then_some(EPHEMERAL),
        }
    }
}

/// The tools, borrowed, then the server tools. The breakpoint is on the last tool
/// before the server tools (on the last server tool when there is no other): agents
/// allowed different web tools still share the rest of the list in the cache.
struct Tools<'a>(&'a [crate::model::ToolDef], &'a [crate::model::ServerTool]);

impl Serialize for Tools<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a crate::content::Raw,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<Ephemeral>,
        }
        let total = self.0.len() + self.1.len();
        let marked = if self.0.is_empty() {
            total
        } else {
            self.0.len()
        };
        let mut seq = s.serialize_seq(Some(total))?;
        for (i, tool) in self.0.iter().enumerate() {
            seq.serialize_element(&Tool {
                name: &tool.name,
                description: &tool.description,
                input_schema: &tool.input_schema,
                cache_control: (i + 1 == marked).then_some(EPHEMERAL),
            })?;
        }
        for (i, tool) in self.1.iter().enumerate() {
            let mark = (self.0.len() + i + 1 == marked).then_some(EPHEMERAL);
            seq.serialize_element(&tool.wire(mark))?;
        }
        seq.end()
    }
}

/// The message that ended the previous request (the one before the newest assistant
/// turn), when the newest turn is too long for the cache's lookback to reach back to
/// it from the newest breakpoint (many parallel tool calls): marking it too makes the
/// cache entry the previous request wrote there a hit.
fn previous_turn_end(history: &History) -> Option<usize> {
    let n = history.len();
    if n < 3 || !history.is_assistant(n - 2) {
        return None;
    }
    let between = history.blocks(n - 2) + history.blocks(n - 1);
    (between >= CACHE_LOOKBACK_BLOCKS).then_some(n - 3)
}

/// Writes the messages as sent: the sealed ones as they are, except the few that get a
/// breakpoint added or an old one removed. Breakpoints: the newest message's last
/// cacheable block, the previous turn's end (see [`previous_turn_end`]), and those
/// already present, the oldest dropped past `budget`.
// Long because the breakpoints to add, keep and remove are decided in the same pass
// that writes the bytes, so that sealed messages are copied untouched.
fn write_messages(out: &mut Vec<u8>, history: &History, budget: usize) {
    let n = history.len();
    let message = |i: usize| history.get(i);
    let previous = previous_turn_end(history)
        .filter(|&i| budget >= 2 && message(i).and_then(|m| marks::with_mark(&m)).is_some());
    let budget = budget - usize::from(previous.is_some());
    // The messages sent changed, by index, ascending.
    let mut changed: Vec<(usize, RequestMessage)> = Vec::new();
    let last = n.checked_sub(1);
    let mut used = 0;
    if let Some(marked) = history.last().and_then(marks::with_mark)
        && let Some(last) = last
    {
        changed.push((last, marked));
        used = 1;
    }
    // Breakpoints the caller put in the history: drop the oldest past the budget.
    // The newest message's block marked above is counted once, by `used`.
    let newest = match changed.first() {
        Some((_, marked)) => marks::count(marked, true),
        None => history.last().map_or(0, |m| marks::count(m, false)),
    };
    let existing: usize = history
        .marked
        .iter()
        .map(|&i| history.sealed[i].marks)
        .sum::<usize>()
        + newest;
    let mut excess = (existing + used).saturating_sub(budget);
    let candidates = history.marked.iter().copied().chain(last);
    for i in candidates {
        if excess == 0 {
            break;
        }
        let skip_last = Some(i) == last && used == 1;
        let edited = match changed.iter_mut().find(|(at, _)| *at == i) {
            Some((_, edited)) => edited,
            None => {
                let Some(original) = message(i) else { continue };
                if marks::count(&original, skip_last) == 0 {
                    continue;
                }
                changed.push((i, original.into_owned()));
                let at = changed.len() - 1;
                &mut changed[at].1
            }
        };
        if marks::count(edited, skip_last) == 0 {
            continue;
        }
        excess -= marks::strip(edited, excess, skip_last);
    }
    if let Some(i) = previous {
        let current = match changed.iter().find(|(at, _)| *at == i) {
            Some((_, m)) => Some(marks::with_mark(m)),
            None => message(i).map(|m| marks::with_mark(&m)),
        };
        if let Some(Some(mut marked)) = current {
            // Its own old marks were counted against the budget above; one more block
            // marked on top of them stays within four only if none was there, so any
            // other mark in it goes.
            let keep = marks::places(&marked).len().saturating_sub(1);
            marks::strip(&mut marked, keep, true);
            match changed.iter_mut().find(|(at, _)| *at == i) {
                Some((_, m)) => *m = marked,
                None => changed.push((i, marked)),
            }
        }
    }
    changed.sort_unstable_by_key(|(i, _)| *i);
    // The sealed messages between changed ones go as runs of the history's text.
    let sealed = history.sealed.len();
    let start = out.len();
    out.push(b'[');
    let mut next = 0;
    let comma = |out: &mut Vec<u8>| {
        if out.len() > start + 1 {
            out.push(b',');
        }
    };
    for (i, message) in &changed {
        let run = history.sealed_run(next, (*i).min(sealed));
        if !run.is_empty() {
            comma(out);
            out.extend_from_slice(run.as_bytes());
        }
        comma(out);
        out.extend_from_slice(canonical_json(message).as_bytes());
        next = i + 1;
    }
    let run = history.sealed_run(next, sealed);
    if !run.is_empty() {
        comma(out);
        out.extend_from_slice(run.as_bytes());
    }
    if next <= sealed
        && let Some(open) = &history.open
    {
        comma(out);
        out.extend_from_slice(canonical_json(open).as_bytes());
    }
    out.push(b']');
}
