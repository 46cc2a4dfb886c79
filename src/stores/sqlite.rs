//! TODO (issue #3)
pub struct SqliteSessionStore;
