//! A tool call's input: the model's JSON, carried as written (so the transcript, the
//! request body and a hook's payload get the bytes the model sent) and read through
//! typed accessors by whoever needs one of its facts (the permission layer, the hooks,
//! a sub-agent's launch). A tool reads all of it into a struct of its own
//! ([`ToolInput::parse`]).

use super::object::{Raw, RawObject};
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use std::fmt;

/// The input of a tool call (`tool_use.input`): a JSON object as the API sends it,
/// though a stored transcript may hold anything; every accessor answers `None` (or
/// nothing) for what is not an object.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolInput(Raw);

impl ToolInput {
    /// `{}`: the input of a call that came with none.
    pub fn empty() -> ToolInput {
        ToolInput(Raw::from_text("{}".into()).unwrap_or_else(|_| Raw::null()))
    }

    /// The input whose JSON is `raw`, as written.
    pub fn from_raw(raw: Raw) -> ToolInput {
        ToolInput(raw)
    }

    /// `value` serialized (an input built in code: a marker, a test's call).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<ToolInput, serde_json::Error> {
        Raw::of(value).map(ToolInput)
    }

    /// `value` serialized, for a value whose serializing cannot fail (a tree built in
    /// code); `null` if it somehow does.
    pub fn of_tree<T: Serialize + ?Sized>(value: &T) -> ToolInput {
        ToolInput(Raw::of_tree(value))
    }

    /// The JSON, as written.
    pub fn raw(&self) -> &Raw {
        &self.0
    }

    /// The JSON text, as written.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The whole input read as `T` (a tool's own input struct).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        self.0.parse()
    }

    /// Whether it is a JSON object.
    pub fn is_object(&self) -> bool {
        self.borrowed().is_some()
    }

    /// The object's fields, in order (`None`: not an object).
    pub fn fields(&self) -> Option<RawObject> {
        self.0.parse().ok()
    }

    /// The field `key`, as written: `None` when it is absent (or this is not an
    /// object). Of a repeated key, the last (as `JSON.parse` reads it).
    pub fn field(&self, key: &str) -> Option<Raw> {
        let value = self.borrowed()?.find(key)?;
        Some(Raw::from_text(value.get().to_string()).unwrap_or_else(|_| Raw::null()))
    }

    /// The field `key` if it is a string (`None`: absent, or of another type).
    pub fn str_field(&self, key: &str) -> Option<String> {
        serde_json::from_str(self.borrowed()?.find(key)?.get()).ok()
    }

    /// Whether the field `key` is absent or `null`.
    pub fn lacks(&self, key: &str) -> bool {
        self.borrowed()
            .and_then(|fields| fields.find(key))
            .is_none_or(|value| value.get() == "null")
    }

    /// The values of the object's fields that are strings, in order (none when it is
    /// not an object): what a rule about "any of the call's words" looks at.
    pub fn string_values(&self) -> Vec<String> {
        self.borrowed()
            .map(|fields| {
                fields
                    .0
                    .iter()
                    .filter_map(|(_, value)| serde_json::from_str(value.get()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The object's fields borrowed from the text (no copy of their values).
    fn borrowed(&self) -> Option<Borrowed<'_>> {
        serde_json::from_str(self.0.get()).ok()
    }
}

impl Default for ToolInput {
    fn default() -> ToolInput {
        ToolInput::empty()
    }
}

impl fmt::Debug for ToolInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// An object's fields, each value borrowed as its text.
struct Borrowed<'a>(Vec<(String, &'a RawValue)>);

impl<'a> Borrowed<'a> {
    /// The last field called `key`.
    fn find(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Fields<'a> {
            type Value = Borrowed<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Borrowed<'a>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(key) = map.next_key::<String>()? {
                    fields.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Borrowed(fields))
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}
