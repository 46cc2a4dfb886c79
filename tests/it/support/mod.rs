//! Support shared by the integration tests and the benches.
//!
//! Use it as `mod support;` from a file in `tests/`, or from a bench with
//! `#[path = "../tests/support/mod.rs"] mod support;`. Each test binary uses a different
//! part of it, hence the blanket `allow`s.
#![allow(dead_code, unused_imports)]

pub mod fake;
pub mod pipeline;
pub mod postgres;
pub mod snapshot;
pub mod workspace;

pub use fake::{Block, CacheUsage, FAKE_API_KEY, FakeServer, Gate, Recorded, Reply};
pub use workspace::{ToolEnv, tool_env};
