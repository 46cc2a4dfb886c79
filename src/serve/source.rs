//! Where `flower serve` finds runs and how it reads one: the run directories under a
//! directory, or every run of a PostgreSQL store. Read-only throughout: `sessions.db`
//! opened read-only, the database's connections in read-only transactions, run locks
//! probed (never taken).

use flower::continuity::lock::{self, Probe};
use flower::continuity::shared::{RunStateStore, SharedRun};
use flower::inspect::Run;
use flower::run_dir::RunDir;
use flower::stores::postgres::ListedRun;
use flower::stores::{PostgresStore, SessionStore};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How deep below the served directory run directories are looked for.
const MAX_DEPTH: usize = 6;
/// How long a directory walk is reused: a new run shows within this; a tree of a
/// thousand workspaces is not walked on every look.
const WALKED_FOR: Duration = Duration::from_secs(10);
/// How long the database's run list (one query, with who holds each run) is reused.
const LISTED_FOR: Duration = Duration::from_secs(2);

/// What is served.
pub enum Source {
    /// Run directories under `root` (it may be one itself, or a workspace with `runs/`).
    Tree { root: PathBuf },
    /// Every run of a shared store.
    Store { store: Arc<PostgresStore> },
}

/// A run found: how to open it and what the finding said of it.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its name in URLs: the run directory's path below the root (`/` as `~`), or the
    /// run key in a database.
    pub key: String,
    pub workspace: PathBuf,
    pub run_dir: PathBuf,
    /// In a shared store: its row there, with who holds it.
    pub listed: Option<ListedRun>,
    /// The key of the run in whose workspace this run directory lies: an agent of
    /// that run can write such a directory, so it is never listed as the person's own.
    pub inside: Option<String>,
}

/// Who holds a run now, asked without taking anything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holding {
    pub running: bool,
    /// Who: `pid N`, with its host when known.
    pub holder: Option<String>,
    /// The machine the run is on (the holder's, else this one for a run directory).
    pub host: Option<String>,
}

/// The runs of a [`Source`], walked at most every [`WALKED_FOR`] (listed every
/// [`LISTED_FOR`]).
pub struct Runs {
    source: Source,
    found: Mutex<Option<(Instant, Arc<Vec<Found>>)>>,
    /// This machine's name, for the runs of a run directory.
    host: String,
}

impl Runs {
    pub fn new(source: Source) -> Runs {
        Runs {
            source,
            found: Mutex::new(None),
            host: flower::stores::postgres::hostname(),
        }
    }

    /// The runs, newest walk or listing (an error reading the database: none, said).
    pub fn found(&self) -> Result<Arc<Vec<Found>>, String> {
        let mut cached = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        let reuse_for = match &self.source {
            Source::Tree { .. } => WALKED_FOR,
            Source::Store { .. } => LISTED_FOR,
        };
        if let Some((at, found)) = cached.as_ref()
            && at.elapsed() < reuse_for
        {
            return Ok(found.clone());
        }
        let found = Arc::new(match &self.source {
            Source::Tree { root } => walk(root),
            Source::Store { store } => store
                .run_list()
                .map_err(|e| format!("读不出数据库里的运行:{e}"))?
                .into_iter()
                .map(|listed| Found {
                    key: listed.row.run_key.clone(),
                    workspace: PathBuf::from(&listed.row.workspace),
                    run_dir: PathBuf::from(&listed.row.workspace).join("runs"),
                    listed: Some(listed),
                    inside: None,
                })
                .collect(),
        });
        *cached = Some((Instant::now(), found.clone()));
        Ok(found)
    }

    pub fn find(&self, key: &str) -> Result<Option<Found>, String> {
        Ok(self.found()?.iter().find(|f| f.key == key).cloned())
    }

    /// Opens a run to read it: its manifest, lineage and transcripts.
    pub fn open(&self, found: &Found) -> Result<Run, String> {
        match (&self.source, &found.listed) {
            (Source::Store { store }, Some(listed)) => {
                let state: Arc<dyn RunStateStore> = store.clone();
                let shared = SharedRun::listed(state, listed.row.clone());
                let transcripts: Arc<dyn SessionStore> = store.clone();
                Run::open_shared(&found.workspace, &found.run_dir, &shared, transcripts)
                    .map_err(|e| e.to_string())
            }
            _ => Run::open(&found.workspace, &found.run_dir).map_err(|e| e.to_string()),
        }
    }

    /// Whether a process holds the run now.
    pub fn holding(&self, found: &Found) -> Holding {
        if let Some(listed) = &found.listed {
            return Holding {
                running: listed.held,
                holder: listed.holder.clone().filter(|_| listed.held),
                host: listed.holder.clone(),
            };
        }
        match lock::probe_run(&found.run_dir) {
            Probe::Free => Holding {
                running: false,
                holder: None,
                host: Some(self.host.clone()),
            },
            Probe::Held(holder) => Holding {
                running: true,
                holder: holder.as_ref().map(|h| format!("pid {}", h.pid)),
                host: Some(
                    holder
                        .and_then(|h| h.host)
                        .unwrap_or_else(|| self.host.clone()),
                ),
            },
        }
    }

    /// What changes whenever the run does (for caches): the run directory's files'
    /// sizes and times, or the database row's last change and a few seconds' clock.
    pub fn fingerprint(&self, found: &Found) -> Vec<u128> {
        if let Some(listed) = &found.listed {
            let tick = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() / 2);
            return vec![listed.updated_ms as u128, u128::from(tick)];
        }
        let dir = RunDir::new(&found.run_dir);
        let db = dir.sessions_db();
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        [dir.manifest(), dir.lineage(), db, PathBuf::from(wal)]
            .iter()
            .flat_map(|path| {
                let meta = std::fs::metadata(path).ok();
                let len = meta.as_ref().map_or(0, |m| u128::from(m.len()));
                let at = meta
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                [len, at]
            })
            .collect()
    }
}

/// The files that make a directory a run directory.
fn is_run_dir(dir: &Path) -> bool {
    let run = RunDir::new(dir);
    run.manifest().is_file() || run.lineage().is_file() || run.sessions_db().is_file()
}

/// Every run directory under `root`, by key. A run directory is not looked into, nor
/// are hidden directories and build or dependency folders.
fn walk(root: &Path) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if is_run_dir(&dir) {
            found.push(found_at(root, &dir));
            continue;
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let skip = name.starts_with('.') || name == "node_modules" || name == "target";
            if !skip && entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    mark_nested(&mut found);
    found
}

/// Marks each run directory that lies inside another run's workspace with that run's
/// key (the closest one). The workspace here is the run directory's parent, never the
/// one its lineage names: a lineage is a file the nested run's writer chose.
fn mark_nested(found: &mut [Found]) {
    let parent = |f: &Found| f.run_dir.parent().map(Path::to_path_buf);
    let workspaces: Vec<(String, PathBuf)> = found
        .iter()
        .filter_map(|f| Some((f.key.clone(), parent(f)?)))
        .collect();
    for f in found.iter_mut() {
        let Some(own) = parent(f) else { continue };
        f.inside = workspaces
            .iter()
            .filter(|(_, ws)| own != *ws && own.starts_with(ws))
            .max_by_key(|(_, ws)| ws.components().count())
            .map(|(key, _)| key.clone());
    }
}

/// The lineage's own record of its workspace: the run's transcripts are keyed by it.
#[derive(serde::Deserialize)]
struct LineageWorkspace {
    workspace: Option<String>,
}

fn found_at(root: &Path, run_dir: &Path) -> Found {
    let rel = run_dir
        .strip_prefix(root)
        .map(|p| p.to_string_lossy().replace('/', "~"))
        .unwrap_or_default();
    let key = if rel.is_empty() { ".".to_string() } else { rel };
    let recorded = std::fs::read(RunDir::new(run_dir).lineage())
        .ok()
        .and_then(|text| serde_json::from_slice::<LineageWorkspace>(&text).ok())
        .and_then(|l| l.workspace)
        .map(PathBuf::from)
        .filter(|w| w.is_dir());
    let workspace = recorded
        .or_else(|| run_dir.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| run_dir.to_path_buf());
    Found {
        key,
        workspace,
        run_dir: run_dir.to_path_buf(),
        listed: None,
        inside: None,
    }
}

/// Values kept per run while the run's [`Runs::fingerprint`] stays the same.
pub struct Cache<T> {
    entries: Mutex<HashMap<String, Cached<T>>>,
}

/// A value and the fingerprint it was made at.
type Cached<T> = (Vec<u128>, Arc<T>);

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Cache<T> {
    /// The value for `key` at `fingerprint`, made by `make` when there is none.
    pub fn get(&self, key: &str, fingerprint: Vec<u128>, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some((at, value)) = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            && *at == fingerprint
        {
            return value.clone();
        }
        let value = Arc::new(make());
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_string(), (fingerprint, value.clone()));
        value
    }
}
