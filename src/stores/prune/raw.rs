//! Reading an entry's facts straight from its stored text, borrowing from it: no
//! entry is built for one that no rule changes. Any entry this reader does not take
//! as it is (a repeated field, a field of an unexpected type) is parsed as an [`Entry`]
//! and read by [`Slot::of_entry`], so the facts are the same either way.

use super::*;
use crate::transcript::Raw;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

impl Slot {
    /// An entry's facts read from its JSON text, which is kept as the entry; an error
    /// if it is not valid JSON.
    pub(super) fn from_text(text: Box<str>) -> serde_json::Result<Slot> {
        match serde_json::from_str::<EntryFacts<'_>>(&text) {
            Ok(facts) => {
                let slot = facts.into_slot();
                Ok(Slot {
                    entry: Stored::Text(text),
                    ..slot
                })
            }
            // Not what this reader takes as it is, or not JSON: the parser decides.
            Err(_) => match Entry::parse(&text) {
                Ok(entry) => Ok(Slot::of_entry(&entry, text)),
                Err(_) => {
                    // JSON, but not an object: nothing pruning reads.
                    serde_json::from_str::<IgnoredAny>(&text)?;
                    Ok(Slot::of_entry(&Entry::default(), text))
                }
            },
        }
    }
}

/// The fields of an entry pruning reads ([`Slot::of_entry`] reads the same from an
/// [`Entry`]).
/// The names are the markers' ([`crate::transcript::markers`]; a test checks them).
#[derive(Deserialize)]
struct EntryFacts<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uuid: Option<Cow<'a, str>>,
    #[serde(rename = "parentUuid", borrow, default)]
    parent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(rename = "isApiErrorMessage", default)]
    api_error: Option<bool>,
    #[serde(rename = "isContinuation", default)]
    continuation: Option<bool>,
    #[serde(borrow, default)]
    message: Option<MessageFacts<'a>>,
}

#[derive(Deserialize)]
struct MessageFacts<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<ContentFacts<'a>>,
}

impl EntryFacts<'_> {
    fn into_slot(self) -> Slot {
        let role = match self.kind.as_deref() {
            Some("user") => Some(Role::User),
            Some("assistant") => Some(Role::Assistant),
            _ => None,
        };
        let message = self.message.as_ref();
        let (content, blocks) = match role.and(message.and_then(|m| m.content.as_ref())) {
            Some(ContentFacts::Text { blank: false }) => (Content::Text, Vec::new()),
            Some(ContentFacts::Blocks(blocks)) => (
                Content::Blocks,
                blocks.iter().map(BlockFacts::to_block).collect(),
            ),
            _ => (Content::Unusable, Vec::new()),
        };
        let synthetic = self.api_error == Some(true)
            || message.and_then(|m| m.model.as_deref()) == Some(SYNTHETIC_MODEL)
            || message.and_then(|m| m.stop_reason.as_deref()) == Some("refusal");
        Slot {
            entry: Stored::Text(Box::default()),
            role,
            system: self.kind.as_deref() == Some("system"),
            timestamp: role
                .and(self.timestamp.as_deref())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc)),
            uuid: self.uuid.as_deref().map(Id::new),
            parent: self.parent.as_deref().map(Id::new),
            synthetic_error: role == Some(Role::Assistant) && synthetic,
            continuation: role == Some(Role::User) && self.continuation == Some(true),
            content,
            blocks,
            removed: false,
            synthesized: false,
            warm: false,
        }
    }
}

/// A message's `content`: a string (whether blank), blocks, or anything else.
enum ContentFacts<'a> {
    Text { blank: bool },
    Blocks(Vec<BlockFacts<'a>>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for ContentFacts<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ContentFacts<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("message content")
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ContentFacts::Text {
                    blank: v.trim().is_empty(),
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(block) = seq.next_element()? {
                    blocks.push(block);
                }
                Ok(ContentFacts::Blocks(blocks))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ContentFacts::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ContentFacts::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ContentFacts::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ContentFacts::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ContentFacts::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The fields of a content block [`Block::read`] reads.
#[derive(Deserialize)]
struct BlockFacts<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default)]
    is_error: Option<bool>,
    /// Kept raw: what is read of it depends on the type, which may come after it.
    #[serde(borrow, default, deserialize_with = "raw")]
    content: Option<&'a RawValue>,
}

/// A field's JSON as it is, `null` included (an `Option` would take `null` for none).
fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl BlockFacts<'_> {
    fn to_block(&self) -> Block {
        let id = |field: &Option<Cow<'_, str>>| field.as_deref().unwrap_or_default().to_string();
        match self.kind.as_deref() {
            Some("tool_use") => Block::ToolUse {
                id: id(&self.id),
                snapshot: (self.name.as_deref() == Some(crate::transcript::tools::BASH))
                    .then(|| command(self.input?))
                    .flatten()
                    .and_then(|c| snapshot_command(&c)),
            },
            Some("tool_result") => {
                let (text, only_text) = self.content.map_or((Cow::Borrowed(""), false), result);
                Block::ToolResult {
                    id: id(&self.tool_use_id),
                    body: Body::of(&text, self.is_error == Some(true)),
                    text_len: only_text.then_some(text.len()),
                }
            }
            Some("thinking" | "redacted_thinking") => Block::Thinking,
            Some("server_tool_use") => Block::ServerToolUse { id: id(&self.id) },
            Some(kind) if kind.ends_with("_tool_result") => Block::ServerResult {
                id: id(&self.tool_use_id),
                len: self.content.map_or(0, |c| canonical(c.get()).len()),
            },
            _ => Block::Other,
        }
    }
}

/// `input.command` of a tool call, if a string.
fn command(input: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Input<'a> {
        #[serde(borrow, default)]
        command: Option<Cow<'a, str>>,
    }
    match serde_json::from_str::<Input<'_>>(input.get()) {
        Ok(input) => input.command.map(Cow::into_owned),
        // Not an object, or odd: as the typed reader takes it.
        Err(_) => Raw::from_text(input.get().to_string())
            .ok()
            .and_then(|input| command_of(&input)),
    }
}

enum Shape<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// A tool result's text ([`result_text`]) and whether its content is only text.
fn result(content: &RawValue) -> (Cow<'_, str>, bool) {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    let json = content.get();
    let shape = match json.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<Text<'_>>(json)
            .ok()
            .map(|t| Shape::Text(t.0)),
        Some(b'[') => serde_json::from_str::<Vec<Part<'_>>>(json)
            .ok()
            .map(Shape::Parts),
        _ => return (Cow::Borrowed(""), false),
    };
    match shape {
        Some(Shape::Text(text)) => (text, true),
        Some(Shape::Parts(parts)) => {
            let only_text = parts.iter().all(|p| p.kind.as_deref() == Some("text"));
            let mut texts: Vec<Cow<'_, str>> = parts.into_iter().filter_map(|p| p.text).collect();
            let text = if texts.len() == 1 {
                texts.swap_remove(0)
            } else {
                Cow::Owned(texts.join("\n"))
            };
            (text, only_text)
        }
        // Odd parts: each read leniently, as the typed reader reads them.
        None => {
            let Ok(parts) = serde_json::from_str::<Vec<Raw>>(json) else {
                return (Cow::Borrowed(""), false);
            };
            let parts: Vec<Option<Lenient>> = parts.iter().map(Lenient::of).collect();
            let only_text = parts
                .iter()
                .all(|p| p.as_ref().and_then(Lenient::kind).as_deref() == Some("text"));
            let mut texts: Vec<String> = parts.iter().flatten().filter_map(Lenient::text).collect();
            let text = if texts.len() == 1 {
                texts.swap_remove(0)
            } else {
                texts.join("\n")
            };
            (Cow::Owned(text), only_text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::markers::{API_ERROR_FLAG, CONTINUATION_FLAG};

    #[test]
    fn the_field_names_are_the_markers() {
        assert_eq!(API_ERROR_FLAG, "isApiErrorMessage");
        assert_eq!(CONTINUATION_FLAG, "isContinuation");
    }

    fn facts(slot: &Slot) -> String {
        format!(
            "{:?} {} {:?} {:?} {:?} {} {} {:?} {:?}",
            slot.role,
            slot.system,
            slot.timestamp,
            slot.uuid,
            slot.parent,
            slot.synthetic_error,
            slot.continuation,
            slot.content,
            slot.blocks
        )
    }

    #[test]
    fn facts_read_from_text_are_those_read_from_the_entry() {
        let big = "x".repeat(100);
        let entries = [
            r#"{"type":"user","uuid":"u1","parentUuid":null,"timestamp":"2026-12-01T10:00:00.000Z","message":{"role":"user","content":"hi"}}"#.to_string(),
            r#"{"type":"user","uuid":"u\u0031","message":{"role":"user","content":"   "},"isContinuation":true}"#.to_string(),
            r#"{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"model":"<synthetic>","content":[{"type":"text","text":"x"}]}}"#.to_string(),
            r#"{"type":"assistant","isApiErrorMessage":true,"message":{"content":[]}}"#.to_string(),
            r#"{"type":"assistant","message":{"stop_reason":"refusal","content":[{"type":"thinking","thinking":"t"},{"type":"redacted_thinking"}]}}"#.to_string(),
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"git   status"}},{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"ls | wc"}},{"type":"tool_use","id":"t3","name":"Read","input":{"command":"ls"}},{"type":"tool_use","id":"t4","name":"Bash","input":null},{"type":"tool_use","id":"t5","name":"Bash","input":"ls"}]}}"#.to_string(),
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"a\nb"},{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":"Permission to use Bash denied"},{"type":"tool_result","tool_use_id":"t3","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]},{"type":"tool_result","tool_use_id":"t4","content":[{"type":"text","text":"[Request interrupted by user for tool use]"},{"type":"image","source":{}}]},{"type":"tool_result","tool_use_id":"t5","content":null},{"type":"tool_result","tool_use_id":"t6"},{"type":"tool_result","tool_use_id":"t7","content":[{"type":"text","text":1}]},{"type":"tool_result","tool_use_id":"t8","content":["odd"]},{"type":"tool_result","tool_use_id":"t9","content":{"a":1}}]}}"#.to_string(),
            format!(r#"{{"type":"assistant","message":{{"content":[{{"type":"server_tool_use","id":"s1"}},{{"type":"web_fetch_tool_result","tool_use_id":"s1","content":{{"a": "{big}", "n": 1.5}}}},{{"type":"web_search_tool_result","tool_use_id":"s2","content":null}},{{"type":"web_search_tool_result","tool_use_id":"s3"}}]}}}}"#),
            r#"{"type":"system","subtype":"memory","content":"m"}"#.to_string(),
            r#"{"type":"summary","summary":"s"}"#.to_string(),
            r#"{"type":"user","uuid":"dup","uuid":"dup2","message":{"content":"x"}}"#.to_string(),
            r#"{"type":"user","uuid":7,"message":"text"}"#.to_string(),
            r#"{"type":"assistant","message":{"content":[{"type":"text"},"loose",3]}}"#.to_string(),
            r#"{"type":"user","message":{"content":5}}"#.to_string(),
            r#"{"type":"user","timestamp":"not a time","message":{"content":"x"}}"#.to_string(),
            r#"{"type":"user","isContinuation":"yes","message":{"content":"x"}}"#.to_string(),
        ];
        for text in entries {
            let entry = Entry::parse(&text).unwrap();
            let from_text = Slot::from_text(text.clone().into_boxed_str()).unwrap();
            assert_eq!(
                facts(&from_text),
                facts(&Slot::of_entry(&entry, text.clone().into())),
                "{text}"
            );
            assert!(matches!(&from_text.entry, Stored::Text(kept) if **kept == *text));
        }
        assert!(Slot::from_text(r#"{"type":"user""#.into()).is_err());
        assert!(Slot::from_text(r#"{"type":"user"} x"#.into()).is_err());
    }
}
