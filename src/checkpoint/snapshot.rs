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
use super::feed::{Feed, Watcher};
use gix_index::entry::{Flags, Mode, Stat, stat::Time};
use gix_object::bstr::{BStr, BString, ByteSlice as _};
use gix_object::tree::{Entry as TreeEntry, EntryKind};
use gix_object::{Kind, Write as _, WriteTo as _};
use gix_odb::loose;
use ignore::Match;
use ignore::gitignore::Gitignore;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
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
    /// Files with more than one hard link: every turn's snapshot `lstat`s them.
    linked: BTreeSet<BString>,
    /// Each directory's `.gitignore` (by the directory's path), for a new file the
    /// feed reports; cleared by every full walk.
    ignores: HashMap<BString, Gitignore>,
    /// The change feed, once a full walk set it up; `feed_tried`: none to be had.
    feed: Option<Feed>,
    feed_tried: bool,
    last_scan: super::Scan,
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
    /// `turn`: a turn's snapshot, which looks only at the paths the change feed reports
    /// when it can, and writes the index later (once enough changed, or when dropped: a
    /// kill in between costs the next process a read of those files, nothing else).
    pub(super) fn take(&self, max_file_bytes: u64, turn: bool) -> Result<String, CheckpointError> {
        let started = SystemTime::now();
        let mut guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let cache = match guard.as_mut() {
            Some(cache) => cache,
            None => guard.insert(self.load()),
        };
        // Taken out until the snapshot succeeds: a failure part-way leaves no tree that
        // the next snapshot would trust wrongly (nor a feed: its events are drained).
        let mut trees = std::mem::take(&mut cache.trees);
        cache.generation += 1;
        let mut dirty: HashSet<BString> = HashSet::new();
        let drained = cache.feed.as_mut().map(Feed::drain).unwrap_or_default();
        let from_feed =
            turn && !drained.full_walk && cache.feed.as_ref().is_some_and(Feed::trusted);
        let mut scanned = Ok(false);
        if from_feed {
            scanned = self.scan_changes(cache, &drained.paths, max_file_bytes, &mut dirty);
        }
        cache.last_scan = super::Scan {
            full_walk: false,
            looked_at: drained.paths.len() + cache.linked.len(),
        };
        if let Ok(false) = scanned {
            cache.last_scan = super::Scan {
                full_walk: true,
                looked_at: 0,
            };
            scanned = self
                .scan_all(cache, &drained.paths, max_file_bytes, &mut dirty)
                .map(|()| true);
        }
        if let Err(e) = scanned {
            if let Some(feed) = cache.feed.as_mut() {
                feed.distrust();
            }
            return Err(e);
        }
        // In git's order already (the map's byte order): no sort.
        let entries: Vec<(&BString, Mode, gix_hash::ObjectId)> = cache
            .files
            .iter()
            .map(|(path, cached)| (path, cached.mode, cached.id))
            .collect();
        let root = self.write_tree(&entries, BStr::new(b""), &dirty, &mut trees)?;
        if cache.last_scan.full_walk {
            cache.last_scan.looked_at = entries.len();
        }
        cache.trees = trees;
        cache.racy_from = started.checked_sub(RACY_MARGIN);
        if cache.unsaved > 0 && (!turn || cache.unsaved >= SAVE_AFTER) {
            self.save(cache)?;
        }
        Ok(root.to_string())
    }

    /// The full walk: every kept file's `lstat` against the index (a path in `forced`
    /// is read whatever its stat data says: the feed said it changed). It sets the
    /// change feed's watches as it goes.
    fn scan_all(
        &self,
        cache: &mut Cache,
        forced: &BTreeSet<BString>,
        max_file_bytes: u64,
        dirty: &mut HashSet<BString>,
    ) -> Result<(), CheckpointError> {
        if !cache.feed_tried {
            cache.feed_tried = true;
            let run_dir = self
                .run_dir
                .strip_prefix(&self.workspace)
                .ok()
                .map(|p| BString::from(p.as_os_str().as_bytes()));
            cache.feed = Feed::new(run_dir);
        }
        let watcher = cache.feed.as_mut().map(|f| f.start_walk(&self.workspace));
        if let Some(watcher) = &watcher {
            watcher.watch(&self.workspace);
        }
        cache.ignores.clear();
        cache.linked.clear();
        let mut walked = Ok(());
        for found in self.walk(watcher) {
            let (full, meta) = match found {
                Ok(found) => found,
                Err(e) => {
                    walked = Err(e);
                    break;
                }
            };
            let Some(path) = full
                .strip_prefix(&self.workspace)
                .ok()
                .map(|p| BStr::new(p.as_os_str().as_bytes()))
            else {
                continue;
            };
            let force = forced.contains(path);
            if let Err(e) = self.update(cache, path, &meta, max_file_bytes, force, dirty) {
                walked = Err(e);
                break;
            }
        }
        if let Some(feed) = cache.feed.as_mut() {
            feed.finish_walk(walked.is_ok());
        }
        walked?;
        let generation = cache.generation;
        let before = cache.files.len();
        cache.files.retain(|path, cached| {
            let kept = cached.seen == generation;
            if !kept {
                mark_dirty(dirty, path.as_ref());
            }
            kept
        });
        cache.unsaved += before - cache.files.len();
        Ok(())
    }

    /// A turn's snapshot from the change feed: only the reported paths, and the files
    /// with other hard links (a write through another link is reported for that
    /// link's directory only). `Ok(false)`: a directory stands where a file was, so
    /// walk everything instead.
    fn scan_changes(
        &self,
        cache: &mut Cache,
        paths: &BTreeSet<BString>,
        max_file_bytes: u64,
        dirty: &mut HashSet<BString>,
    ) -> Result<bool, CheckpointError> {
        let linked: Vec<BString> = cache.linked.iter().cloned().collect();
        for path in paths.iter().chain(linked.iter()) {
            let full = self.workspace.join(OsStr::from_bytes(path));
            let meta = match full.symlink_metadata() {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    forget(cache, path.as_ref(), dirty);
                    continue;
                }
                Err(source) => return Err(CheckpointError::Io { path: full, source }),
            };
            if meta.is_dir() {
                return Ok(false);
            }
            if !cache.files.contains_key(path) && !self.kept(cache, path.as_ref()) {
                continue;
            }
            self.update(cache, path.as_ref(), &meta, max_file_bytes, false, dirty)?;
        }
        Ok(true)
    }

    /// Brings `path`'s entry up to date from its `lstat`: unchanged stat data (not
    /// racily clean, not `force`d) stands for unchanged content; otherwise the file is
    /// read and its blob written.
    fn update(
        &self,
        cache: &mut Cache,
        path: &BStr,
        meta: &std::fs::Metadata,
        max_file_bytes: u64,
        force: bool,
        dirty: &mut HashSet<BString>,
    ) -> Result<(), CheckpointError> {
        let mode = match mode_of(meta) {
            Some(mode) if !(meta.is_file() && meta.len() > max_file_bytes) => mode,
            _ => {
                forget(cache, path, dirty);
                return Ok(());
            }
        };
        if meta.nlink() > 1 && !meta.is_dir() {
            cache.linked.insert(path.to_owned());
        } else if !cache.linked.is_empty() {
            cache.linked.remove(path);
        }
        let stat = stat_of(meta);
        let generation = cache.generation;
        let racy_from = cache.racy_from;
        if !force
            && let Some(cached) = cache.files.get_mut(path)
            && cached.stat == stat
            && cached.mode == mode
            && racy_from.is_some_and(|from| mtime_of(meta) < from)
        {
            cached.seen = generation;
            return Ok(());
        }
        let Some(id) = self.write_blob(path, mode)? else {
            forget(cache, path, dirty); // gone since its `lstat`
            return Ok(());
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
            mark_dirty(dirty, path);
        }
        Ok(())
    }

    /// Whether the walk would keep the new file at `path`, whose directory it entered:
    /// the `.gitignore` files of that directory and of those above it, the nearest
    /// that matches deciding (the `ignore` crate's rule for its walk).
    fn kept(&self, cache: &mut Cache, path: &BStr) -> bool {
        let full = self.workspace.join(OsStr::from_bytes(path));
        let mut dir: &[u8] = path;
        loop {
            dir = match dir.rfind_byte(b'/') {
                Some(slash) => &dir[..slash],
                None => &[],
            };
            let matcher = cache.ignores.entry(BString::from(dir)).or_insert_with(|| {
                let base = self.workspace.join(OsStr::from_bytes(dir));
                Gitignore::new(base.join(".gitignore")).0
            });
            match matcher.matched(&full, false) {
                Match::Ignore(_) => return false,
                Match::Whitelist(_) => return true,
                Match::None => {}
            }
            if dir.is_empty() {
                return true;
            }
        }
    }

    /// How the last snapshot found its changes.
    pub(super) fn last_scan(&self) -> super::Scan {
        let guard = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|c| c.last_scan).unwrap_or_default()
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
    fn walk(
        &self,
        watcher: Option<Watcher>,
    ) -> impl Iterator<Item = Result<(PathBuf, std::fs::Metadata), CheckpointError>> {
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
                let kept = !(name.eq_ignore_ascii_case(b".git")
                    || path == run_dir
                    || is_dir && path.join(".git").symlink_metadata().is_ok());
                // Watched before the walk reads it: a change after the read is reported.
                if kept
                    && is_dir
                    && let Some(watcher) = &watcher
                {
                    watcher.watch(path);
                }
                kept
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
        let full = self.workspace.join(OsStr::from_bytes(path));
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

/// Drops `path`'s entry (gone, no longer a file, over the size cap).
fn forget(cache: &mut Cache, path: &BStr, dirty: &mut HashSet<BString>) {
    cache.linked.remove(path);
    if cache.files.remove(path).is_some() {
        cache.unsaved += 1;
        mark_dirty(dirty, path);
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
