//! Reading a tool's JSON input. The model sometimes gets it wrong (a missing field, a
//! number sent as a string); the helpers accept the harmless variants and turn the rest
//! into a [`ToolOutput`] error that names the field, for the model to correct.

use super::ToolOutput;
use serde_json::Value;

/// The input as an object, or an error naming the tool.
pub fn object<'a>(
    tool: &str,
    input: &'a Value,
) -> Result<&'a serde_json::Map<String, Value>, ToolOutput> {
    input.as_object().ok_or_else(|| {
        ToolOutput::error(format!(
            "Invalid input for {tool}: expected a JSON object, got {}.",
            kind(input)
        ))
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn missing(tool: &str, field: &str) -> ToolOutput {
    ToolOutput::error(format!(
        "Invalid input for {tool}: the required field \"{field}\" is missing."
    ))
}

fn wrong(tool: &str, field: &str, want: &str, got: &Value) -> ToolOutput {
    let mut shown = got.to_string();
    if shown.chars().count() > 60 {
        shown = shown.chars().take(60).collect::<String>() + "…";
    }
    ToolOutput::error(format!(
        "Invalid input for {tool}: the field \"{field}\" must be {want}, got {} ({shown}).",
        kind(got)
    ))
}

/// A required string field.
pub fn required_str<'a>(tool: &str, input: &'a Value, field: &str) -> Result<&'a str, ToolOutput> {
    match object(tool, input)?.get(field) {
        None | Some(Value::Null) => Err(missing(tool, field)),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(wrong(tool, field, "a string", other)),
    }
}

/// An optional string field (`null` counts as absent).
pub fn optional_str<'a>(
    tool: &str,
    input: &'a Value,
    field: &str,
) -> Result<Option<&'a str>, ToolOutput> {
    match object(tool, input)?.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong(tool, field, "a string", other)),
    }
}

/// An optional non-negative integer; accepts `12`, `12.0` and `"12"`.
pub fn optional_u64(tool: &str, input: &Value, field: &str) -> Result<Option<u64>, ToolOutput> {
    let v = match object(tool, input)?.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let n = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    n.map(Some)
        .ok_or_else(|| wrong(tool, field, "a non-negative integer", v))
}

/// An optional boolean; accepts `true`, `"true"` and their `false` forms.
pub fn optional_bool(tool: &str, input: &Value, field: &str) -> Result<Option<bool>, ToolOutput> {
    match object(tool, input)?.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" => Ok(Some(true)),
        Some(Value::String(s)) if s == "false" => Ok(Some(false)),
        Some(other) => Err(wrong(tool, field, "a boolean", other)),
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
