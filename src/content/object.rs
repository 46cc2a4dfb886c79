//! JSON objects read through types without losing a byte: the fields flower reads are
//! typed, the others (and any whose value is not of the type flower reads) are kept
//! as their text, and the order they came in is kept, so that an entry written back
//! is the line it was read from (a newer Claude Code's transcript imports and goes
//! back out unchanged). [`object!`](crate::content::object) declares such a type.

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A JSON value flower carries without reading it, kept as the text it came as.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Raw(Box<RawValue>);

impl Raw {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value read as `T` (for a reader above that wants it).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }

    /// `value` serialized.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Raw, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Raw)
    }

    /// JSON text (checked).
    pub fn from_text(text: String) -> Result<Raw, serde_json::Error> {
        RawValue::from_string(text).map(Raw)
    }

    /// A copy of `raw`'s text (already checked: it was read as JSON).
    #[doc(hidden)]
    pub fn copied(raw: &RawValue) -> Raw {
        Raw(raw.to_owned())
    }

    /// `null`.
    pub fn null() -> Raw {
        Raw(RawValue::NULL.to_owned())
    }

    /// `value` serialized, for a value whose serializing cannot fail (a tree built in
    /// code, plain structs); `null` if it somehow does.
    pub fn of_tree<T: Serialize + ?Sized>(value: &T) -> Raw {
        Raw::of(value).unwrap_or_else(|_| Raw::null())
    }
}

impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        self.get() == other.get()
    }
}

impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

/// An object's fields as written: in order, repeated keys included, each value as
/// its text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawObject(Vec<(String, Raw)>);

impl RawObject {
    /// The field called `key`: the last, if it is repeated (as `JSON.parse` and
    /// serde_json read it).
    pub fn get(&self, key: &str) -> Option<&Raw> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key`: in its place if it is there (the last of a repeated key, the one
    /// [`RawObject::get`] reads), at the end otherwise.
    pub fn insert(&mut self, key: &str, value: Raw) {
        match self.0.iter_mut().rev().find(|(k, _)| k == key) {
            Some((_, old)) => *old = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Raw)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[doc(hidden)]
    pub fn push(&mut self, key: String, value: Raw) {
        self.0.push((key, value));
    }

    #[doc(hidden)]
    pub fn at(&self, index: usize) -> Option<(&str, &Raw)> {
        self.0.get(index).map(|(k, v)| (k.as_str(), v))
    }

    #[doc(hidden)]
    pub fn into_fields(self) -> std::vec::IntoIter<(String, Raw)> {
        self.0.into_iter()
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(key) = map.next_key::<String>()? {
                    fields.push((key, map.next_value::<Raw>()?));
                }
                Ok(RawObject(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// The order an object's fields came in: each a typed field (its number in the
/// declaration) or one of the kept ones (its place in [`RawObject`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Order(Vec<Slot>);

#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Slot {
    Typed(u8),
    Kept(u32),
}

impl Order {
    #[doc(hidden)]
    pub fn push(&mut self, slot: Slot) {
        self.0.push(slot);
    }

    #[doc(hidden)]
    pub fn slots(&self) -> &[Slot] {
        &self.0
    }

    /// How many kept fields came with the object (later ones go at its end).
    #[doc(hidden)]
    pub fn kept(&self) -> usize {
        self.0.iter().filter(|s| matches!(s, Slot::Kept(_))).count()
    }
}

/// An object's fields borrowed from its text: each key (copied only when it holds an
/// escape) and each value as its text, not copied. What the typed objects are read
/// from, so that a nested object's bytes are not copied at every level it is in.
#[doc(hidden)]
pub struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Fields<'a> {
    /// The fields of `text`, a JSON object. Checked as UTF-8 once: read from bytes,
    /// serde_json would check each value's text again at every level.
    pub fn of(text: &'a [u8]) -> Result<Fields<'a>, serde_json::Error> {
        match std::str::from_utf8(text) {
            Ok(text) => Fields::of_str(text),
            // Not UTF-8: the byte reader says where.
            Err(_) => serde_json::from_slice(text),
        }
    }

    /// The fields of `text`, a JSON object.
    pub fn of_str(text: &'a str) -> Result<Fields<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The field called `key`: the last, if it is repeated.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_fields(self) -> std::vec::IntoIter<(Cow<'a, str>, &'a RawValue)> {
        self.0.into_iter()
    }
}

impl RawObject {
    /// Its fields, borrowed.
    #[doc(hidden)]
    pub fn borrowed(&self) -> Fields<'_> {
        Fields(
            self.0
                .iter()
                .map(|(k, v)| (Cow::Borrowed(k.as_str()), &*v.0))
                .collect(),
        )
    }
}

/// A key borrowed from the text when it can be (it has no escape).
#[doc(hidden)]
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Text<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(key.to_string())))
            }
            fn visit_string<E>(self, key: String) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(Text(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Object<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'a>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    fields.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Object(std::marker::PhantomData))
    }
}

/// A declared field's type. Read two ways that give the same value:
/// - `read_one_pass`, straight from the parser, each byte scanned once: an [`object!`]
///   type descends into its fields. It fails (any error) where the value is not what
///   that read takes as it is: a declared field of another type, a declared key
///   repeated, a block whose `type` is not its first field or not one flower knows.
///   The caller then reads the whole text the other way.
/// - `read`, from the value's text: an [`object!`] type reads its fields borrowed from
///   it ([`Fields`]), so a value of the wrong type is kept as written; every level
///   below scans its part of the text again.
#[doc(hidden)]
pub trait Typed: Sized {
    fn read(raw: &RawValue) -> Result<Self, serde_json::Error>;
    fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;
}

macro_rules! typed_by_serde {
    ($($ty:ty),*) => {
        $(impl Typed for $ty {
            fn read(raw: &RawValue) -> Result<Self, serde_json::Error> {
                serde_json::from_str(raw.get())
            }
            fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$ty as Deserialize>::deserialize(deserializer)
            }
        })*
    };
}
typed_by_serde!(String, Option<String>, bool, u64, Vec<String>);

impl Typed for Raw {
    fn read(raw: &RawValue) -> Result<Self, serde_json::Error> {
        Ok(Raw::copied(raw))
    }
    fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Raw::deserialize(deserializer)
    }
}

impl Typed for super::ToolInput {
    fn read(raw: &RawValue) -> Result<Self, serde_json::Error> {
        Ok(super::ToolInput::from_raw(Raw::copied(raw)))
    }
    fn read_one_pass<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Raw::deserialize(deserializer).map(super::ToolInput::from_raw)
    }
}

/// [`Typed::read_one_pass`] as a seed, for `next_value_seed` and `next_element_seed`.
#[doc(hidden)]
pub struct OnePass<T>(std::marker::PhantomData<T>);

impl<T> OnePass<T> {
    pub fn new() -> OnePass<T> {
        OnePass(std::marker::PhantomData)
    }
}

impl<T> Default for OnePass<T> {
    fn default() -> OnePass<T> {
        OnePass::new()
    }
}

impl<'de, T: Typed> serde::de::DeserializeSeed<'de> for OnePass<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        T::read_one_pass(deserializer)
    }
}

/// The error that sends a value back to be read from its text (never shown: the
/// text read decides what the value is, or what is wrong with it).
#[doc(hidden)]
pub fn not_one_pass<E: serde::de::Error>() -> E {
    E::custom("read from the text instead")
}

/// `text` read in one pass ([`Typed::read_one_pass`]), to its end.
#[doc(hidden)]
pub fn one_pass<T: Typed>(text: &str) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = T::read_one_pass(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Which fields of an object are a declared key (`keys`) repeated later in it: read
/// from the last one only. Empty when no declared key repeats (the usual case: no
/// allocation).
#[doc(hidden)]
pub fn superseded(fields: &Fields<'_>, keys: &[&str]) -> Vec<bool> {
    let declared = |key: &str| keys.iter().position(|k| *k == key);
    let mut seen: u64 = 0;
    let mut repeats = false;
    for (key, _) in &fields.0 {
        if let Some(n) = declared(key) {
            repeats |= seen & (1 << n) != 0;
            seen |= 1 << n;
        }
    }
    if !repeats {
        return Vec::new();
    }
    let mut later: u64 = 0;
    let mut out = vec![false; fields.len()];
    for (index, (key, _)) in fields.0.iter().enumerate().rev() {
        if let Some(n) = declared(key) {
            out[index] = later & (1 << n) != 0;
            later |= 1 << n;
        }
    }
    out
}

/// Declares a transcript object type: `field: Type = "jsonKey",` each an
/// `Option<Type>` (absent is `None`), plus `rest` (the fields not declared, or whose
/// value is not a `Type`, as written) and the order they came in. Of a repeated key the
/// last is the one read (as `JSON.parse` and serde_json read it), the earlier ones are
/// kept in `rest`. Serialized, the
/// fields come back in that order; fields set in memory since follow, declared ones
/// in their declaration order (which is the order flower writes them in).
macro_rules! object {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: Option<$ty>, )*
            /// The fields not declared above (or whose value is not of the declared
            /// type), as written.
            pub rest: $crate::content::object::RawObject,
            /// The order the fields were read in (leave it default when building one).
            pub order: $crate::content::object::Order,
        }

        impl $name {
            /// Read from the JSON text of an object: in one pass where it can be,
            /// else from its fields' text (the same value either way).
            pub fn from_json(text: &[u8]) -> Result<Self, serde_json::Error> {
                match std::str::from_utf8(text) {
                    Ok(text) => Self::from_json_str(text),
                    // Not UTF-8: the byte reader says where.
                    Err(_) => $crate::content::object::Fields::of(text).map(Self::from_borrowed),
                }
            }

            /// [`from_json`](Self::from_json) of text already checked as UTF-8.
            pub fn from_json_str(text: &str) -> Result<Self, serde_json::Error> {
                $crate::content::object::one_pass::<Self>(text)
                    .or_else(|_| Self::read_by_text(text))
            }

            /// Read from its fields' text, each level scanning its part again: the
            /// way a value the one-pass read does not take is read. Public for the
            /// tests that hold the two reads to the same value.
            #[doc(hidden)]
            pub fn read_by_text(text: &str) -> Result<Self, serde_json::Error> {
                $crate::content::object::Fields::of_str(text).map(Self::from_borrowed)
            }

            /// Reads the rest of an object's fields in one pass into `out`, whose
            /// declared fields numbered in `seen` were read already (a block's
            /// `type`, read to know which block it is).
            #[doc(hidden)]
            #[allow(unused_assignments)]
            pub fn fields_one_pass<'de, A: serde::de::MapAccess<'de>>(
                mut out: Self,
                mut seen: u64,
                map: &mut A,
            ) -> Result<Self, A::Error> {
                use $crate::content::object::{Key, OnePass, Raw, Slot, not_one_pass};
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    let mut number: u8 = 0;
                    let mut typed = false;
                    $(
                        if !typed && key == $key {
                            // A repeated declared key: the text read keeps the earlier.
                            if seen & (1 << number) != 0 {
                                return Err(not_one_pass());
                            }
                            out.$field = Some(map.next_value_seed(OnePass::<$ty>::new())?);
                            out.order.push(Slot::Typed(number));
                            seen |= 1 << number;
                            typed = true;
                        }
                        number += 1;
                    )*
                    if !typed {
                        out.order.push(Slot::Kept(out.rest.len() as u32));
                        out.rest.push(key.into_owned(), map.next_value::<Raw>()?);
                    }
                }
                Ok(out)
            }

            fn from_fields(fields: $crate::content::object::RawObject) -> Self {
                Self::from_borrowed(fields.borrowed())
            }

            #[allow(unused_assignments)]
            fn from_borrowed(fields: $crate::content::object::Fields<'_>) -> Self {
                use $crate::content::object::{Raw, Slot, Typed};
                const KEYS: &[&str] = &[$($key),*];
                let superseded = $crate::content::object::superseded(&fields, KEYS);
                let mut out = Self::default();
                for (index, (key, raw)) in fields.into_fields().enumerate() {
                    let mut number: u8 = 0;
                    let mut typed = false;
                    $(
                        if !typed
                            && key == $key
                            && !superseded.get(index).copied().unwrap_or(false)
                            && let Ok(value) = <$ty as Typed>::read(raw)
                        {
                            out.$field = Some(value);
                            out.order.push(Slot::Typed(number));
                            typed = true;
                        }
                        number += 1;
                    )*
                    if !typed {
                        out.order.push(Slot::Kept(out.rest.len() as u32));
                        out.rest.push(key.into_owned(), Raw::copied(raw));
                    }
                }
                out
            }
        }

        impl $crate::content::object::Typed for $name {
            fn read(raw: &serde_json::value::RawValue) -> Result<Self, serde_json::Error> {
                $crate::content::object::Fields::of_str(raw.get()).map(Self::from_borrowed)
            }

            fn read_one_pass<'de, D: serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                struct Object;
                impl<'de> serde::de::Visitor<'de> for Object {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a JSON object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        $name::fields_one_pass($name::default(), 0, &mut map)
                    }
                }
                deserializer.deserialize_map(Object)
            }
        }

        impl serde::Serialize for $name {
            #[allow(unused_assignments)]
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                use $crate::content::object::Slot;
                let mut map = serializer.serialize_map(None)?;
                let mut written: u64 = 0;
                for slot in self.order.slots() {
                    match *slot {
                        Slot::Typed(wanted) => {
                            let mut number: u8 = 0;
                            $(
                                if number == wanted && let Some(value) = &self.$field {
                                    map.serialize_entry($key, value)?;
                                }
                                number += 1;
                            )*
                            written |= 1 << wanted;
                        }
                        Slot::Kept(index) => {
                            if let Some((key, value)) = self.rest.at(index as usize) {
                                map.serialize_entry(key, value)?;
                            }
                        }
                    }
                }
                let mut number: u8 = 0;
                $(
                    if written & (1 << number) == 0 && let Some(value) = &self.$field {
                        map.serialize_entry($key, value)?;
                    }
                    number += 1;
                )*
                for index in self.order.kept()..self.rest.len() {
                    if let Some((key, value)) = self.rest.at(index) {
                        map.serialize_entry(key, value)?;
                    }
                }
                map.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$crate::content::object::RawObject as serde::Deserialize>::deserialize(
                    deserializer,
                )
                .map(Self::from_fields)
            }
        }
    };
}

pub(crate) use object;
