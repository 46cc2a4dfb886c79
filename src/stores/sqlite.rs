//! STUB with the agreed API; replaced by branch wt-store.
use super::{SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError};
use serde_json::Value;
use std::path::Path;
pub struct SqliteSessionStore;
impl SqliteSessionStore {
    pub fn open(_path: &Path) -> Result<Self, StoreError> {
        Ok(SqliteSessionStore)
    }
    pub fn open_read_only(_path: &Path) -> Result<Option<Self>, StoreError> {
        Ok(None)
    }
    pub fn last_assistant_usage(&self, _key: &SessionKey) -> Result<Option<Value>, StoreError> {
        Ok(None)
    }
}
impl SessionStore for SqliteSessionStore {
    fn append(&self, _key: &SessionKey, _entries: &[Value]) -> Result<(), StoreError> {
        Ok(())
    }
    fn load(&self, _key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        Ok(None)
    }
    fn list_sessions(&self, _p: &str) -> Result<Vec<SessionInfo>, StoreError> {
        Ok(vec![])
    }
    fn list_session_summaries(&self, _p: &str) -> Result<Vec<SessionSummary>, StoreError> {
        Ok(vec![])
    }
    fn delete(&self, _key: &SessionKey) -> Result<(), StoreError> {
        Ok(())
    }
    fn list_subkeys(&self, _key: &SessionKey) -> Result<Vec<String>, StoreError> {
        Ok(vec![])
    }
    fn has_session(&self, _id: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
}
