//! The `Glob` tool. TODO (issue #2)

use super::{Tool, ToolContext, ToolOutput};
use crate::BoxFuture;
use serde_json::{Value, json};

pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &'static str {
        "Glob"
    }
    fn description(&self) -> String {
        String::new()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(&'a self, _input: &'a Value, _ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::error("not implemented") })
    }
}
