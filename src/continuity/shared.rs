//! A run's lineage and manifest in a database that several hosts share, beside its
//! transcripts, so that a run outlives its machine and its run directory.
//!
//! Two backends keep a run's state: the files of the run directory (`lineage.json`,
//! `manifest.json`: [`super::lineage`], [`super::manifest`], the default and the only
//! one with SQLite), and a [`RunStateStore`] (PostgreSQL). With a store the database is
//! the truth and the two files are still written after every change, as read-only
//! mirrors for people and tools.
//!
//! A run in the database is identified by its run key:
//! - without a name, the project key of the workspace (`stores::key`, from its real
//!   path): hosts that mount the workspace at the same path share the run;
//! - with a name (`--run-key`, [`RunName`]), the name: hosts that mount it at different
//!   paths share the run. The transcripts stay under the project key of the workspace
//!   that began the run, so every host finds them.
//!
//! The guard keeps the page's meaning. A run derived from a path belongs to that path:
//! another path with the same project key (two paths differ only in `/`, `_`, `.`)
//! reads as no run in the database and writes none ([`SharedRun::open`] gives `None`;
//! the files take over, silently). A named run belongs to the workspace that began it;
//! another workspace continues it only when the name was given on purpose
//! ([`RunName::adopt`], the command line's `--run-key`): a name that only came from the
//! environment and names a run begun elsewhere is refused ([`SharedRunError::Foreign`]),
//! before anything is written, so that a variable left set in a shell never continues
//! another project's conversation here.

use crate::stores::postgres::{Leased, OnLeaseLost, PostgresStore, RunRow};
pub use crate::stores::postgres::{ManifestSeen, MergedManifest};
use crate::stores::{StoreError, project_key};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where a run's state lives when it is not (only) in the run directory's files.
pub trait RunStateStore: Send + Sync {
    /// The run, if it was ever registered. Reads only.
    fn find_run(&self, run_key: &str) -> Result<Option<RunRow>, StoreError>;
    /// Registers the run unless it exists; the stored row (an existing one wins).
    fn register_run(&self, row: &RunRow) -> Result<RunRow, StoreError>;
    /// Wakes and step → session id.
    fn lineage(&self, run_key: &str) -> Result<(u64, BTreeMap<String, String>), StoreError>;
    fn remember(&self, run_key: &str, step: &str, session_id: &str) -> Result<(), StoreError>;
    /// One more wake; the new count.
    fn wake(&self, run_key: &str) -> Result<u64, StoreError>;
    /// Steps and wakes forgotten (`/new`).
    fn reset(&self, run_key: &str) -> Result<(), StoreError>;
    /// This process's rows (`run`) replaced, the others kept; all rows after, in order.
    /// Rows travel as their JSON texts: only `continuity::manifest` reads them.
    fn merge_manifest(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
    ) -> Result<Vec<String>, StoreError>;
    /// [`Self::merge_manifest`] for a mirror that holds the other processes' rows up
    /// to `seen`: only what they added since comes back when none of those went away.
    /// By default every row, as [`Self::merge_manifest`] gives them.
    fn merge_manifest_since(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
        seen: Option<ManifestSeen>,
    ) -> Result<MergedManifest, StoreError> {
        let _ = seen;
        let ours = rows.len();
        let mut all = self.merge_manifest(run_key, run, rows)?;
        // Ours follow the others' (see `merge_manifest`).
        all.truncate(all.len().saturating_sub(ours));
        Ok(MergedManifest {
            others: all,
            appended: false,
            seen: None,
        })
    }
    /// Every manifest row of the run (JSON texts), in write order.
    fn manifest(&self, run_key: &str) -> Result<Vec<String>, StoreError>;
    /// Where the store is, as a person would name it to `--store` (a URL without its
    /// password), for the run directory's mirrors; `None`: not said.
    fn location(&self) -> Option<String> {
        None
    }
    /// Holds the run for this process, across hosts, until the guard is dropped (or the
    /// process dies), waiting up to `wait` (`None`: for ever) for another holder;
    /// `Err(holder)` when another process still holds it, with what it said about
    /// itself. A hold that the database's going away released is taken again when it
    /// is back; `on_lost` hears who took the run if someone did meanwhile.
    fn hold(
        &self,
        run_key: &str,
        holder: &str,
        wait: Option<Duration>,
        on_lost: OnLeaseLost,
    ) -> HoldResult;
}

/// What [`RunStateStore::hold`] gives: the guard, or who holds the run.
pub type HoldResult = Result<Result<Box<dyn Send>, Option<String>>, StoreError>;

impl RunStateStore for PostgresStore {
    fn location(&self) -> Option<String> {
        Some(self.url().to_string())
    }

    fn find_run(&self, run_key: &str) -> Result<Option<RunRow>, StoreError> {
        self.run_find(run_key)
    }

    fn register_run(&self, row: &RunRow) -> Result<RunRow, StoreError> {
        self.run_register(row)
    }

    fn lineage(&self, run_key: &str) -> Result<(u64, BTreeMap<String, String>), StoreError> {
        let (woke, steps) = self.run_lineage(run_key)?;
        Ok((woke, steps.into_iter().collect()))
    }

    fn remember(&self, run_key: &str, step: &str, session_id: &str) -> Result<(), StoreError> {
        self.run_remember(run_key, step, session_id)
    }

    fn wake(&self, run_key: &str) -> Result<u64, StoreError> {
        self.run_wake(run_key)
    }

    fn reset(&self, run_key: &str) -> Result<(), StoreError> {
        self.run_reset(run_key)
    }

    fn merge_manifest(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        self.manifest_merge(run_key, run, rows)
    }

    fn merge_manifest_since(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
        seen: Option<ManifestSeen>,
    ) -> Result<MergedManifest, StoreError> {
        self.manifest_merge_since(run_key, run, rows, seen)
    }

    fn manifest(&self, run_key: &str) -> Result<Vec<String>, StoreError> {
        self.manifest_rows(run_key)
    }

    fn hold(
        &self,
        run_key: &str,
        holder: &str,
        wait: Option<Duration>,
        on_lost: OnLeaseLost,
    ) -> HoldResult {
        Ok(match self.lease_run(run_key, holder, wait, on_lost)? {
            Leased::Held(lease) => Ok(Box::new(lease)),
            Leased::Busy(holder) => Err(holder),
        })
    }
}

/// A run named by the user rather than by its workspace's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunName {
    pub name: String,
    /// May continue a run of this name begun in another workspace (the name was given
    /// on purpose, e.g. on the command line).
    pub adopt: bool,
}

/// What a run name may be: 1 to 128 of `A-Z a-z 0-9 . _ -`, starting with a letter or
/// digit (a project key always starts with `-`, so a name never equals one).
pub fn check_run_name(name: &str) -> Result<(), RunNameError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 128 {
        return Err(RunNameError::Length);
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(RunNameError::Start);
    }
    if !name.chars().all(ok_char) {
        return Err(RunNameError::Characters);
    }
    Ok(())
}

/// What is wrong with a run name ([`check_run_name`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunNameError {
    #[error("要 1 到 128 个字符")]
    Length,
    #[error("要以字母或数字开头")]
    Start,
    #[error("只能有字母、数字、'.'、'_' 和 '-'")]
    Characters,
}

#[derive(Debug, thiserror::Error)]
pub enum SharedRunError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("运行名 {name:?} 不行:{why}")]
    BadName {
        name: String,
        #[source]
        why: RunNameError,
    },
    /// A name that only came from the environment names a run begun in another
    /// workspace. Nothing was written.
    #[error(
        "运行 {name} 是在另一个工作区({workspace})开始的;FLOWER_RUN_KEY 不会让它在这里接着跑。确实要在这里接着它:flower --run-key {name}。什么都没有改动。"
    )]
    Foreign { name: String, workspace: String },
}

/// A run registered in a [`RunStateStore`]: the handle lineage and manifest write
/// through. Cheap to clone.
#[derive(Clone)]
pub struct SharedRun {
    store: Arc<dyn RunStateStore>,
    row: RunRow,
}

impl std::fmt::Debug for SharedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRun").field("row", &self.row).finish()
    }
}

impl SharedRun {
    /// The run of `workspace` (or named `name`), registered if it is new. `None` when
    /// the database's run for this project key belongs to another path (see the module
    /// doc): the caller keeps the run's state in files only.
    pub fn open(
        store: Arc<dyn RunStateStore>,
        workspace: &Path,
        name: Option<&RunName>,
    ) -> Result<Option<SharedRun>, SharedRunError> {
        Self::lookup(store, workspace, name, true)
    }

    /// Like [`SharedRun::open`] but never writes: a run not registered yet is `None`.
    pub fn find(
        store: Arc<dyn RunStateStore>,
        workspace: &Path,
        name: Option<&RunName>,
    ) -> Result<Option<SharedRun>, SharedRunError> {
        Self::lookup(store, workspace, name, false)
    }

    /// The run of a row the store listed (`flower serve`, which reads every run of a
    /// database): nothing is looked up, registered or checked against a workspace.
    pub fn listed(store: Arc<dyn RunStateStore>, row: RunRow) -> SharedRun {
        SharedRun { store, row }
    }

    fn lookup(
        store: Arc<dyn RunStateStore>,
        workspace: &Path,
        name: Option<&RunName>,
        register: bool,
    ) -> Result<Option<SharedRun>, SharedRunError> {
        let wanted = wanted_row(workspace, name)?;
        match store.find_run(&wanted.run_key)? {
            Some(row) => Self::admit(store, &wanted, row, name),
            None if register => {
                let row = store.register_run(&wanted)?;
                Self::admit(store, &wanted, row, name)
            }
            None => Ok(None),
        }
    }

    fn admit(
        store: Arc<dyn RunStateStore>,
        wanted: &RunRow,
        row: RunRow,
        name: Option<&RunName>,
    ) -> Result<Option<SharedRun>, SharedRunError> {
        let here = row.workspace == wanted.workspace && row.project_key == wanted.project_key;
        match name {
            // A named run from anywhere, if the name was meant.
            Some(name) if !here && !name.adopt => Err(SharedRunError::Foreign {
                name: name.name.clone(),
                workspace: row.workspace,
            }),
            Some(_) => Ok(Some(SharedRun { store, row })),
            // A path's run: only that path's.
            None if row.named || row.workspace != wanted.workspace => Ok(None),
            None => Ok(Some(SharedRun { store, row })),
        }
    }

    pub fn run_key(&self) -> &str {
        &self.row.run_key
    }

    /// The run's name, when it was given one (`--run-key`) rather than derived from the
    /// workspace's path.
    pub fn name(&self) -> Option<&str> {
        self.row.named.then_some(self.row.run_key.as_str())
    }

    /// Where the run's store is, for the mirrors ([`RunStateStore::location`]).
    pub fn location(&self) -> Option<String> {
        self.store.location()
    }

    /// The project key the run's transcripts are stored under (the first workspace's).
    pub fn project_key(&self) -> &str {
        &self.row.project_key
    }

    /// The workspace the run began in, as its host saw it.
    pub fn origin(&self) -> &str {
        &self.row.workspace
    }

    pub fn lineage(&self) -> Result<(u64, BTreeMap<String, String>), StoreError> {
        self.store.lineage(&self.row.run_key)
    }

    pub fn remember(&self, step: &str, session_id: &str) -> Result<(), StoreError> {
        self.store.remember(&self.row.run_key, step, session_id)
    }

    pub fn wake(&self) -> Result<u64, StoreError> {
        self.store.wake(&self.row.run_key)
    }

    pub fn reset(&self) -> Result<(), StoreError> {
        self.store.reset(&self.row.run_key)
    }

    /// See [`RunStateStore::merge_manifest`].
    pub fn merge_manifest(&self, run: &str, rows: Vec<String>) -> Result<Vec<String>, StoreError> {
        self.store.merge_manifest(&self.row.run_key, run, rows)
    }

    /// See [`RunStateStore::merge_manifest_since`].
    pub fn merge_manifest_since(
        &self,
        run: &str,
        rows: Vec<String>,
        seen: Option<ManifestSeen>,
    ) -> Result<MergedManifest, StoreError> {
        self.store
            .merge_manifest_since(&self.row.run_key, run, rows, seen)
    }

    /// The run's manifest rows (JSON texts); `continuity::manifest::shared_rows` reads them.
    pub fn manifest(&self) -> Result<Vec<String>, StoreError> {
        self.store.manifest(&self.row.run_key)
    }

    /// See [`RunStateStore::hold`].
    pub fn hold(&self, holder: &str, wait: Option<Duration>, on_lost: OnLeaseLost) -> HoldResult {
        self.store.hold(&self.row.run_key, holder, wait, on_lost)
    }
}

fn wanted_row(workspace: &Path, name: Option<&RunName>) -> Result<RunRow, SharedRunError> {
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let project = project_key(&canonical);
    let run_key = match name {
        Some(name) => {
            check_run_name(&name.name).map_err(|why| SharedRunError::BadName {
                name: name.name.clone(),
                why,
            })?;
            name.name.clone()
        }
        None => project.clone(),
    };
    Ok(RunRow {
        run_key,
        named: name.is_some(),
        project_key: project,
        workspace: canonical.to_string_lossy().into_owned(),
        woke: 0,
    })
}
