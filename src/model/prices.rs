//! Per-model prices and cost computation.
