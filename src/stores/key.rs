//! Session keys (`project_key/session_id[/subpath]`) and `project_key` for a directory.

use super::StoreError;
use std::fmt;
use std::path::{Path, PathBuf};
use unicode_normalization::UnicodeNormalization;

/// Where one transcript lives: a project, a session, and optionally a subpath inside
/// that session (sub-agent transcripts live under `subagents/agent-<id>`).
///
/// Keys built with [`SessionKey::parse`] and [`SessionKey::sub`] are validated; the
/// fields are public so that a key can be built by hand, and the stores re-validate
/// every key they are given before writing anything.
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

    /// A subkey of this session's main key; the subpath is validated (see
    /// [`validate_subpath`]). Calling it on a subkey replaces the subpath.
    pub fn sub(&self, subpath: &str) -> Result<Self, StoreError> {
        validate_subpath(subpath).map_err(|why| StoreError::BadKey {
            key: format!("{}/{}/{}", self.project_key, self.session_id, subpath),
            why,
        })?;
        Ok(SessionKey {
            project_key: self.project_key.clone(),
            session_id: self.session_id.clone(),
            subpath: Some(subpath.to_string()),
        })
    }

    /// The main key of this key's session (itself when it has no subpath).
    pub fn main_key(&self) -> Self {
        SessionKey::main(self.project_key.clone(), self.session_id.clone())
    }

    /// Parses `project_key/session_id[/subpath]`. Everything after the second `/` is the
    /// subpath, which may itself contain `/`.
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        let mut parts = text.splitn(3, '/');
        let project_key = parts.next().unwrap_or_default();
        let Some(session_id) = parts.next() else {
            return Err(StoreError::BadKey {
                key: text.to_string(),
                why: KeyError::Shape,
            });
        };
        let key = SessionKey {
            project_key: project_key.to_string(),
            session_id: session_id.to_string(),
            subpath: parts.next().map(str::to_string),
        };
        key.validate()?;
        Ok(key)
    }

    /// Checks every part of the key: a non-empty project key and session id without
    /// `/`, `\` or NUL, and a valid subpath when there is one.
    pub fn validate(&self) -> Result<(), StoreError> {
        let check = || -> Result<(), KeyError> {
            validate_segment("project_key", &self.project_key)?;
            validate_segment("session_id", &self.session_id)?;
            if let Some(sub) = &self.subpath {
                validate_subpath(sub)?;
            }
            Ok(())
        };
        check().map_err(|why| StoreError::BadKey {
            key: self.to_string(),
            why,
        })
    }
}

/// What is wrong with a session key (the `why` of [`StoreError::BadKey`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("要写成 project_key/session_id[/subpath]")]
    Shape,
    #[error("{0} 是空的")]
    Empty(&'static str),
    #[error("{0} 里有 '/'、'\\' 或 NUL")]
    Separator(&'static str),
    #[error("{what} 不能是 {text:?}")]
    Dots { what: &'static str, text: String },
    #[error("subpath 是空的")]
    EmptySubpath,
    #[error("subpath 里有 NUL")]
    Nul,
    #[error("subpath 是绝对路径")]
    Absolute,
    #[error("subpath 以 '\\' 开头")]
    BackslashRooted,
    #[error("subpath 以盘符开头")]
    DrivePrefix,
    #[error("subpath 里有空段")]
    EmptySegment,
    #[error("subpath 里有 {0:?} 段")]
    DotSegment(String),
}

fn validate_segment(what: &'static str, text: &str) -> Result<(), KeyError> {
    if text.is_empty() {
        return Err(KeyError::Empty(what));
    }
    if text.contains(['/', '\\', '\0']) {
        return Err(KeyError::Separator(what));
    }
    if text == "." || text == ".." {
        return Err(KeyError::Dots {
            what,
            text: text.to_string(),
        });
    }
    Ok(())
}

/// Validates a subpath that arrived from outside (a CLI argument, an agent id).
///
/// Rejected: empty; absolute (`/…`); `\`-rooted; drive-prefixed (`C:…`); containing
/// NUL; any empty, `.` or `..` segment (segments split on `/` and `\`, so `a//b` and a
/// trailing `/` are rejected too). A subpath is a storage name, never a file path, but
/// a store that maps keys to files must not be walkable out of its directory.
pub fn validate_subpath(subpath: &str) -> Result<(), KeyError> {
    if subpath.is_empty() {
        return Err(KeyError::EmptySubpath);
    }
    if subpath.contains('\0') {
        return Err(KeyError::Nul);
    }
    if subpath.starts_with('/') {
        return Err(KeyError::Absolute);
    }
    if subpath.starts_with('\\') {
        return Err(KeyError::BackslashRooted);
    }
    let bytes = subpath.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(KeyError::DrivePrefix);
    }
    for segment in subpath.split(['/', '\\']) {
        match segment {
            "" => return Err(KeyError::EmptySegment),
            "." | ".." => return Err(KeyError::DotSegment(segment.to_string())),
            _ => {}
        }
    }
    Ok(())
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

/// The longest sanitized key kept whole; longer ones get a hash suffix.
const MAX_SANITIZED_LEN: usize = 200;

/// The project key of a directory, the same Claude Code uses for
/// `~/.claude/projects/<key>/` (DESIGN.md §4).
///
/// The path is resolved with realpath when the directory exists (otherwise made absolute
/// lexically), normalized to Unicode NFC, and every UTF-16 code unit outside
/// `[A-Za-z0-9]` becomes `-` (Claude Code is JavaScript: a character outside the BMP is
/// two code units, so two dashes). Past 200 characters the key is the first 200, `-`,
/// and the base-36 absolute value of the Java-style 32-bit string hash of the full
/// (NFC) path.
pub fn project_key(dir: &Path) -> String {
    let resolved = resolve_dir(dir);
    let path: String = resolved.to_string_lossy().nfc().collect();
    let units: Vec<u16> = path.encode_utf16().collect();
    let sanitized: String = units
        .iter()
        .map(|&u| match u8::try_from(u) {
            Ok(b) if b.is_ascii_alphanumeric() => char::from(b),
            _ => '-',
        })
        .collect();
    if sanitized.len() <= MAX_SANITIZED_LEN {
        return sanitized;
    }
    let hash = units
        .iter()
        .fold(0i32, |h, &u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    format!(
        "{}-{}",
        &sanitized[..MAX_SANITIZED_LEN],
        base36(u64::from(hash.unsigned_abs()))
    )
}

fn resolve_dir(dir: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(dir) {
        return real;
    }
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    // realpath never ends in a separator; keep the lexical fallback consistent.
    let text = absolute.to_string_lossy().into_owned();
    let trimmed = text.trim_end_matches('/');
    if trimmed.is_empty() {
        absolute
    } else {
        PathBuf::from(trimmed)
    }
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_matches_javascript_to_string_36() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(2_147_483_648), "zik0zk");
    }
}
