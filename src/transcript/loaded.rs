//! A transcript as a resume reads it: each entry kept as the JSON text it was stored
//! as, parsed only where a fact of it is needed. A long transcript's tree of `Value`s
//! is about 5 × its text; the text goes into the request history as it is
//! ([`super::Messages::from_loaded`]).

use serde_json::Value;
use std::borrow::Cow;

/// An entry's JSON: the text it was stored as, or a value (an entry built or changed
/// in memory).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// Valid JSON of an object (whoever builds one has parsed it).
    Text(Box<str>),
    Value(Value),
}

impl Json {
    /// The entry as a `Value`, parsed from its text if need be.
    pub fn value(&self) -> Cow<'_, Value> {
        match self {
            Json::Value(value) => Cow::Borrowed(value),
            Json::Text(text) => Cow::Owned(parse(text)),
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Json::Value(value) => value,
            Json::Text(text) => parse(&text),
        }
    }

    /// The entry, typed (`None` if it is not an object).
    pub fn entry(&self) -> Option<super::Entry> {
        use serde::Deserialize;
        match self {
            Json::Text(text) => super::Entry::parse(text).ok(),
            Json::Value(value) => super::Entry::deserialize(value).ok(),
        }
    }

    /// The entry as a `Value` to change in place (parsed once, then kept so).
    pub fn value_mut(&mut self) -> &mut Value {
        if let Json::Text(text) = self {
            *self = Json::Value(parse(text));
        }
        match self {
            Json::Value(value) => value,
            // Made a value just above.
            Json::Text(_) => unreachable!(),
        }
    }
}

/// Text a store has already parsed once cannot fail; `Null` if it somehow does.
fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// What kind of entry it is (its `type`), as far as finding entries needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    User,
    Assistant,
    System,
    Other,
}

impl Kind {
    pub fn of(kind: Option<&str>) -> Kind {
        match kind {
            Some("user") => Kind::User,
            Some("assistant") => Kind::Assistant,
            Some("system") => Kind::System,
            _ => Kind::Other,
        }
    }
}

/// One entry of a loaded transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub json: Json,
    pub kind: Kind,
    /// `false` only for an entry that is certainly not a result pruning synthesized
    /// ([`crate::stores::prune::is_synthesized_result`], whose only block is an
    /// interrupted tool result): the entries worth parsing to ask.
    pub maybe_synthesized: bool,
}

impl Loaded {
    /// An entry built in memory.
    pub fn from_value(value: Value) -> Loaded {
        let kind = Kind::of(value.get("type").and_then(Value::as_str));
        Loaded {
            json: Json::Value(value),
            kind,
            maybe_synthesized: true,
        }
    }

    pub fn value(&self) -> Cow<'_, Value> {
        self.json.value()
    }

    pub fn into_value(self) -> Value {
        self.json.into_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Messages;

    fn loaded(text: &str) -> Loaded {
        let value: Value = serde_json::from_str(text).unwrap();
        Loaded {
            kind: Kind::of(value.get("type").and_then(Value::as_str)),
            json: Json::Text(text.into()),
            maybe_synthesized: true,
        }
    }

    #[test]
    fn history_from_stored_text_is_the_history_from_values() {
        let entries = [
            r#"{"type":"user","message":{"role":"user","content":"first \"prompt\"\n"}}"#,
            r#"{"type":"system","content":"not sent"}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"Read","input":{"n":1}}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Read","input":{"x":1.5}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"\u00e9"}]}}"#,
            r#"{"type":"user","message":{"role":"user", "content":[{"type":"tool_result","tool_use_id":"t2","content":"ok","cache_control":{"type":"ephemeral"}}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":null}}"#,
            r#"{"type":"assistant","message":{"content":"no role"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"a\u0001","role":"assistant"}}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"k","k":1,"k":2}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":"after thinking only"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"thinking"},{"type":"redacted_thinking","data":"d"}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":"next"}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"b"}]}}"#,
            r#"{"type":"assistant","message":{"role":"assistant","content":"tail"}}"#,
        ];
        for n in 0..=entries.len() {
            let values: Vec<Value> = entries[..n]
                .iter()
                .map(|e| serde_json::from_str(e).unwrap())
                .collect();
            let expected = Messages::from_owned(values.clone());
            let from_text = Messages::from_loaded(entries[..n].iter().map(|e| loaded(e)));
            assert_eq!(from_text.history(), expected.history(), "first {n}");
            let mixed = Messages::from_loaded(values.into_iter().enumerate().map(|(i, v)| {
                if i % 2 == 0 {
                    Loaded::from_value(v)
                } else {
                    loaded(entries[i])
                }
            }));
            assert_eq!(mixed.history(), expected.history(), "mixed, first {n}");
        }
    }
}
