//! flower: a harness for long-running LLM coding agents.
//!
//! The modules form a line; each imports only the ones before it (DESIGN.md §2,
//! `docs/architecture.md` has the whole picture and the trace of a run):
//!
//! ```text
//! future, run_dir, atomic, error → model → transcript, events → stores → tools → engine
//!   → continuity → settings → run → workflow → inspect
//!   → the binary (src/main.rs, src/cli/) and the Python package
//! ```
//!
//! - [`future`]: the boxed future of the async traits; [`run_dir`]: the run directory
//!   and its file names; [`atomic`]: the one temp-file-and-rename writer; [`error`]:
//!   an error printed with its causes; [`events`]: what a run reports to its front end;
//!   [`lenient`]: configuration JSON read into serde types that mark a mistyped value;
//! - [`transcript`]: the transcript entry format, its marker strings, tool names;
//! - [`model`]: talking to a model (the Anthropic Messages API over SSE), model names,
//!   prices, error classes;
//! - [`stores`]: where transcripts live (SQLite, PostgreSQL) and what a resumed session
//!   is fed (pruning);
//! - [`tools`]: the tools an agent can call (Read, Write, Edit, Glob, Grep, Bash) and
//!   the sandbox around Bash;
//! - [`engine`]: the agent loop: turns, tool calls, permissions, sub-agents;
//! - [`continuity`]: what makes a run continue across processes: the runtime, lineage,
//!   manifest, resilience, 换代, locks, signals, the wake probe;
//! - [`settings`]: every flag and variable resolved once into validated [`Settings`];
//!   the only reader of the process environment;
//! - [`run`]: the run's lifecycle ([`Run`]): settings in, a runtime out;
//! - [`workflow`]: steps and workflows, gates, and flower's default pipeline;
//! - [`inspect`]: the read-only model of a run for `flower log`, `show` and `report`.

pub mod atomic;
pub mod checkpoint;
pub mod content;
pub mod continuity;
pub mod engine;
pub mod error;
pub mod events;
pub mod future;
pub mod inspect;
pub mod lenient;
pub mod model;
pub mod run;
pub mod run_dir;
pub mod settings;
pub mod stores;
pub mod telemetry;
pub mod tools;
pub mod transcript;
pub mod workflow;

pub use crate::continuity::lineage::Lineage;
pub use crate::continuity::runtime::{Runtime, RuntimeOptions};
pub use crate::continuity::wake::{WakeState, wake_state, wake_state_in};
pub use crate::engine::spec::AgentSpec;
pub use crate::future::BoxFuture;
pub use crate::run::Run;
pub use crate::run_dir::RunDir;
pub use crate::settings::{ConfigError, Settings};
pub use crate::workflow::{Context, Step, Workflow};
