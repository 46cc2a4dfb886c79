//! The integration tests, in one binary: one link of the crate instead of one per file.
//! Each module is one area; `support` is the fake Messages API server and helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod faults_support;
mod store_support;
mod support;

mod claude_code_import;
mod config;
mod continuation_crash;
mod continuation_example;
mod engine_history;
mod faults;
mod flow;
mod handoff;
mod inspect;
mod interrupt_plain;
mod lineage;
mod manifest;
mod model_client;
mod model_fake_server;
mod model_prices;
mod model_settings;
mod once;
mod permissions;
mod permissions_bash_differential;
mod permissions_paths;
mod permissions_proptest;
mod permissions_shell;
mod prompt_cache;
mod resilience;
mod run_lock;
mod signals;
mod stop_reasons;
mod store_cli;
mod store_conformance;
mod store_create;
mod store_postgres;
mod store_prune;
mod store_sqlite;
mod terminal;
mod tools_bash;
mod tools_glob_grep;
mod tools_input;
mod tools_read;
mod tools_write_edit;
mod workflow;
