//! flower: a harness for long-running LLM coding agents.
//!
//! The crate is laid out by job, one folder each:
//! - [`model`]: talking to a model (the Anthropic Messages API over SSE);
//! - [`stores`]: where transcripts live (SQLite) and what a resumed session is fed (pruning);
//! - [`tools`]: the tools an agent can call (Read, Write, Edit, Glob, Grep, Bash);
//! - [`engine`]: the agent loop: turns, tool calls, permissions, sub-agents;
//! - [`core`]: what makes a run continue across processes: runtime, lineage, manifest,
//!   resilience, signals, the wake probe;
//! - [`workflow`]: steps and workflows, and flower's default pipeline;
//!
//! The `flower` command line lives in the binary (`src/main.rs`, `src/cli/`).

pub mod atomic;
pub mod continuity;
pub mod engine;
pub mod events;
pub mod inspect;
pub mod model;
pub mod settings;
pub mod stores;
pub mod tools;
pub mod transcript;
pub mod workflow;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the return type of the object-safe async traits
/// ([`model::ModelClient`], [`tools::Tool`]).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub use crate::continuity::lineage::Lineage;
pub use crate::continuity::runtime::{Runtime, RuntimeOptions};
pub use crate::continuity::wake::{WakeState, wake_state, wake_state_in};
pub use crate::engine::spec::AgentSpec;
pub use crate::settings::{ConfigError, Settings};
pub use crate::workflow::{Context, Step, Workflow};
