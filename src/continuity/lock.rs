//! Who may write a run directory, and who may append to a session.
//!
//! Two kinds of OS advisory lock, both released by the kernel the moment their holder
//! exits, however it exits (SIGKILL included): no stale lock to clean up, no PID guessing.
//!
//! - The **run lock**, `runs/run.lock`: held exclusively, for its whole life, by the one
//!   process that runs the pipeline in that run directory (a [`crate::Runtime`] that owns
//!   it). The file stays after its holder is gone; it holds the holder's pid and start
//!   time (JSON), only for the message another process prints.
//! - **Session locks**, `runs/locks/<session_id>.lock`: exclusive while a process may
//!   append to the session, shared while a fork reads it. The last holder removes the
//!   file, after proving it is the last (it upgrades to exclusive first); whoever opened
//!   the file just before it was removed notices (the path no longer names its file) and
//!   opens it anew.
//!
//! On Linux these are open-file-description locks (`F_OFD_SETLK`): a lock belongs to one
//! `open` of the file, so two opens in one process conflict exactly as two processes do,
//! and a probe (`F_OFD_GETLK`) asks whether a lock is held without taking one, on a file
//! opened read-only: [`probe_run`] creates and writes nothing. Elsewhere they are `flock`
//! locks, which also belong to one open.
//!
//! Locks that live outside this machine's kernel belong to a store that hosts share (the
//! PostgreSQL store's advisory locks): the run's hold ([`crate::continuity::shared`]),
//! and each session lock's twin ([`crate::stores::SessionStore::hold_session`]), which
//! [`SessionLocks`] takes right after the file lock, so that two hosts that mount one
//! workspace at the same path (and so share a project key) never append to one session
//! at once.

use crate::engine::SessionStart;
use crate::stores::{SessionHold, SessionStore};
use chrono::{DateTime, FixedOffset, Local};
use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use crate::run_dir::{LOCKS_DIR, RUN_LOCK_FILE};

/// Who holds a lock, as its holder wrote it into the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// When the holder took the lock.
    pub since: DateTime<FixedOffset>,
    /// The holder's host, when it holds the lock through a store that hosts share
    /// (it may be another machine); `None` for a lock file of this run directory.
    pub host: Option<String>,
}

impl Holder {
    fn me() -> Holder {
        Holder {
            pid: std::process::id(),
            since: Local::now().fixed_offset(),
            host: None,
        }
    }

    /// `HH:MM` of [`Holder::since`], in local time.
    pub fn clock(&self) -> String {
        self.since.with_timezone(&Local).format("%H:%M").to_string()
    }

    fn to_json(&self) -> String {
        serde_json::json!({"pid": self.pid, "since": self.since.to_rfc3339()}).to_string() + "\n"
    }

    fn parse(text: &str) -> Option<Holder> {
        #[derive(serde::Deserialize)]
        struct Written {
            pid: u64,
            since: String,
        }
        let written: Written = serde_json::from_str(text).ok()?;
        Some(Holder {
            pid: u32::try_from(written.pid).ok()?,
            since: DateTime::parse_from_rfc3339(&written.since).ok()?,
            host: None,
        })
    }

    /// A holder as a shared store reports it ([`crate::stores::HOLDER_TAG`] text:
    /// `flower <pid> <since> <host>`).
    pub fn from_tag(tag: &str) -> Option<Holder> {
        let mut words = tag.split(' ');
        if words.next()? != crate::stores::HOLDER_TAG {
            return None;
        }
        Some(Holder {
            pid: words.next()?.parse().ok()?,
            since: DateTime::parse_from_rfc3339(words.next()?).ok()?,
            host: words.next().filter(|h| !h.is_empty()).map(str::to_string),
        })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {},{} 起", self.pid, self.since.to_rfc3339())
    }
}

/// What a probe of a lock found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Nobody holds it (or there is no lock file at all).
    Free,
    /// Someone holds it; `None` when the holder did not say who it is (yet).
    Held(Option<Holder>),
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else holds the lock.
    #[error("另一个 flower 占着 {}({})", path.display(), describe(holder))]
    Held {
        path: PathBuf,
        holder: Option<Holder>,
    },
    #[error("锁 {} 用不了({source})", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The shared store could not take or check its twin of a session lock.
    #[error("存储里的会话锁:{0}")]
    Store(#[from] crate::stores::StoreError),
}

fn describe(holder: &Option<Holder>) -> String {
    holder
        .as_ref()
        .map_or_else(|| "pid 不详".into(), Holder::to_string)
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LockError + '_ {
    move |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------------
// The run lock
// ---------------------------------------------------------------------------------

/// The run lock of one run directory, held until dropped (or the process ends).
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    dir: PathBuf,
}

impl RunLock {
    /// Takes the run lock of `run_dir` (created if missing) without waiting.
    /// [`LockError::Held`] names the holder when another open of the file holds it, in
    /// this process or another.
    pub fn acquire(run_dir: &Path) -> Result<RunLock, LockError> {
        RunLock::take(run_dir, false)
    }

    /// Waits until the run lock of `run_dir` is free, then takes it.
    pub fn wait(run_dir: &Path) -> Result<RunLock, LockError> {
        RunLock::take(run_dir, true)
    }

    fn take(run_dir: &Path, wait: bool) -> Result<RunLock, LockError> {
        std::fs::create_dir_all(run_dir).map_err(io_error(run_dir))?;
        let dir = run_dir.canonicalize().map_err(io_error(run_dir))?;
        let path = dir.join(RUN_LOCK_FILE);
        let file = open_lock_file(&path).map_err(io_error(&path))?;
        if wait {
            os::lock_wait(&file, Mode::Exclusive).map_err(io_error(&path))?;
        } else if !try_lock_settled(&file, &path)? {
            return Err(LockError::Held {
                holder: read_holder(&path),
                path,
            });
        }
        write_holder(&file).map_err(io_error(&path))?;
        live_run_locks().insert(path);
        Ok(RunLock { _file: file, dir })
    }

    /// The run directory (canonical) this lock is for.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        live_run_locks().remove(&self.dir.join(RUN_LOCK_FILE));
    }
}

/// The run lock files this process holds through a live [`RunLock`]. A lock belongs to
/// an open file description, and a child forked by any thread shares this process's
/// descriptions until its `exec` closes them (they are close-on-exec): for that moment
/// a lock this process already released still looks held. Knowing which locks are
/// really ours tells that moment apart from a second runtime on the same directory.
fn live_run_locks() -> std::sync::MutexGuard<'static, std::collections::HashSet<PathBuf>> {
    static LIVE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes the run lock without waiting. When the recorded holder is this process but no
/// live [`RunLock`] of it holds the file, the holder is a child between fork and exec:
/// retried for up to [`FORK_WINDOW`] instead of reporting a lock nobody holds.
fn try_lock_settled(file: &File, path: &Path) -> Result<bool, LockError> {
    let started = std::time::Instant::now();
    loop {
        if os::try_lock(file, Mode::Exclusive).map_err(io_error(path))? {
            return Ok(true);
        }
        let ours = read_holder(path).is_some_and(|h| h.pid == std::process::id());
        if !ours || live_run_locks().contains(path) || started.elapsed() > FORK_WINDOW {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// How long a forked child may hold this process's released lock before its `exec`.
const FORK_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// How a [`crate::Runtime`] holds its run directory.
#[derive(Debug, Default)]
pub enum RunLocking {
    /// Take the run lock when the runtime opens the directory, without waiting (the
    /// default): a second runtime on the same run directory gets
    /// [`crate::continuity::runtime::Held::RunDir`].
    #[default]
    Take,
    /// A run lock the caller took already (before it read the run's state); it must be
    /// for the same run directory.
    Held(RunLock),
    /// No run lock: for a runtime that appends only to sessions it creates or claims
    /// (`flower once`) and writes neither lineage nor manifest.
    Unlocked,
}

impl RunLocking {
    /// The run lock of `run_dir` (canonical) this asks for, taken if need be.
    pub fn resolve(self, run_dir: &Path) -> Result<Option<RunLock>, LockError> {
        match self {
            RunLocking::Take => RunLock::acquire(run_dir).map(Some),
            RunLocking::Held(held) if held.dir() == run_dir => Ok(Some(held)),
            RunLocking::Held(held) => Err(LockError::Io {
                path: run_dir.to_path_buf(),
                source: io::Error::other(format!(
                    "给的运行锁是另一个运行目录的({})",
                    held.dir().display()
                )),
            }),
            RunLocking::Unlocked => Ok(None),
        }
    }
}

/// Whether a process holds the run lock of `run_dir`, and who, asked without taking the
/// lock: the file is opened read-only, never created, never written (`flower state`).
/// A run directory or lock file that cannot be read reads as free.
pub fn probe_run(run_dir: &Path) -> Probe {
    probe(&run_dir.join(RUN_LOCK_FILE))
}

fn probe(path: &Path) -> Probe {
    let Ok(file) = File::open(path) else {
        return Probe::Free;
    };
    match os::held_elsewhere(&file) {
        Ok(true) => Probe::Held(read_holder(path)),
        _ => Probe::Free,
    }
}

// ---------------------------------------------------------------------------------
// Session locks
// ---------------------------------------------------------------------------------

/// The session locks one runtime holds: exclusive on every session it has appended to
/// (or claimed), kept until the registry is dropped, so that nobody else appends to a
/// session this runtime may still continue.
pub struct SessionLocks {
    dir: PathBuf,
    held: Mutex<HashMap<String, Taken>>,
    /// Where the sessions live; a store that hosts share holds a twin of each lock.
    store: Option<Arc<dyn SessionStore>>,
}

impl fmt::Debug for SessionLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLocks")
            .field("dir", &self.dir)
            .field("held", &lock(&self.held).len())
            .finish_non_exhaustive()
    }
}

/// A session lock and its twin in the store (see [`SessionStore::hold_session`]),
/// released together.
struct Taken {
    // Field order is drop order: the store's twin goes before the file lock.
    _shared: Box<dyn Send + Sync>,
    _file: SessionLock,
}

impl fmt::Debug for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Taken")
            .field("file", &self._file)
            .finish_non_exhaustive()
    }
}

impl SessionLocks {
    /// The registry for `run_dir`'s sessions; takes nothing yet.
    pub fn new(run_dir: &Path) -> SessionLocks {
        SessionLocks {
            dir: run_dir.join(LOCKS_DIR),
            held: Mutex::new(HashMap::new()),
            store: None,
        }
    }

    /// The same, for sessions kept in `store`: each lock also takes the store's twin.
    pub fn with_store(run_dir: &Path, store: Arc<dyn SessionStore>) -> SessionLocks {
        SessionLocks {
            store: Some(store),
            ..SessionLocks::new(run_dir)
        }
    }

    /// The file lock on session `id`, then the store's twin.
    fn take(&self, id: &str, mode: Mode) -> Result<Taken, LockError> {
        let path = session_lock_path(&self.dir, id);
        let file = SessionLock::take(&path, mode)?;
        let shared = match &self.store {
            None => Box::new(()),
            Some(store) => match store.hold_session(id, mode == Mode::Shared)? {
                SessionHold::Held(guard) => guard,
                SessionHold::Busy(holder) => {
                    return Err(LockError::Held {
                        path,
                        holder: holder.as_deref().and_then(Holder::from_tag),
                    });
                }
            },
        };
        Ok(Taken {
            _shared: shared,
            _file: file,
        })
    }

    /// Takes the exclusive lock on session `id` without waiting, and keeps it. Claiming a
    /// session already held here is a no-op.
    pub fn claim(&self, id: &str) -> Result<(), LockError> {
        let mut held = lock(&self.held);
        if !held.contains_key(id) {
            let taken = self.take(id, Mode::Exclusive)?;
            held.insert(id.to_string(), taken);
        }
        Ok(())
    }

    /// Whether this registry holds session `id`.
    pub fn holds(&self, id: &str) -> bool {
        lock(&self.held).contains_key(id)
    }

    /// The locks an agent run starting at `start` needs before it reads anything: the
    /// session it resumes (claimed, kept), or a shared lock on the session it forks, kept
    /// by the returned lease until [`Lease::started`]. A new session is claimed in
    /// [`Lease::started`], the moment it exists.
    pub fn begin(self: &Arc<Self>, start: &SessionStart) -> Result<Arc<Lease>, LockError> {
        let source = match start {
            SessionStart::New => None,
            SessionStart::Resume(id) => {
                self.claim(id)?;
                None
            }
            // The writer holds it here: nobody is mid-append.
            SessionStart::Fork(id) if self.holds(id) => None,
            SessionStart::Fork(id) => Some(self.take(id, Mode::Shared)?),
        };
        Ok(Arc::new(Lease {
            locks: self.clone(),
            source: Mutex::new(source),
        }))
    }
}

/// One agent run's hold on the session it forks from, until its own session exists.
#[derive(Debug)]
pub struct Lease {
    locks: Arc<SessionLocks>,
    source: Mutex<Option<Taken>>,
}

impl Lease {
    /// The run's session `id` exists (a fork has copied its source): claim it, release
    /// the source. A claim that fails (someone guessed a fresh id) is not this run's
    /// problem to solve mid-flight; it goes on unlocked.
    pub fn started(&self, id: &str) {
        let _ = self.locks.claim(id);
        lock(&self.source).take();
    }
}

/// Whether a process holds a lock on session `id` of `run_dir`, and who, asked without
/// taking it (nothing is created or written).
pub fn probe_session(run_dir: &Path, id: &str) -> Probe {
    probe(&session_lock_path(&run_dir.join(LOCKS_DIR), id))
}

/// `locks/<id>.lock`, the id escaped so that it is one plain file name whatever it holds.
fn session_lock_path(dir: &Path, id: &str) -> PathBuf {
    let mut name = String::with_capacity(id.len() + 5);
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            name.push(byte as char);
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name.push_str(".lock");
    dir.join(name)
}

/// One taken session lock; removes its file on drop when it is the last holder.
#[derive(Debug)]
struct SessionLock {
    file: File,
    path: PathBuf,
}

impl SessionLock {
    fn take(path: &Path, mode: Mode) -> Result<SessionLock, LockError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        }
        loop {
            let file = open_lock_file(path).map_err(io_error(path))?;
            if !os::try_lock(&file, mode).map_err(io_error(path))? {
                return Err(LockError::Held {
                    path: path.to_path_buf(),
                    holder: read_holder(path),
                });
            }
            // The last holder may have removed the file between our open and our lock:
            // then we hold a lock on a file nobody else will ever see. Open it anew.
            if names_file(path, &file) {
                if mode == Mode::Exclusive {
                    write_holder(&file).map_err(io_error(path))?;
                }
                return Ok(SessionLock {
                    file,
                    path: path.to_path_buf(),
                });
            }
        }
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Only the last holder may remove the file; becoming exclusive proves it.
        if os::try_lock(&self.file, Mode::Exclusive).unwrap_or(false) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn names_file(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(on_disk), Ok(ours)) => on_disk.dev() == ours.dev() && on_disk.ino() == ours.ino(),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------
// Lock files
// ---------------------------------------------------------------------------------

fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
}

/// Bytes of a holder record: the JSON padded with spaces, so that a new holder
/// overwrites the last one in place. Truncating instead costs milliseconds on ext4,
/// which flushes a file truncated to zero when it is closed (`auto_da_alloc`).
const HOLDER_LEN: usize = 128;

fn write_holder(file: &File) -> io::Result<()> {
    let mut record = Holder::me().to_json().into_bytes();
    record.pop(); // the newline goes last, after the padding
    record.resize(HOLDER_LEN - 1, b' ');
    record.push(b'\n');
    if file.metadata()?.len() > HOLDER_LEN as u64 {
        file.set_len(HOLDER_LEN as u64)?;
    }
    file.write_all_at(&record, 0)
}

/// The holder named in `path`. Its holder writes it just after taking the lock, so an
/// empty or half-written file is read again a few times before giving up.
fn read_holder(path: &Path) -> Option<Holder> {
    for _ in 0..20 {
        let mut text = String::new();
        if let Ok(mut file) = File::open(path)
            && file.read_to_string(&mut text).is_ok()
            && let Some(holder) = Holder::parse(&text)
        {
            return Some(holder);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Shared,
    Exclusive,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod os {
    //! Open-file-description locks over the whole file.
    use super::Mode;
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd as _;

    fn whole_file(kind: libc::c_int) -> libc::flock {
        // SAFETY: `flock` is a plain C struct; all-zero is a valid value of it (and
        // `l_pid` must be 0 for the OFD commands).
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = kind as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock
    }

    fn kind(mode: Mode) -> libc::c_int {
        match mode {
            Mode::Shared => libc::F_RDLCK,
            Mode::Exclusive => libc::F_WRLCK,
        }
    }

    fn fcntl(file: &File, command: libc::c_int, lock: &mut libc::flock) -> io::Result<()> {
        loop {
            // SAFETY: a valid open descriptor and a pointer to a live `flock`.
            let rc = unsafe { libc::fcntl(file.as_raw_fd(), command, lock as *mut libc::flock) };
            if rc != -1 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// `false` when another open of the file holds a conflicting lock.
    pub fn try_lock(file: &File, mode: Mode) -> io::Result<bool> {
        match fcntl(file, libc::F_OFD_SETLK, &mut whole_file(kind(mode))) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn lock_wait(file: &File, mode: Mode) -> io::Result<()> {
        fcntl(file, libc::F_OFD_SETLKW, &mut whole_file(kind(mode)))
    }

    /// Whether another open of the file holds any lock on it; takes none.
    pub fn held_elsewhere(file: &File) -> io::Result<bool> {
        let mut lock = whole_file(libc::F_WRLCK);
        fcntl(file, libc::F_OFD_GETLK, &mut lock)?;
        Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod os {
    //! `flock` locks (per open, like OFD locks).
    use super::Mode;
    use std::fs::File;
    use std::io;
    use std::os::fd::AsRawFd as _;

    fn flock(file: &File, operation: libc::c_int) -> io::Result<bool> {
        loop {
            // SAFETY: a valid open descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
                return Ok(true);
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => return Ok(false),
                _ => return Err(error),
            }
        }
    }

    fn operation(mode: Mode) -> libc::c_int {
        match mode {
            Mode::Shared => libc::LOCK_SH,
            Mode::Exclusive => libc::LOCK_EX,
        }
    }

    pub fn try_lock(file: &File, mode: Mode) -> io::Result<bool> {
        flock(file, operation(mode) | libc::LOCK_NB)
    }

    pub fn lock_wait(file: &File, mode: Mode) -> io::Result<()> {
        flock(file, operation(mode)).map(|_| ())
    }

    /// Without a test-only command: a shared lock taken and dropped at once (it
    /// conflicts with the exclusive holders a probe asks about).
    pub fn held_elsewhere(file: &File) -> io::Result<bool> {
        if flock(file, libc::LOCK_SH | libc::LOCK_NB)? {
            flock(file, libc::LOCK_UN)?;
            Ok(false)
        } else {
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_become_plain_file_names() {
        let dir = Path::new("/r/locks");
        assert_eq!(
            session_lock_path(dir, "47395075-ab_c"),
            dir.join("47395075-ab_c.lock")
        );
        assert_eq!(
            session_lock_path(dir, "../x/.y"),
            dir.join("%2E%2E%2Fx%2F%2Ey.lock")
        );
    }

    #[test]
    fn holder_round_trips() {
        let me = Holder::me();
        assert_eq!(Holder::parse(&me.to_json()), Some(me));
        assert_eq!(Holder::parse(""), None);
    }

    #[test]
    fn a_holder_record_overwrites_the_last_in_place() {
        let path = std::env::temp_dir().join(format!("flower-lock-{}", std::process::id()));
        std::fs::write(&path, "x".repeat(300)).unwrap();
        let file = open_lock_file(&path).unwrap();
        write_holder(&file).unwrap();
        write_holder(&file).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(text.len(), HOLDER_LEN);
        assert_eq!(
            Holder::parse(&text).map(|h| h.pid),
            Some(std::process::id())
        );
    }
}
