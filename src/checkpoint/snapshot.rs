//! Taking a snapshot of the workspace in-process: no `git` is spawned on this path (it
//! runs after every turn that may have changed files).
//!
//! - **The walk** follows the workspace's `.gitignore` files (the `ignore` crate, git's
//!   rules), and never enters `.git/`, a nested repository or the run directory.
//! - **The stat cache** is git's index format (`gix-index`), at `runs/checkpoints/index`:
//!   a file whose `lstat` data is what the index holds costs that `lstat` and nothing
//!   more. As in git, an entry whose mtime is not safely before the moment it was read
//!   ("racily clean") is read again: the index file's mtime is set to that moment.
//! - **The objects** are git's (`gix-object` encodes, `gix-odb` writes loose objects,
//!   zlib, SHA-1): a changed file's blob, and the trees on its path. A directory whose
//!   entries did not change keeps its tree id from the last snapshot in this process.

use super::CheckpointError;
use gix_index::entry::{Flags, Mode, Stat, stat::Time};
use gix_object::bstr::{BStr, BString, ByteSlice as _};
use gix_object::tree::{Entry as TreeEntry, EntryKind};
use gix_object::{Kind, Write as _, WriteTo as _};
use gix_odb::loose;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How far before a snapshot's start an mtime must be for the cache to trust it: more
/// than a coarse file-system clock's tick, and FAT's two seconds.
const RACY_MARGIN: Duration = Duration::from_secs(2);

const HASH: gix_hash::Kind = gix_hash::Kind::Sha1;

/// A turn's snapshot writes the index once this many entries changed since it was
/// last written (it always does when dropped, and for the other snapshots).
const SAVE_AFTER: usize = 256;

#[derive(Debug, Clone)]
struct Cached {
    stat: Stat,
    mode: Mode,
    id: gix_hash::ObjectId,
    /// The snapshot that last saw it (a file not seen by this one is gone).
    seen: u64,
}

#[derive(Debug, Default)]
struct Cache {
    /// By path's bytes: git's index order, and the order trees are built in.
    files: BTreeMap<BString, Cached>,
    generation: u64,
    /// Entries changed since the index was written.
    unsaved: usize,
    /// Entries whose mtime is at or after this were read too close to a change.
    racy_from: Option<SystemTime>,
    /// The last snapshot's tree of each directory ("" the root), in this process only.
    trees: HashMap<BString, gix_hash::ObjectId>,
}

/// The writer of snapshots: the object store, the index, what the walk leaves out.
pub(super) struct Snapshots {
    objects: loose::Store,
    index: PathBuf,
    workspace: PathBuf,
    /// The run directory, never kept wherever it is.
    run_dir: PathBuf,
    cache: Mutex<Option<Cache>>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("index", &self.index)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn store_error<E>(what: &'static str) -> impl FnOnce(E) -> CheckpointError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |source| CheckpointError::Objects {
        what,
        source: Box::new(source),
    }
}

impl Snapshots {
    pub(super) fn new(
        git_dir: &Path,
        index: PathBuf,
        workspace: PathBuf,
        run_dir: PathBuf,
    ) -> Self {
        Snapshots {
            objects: loose::Store::at(git_dir.join("objects"), HASH),
            index,
            workspace,
            run_dir,
            cache: Mutex::new(None),
        }
    }

    /// The workspace's tree now; changed files' blobs and changed trees are written.
    /// `persist`: write the index now (else once enough changed, or when dropped: a
    /// kill in between costs the next process a read of those files, nothing else).
    pub(super) fn take(
        &self,
        max_file_bytes: u64,
        persist: bool,
    ) -> Result<String, CheckpointError> {
        let started = SystemTime::now();
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let cache = match guard.as_mut() {
            Some(cache) => cache,
            None => guard.insert(self.load()),
        };
        let racy_from = cache.racy_from;
        // Taken out until the snapshot succeeds: a failure part-way leaves no tree that
        // the next snapshot would trust wrongly.
        let mut trees = std::mem::take(&mut cache.trees);
        cache.generation += 1;
        let generation = cache.generation;
        let mut dirty: HashSet<BString> = HashSet::new();
        for found in self.walk() {
            let (full, meta) = found?;
            let Some(path) = full
                .strip_prefix(&self.workspace)
                .ok()
                .map(|p| BStr::new(p.as_os_str().as_bytes()))
            else {
                continue;
            };
            let mode = match mode_of(&meta) {
                Some(mode) if !(meta.is_file() && meta.len() > max_file_bytes) => mode,
                _ => continue,
            };
            let stat = stat_of(&meta);
            if let Some(cached) = cache.files.get_mut(path)
                && cached.stat == stat
                && cached.mode == mode
                && racy_from.is_some_and(|from| mtime_of(&meta) < from)
            {
                cached.seen = generation;
                continue;
            }
            let Some(id) = self.write_blob(path, mode)? else {
                continue; // gone since the walk saw it
            };
            let cached = Cached {
                stat,
                mode,
                id,
                seen: generation,
            };
            let before = cache.files.insert(path.to_owned(), cached);
            cache.unsaved += 1;
            if before.is_none_or(|b| b.id != id || b.mode != mode) {
                mark_dirty(&mut dirty, path);
            }
        }
        let before = cache.files.len();
        cache.files.retain(|path, cached| {
            let kept = cached.seen == generation;
            if !kept {
                mark_dirty(&mut dirty, path.as_ref());
            }
            kept
        });
        cache.unsaved += before - cache.files.len();
        // In git's order already (the map's byte order): no sort.
        let entries: Vec<(&BString, Mode, gix_hash::ObjectId)> = cache
            .files
            .iter()
            .map(|(path, cached)| (path, cached.mode, cached.id))
            .collect();
        let root = self.write_tree(&entries, BStr::new(b""), &dirty, &mut trees)?;
        cache.trees = trees;
        cache.racy_from = started.checked_sub(RACY_MARGIN);
        if cache.unsaved > 0 && (persist || cache.unsaved >= SAVE_AFTER) {
            self.save(cache)?;
        }
        Ok(root.to_string())
    }

    /// The index as the last snapshot left it; an index that does not read (an older
    /// git's, a torn one) is an empty cache: every file is read once.
    fn load(&self) -> Cache {
        let decode = gix_index::decode::Options::default();
        let Ok(file) = gix_index::File::at(&self.index, HASH, true, decode) else {
            return Cache::default();
        };
        let racy_from = std::fs::metadata(&self.index)
            .and_then(|m| m.modified())
            .ok();
        let files = file
            .entries()
            .iter()
            .map(|entry| {
                let cached = Cached {
                    stat: entry.stat,
                    mode: entry.mode,
                    id: entry.id,
                    seen: 0,
                };
                (entry.path(&file).to_owned(), cached)
            })
            .collect();
        Cache {
            files,
            racy_from,
            ..Cache::default()
        }
    }

    /// Writes the index (atomically), its mtime the moment before which its entries are
    /// trusted.
    fn save(&self, cache: &mut Cache) -> Result<(), CheckpointError> {
        let mut state = gix_index::State::new(HASH);
        for (path, cached) in &cache.files {
            state.dangerously_push_entry(
                cached.stat,
                cached.id,
                Flags::empty(),
                cached.mode,
                path.as_ref(),
            );
        }
        state.sort_entries();
        let options = gix_index::write::Options {
            extensions: gix_index::write::Extensions::None,
            skip_hash: true,
        };
        let file = gix_index::File::from_state(state, &self.index);
        let mut bytes = Vec::with_capacity(cache.files.len() * 80);
        file.write_to(&mut bytes, options)
            .map_err(store_error("写索引"))?;
        let temp = self.index.with_extension("tmp");
        std::fs::write(&temp, &bytes).map_err(io_error(&temp))?;
        if let Some(from) = cache.racy_from {
            let set = std::fs::File::options()
                .write(true)
                .open(&temp)
                .and_then(|f| f.set_modified(from));
            set.map_err(io_error(&temp))?;
        }
        std::fs::rename(&temp, &self.index).map_err(io_error(&self.index))?;
        cache.unsaved = 0;
        Ok(())
    }

    /// Every file and symbolic link the checkpoints keep: its path (relative, `/`) and
    /// `lstat`.
    fn walk(&self) -> impl Iterator<Item = Result<(PathBuf, std::fs::Metadata), CheckpointError>> {
        let run_dir = self.run_dir.clone();
        let root = self.workspace.clone();
        let walker = ignore::WalkBuilder::new(&self.workspace)
            .standard_filters(false)
            .git_ignore(true)
            .require_git(false)
            .parents(false)
            .follow_links(false)
            .filter_entry(move |entry| {
                let path = entry.path();
                if path == root {
                    return true;
                }
                let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
                let name = entry.file_name().as_bytes();
                !(name.eq_ignore_ascii_case(b".git")
                    || path == run_dir
                    || is_dir && path.join(".git").symlink_metadata().is_ok())
            })
            .build();
        walker.filter_map(move |entry| {
            // An unreadable directory is left out, as git's own walk leaves it.
            let entry = entry.ok()?;
            if entry.file_type().is_some_and(|t| t.is_dir()) {
                return None;
            }
            let path = entry.into_path();
            let meta = match path.symlink_metadata() {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
                Err(source) => return Some(Err(CheckpointError::Io { path, source })),
            };
            Some(Ok((path, meta)))
        })
    }

    /// Reads a file (or a link's target) and writes its blob unless the store has it;
    /// `None` when the file is gone.
    fn write_blob(
        &self,
        path: &BStr,
        mode: Mode,
    ) -> Result<Option<gix_hash::ObjectId>, CheckpointError> {
        let full = self.workspace.join(std::ffi::OsStr::from_bytes(path));
        let read = if mode == Mode::SYMLINK {
            std::fs::read_link(&full).map(|t| t.as_os_str().as_bytes().to_vec())
        } else {
            std::fs::read(&full)
        };
        let data = match read {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Io { path: full, source }),
        };
        self.write_object(Kind::Blob, &data).map(Some)
    }

    fn write_object(&self, kind: Kind, data: &[u8]) -> Result<gix_hash::ObjectId, CheckpointError> {
        let id = gix_object::compute_hash(HASH, kind, data).map_err(store_error("算对象名"))?;
        if !self.objects.object_path(&id).exists() {
            self.objects
                .write_buf_with_known_id(kind, data, id)
                .map_err(store_error("写对象"))?;
        }
        Ok(id)
    }

    /// The tree of `dir` from `entries` (sorted, paths relative to the workspace, all
    /// under `dir`), reusing the last snapshot's tree of a directory not marked dirty.
    fn write_tree(
        &self,
        entries: &[(&BString, Mode, gix_hash::ObjectId)],
        dir: &BStr,
        dirty: &HashSet<BString>,
        trees: &mut HashMap<BString, gix_hash::ObjectId>,
    ) -> Result<gix_hash::ObjectId, CheckpointError> {
        if !dirty.contains(dir)
            && let Some(id) = trees.get(dir)
        {
            return Ok(*id);
        }
        let prefix = if dir.is_empty() { 0 } else { dir.len() + 1 };
        let mut tree = gix_object::Tree::empty();
        let mut i = 0;
        while i < entries.len() {
            let (path, mode, id) = &entries[i];
            let rest = &path[prefix..];
            match rest.find_byte(b'/') {
                None => {
                    tree.entries.push(TreeEntry {
                        mode: tree_mode(*mode).into(),
                        filename: rest.into(),
                        oid: *id,
                    });
                    i += 1;
                }
                Some(slash) => {
                    // A directory's entries are contiguous: they share `name/`.
                    let sub = BStr::new(&path[..prefix + slash]);
                    let end = i + entries[i..]
                        .iter()
                        .take_while(|(p, _, _)| {
                            p.len() > sub.len() && p.starts_with(sub) && p[sub.len()] == b'/'
                        })
                        .count();
                    let id = self.write_tree(&entries[i..end], sub, dirty, trees)?;
                    tree.entries.push(TreeEntry {
                        mode: EntryKind::Tree.into(),
                        filename: rest[..slash].into(),
                        oid: id,
                    });
                    i = end;
                }
            }
        }
        tree.entries.sort();
        let mut bytes = Vec::new();
        tree.write_to(&mut bytes).map_err(io_error(&self.index))?;
        let id = self.write_object(Kind::Tree, &bytes)?;
        trees.insert(dir.to_owned(), id);
        Ok(id)
    }
}

/// Marks `path`'s directories (the root too) as needing their trees written again.
fn mark_dirty(dirty: &mut HashSet<BString>, path: &BStr) {
    let mut end = path.len();
    while let Some(slash) = path[..end].rfind_byte(b'/') {
        if !dirty.insert(path[..slash].into()) {
            return;
        }
        end = slash;
    }
    dirty.insert(BString::default());
}

fn mode_of(meta: &std::fs::Metadata) -> Option<Mode> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        Some(Mode::SYMLINK)
    } else if kind.is_file() {
        // Git's rule: the owner's execute bit.
        Some(match meta.mode() & 0o100 {
            0 => Mode::FILE,
            _ => Mode::FILE_EXECUTABLE,
        })
    } else {
        None
    }
}

fn tree_mode(mode: Mode) -> EntryKind {
    match mode {
        Mode::SYMLINK => EntryKind::Link,
        Mode::FILE_EXECUTABLE => EntryKind::BlobExecutable,
        _ => EntryKind::Blob,
    }
}

/// The stat data git's index keeps (truncated to 32 bits as git truncates it).
fn stat_of(meta: &std::fs::Metadata) -> Stat {
    let time = |secs: i64, nsecs: i64| Time {
        secs: secs as u32,
        nsecs: nsecs as u32,
    };
    Stat {
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        dev: meta.dev() as u32,
        ino: meta.ino() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        size: meta.size() as u32,
    }
}

fn mtime_of(meta: &std::fs::Metadata) -> SystemTime {
    meta.modified().unwrap_or_else(|_| SystemTime::now())
}

impl Drop for Snapshots {
    /// What the last turns' snapshots left unsaved goes to the index.
    fn drop(&mut self) {
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cache) = guard.as_mut()
            && cache.unsaved > 0
        {
            let _ = self.save(cache);
        }
    }
}
