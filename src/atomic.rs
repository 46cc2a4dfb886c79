//! Replacing a file atomically: the one way flower writes files that others may read
//! while it writes, or that a kill must never leave half-written (the agent's Write and
//! Edit, the notes, trimmed tool results). `lineage.json` and `manifest.json` add their
//! own locking on top (see `continuity::lineage`, `continuity::manifest`).

use std::io::Write as _;
use std::path::Path;

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`. A
/// kill mid-write, or a reader at the same moment, sees the old content or the new
/// one, never half of it. An existing file keeps its permissions; the temporary file
/// is removed if anything fails. The parent directory must exist.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Unique per writer, so concurrent writers never share a temporary file.
    let tmp = dir.join(format!(
        ".{name}.flower-{}-{:08x}.tmp",
        std::process::id(),
        fastrand::u32(..)
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if let Ok(meta) = std::fs::metadata(path) {
            file.set_permissions(meta.permissions())?;
        }
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
