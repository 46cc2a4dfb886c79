//! `runs/lineage.json`: which session each step of a workflow used, so that the next
//! process continues the same conversations (spec 接续.md, 血缘; DESIGN.md §3).
//!
//! ```json
//! {"workspace": "/abs/proj", "woke": 3, "steps": {"干活": "47395075-…"}}
//! ```
//!
//! Two invariants drive this module:
//! - **Written the moment a session id exists**, atomically (`lineage.json.tmp`, fsync,
//!   rename), because a process killed by SIGHUP or SIGKILL runs no cleanup at all. A
//!   write error is swallowed by [`Lineage::remember`] and [`Lineage::wake`]: continuation
//!   is a bonus and must never stop a run.
//! - **What does not match counts as absent**: another workspace path (the directory was
//!   copied or moved), a session no longer in `sessions.db`, or an unreadable file all
//!   load as an empty lineage, silently.

use super::attempt::AttemptName;
use super::shared::SharedRun;
use crate::stores::StoreError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use crate::run_dir::{LINEAGE_FILE, LINEAGE_TMP_FILE};

/// Exactly what `lineage.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineageFile {
    /// The canonical absolute path of the workspace the steps ran in: the guard against a
    /// copied or moved directory, whose old session ids mean nothing at the new place.
    pub workspace: String,
    /// How many processes have run the workflow here (wakes).
    pub woke: u64,
    /// Plain step name → the session id that step last used.
    pub steps: BTreeMap<String, String>,
    /// The store that holds the run when it is not this run directory (a PostgreSQL
    /// URL, without its password): the file is then only a mirror, and a `flower` that
    /// is not given that store refuses the run. Absent: `sessions.db` beside the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The run's name in that store, when it has one (`--run-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_key: Option<String>,
}

/// The lineage of one workspace and run dir, loaded once per process and kept current on
/// disk. Plain data, `Send + Sync`: share it as `Arc<Mutex<Lineage>>`.
#[derive(Debug, Clone)]
pub struct Lineage {
    run_dir: PathBuf,
    path: PathBuf,
    workspace: String,
    woke: u64,
    steps: BTreeMap<String, String>,
    /// With a shared database, the truth; `lineage.json` is then its mirror.
    shared: Option<SharedRun>,
    /// A database write failed: the next one sends every step, not only its own.
    unsynced: bool,
    /// `lineage.json` was there and could not be read: loaded as empty, and kept aside
    /// before it is overwritten ([`Lineage::keep_unreadable`]).
    unreadable: bool,
}

/// What is at `lineage.json`, for telling why a run starts afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineageOnDisk {
    Missing,
    /// There, and not a lineage file (corrupt, truncated, unreadable).
    Unreadable,
    /// Written for another workspace (the directory was moved or copied): the path it names.
    Elsewhere(String),
    Matching(LineageFile),
}

/// Whether `name` is a plain step name, the only kind lineage remembers: not an attempt
/// name (`#retry<N>`, `#round<N>`, `·判定#<N>`; see [`AttemptName`]) and not empty.
/// A step whose own name ends like an attempt name is never remembered.
pub fn is_plain_step_name(name: &str) -> bool {
    !name.is_empty() && AttemptName::parse(name).is_first()
}

impl Lineage {
    /// An empty lineage (woke 0, no steps) for `workspace`, writing to
    /// `run_dir/lineage.json`. Nothing is read or written.
    pub fn empty(run_dir: &Path, workspace: &Path) -> Lineage {
        Lineage {
            run_dir: run_dir.to_path_buf(),
            path: run_dir.join(LINEAGE_FILE),
            workspace: canonical_string(workspace),
            woke: 0,
            steps: BTreeMap::new(),
            shared: None,
            unsynced: false,
            unreadable: false,
        }
    }

    /// The lineage of a run kept in a shared database (see [`super::shared`]): read
    /// from there, each session kept only if `is_alive`; `lineage.json` in `run_dir` is
    /// only written (as a mirror), never read. An error reading the database is
    /// returned, never taken for "no lineage". Writes nothing.
    pub fn load_shared(
        run_dir: &Path,
        workspace: &Path,
        shared: SharedRun,
        is_alive: impl Fn(&str) -> Result<bool, StoreError>,
    ) -> Result<Lineage, StoreError> {
        let mut lineage = Lineage::empty(run_dir, workspace);
        let (woke, steps) = shared.lineage()?;
        lineage.admit(woke, steps, is_alive)?;
        lineage.shared = Some(shared);
        Ok(lineage)
    }

    /// The shared run this lineage is kept in, if any.
    pub fn shared(&self) -> Option<&SharedRun> {
        self.shared.as_ref()
    }

    /// Loads `run_dir/lineage.json` for `workspace`. Never fails: a missing, unreadable,
    /// corrupt, truncated or wrongly typed file, or one written for another workspace,
    /// loads as [`Lineage::empty`]. Each remembered session is kept only if
    /// `is_alive(session_id)` (it is still in `sessions.db`): resuming a session that is
    /// gone would only fail later, deep inside a run. Writes nothing.
    pub fn load(run_dir: &Path, workspace: &Path, is_alive: impl Fn(&str) -> bool) -> Lineage {
        match Lineage::try_load(run_dir, workspace, |id| {
            Ok::<_, std::convert::Infallible>(is_alive(id))
        }) {
            Ok(lineage) => lineage,
            Err(never) => match never {},
        }
    }

    /// Like [`Lineage::load`], but asking the store can fail: an error reading it is
    /// returned, never read as "the session is gone". The silent fallback is for a
    /// session that really is gone; forgetting a live conversation because the database
    /// was busy or unreadable for a moment would lose it.
    pub fn try_load<E>(
        run_dir: &Path,
        workspace: &Path,
        is_alive: impl Fn(&str) -> Result<bool, E>,
    ) -> Result<Lineage, E> {
        let mut lineage = Lineage::empty(run_dir, workspace);
        match on_disk(&lineage.path, &lineage.workspace) {
            LineageOnDisk::Matching(file) => lineage.admit(file.woke, file.steps, is_alive)?,
            LineageOnDisk::Unreadable => lineage.unreadable = true,
            LineageOnDisk::Missing | LineageOnDisk::Elsewhere(_) => {}
        }
        Ok(lineage)
    }

    /// Takes `woke` and the steps whose session is still alive (plain names only).
    fn admit<E>(
        &mut self,
        woke: u64,
        steps: impl IntoIterator<Item = (String, String)>,
        is_alive: impl Fn(&str) -> Result<bool, E>,
    ) -> Result<(), E> {
        self.woke = woke;
        for (step, id) in steps {
            if is_plain_step_name(&step) && !id.is_empty() && is_alive(&id)? {
                self.steps.insert(step, id);
            }
        }
        Ok(())
    }

    /// The parsed `run_dir/lineage.json` when it is readable and was written for this
    /// `workspace`; `None` otherwise. Strictly read-only (the wake probe relies on that);
    /// sessions are not checked against the store.
    pub fn read(run_dir: &Path, workspace: &Path) -> Option<LineageFile> {
        read_matching(&run_dir.join(LINEAGE_FILE), &canonical_string(workspace))
    }

    /// What is at `run_dir/lineage.json` for `workspace`. Strictly read-only.
    pub fn on_disk(run_dir: &Path, workspace: &Path) -> LineageOnDisk {
        on_disk(&run_dir.join(LINEAGE_FILE), &canonical_string(workspace))
    }

    /// Whether `lineage.json` was there and could not be read when this was loaded.
    pub fn unreadable(&self) -> bool {
        self.unreadable
    }

    /// Moves an unreadable `lineage.json` (see [`Lineage::unreadable`]) aside, to
    /// `lineage.json.corrupt-<YYYYmmdd-HHMMSS>`, before a write replaces it: the spec's
    /// silent fresh start loses nothing. Where it went; `None` when there was nothing to
    /// keep (readable by now, or gone).
    pub fn keep_unreadable(&mut self) -> io::Result<Option<PathBuf>> {
        if !self.unreadable || on_disk(&self.path, &self.workspace) != LineageOnDisk::Unreadable {
            return Ok(None);
        }
        let aside = aside_path(&self.path);
        fs::rename(&self.path, &aside)?;
        sync_dir(&self.run_dir);
        self.unreadable = false;
        Ok(Some(aside))
    }

    /// How many processes have woken this workflow (0 before the first [`Lineage::wake`]).
    pub fn woke(&self) -> u64 {
        self.woke
    }

    /// Plain step name → session id.
    pub fn steps(&self) -> &BTreeMap<String, String> {
        &self.steps
    }

    /// The session `step` last used, if it is remembered.
    pub fn session(&self, step: &str) -> Option<&str> {
        self.steps.get(step).map(String::as_str)
    }

    /// `run_dir/lineage.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The canonical workspace path this lineage is for (what the file's `workspace`
    /// field holds).
    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    /// Records that `step` uses `session_id`, and writes the file at once. Suffixed
    /// attempt names never enter (see [`is_plain_step_name`]); the caller passes the
    /// step's own name. A write error is swallowed so that the run goes on.
    ///
    /// Returns whether the file now holds this pair (false for a suffixed name or a
    /// failed write; the pair is still kept in memory after a failed write).
    pub fn remember(&mut self, step: &str, session_id: &str) -> bool {
        if !is_plain_step_name(step) || session_id.is_empty() {
            return false;
        }
        self.steps.insert(step.to_owned(), session_id.to_owned());
        let saved = match &self.shared {
            Some(_) if self.unsynced => self.sync(),
            Some(shared) => {
                self.unsynced = shared.remember(step, session_id).is_err();
                !self.unsynced
            }
            None => true,
        };
        // The mirror follows even when the database write failed: the person reading
        // it sees what this process knows.
        self.save().is_ok() && saved
    }

    /// Forgets `step`'s session (a rewind to before the step began), writing the file;
    /// the next run starts the step afresh. A local lineage only (a shared run's
    /// rewind is files only).
    pub fn forget(&mut self, step: &str) -> bool {
        self.steps.remove(step).is_some() && self.save().is_ok()
    }

    /// Counts one more wake (once per process that runs the workflow) and writes the
    /// file, swallowing a write error. Returns the new count.
    pub fn wake(&mut self) -> u64 {
        // The database counts (hosts may wake the run in turn); offline, this process
        // still counts its own wake.
        self.woke = match self.shared.as_ref().map(SharedRun::wake) {
            Some(Ok(woke)) => woke,
            _ => self.woke + 1,
        };
        if self.unsynced {
            self.sync();
        }
        let _ = self.save();
        self.woke
    }

    /// Sends every step to the shared database after a failed write; whether it took.
    fn sync(&mut self) -> bool {
        let Some(shared) = &self.shared else {
            return true;
        };
        let ok = self
            .steps
            .iter()
            .all(|(step, id)| shared.remember(step, id).is_ok());
        self.unsynced = !ok;
        ok
    }

    /// Writes the lineage atomically: `lineage.json.tmp`, fsync, rename over
    /// `lineage.json`, creating the run dir if needed. A reader (or a process killed
    /// mid-write) never sees half a file.
    pub fn save(&self) -> io::Result<()> {
        fs::create_dir_all(&self.run_dir)?;
        let file = LineageFile {
            workspace: self.workspace.clone(),
            woke: self.woke,
            steps: self.steps.clone(),
            store: self.shared.as_ref().and_then(SharedRun::location),
            run_key: self
                .shared
                .as_ref()
                .and_then(SharedRun::name)
                .map(str::to_owned),
        };
        let mut bytes = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
        bytes.push(b'\n');
        let tmp = self.run_dir.join(LINEAGE_TMP_FILE);
        let locked = lock_tmp(&tmp)?;
        write_locked_and_rename(locked, &bytes, &tmp, &self.path)?;
        sync_dir(&self.run_dir);
        Ok(())
    }

    /// Starts over (`/new`): moves `lineage.json` and each existing `extra` file (需求.md,
    /// 目标.md) into the directory `into` (created if needed), keeping their file names,
    /// then resets steps and woke. Nothing is deleted; a file already at a destination
    /// is an error (`AlreadyExists`) and nothing moves. Missing files are skipped. The
    /// reset lineage is not written until the next [`remember`](Lineage::remember) or
    /// [`wake`](Lineage::wake).
    /// With a shared run, the database forgets the steps and wakes first (an error then
    /// moves nothing).
    pub fn archive(&mut self, into: &Path, extra: &[PathBuf]) -> io::Result<()> {
        let mut moves: Vec<(PathBuf, PathBuf)> = Vec::new();
        let sources = std::iter::once(self.path.clone()).chain(extra.iter().cloned());
        for source in sources {
            if fs::symlink_metadata(&source).is_err() {
                continue;
            }
            let Some(name) = source.file_name() else {
                continue;
            };
            let dest = into.join(name);
            if fs::symlink_metadata(&dest).is_ok() || moves.iter().any(|(_, d)| *d == dest) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} 已经存在;不覆盖归档", dest.display()),
                ));
            }
            moves.push((source, dest));
        }
        if let Some(shared) = &self.shared {
            shared.reset().map_err(io::Error::other)?;
        }
        fs::create_dir_all(into)?;
        for (source, dest) in &moves {
            move_file(source, dest)?;
        }
        sync_dir(into);
        sync_dir(&self.run_dir);
        self.steps.clear();
        self.woke = 0;
        Ok(())
    }
}

/// Reads and parses `path`, returning it only when it is for `workspace`.
fn read_matching(path: &Path, workspace: &str) -> Option<LineageFile> {
    match on_disk(path, workspace) {
        LineageOnDisk::Matching(file) => Some(file),
        _ => None,
    }
}

fn on_disk(path: &Path, workspace: &str) -> LineageOnDisk {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return LineageOnDisk::Missing,
        Err(_) => return LineageOnDisk::Unreadable,
    };
    let Ok(file) = serde_json::from_slice::<LineageFile>(&bytes) else {
        return LineageOnDisk::Unreadable;
    };
    let same =
        file.workspace == workspace || canonical_string(Path::new(&file.workspace)) == workspace;
    match same {
        true => LineageOnDisk::Matching(file),
        false => LineageOnDisk::Elsewhere(file.workspace),
    }
}

/// The canonical absolute form of `path`; for a path that does not exist (so cannot be
/// canonicalized), its absolute form.
fn canonical_string(path: &Path) -> String {
    let resolved = fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf());
    resolved.to_string_lossy().into_owned()
}

/// Opens the shared temporary file and takes an exclusive lock on it, so that two
/// processes saving at once cannot interleave their bytes in it. After the lock is
/// granted the path must still name the same file: the previous holder may have renamed
/// it away (then we would be writing into the live file) — if so, start again.
fn lock_tmp(tmp: &Path) -> io::Result<File> {
    // Each retry means another writer completed a save meanwhile; the bound only guards
    // against a path that never stays put (it would take a pathological filesystem).
    for _ in 0..1000 {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(tmp)?;
        // A filesystem without flock (some network mounts) still gets its lineage: the
        // lock only matters when two processes save at the same instant.
        let _ = file.lock();
        if same_file(&file, tmp) {
            return Ok(file);
        }
    }
    Err(io::Error::other(format!(
        "{} 在锁下还一直在变",
        tmp.display()
    )))
}

fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Replaces the locked temporary file's content with `bytes`, flushes it to disk and
/// renames it over `dest`. A directory squatting on `dest` is moved aside, never deleted.
fn write_locked_and_rename(
    mut file: File,
    bytes: &[u8],
    tmp: &Path,
    dest: &Path,
) -> io::Result<()> {
    file.set_len(0)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    if let Err(err) = fs::rename(tmp, dest) {
        if !fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
            return Err(err);
        }
        fs::rename(dest, aside_path(dest))?;
        fs::rename(tmp, dest)?;
    }
    // The lock goes with the file handle, after the rename: a waiting writer then finds
    // that the path names another file and reopens it.
    drop(file);
    Ok(())
}

/// `<path>.corrupt-<YYYYmmdd-HHMMSS>`, with `-N` added if that name is taken.
pub(crate) fn aside_path(path: &Path) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let base = format!("{}.corrupt-{stamp}", path.to_string_lossy());
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while fs::symlink_metadata(&candidate).is_ok() {
        candidate = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

/// Renames `from` to `to`; across filesystems, copies and then removes the original.
fn move_file(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::CrossesDevices => {
            fs::copy(from, to)?;
            File::open(to)?.sync_all()?;
            fs::remove_file(from)
        }
        Err(err) => Err(err),
    }
}

/// Makes a rename in `dir` durable. Best effort: some filesystems refuse to fsync a
/// directory, and the rename itself already happened.
pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}
