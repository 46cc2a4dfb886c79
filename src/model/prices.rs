//! TODO stub (issue #2)
use super::Usage;
pub fn cost_usd(_model: &str, _usage: &Usage) -> Option<f64> {
    None
}
