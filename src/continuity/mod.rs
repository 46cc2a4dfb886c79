//! What makes a run continue across processes: the run's lifecycle ([`run`]), the
//! runtime that runs step attempts ([`runtime`], with 换代 in [`succession`] and its
//! pieces in [`handoff`]), lineage, the manifest and attempt names, retries and outage
//! waits ([`resilience`]), locks, a run in a shared database ([`shared`]), signals, the
//! frozen notes and the wake probe ([`wake`]).

pub mod attempt;
pub mod checkpointing;
mod guard;
pub mod handoff;
pub mod lineage;
pub mod lock;
pub mod manifest;
pub mod notes;
pub mod resilience;
mod retry;
pub mod rewind;
pub mod runtime;
pub mod shared;
pub mod signals;
pub mod succession;
pub mod wake;
