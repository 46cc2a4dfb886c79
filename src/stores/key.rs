//! Session keys (`project_key/session_id[/subpath]`) and `project_key` for a directory.

use super::StoreError;
use std::fmt;
use std::path::Path;

/// Where one transcript lives: a project, a session, and optionally a subpath inside
/// that session (sub-agent transcripts live under `subagents/agent-<id>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub project_key: String,
    pub session_id: String,
    pub subpath: Option<String>,
}

impl SessionKey {
    /// The main transcript of a session.
    pub fn main(project_key: impl Into<String>, session_id: impl Into<String>) -> Self {
        SessionKey {
            project_key: project_key.into(),
            session_id: session_id.into(),
            subpath: None,
        }
    }

    /// A subkey of this session's main key; the subpath is validated.
    pub fn sub(&self, subpath: &str) -> Result<Self, StoreError> {
        todo_key(subpath)
    }

    /// Parses `project_key/session_id[/subpath]`.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        todo_key(text)
    }
}

fn todo_key(text: &str) -> Result<SessionKey, StoreError> {
    Err(StoreError::BadKey {
        key: text.to_string(),
        why: "not implemented yet".into(),
    })
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project_key, self.session_id)?;
        if let Some(sub) = &self.subpath {
            write!(f, "/{sub}")?;
        }
        Ok(())
    }
}

/// The project key of a directory, the same Claude Code uses for
/// `~/.claude/projects/<key>/` (DESIGN.md §4).
pub fn project_key(dir: &Path) -> String {
    dir.to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "-")
}
