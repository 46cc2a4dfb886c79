//! Reading a tool's JSON input. Each tool reads its input into a struct of its own
//! (serde derive), each field a [`Field`]: the model sometimes gets a field wrong (a
//! missing field, a number sent as a string); a field accepts the harmless variants and
//! keeps the rest, which [`Field::required`] and [`Field::optional`] turn into a
//! [`ToolOutput`] error that names the field, for the model to correct.

use super::ToolOutput;
use crate::content::ToolInput;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The input of a call read as `T` (a tool's struct of [`Field`]s), or an error naming
/// the tool.
pub fn parse<T: DeserializeOwned>(tool: &str, input: &ToolInput) -> Result<T, ToolOutput> {
    let text = input.text();
    let kind = kind_of(text);
    if kind != OBJECT {
        return Err(ToolOutput::error(format!(
            "Invalid input for {tool}: expected a JSON object, got {kind}."
        )));
    }
    serde_json::from_str(text)
        .map_err(|e| ToolOutput::error(format!("Invalid input for {tool}: {e}.")))
}

const OBJECT: &str = "an object";

/// What a JSON text is, by its first character.
fn kind_of(json: &str) -> &'static str {
    match json.trim_start().as_bytes().first() {
        Some(b'n') | None => "null",
        Some(b't' | b'f') => "a boolean",
        Some(b'"') => "a string",
        Some(b'[') => "an array",
        Some(b'{') => OBJECT,
        Some(_) => "a number",
    }
}

/// One field of a tool's input, as the model sent it.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    /// Absent, or `null`.
    #[default]
    Absent,
    Given(T),
    /// Of a type the field does not take: what it was, and its JSON (for the error).
    Wrong {
        kind: &'static str,
        json: String,
    },
}

/// What a field holds, read leniently: the harmless variants a model sends are taken.
pub trait Lenient: Sized {
    /// What the error says the field must be.
    const WANT: &'static str;
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
}

impl Lenient for String {
    const WANT: &'static str = "a string";
    fn from_str(text: &str) -> Option<Self> {
        Some(text.to_string())
    }
}

/// A non-negative integer; `12`, `12.0` and `"12"` alike.
impl Lenient for u64 {
    const WANT: &'static str = "a non-negative integer";
    fn from_str(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
    fn from_u64(n: u64) -> Option<Self> {
        Some(n)
    }
    fn from_f64(f: f64) -> Option<Self> {
        (f.fract() == 0.0 && f >= 0.0).then_some(f as u64)
    }
}

/// `true`, `"true"` and their `false` forms.
impl Lenient for bool {
    const WANT: &'static str = "a boolean";
    fn from_str(text: &str) -> Option<Self> {
        match text {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }
    fn from_bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

impl<T: Lenient> Field<T> {
    /// The value; an error if it is absent or wrong.
    pub fn required(self, tool: &str, field: &str) -> Result<T, ToolOutput> {
        self.optional(tool, field)?.ok_or_else(|| {
            ToolOutput::error(format!(
                "Invalid input for {tool}: the required field \"{field}\" is missing."
            ))
        })
    }

    /// The value, `None` if absent; an error if it is wrong.
    pub fn optional(self, tool: &str, field: &str) -> Result<Option<T>, ToolOutput> {
        match self {
            Field::Absent => Ok(None),
            Field::Given(value) => Ok(Some(value)),
            Field::Wrong { kind, mut json } => {
                if json.chars().count() > 60 {
                    json = json.chars().take(60).collect::<String>() + "…";
                }
                Err(ToolOutput::error(format!(
                    "Invalid input for {tool}: the field \"{field}\" must be {}, got {kind} \
                     ({json}).",
                    T::WANT
                )))
            }
        }
    }
}

impl<'de, T: Lenient> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor(std::marker::PhantomData))
    }
}

struct FieldVisitor<T>(std::marker::PhantomData<T>);

impl<T> FieldVisitor<T> {
    fn given(value: Option<T>, kind: &'static str, json: impl FnOnce() -> String) -> Field<T> {
        match value {
            Some(value) => Field::Given(value),
            None => Field::Wrong { kind, json: json() },
        }
    }
}

impl<'de, T: Lenient> Visitor<'de> for FieldVisitor<T> {
    type Value = Field<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Field<T>, E> {
        Ok(Field::Absent)
    }

    fn visit_none<E: de::Error>(self) -> Result<Field<T>, E> {
        Ok(Field::Absent)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Field<T>, E> {
        Ok(Self::given(T::from_str(text), "a string", || {
            serde_json::to_string(text).unwrap_or_default()
        }))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Field<T>, E> {
        Ok(Self::given(T::from_u64(n), "a number", || n.to_string()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Field<T>, E> {
        let value = u64::try_from(n).ok().and_then(T::from_u64);
        Ok(Self::given(value, "a number", || n.to_string()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Field<T>, E> {
        Ok(Self::given(T::from_f64(f), "a number", || {
            serde_json::Number::from_f64(f).map_or_else(|| "null".into(), |n| n.to_string())
        }))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Field<T>, E> {
        Ok(Self::given(T::from_bool(b), "a boolean", || b.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Field<T>, A::Error> {
        // Read whole to be shown in the error.
        let tree = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Field::Wrong {
            kind: "an array",
            json: tree.to_string(),
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Field<T>, A::Error> {
        // Read whole to be shown in the error.
        let tree = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Field::Wrong {
            kind: OBJECT,
            json: tree.to_string(),
        })
    }
}

/// Formats lines like `cat -n`: the 1-based number right-aligned in six columns, a tab,
/// the line.
pub fn numbered_line(out: &mut String, n: u64, line: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "{n:>6}\t{line}");
}

/// Runs blocking file-system work off the async runtime; a panic inside becomes a tool
/// error rather than taking the session down.
pub async fn blocking<F>(tool: &'static str, f: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) => ToolOutput::error(format!("{tool} failed unexpectedly: {e}")),
    }
}
