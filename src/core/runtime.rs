//! TODO (issue #4)
pub struct Runtime;
pub struct RuntimeOptions;
