//! TODO (issue #3) — stub with the agreed API; replaced by the store branch.
use super::{SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct PruneOptions {
    pub keep_denials: usize,
    pub ephemeral: bool,
    pub trim: bool,
    pub trim_threshold_bytes: usize,
    pub trim_dir: PathBuf,
}
impl PruneOptions {
    pub fn new(trim_dir: PathBuf) -> Self {
        PruneOptions {
            keep_denials: 1,
            ephemeral: true,
            trim: false,
            trim_threshold_bytes: 16 * 1024,
            trim_dir,
        }
    }
}
pub fn prune(entries: Vec<Value>, _opts: &PruneOptions) -> Vec<Value> {
    entries
}
pub struct PruningSessionStore {
    inner: Arc<dyn SessionStore>,
    opts: PruneOptions,
}
impl PruningSessionStore {
    pub fn new(inner: Arc<dyn SessionStore>, opts: PruneOptions) -> Self {
        PruningSessionStore { inner, opts }
    }
    pub fn options(&self) -> &PruneOptions {
        &self.opts
    }
    pub fn load_raw(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        self.inner.load(key)
    }
}
impl SessionStore for PruningSessionStore {
    fn append(&self, key: &SessionKey, entries: &[Value]) -> Result<(), StoreError> {
        self.inner.append(key, entries)
    }
    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        Ok(self.inner.load(key)?.map(|e| prune(e, &self.opts)))
    }
    fn list_sessions(&self, p: &str) -> Result<Vec<SessionInfo>, StoreError> {
        self.inner.list_sessions(p)
    }
    fn list_session_summaries(&self, p: &str) -> Result<Vec<SessionSummary>, StoreError> {
        self.inner.list_session_summaries(p)
    }
    fn delete(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.inner.delete(key)
    }
    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        self.inner.list_subkeys(key)
    }
    fn has_session(&self, id: &str) -> Result<bool, StoreError> {
        self.inner.has_session(id)
    }
}
