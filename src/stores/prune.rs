//! TODO (issue #3)
pub struct PruneOptions;
pub struct PruningSessionStore;
