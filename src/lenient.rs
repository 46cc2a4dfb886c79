//! Configuration JSON read leniently into serde types: every value typed where it has
//! the expected shape and marked where it has not, so that the reader words the error
//! for its own key (`hooks.PreToolUse[0].matcher: 要一个字符串`) instead of serde's
//! English message, and warns about or ignores what it may ignore. Used for Claude
//! Code's settings files (`settings::document`, the hooks and MCP servers sections) and
//! for a hook's answer. A value of the wrong shape is kept as written, so a settings
//! file serializes back to what it said.

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, IgnoredAny, MapAccess};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::fmt;

/// One value of a JSON object, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Slot<T> {
    /// The key is not there (`#[serde(default)]` gives this; a field that can be absent
    /// is written with `skip_serializing_if = "Slot::is_absent"`).
    #[default]
    Absent,
    /// `null`: for most keys the same as absent, but a key that is there at all can
    /// mean something (an MCP server with a `url` key is an HTTP one).
    Null,
    /// A value of the expected type.
    Is(T),
    /// `Value`: a value of another type, kept as written (for the reader's error, and
    /// so that it serializes back unchanged).
    Wrong(Value),
}
impl<T> Slot<T> {
    /// The value, when it has the expected type.
    pub fn get(&self) -> Option<&T> {
        match self {
            Slot::Is(value) => Some(value),
            _ => None,
        }
    }

    /// Absent or `null`.
    pub fn is_unset(&self) -> bool {
        matches!(self, Slot::Absent | Slot::Null)
    }

    /// The key is not there.
    pub fn is_absent(&self) -> bool {
        matches!(self, Slot::Absent)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Slot<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Value: the slot's JSON is read once as a tree, then tried as `T`; a failure
        // is the reader's to word, so the tree is all that is needed to tell.
        let value = Value::deserialize(deserializer)?;
        if value.is_null() {
            return Ok(Slot::Null);
        }
        Ok(match T::deserialize(&value) {
            Ok(typed) => Slot::Is(typed),
            Err(_) => Slot::Wrong(value),
        })
    }
}

/// As written: `null` for [`Slot::Null`] (and for [`Slot::Absent`], which a field skips).
impl<T: Serialize> Serialize for Slot<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Slot::Absent | Slot::Null => serializer.serialize_unit(),
            Slot::Is(value) => value.serialize(serializer),
            Slot::Wrong(value) => value.serialize(serializer),
        }
    }
}

/// A JSON object's entries in the file's order; a key written twice keeps the place of
/// its first and the value of its last (as `serde_json::Map` does with
/// `preserve_order`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries<T>(pub Vec<(String, T)>);

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<T> Entries<T> {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.0.iter().map(|(key, value)| (key.as_str(), value))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Visit<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<T>, A::Error> {
                let mut entries: Vec<(String, T)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, T>()? {
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(slot) => slot.1 = value,
                        None => entries.push((key, value)),
                    }
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visit(std::marker::PhantomData))
    }
}

impl<T: Serialize> Serialize for Entries<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// The keys of an object that its type does not name, kept by name (their values are
/// not read). As a `#[serde(flatten)]` field it also makes the type read from a JSON
/// object only: a derived struct alone would take an array of its fields too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnknownKeys(pub Vec<String>);

impl<'de> Deserialize<'de> for UnknownKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Entries::<IgnoredAny>::deserialize(deserializer)?;
        Ok(UnknownKeys(
            entries.0.into_iter().map(|(key, _)| key).collect(),
        ))
    }
}
