//! A transcript as a resume reads it: each entry kept as the JSON text it was stored
//! as, parsed only where a fact of it is needed. A long transcript's tree of `Value`s
//! is about 5 × its text; the text goes into the request history as it is
//! ([`super::Messages::from_loaded`]).

/// An entry's JSON: the text it was stored as (valid JSON of an object: whoever builds
/// one has parsed it, or serialized an entry).
#[derive(Debug, Clone, PartialEq)]
pub struct Json(Box<str>);

impl Json {
    pub fn new(text: Box<str>) -> Json {
        Json(text)
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The entry, typed (`None` if it is not an object).
    pub fn entry(&self) -> Option<super::Entry> {
        super::Entry::parse(&self.0).ok()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Messages;

    use serde_json::Value;

    fn loaded(text: &str) -> Loaded {
        let value: Value = serde_json::from_str(text).unwrap();
        Loaded {
            kind: Kind::of(value.get("type").and_then(Value::as_str)),
            json: Json::new(text.into()),
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
            let mut expected = Messages::default();
            for entry in &entries[..n] {
                expected.push_entry(crate::transcript::Entry::parse(entry).unwrap());
            }
            let from_text = Messages::from_loaded(entries[..n].iter().map(|e| loaded(e)));
            assert_eq!(from_text.history(), expected.history(), "first {n}");
        }
    }
}
