//! Parsing stored entries into `serde_json::Value`, a little faster.
//!
//! `serde_json::from_slice::<Value>` grows every object and array as it goes (each
//! 9-key entry object reallocates and rehashes three times). This parser collects a
//! container's members on a reusable scratch stack first and builds the object or
//! array once, at its exact size. The result is the same `Value` (tested against
//! serde_json below); on a long transcript parsing is most of the cost of a load.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Members of the containers being parsed, innermost last; reused across parses.
#[derive(Default)]
pub(crate) struct Scratch {
    members: Vec<(String, Value)>,
    items: Vec<Value>,
}

/// Parses one JSON value, exactly as `serde_json::from_slice::<Value>` would.
pub(crate) fn parse(bytes: &[u8], scratch: &mut Scratch) -> serde_json::Result<Value> {
    // A failed parse leaves members behind.
    scratch.members.clear();
    scratch.items.clear();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Seed(scratch).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

struct Seed<'a>(&'a mut Scratch);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let scratch = self.0;
        let start = scratch.items.len();
        while let Some(item) = seq.next_element_seed(Seed(&mut *scratch))? {
            scratch.items.push(item);
        }
        Ok(Value::Array(scratch.items.drain(start..).collect()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let scratch = self.0;
        let start = scratch.members.len();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Seed(&mut *scratch))?;
            scratch.members.push((key, value));
        }
        let mut object = Map::with_capacity(scratch.members.len() - start);
        // A repeated key keeps its first place and its last value, as in serde_json.
        for (key, value) in scratch.members.drain(start..) {
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_like_serde_json() {
        let mut scratch = Scratch::default();
        let cases = [
            r#"{"type":"user","uuid":"u","n":[1,-2,3.5,1e300,18446744073709551615,-9223372036854775808,0.1],"e":{},"a":[],"s":"\u00e9\n\"x\"\ud83d\ude00","b":[true,false,null],"nested":{"k":[{"x":[[]]}]}}"#,
            r#"{"dup":1,"other":2,"dup":3}"#,
            r#"[1, {"a": "b"}, [2, [3]]]"#,
            r#""just a string""#,
            "  42  ",
        ];
        for case in cases {
            let expected: Value = serde_json::from_str(case).unwrap();
            let got = parse(case.as_bytes(), &mut scratch).unwrap();
            assert_eq!(got, expected, "{case}");
            assert_eq!(
                got.to_string(),
                expected.to_string(),
                "same key order: {case}"
            );
        }
        for bad in ["{", r#"{"a":1} x"#, "[1,]", ""] {
            assert!(parse(bad.as_bytes(), &mut scratch).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err());
        }
        // A failed parse may leave members behind; the next parse must not see them.
        let after: Value = parse(br#"{"z":[9]}"#, &mut Scratch::default()).unwrap();
        assert_eq!(parse(br#"{"z":[9]}"#, &mut scratch).unwrap(), after);
    }
}
