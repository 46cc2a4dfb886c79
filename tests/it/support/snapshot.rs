//! Proving a command read-only: a snapshot of every file and directory (size, mtime,
//! inode, content) before and after, compared.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

/// Path → (size, mtime, inode, content; `None` for a directory).
pub type Snapshot = BTreeMap<String, (u64, SystemTime, u64, Option<Vec<u8>>)>;

/// Every entry under `dir`, and `dir` itself (creating or removing anything in it
/// changes its mtime).
pub fn snapshot(dir: &Path) -> Snapshot {
    snapshot_all(&[dir])
}

/// [`snapshot`] of each of `dirs` that exists.
pub fn snapshot_all(dirs: &[&Path]) -> Snapshot {
    let mut out = Snapshot::new();
    let dirs: Vec<&Path> = dirs.iter().copied().filter(|d| d.exists()).collect();
    let mut stack: Vec<_> = dirs.iter().map(|d| d.to_path_buf()).collect();
    for dir in dirs {
        let meta = std::fs::metadata(dir).unwrap();
        out.insert(
            dir.display().to_string(),
            (meta.len(), meta.modified().unwrap(), meta.ino(), None),
        );
    }
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_dir() {
                stack.push(path.clone());
                None
            } else {
                Some(std::fs::read(&path).unwrap())
            };
            out.insert(
                path.display().to_string(),
                (meta.len(), meta.modified().unwrap(), meta.ino(), content),
            );
        }
    }
    out
}

/// Panics, saying what, when anything was created, removed or changed.
pub fn assert_same(before: &Snapshot, after: &Snapshot, what: &str) {
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "{what}: files created or removed"
    );
    for (path, was) in before {
        let now = &after[path];
        assert!(
            was == now,
            "{what}: {path} changed (size {} -> {}, mtime {:?} -> {:?})",
            was.0,
            now.0,
            was.1,
            now.1
        );
    }
}
