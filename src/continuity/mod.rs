//! What makes a run continue across processes.

pub mod attempt;
pub mod handoff;
pub mod lineage;
pub mod lock;
pub mod manifest;
pub mod notes;
pub mod resilience;
pub mod runtime;
pub mod shared;
pub mod signals;
pub mod wake;
