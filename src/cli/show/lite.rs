//! The fields of an entry the renderer reads, borrowed from its JSON text where no
//! escape forces a copy; the rest is skipped unparsed. Stricter than the typed
//! `Entry` (a field of an unexpected type is an error, and the caller falls back to
//! the `Entry`), and like it where it succeeds: the last of duplicate keys wins, `null`
//! reads as absent.

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// A JSON string, borrowed when it has no escapes.
pub struct Str<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON object read key by key into `T`; anything else is an error (a derived
/// struct would also take an array, field by position).
pub struct Obj<T>(pub T);

pub trait Fields<'de>: Default {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

impl<'de, T: Fields<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<T>, A::Error> {
                let mut t = T::default();
                while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
                    t.field(&key, &mut map)?;
                }
                Ok(Obj(t))
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

fn string<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Str<'de>>>()?.map(|s| s.0))
}

#[derive(Default)]
pub struct Entry<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub timestamp: Option<Cow<'a, str>>,
    /// `isApiErrorMessage`, as written.
    pub api_error: Option<&'a RawValue>,
    pub message: Option<Obj<Message<'a>>>,
}

impl<'de> Fields<'de> for Entry<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = string(map)?,
            "timestamp" => self.timestamp = string(map)?,
            flower::transcript::markers::API_ERROR_FLAG => self.api_error = map.next_value()?,
            "message" => self.message = map.next_value()?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct Message<'a> {
    pub model: Option<Cow<'a, str>>,
    pub content: Option<Content<'a>>,
    pub usage: Option<Obj<Usage>>,
}

impl<'de> Fields<'de> for Message<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "model" => self.model = string(map)?,
            "content" => self.content = map.next_value()?,
            "usage" => self.usage = map.next_value()?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_creation: Option<u64>,
    pub cache_read: Option<u64>,
}

impl<'de> Fields<'de> for Usage {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "input_tokens" => &mut self.input,
            "output_tokens" => &mut self.output,
            "cache_creation_input_tokens" => &mut self.cache_creation,
            "cache_read_input_tokens" => &mut self.cache_read,
            _ => {
                map.next_value::<IgnoredAny>()?;
                return Ok(());
            }
        };
        *slot = map.next_value()?;
        Ok(())
    }
}

/// A message's (or a tool result's) `content`.
pub enum Content<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
    /// An object, a number or a boolean: nothing to show.
    Other,
}

impl<'de> Deserialize<'de> for Content<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("content")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Content<'de>, E> {
                Ok(Content::Text(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<'de>, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                while let Some(Obj(block)) = seq.next_element::<Obj<Block<'de>>>()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Content<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Content::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Content<'de>, E> {
                Ok(Content::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Content<'de>, E> {
                Ok(Content::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Content<'de>, E> {
                Ok(Content::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Content<'de>, E> {
                Ok(Content::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// A content block, or a part of a tool result's content.
#[derive(Default)]
pub struct Block<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub text: Option<Cow<'a, str>>,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub tool_use_id: Option<Cow<'a, str>>,
    pub input: Option<&'a RawValue>,
    pub content: Option<Content<'a>>,
    /// `is_error`, as written.
    pub is_error: Option<&'a RawValue>,
}

impl<'de> Fields<'de> for Block<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = string(map)?,
            "text" => self.text = string(map)?,
            "id" => self.id = string(map)?,
            "name" => self.name = string(map)?,
            "tool_use_id" => self.tool_use_id = string(map)?,
            "input" => self.input = map.next_value()?,
            "content" => self.content = map.next_value()?,
            "is_error" => self.is_error = map.next_value()?,
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The string field `name` of the JSON object `text` (`None`: absent or `null`).
pub fn field<'a>(text: &'a str, name: &str) -> Result<Option<Cow<'a, str>>, serde_json::Error> {
    struct Seed<'n>(&'n str);
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = Option<Cow<'de, str>>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
                if key == self.0 {
                    found = string(&mut map)?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Seed(name).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}
