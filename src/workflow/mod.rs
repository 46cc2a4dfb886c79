//! TODO (issue #4)
pub struct Context;
pub struct Step;
pub struct Workflow;
