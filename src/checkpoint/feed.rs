//! The change feed (git's fsmonitor idea, with the kernel's inotify): the process that
//! takes checkpoints watches every directory its last full walk kept, so that a turn's
//! checkpoint looks only at the paths reported changed instead of `lstat`-ing every
//! file.
//!
//! inotify reports changes by inode, whatever the mount namespace: a Bash command in the
//! sandbox (bind mounts of the same file system) is reported like flower's own writes.
//! What the feed cannot vouch for makes the next checkpoint a full walk: a lost event
//! (the queue overflowed), a directory created, removed or renamed, a `.gitignore`
//! changed, a watch that could not be set. The watches are set by the full walk itself,
//! each before its directory is read, so that nothing changed after the read goes
//! unreported. Only turn checkpoints trust the feed; an attempt's checkpoint and every
//! snapshot a rewind compares with walk the whole workspace (a second, independent line:
//! a change the feed missed shows there, and a rewind refuses instead of losing it).

use gix_object::bstr::BString;
use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a directory's watch reports: every change of an entry's content, metadata or
/// name, and the directory's own removal.
fn watch_flags() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::ATTRIB
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::EXCL_UNLINK
}

/// What the queue said since the last drain.
#[derive(Debug, Default)]
pub(super) struct Drained {
    /// Paths (relative to the workspace) whose entry changed.
    pub paths: BTreeSet<BString>,
    /// Something the feed cannot describe happened: walk everything.
    pub full_walk: bool,
}

/// Sets watches during a full walk (shared with the walk's filter, which runs on the
/// walker's side).
#[derive(Clone)]
pub(super) struct Watcher {
    fd: Arc<OwnedFd>,
    workspace: PathBuf,
    added: Arc<Mutex<Vec<(i32, BString)>>>,
    failed: Arc<AtomicBool>,
}

impl Watcher {
    /// Watches `dir` (absolute, in the workspace). A failure (the user's watch limit,
    /// a directory gone) leaves the feed untrusted until the next full walk.
    pub(super) fn watch(&self, dir: &Path) {
        let Ok(relative) = dir.strip_prefix(&self.workspace) else {
            self.failed.store(true, Ordering::Relaxed);
            return;
        };
        match inotify::add_watch(&*self.fd, dir, watch_flags()) {
            Ok(wd) => {
                let name = BString::from(relative.as_os_str().as_bytes());
                let mut added = self.added.lock().unwrap_or_else(|e| e.into_inner());
                added.push((wd, name));
            }
            Err(_) => self.failed.store(true, Ordering::Relaxed),
        }
    }
}

pub(super) struct Feed {
    fd: Arc<OwnedFd>,
    /// Watch descriptor → its directory (relative, "" the workspace).
    dirs: HashMap<i32, BString>,
    /// A full walk set every watch and nothing was lost since.
    trusted: bool,
    /// The run directory's path in the workspace, whose changes are never kept.
    run_dir: Option<BString>,
    pending: Option<Watcher>,
    buffer: Vec<MaybeUninit<u8>>,
}

impl Feed {
    /// A feed, or `None` where inotify is not to be had (the user's instance limit).
    pub(super) fn new(run_dir: Option<BString>) -> Option<Feed> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        Some(Feed {
            fd: Arc::new(fd),
            dirs: HashMap::new(),
            trusted: false,
            run_dir,
            pending: None,
            buffer: vec![MaybeUninit::uninit(); 64 * 1024],
        })
    }

    /// Whether a checkpoint may look only at the drained paths.
    pub(super) fn trusted(&self) -> bool {
        self.trusted
    }

    /// The watcher a full walk of `workspace` sets its watches with.
    pub(super) fn start_walk(&mut self, workspace: &Path) -> Watcher {
        let watcher = Watcher {
            fd: Arc::clone(&self.fd),
            workspace: workspace.to_path_buf(),
            added: Arc::default(),
            failed: Arc::default(),
        };
        self.pending = Some(watcher.clone());
        watcher
    }

    /// After a full walk: the watches it set are the feed's; a directory no longer
    /// walked is no longer watched.
    pub(super) fn finish_walk(&mut self, walked: bool) {
        let Some(watcher) = self.pending.take() else {
            return;
        };
        let added = std::mem::take(&mut *watcher.added.lock().unwrap_or_else(|e| e.into_inner()));
        let failed = watcher.failed.load(Ordering::Relaxed);
        let fresh: HashSet<i32> = added.iter().map(|(wd, _)| *wd).collect();
        for wd in self.dirs.keys().filter(|wd| !fresh.contains(wd)) {
            let _ = inotify::remove_watch(&*self.fd, *wd);
        }
        self.dirs = added.into_iter().collect();
        self.trusted = walked && !failed;
    }

    /// After a failed snapshot: its drained events were not applied.
    pub(super) fn distrust(&mut self) {
        self.trusted = false;
    }

    /// Reads every event queued so far.
    pub(super) fn drain(&mut self) -> Drained {
        let mut drained = Drained::default();
        let mut reader = inotify::Reader::new(&*self.fd, &mut self.buffer);
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => {
                    drained.full_walk = true;
                    break;
                }
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                drained.full_walk = true;
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd()) else {
                continue; // a watch this feed removed
            };
            let name = event.file_name().map(|n| n.to_bytes()).unwrap_or_default();
            if name.is_empty() {
                // The directory itself: removed, renamed, its mode changed.
                drained.full_walk = true;
                continue;
            }
            let mut path = dir.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            if self.run_dir.as_ref() == Some(&path) {
                continue;
            }
            if flags.contains(ReadFlags::ISDIR)
                || name == b".gitignore"
                || name.eq_ignore_ascii_case(b".git")
            {
                drained.full_walk = true;
                continue;
            }
            drained.paths.insert(path);
        }
        if drained.full_walk {
            self.trusted = false;
        }
        drained
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("watches", &self.dirs.len())
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}
