//! The agent engine: the loop of model turns and tool calls that makes one session.

pub mod events;
pub mod permissions;
pub mod shell;
pub mod spec;
