//! The request body, built by concatenation: the history is kept as each message's
//! serialized JSON ([`History`]), so a turn costs the same at turn 10 and at turn
//! 10,000 (re-serializing every message on every request was most of a long session's
//! CPU). The bytes are exactly those of serializing the messages as `Value`s, cache
//! marks placed by the rules of [`request_body`](super::anthropic::request_body).

use super::MessagesRequest;
use serde::Serialize;
use serde::ser::SerializeSeq;
use serde_json::{Value, json};
use std::borrow::Cow;

/// The API allows at most this many `cache_control` breakpoints per request.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The API looks for an earlier cache entry at most this many blocks before a
/// breakpoint.
pub const CACHE_LOOKBACK_BLOCKS: usize = 20;

/// The messages of a conversation (`{"role": …, "content": …}`), append-only (but for
/// the newest, which [`History::drop_last`] may take back). Every
/// message but the newest is sealed: kept only as its JSON text and the few facts the
/// cache marks need. The newest stays a `Value`, since the next entry of the same role
/// joins it ([`History::last_mut`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    sealed: Vec<Sealed>,
    /// The sealed messages' JSON, one after another with a comma between: a request
    /// copies the messages it sends unchanged as one slice, so a turn's own work does
    /// not grow with the number of messages (#46 item 2).
    text: String,
    open: Option<Value>,
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
    pub fn push(&mut self, message: Value) {
        if let Some(previous) = self.open.replace(message) {
            self.seal(previous);
        }
    }

    fn seal(&mut self, message: Value) {
        // Serializing a `Value` into a String cannot fail.
        let json = serde_json::to_string(&message).unwrap_or_default();
        let marks = count_breakpoints(&message, false);
        let assistant = role(&message) == Some("assistant");
        self.append_sealed(&json, assistant, blocks(&message), marks);
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

    /// Appends a message already serialized: `json` must be exactly what serializing
    /// it as a `Value` gives (`{"role":…,"content":[…]}`, see
    /// [`super::canonical::is_canonical`]), with `blocks` content blocks. It is sealed
    /// at once, and so is the message before it.
    pub fn push_sealed(&mut self, json: String, assistant: bool, blocks: usize) {
        if let Some(previous) = self.open.take() {
            self.seal(previous);
        }
        // A mark is a key of that name: a text without one has none.
        let marks = if json.contains("\"cache_control\"") {
            serde_json::from_str::<Value>(&json).map_or(0, |m| count_breakpoints(&m, false))
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
    pub fn last_mut(&mut self) -> Option<&mut Value> {
        self.open.as_mut()
    }

    /// The newest message.
    pub fn last(&self) -> Option<&Value> {
        self.open.as_ref()
    }

    pub fn len(&self) -> usize {
        self.sealed.len() + usize::from(self.open.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Message `i` as a `Value` (sealed ones are parsed again).
    pub fn get(&self, i: usize) -> Option<Cow<'_, Value>> {
        match self.sealed_json(i) {
            Some(json) => serde_json::from_str(json).ok().map(Cow::Owned),
            None if i == self.sealed.len() => self.open.as_ref().map(Cow::Borrowed),
            None => None,
        }
    }

    /// Every message as a `Value` (a copy).
    pub fn to_values(&self) -> Vec<Value> {
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
            None => self.open.as_ref().and_then(role) == Some("assistant"),
        }
    }

    fn blocks(&self, i: usize) -> usize {
        match self.sealed.get(i) {
            Some(s) => s.blocks,
            None => self.open.as_ref().map_or(1, blocks),
        }
    }
}

impl From<Vec<Value>> for History {
    fn from(messages: Vec<Value>) -> Self {
        let mut history = History::new();
        for message in messages {
            history.push(message);
        }
        history
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn blocks(message: &Value) -> usize {
    message
        .get("content")
        .and_then(Value::as_array)
        .map_or(1, Vec::len)
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
            system.push(json!({"type": "text", "text": request.system_shared, "cache_control": ephemeral()}));
        }
        if !request.system.is_empty() {
            system.push(if request.system_shared.is_empty() {
                json!({"type": "text", "text": request.system, "cache_control": ephemeral()})
            } else {
                json!({"type": "text", "text": request.system})
            });
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
        put(
            &mut out,
            "output_config",
            &json!({"effort": effort.as_str()}),
        );
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

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
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
            cache_control: Option<Value>,
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
                cache_control: (i + 1 == marked).then(ephemeral),
            })?;
        }
        for (i, tool) in self.1.iter().enumerate() {
            let mark = (self.0.len() + i + 1 == marked).then(ephemeral);
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
    let value = |i: usize| history.get(i);
    let previous = previous_turn_end(history)
        .filter(|&i| budget >= 2 && value(i).and_then(|m| with_breakpoint(m.as_ref())).is_some());
    let budget = budget - usize::from(previous.is_some());
    // The messages sent changed, by index, ascending.
    let mut changed: Vec<(usize, Value)> = Vec::new();
    let last = n.checked_sub(1);
    let mut used = 0;
    if let Some(marked) = history.last().and_then(with_breakpoint)
        && let Some(last) = last
    {
        changed.push((last, marked));
        used = 1;
    }
    // Breakpoints the caller put in the history: drop the oldest past the budget.
    // The newest message's block marked above is counted once, by `used`.
    let newest = match changed.first() {
        Some((_, marked)) => count_breakpoints(marked, true),
        None => history.last().map_or(0, |m| count_breakpoints(m, false)),
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
        let message = match changed.iter_mut().find(|(at, _)| *at == i) {
            Some((_, message)) => message,
            None => {
                let Some(original) = value(i) else { continue };
                if count_breakpoints(&original, skip_last) == 0 {
                    continue;
                }
                changed.push((i, original.into_owned()));
                let at = changed.len() - 1;
                &mut changed[at].1
            }
        };
        if count_breakpoints(message, skip_last) == 0 {
            continue;
        }
        excess -= strip_breakpoints(message, excess, skip_last);
    }
    if let Some(i) = previous {
        let current = match changed.iter().find(|(at, _)| *at == i) {
            Some((_, m)) => Some(with_breakpoint(m)),
            None => value(i).map(|m| with_breakpoint(&m)),
        };
        if let Some(Some(mut marked)) = current {
            // Its own old marks were counted against the budget above; one more block
            // marked on top of them stays within four only if none was there, so any
            // other mark in it goes.
            let keep = breakpoint_blocks(&marked).len().saturating_sub(1);
            strip_breakpoints(&mut marked, keep, true);
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
        let _ = serde_json::to_writer(&mut *out, message);
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
        let _ = serde_json::to_writer(&mut *out, open);
    }
    out.push(b']');
}

/// A copy of `message` with a breakpoint on its last cacheable content block, or
/// `None` when it has none.
fn with_breakpoint(message: &Value) -> Option<Value> {
    let mut message = message.clone();
    let obj = message.as_object_mut()?;
    match obj.get_mut("content")? {
        Value::String(text) if !text.is_empty() => {
            let text = std::mem::take(text);
            obj.insert(
                "content".into(),
                json!([{"type": "text", "text": text, "cache_control": ephemeral()}]),
            );
        }
        Value::Array(blocks) => {
            let block = blocks.iter_mut().rev().find(|b| cacheable(b))?;
            block
                .as_object_mut()?
                .insert("cache_control".into(), ephemeral());
        }
        _ => return None,
    }
    Some(message)
}

fn cacheable(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking" | "redacted_thinking") | None => false,
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        Some(_) => block.is_object(),
    }
}

/// The blocks of a message that carry a breakpoint, including blocks nested in a
/// `tool_result`, in document order.
fn breakpoint_blocks(message: &Value) -> Vec<(usize, Option<usize>)> {
    let mut found = Vec::new();
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        return found;
    };
    for (i, block) in blocks.iter().enumerate() {
        if let Some(inner) = block.get("content").and_then(Value::as_array) {
            for (j, nested) in inner.iter().enumerate() {
                if nested.get("cache_control").is_some() {
                    found.push((i, Some(j)));
                }
            }
        }
        if block.get("cache_control").is_some() {
            found.push((i, None));
        }
    }
    found
}

/// The breakpoints a message carries; `skip_last` leaves its last one (the newest
/// message's own mark) out of the count. Counts what [`breakpoint_blocks`] lists.
fn count_breakpoints(message: &Value, skip_last: bool) -> usize {
    fn field<'v>(value: &'v Value, name: &str) -> Option<&'v Value> {
        let object = value.as_object()?;
        object.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
    let Some(Value::Array(blocks)) = field(message, "content") else {
        return 0;
    };
    let mut n = 0;
    for block in blocks.iter().filter_map(Value::as_object) {
        for (key, value) in block {
            match (key.as_str(), value) {
                ("cache_control", _) => n += 1,
                ("content", Value::Array(inner)) => {
                    n += inner
                        .iter()
                        .filter(|b| field(b, "cache_control").is_some())
                        .count();
                }
                _ => {}
            }
        }
    }
    if skip_last { n.saturating_sub(1) } else { n }
}

/// Removes up to `max` breakpoints from `message`, oldest first; returns how many.
fn strip_breakpoints(message: &mut Value, max: usize, skip_last: bool) -> usize {
    let mut found = breakpoint_blocks(message);
    if skip_last {
        found.pop();
    }
    found.truncate(max);
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let mut removed = 0;
    for (i, nested) in found {
        let target = match nested {
            None => blocks.get_mut(i),
            Some(j) => blocks
                .get_mut(i)
                .and_then(|b| b.get_mut("content"))
                .and_then(Value::as_array_mut)
                .and_then(|inner| inner.get_mut(j)),
        };
        if let Some(Value::Object(block)) = target
            && block.shift_remove("cache_control").is_some()
        {
            removed += 1;
        }
    }
    removed
}
