//! `runs/manifest.json`: the run list, accumulated across processes, one row per step
//! attempt (spec 接续.md; DESIGN.md §3). It is the one place to look up a step's
//! session id after the fact.
//!
//! A row is every field of [`StepResult`] plus `duration_s` and `run` (the process's run
//! id, `YYYYmmdd-HHMMSS-<6 hex>`). Writes never overwrite other processes' work: each
//! write takes an exclusive lock on `manifest.json.lock`, re-reads the file, replaces
//! only this process's rows by its current ones and keeps every other row exactly as it
//! was, then renames a fully written (fsynced) `manifest.json.tmp` over the file. So
//! several flower processes may share one run dir.
//!
//! Other rows are copied as their exact source bytes, never re-serialised: unknown
//! fields, key order and number spellings survive, and a write with 10,000 rows in the
//! file needs no tree of them. When nobody else has written since this process did (the
//! file's identity and a token in the lock file say so), even the parse is skipped and
//! the other rows are copied in the kernel. An unparseable file is moved aside to
//! `manifest.json.corrupt-<YYYYmmdd-HHMMSS>`, never deleted, and a new one started.
//!
//! A row in memory is a [`ManifestRow`]; this module is its one serde boundary. Reading
//! is lenient (rows of older flowers and other tools): a missing or mistyped field
//! reads as empty, counts saturate, unknown fields are ignored by readers and kept, as
//! bytes, by writers.

use chrono::SecondsFormat;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod mirror;

use super::attempt::{AttemptKind, AttemptName};
use super::lineage::aside_path;
use super::shared::SharedRun;
use crate::engine::EngineError;
use crate::model::classify::ErrorKind;
use crate::stores::StoreError;

pub use crate::run_dir::{MANIFEST_FILE, MANIFEST_LOCK_FILE, MANIFEST_TMP_FILE};

/// What one attempt of one step came to: a manifest row without `duration_s` and `run`.
///
/// Field names and order are the contract (spec 接续.md). Timestamps are RFC 3339 in
/// local time with the offset, microsecond precision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct StepResult {
    /// The attempt's name: `name`, `name#retry<N>`, `name#round<N>` or `name·判定#<N>`.
    pub step: String,
    pub session_id: Option<String>,
    pub ok: bool,
    pub cost_usd: Option<f64>,
    pub num_turns: u32,
    /// The step's final output text.
    pub text: String,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: String,
    /// Engine runs this attempt took, the first included: a retry after an error (which
    /// resumes the same session) is one more. Not model requests: a run makes one per turn.
    pub attempts: u32,
    /// Every error met on the way, oldest first (also those that a retry got past).
    pub errors: Vec<StepError>,
    /// Whether a retry resumed the step's session instead of starting over.
    pub resumed: bool,
    /// Sessions that handed over to a successor (generation handoff), oldest first.
    pub retired: Vec<String>,
    /// Context size (tokens) of the session's last turn.
    pub context: u64,
    /// Outages waited out during this attempt (its sub-agents' included), oldest
    /// first. Not one of the contract's fields: the row writes it after them
    /// (`outages`, only when there were any).
    #[serde(skip)]
    pub outages: Vec<Outage>,
}

/// An outage a step attempt waited out: how long, and what was away.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct Outage {
    pub waited_s: f64,
    /// The store's database (`true`) or the model's API.
    pub database: bool,
}

impl StepResult {
    /// A result for a step that starts now: `started_at` = `ended_at` = now, one attempt,
    /// not ok until the caller says so.
    pub fn started(step: &str) -> Self {
        let now = now_rfc3339();
        StepResult {
            step: step.to_owned(),
            started_at: now.clone(),
            ended_at: now,
            attempts: 1,
            ..StepResult::default()
        }
    }

    /// Stamps `ended_at` with the current time.
    pub fn finish(&mut self) {
        self.ended_at = now_rfc3339();
    }

    /// Seconds from `started_at` to `ended_at`; 0 when either does not parse (never
    /// negative). Derived, not stored: the manifest row adds it as `duration_s`.
    pub fn duration_s(&self) -> f64 {
        let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
        match (parse(&self.started_at), parse(&self.ended_at)) {
            (Some(start), Some(end)) => {
                let micros = (end - start).num_microseconds().unwrap_or(0);
                (micros.max(0) as f64) / 1e6
            }
            _ => 0.0,
        }
    }

    /// The manifest row: every field, then `duration_s`, then `run` (no run context).
    pub fn to_row(&self, run: &str) -> ManifestRow {
        ManifestRow {
            result: self.clone(),
            duration_s: self.duration_s(),
            run: run.to_owned(),
            context: None,
            woke: None,
        }
    }

    /// Whether any error this attempt met was of `kind`.
    pub fn met(&self, kind: ErrorKind) -> bool {
        self.errors.iter().any(|e| e.kind == kind)
    }
}

/// One error a step attempt met: its text, which is all the manifest records
/// (`errors[]` is a list of strings), and its kind, known to the process that met it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepError {
    pub text: String,
    /// [`ErrorKind::Other`] for an error read back from a file: kinds are not recorded.
    pub kind: ErrorKind,
}

impl StepError {
    pub fn new(text: impl Into<String>, kind: ErrorKind) -> Self {
        StepError {
            text: text.into(),
            kind,
        }
    }

    /// A run's error, as its text says it and of the kind it is.
    pub fn of_run(error: &EngineError) -> Self {
        StepError::new(error.to_string(), error.kind())
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl From<String> for StepError {
    fn from(text: String) -> Self {
        StepError::new(text, ErrorKind::Other)
    }
}

impl From<&str> for StepError {
    fn from(text: &str) -> Self {
        StepError::new(text, ErrorKind::Other)
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for StepError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for StepError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(StepError::from)
    }
}

/// One row of `manifest.json` (or of the run's manifest in a shared database): a step
/// attempt's [`StepResult`], then `duration_s` and `run`, then, for rows written since
/// the run's context was recorded, `context_window` and `handoff_threshold`.
///
/// Written in exactly that field order (the contract). Read leniently, so that rows of
/// older flowers and hand-edited ones still read: a missing or mistyped field reads as
/// empty (0, `false`, `None`, `""`), a count beyond `u32` saturates, a row that is not
/// an object reads as an empty row, unknown fields are ignored. Readers never write a
/// row back: a writer keeps other processes' rows as their exact bytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ManifestRow {
    pub result: StepResult,
    /// Seconds from `started_at` to `ended_at` ([`StepResult::duration_s`]).
    pub duration_s: f64,
    /// The run id of the process that wrote the row.
    pub run: String,
    /// The run's window and threshold; `None` in rows of an older flower.
    pub context: Option<RunContext>,
    /// Which wake of the run wrote the row (lineage's `woke`: 1 for the first run):
    /// the number the banner says; `None` in rows of an older flower.
    pub woke: Option<u64>,
}

impl ManifestRow {
    /// The row's JSON text, compact (as the shared database keeps it).
    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A row from its JSON text. Any JSON value reads (see the type's doc); only text
    /// that is not JSON at all fails.
    pub fn from_json(text: &str) -> Result<ManifestRow, serde_json::Error> {
        serde_json::from_str(text).or_else(|first| {
            // The fast path reads the object in one pass and rejects a duplicated key;
            // as a tree the last value wins, as it always did.
            serde_json::from_str::<Value>(text)
                .and_then(ManifestRow::deserialize)
                .map_err(|_| first)
        })
    }
}

impl Serialize for ManifestRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Row<'a> {
            #[serde(flatten)]
            result: &'a StepResult,
            duration_s: f64,
            run: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            context_window: Option<u64>,
            /// Written as `null` when the run does not hand off.
            #[serde(skip_serializing_if = "Option::is_none")]
            handoff_threshold: Option<Option<u64>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            woke: Option<u64>,
            #[serde(skip_serializing_if = "<[Outage]>::is_empty")]
            outages: &'a [Outage],
        }
        Row {
            result: &self.result,
            duration_s: self.duration_s,
            run: &self.run,
            context_window: self.context.map(|c| c.window),
            handoff_threshold: self.context.map(|c| c.handoff_threshold),
            woke: self.woke,
            outages: &self.result.outages,
        }
        .serialize(serializer)
    }
}

/// A field read leniently: a value of another type reads as missing.
struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either<T> {
            Fits(T),
            Other(IgnoredAny),
        }
        Ok(Lenient(match Either::deserialize(deserializer)? {
            Either::Fits(value) => Some(value),
            Either::Other(_) => None,
        }))
    }
}

/// The fields of a row as they may be found.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RowFields {
    step: Lenient<String>,
    session_id: Lenient<String>,
    ok: Lenient<bool>,
    cost_usd: Lenient<f64>,
    num_turns: Lenient<u64>,
    text: Lenient<String>,
    error: Lenient<String>,
    started_at: Lenient<String>,
    ended_at: Lenient<String>,
    attempts: Lenient<u64>,
    errors: Lenient<Vec<Lenient<String>>>,
    resumed: Lenient<bool>,
    retired: Lenient<Vec<Lenient<String>>>,
    context: Lenient<u64>,
    duration_s: Lenient<f64>,
    run: Lenient<String>,
    context_window: Lenient<u64>,
    handoff_threshold: Lenient<u64>,
    woke: Lenient<u64>,
    outages: Lenient<Vec<Lenient<Outage>>>,
}

impl RowFields {
    fn into_row(self) -> ManifestRow {
        let count = |n: Lenient<u64>| n.0.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        let texts = |list: Lenient<Vec<Lenient<String>>>| -> Vec<String> {
            list.0
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| t.0)
                .collect()
        };
        ManifestRow {
            result: StepResult {
                step: self.step.0.unwrap_or_default(),
                session_id: self.session_id.0,
                ok: self.ok.0.unwrap_or_default(),
                cost_usd: self.cost_usd.0,
                num_turns: count(self.num_turns),
                text: self.text.0.unwrap_or_default(),
                error: self.error.0,
                started_at: self.started_at.0.unwrap_or_default(),
                ended_at: self.ended_at.0.unwrap_or_default(),
                attempts: count(self.attempts),
                errors: texts(self.errors)
                    .into_iter()
                    .map(StepError::from)
                    .collect(),
                resumed: self.resumed.0.unwrap_or_default(),
                retired: texts(self.retired),
                context: self.context.0.unwrap_or_default(),
                outages: self
                    .outages
                    .0
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| o.0)
                    .collect(),
            },
            duration_s: self.duration_s.0.unwrap_or_default(),
            run: self.run.0.unwrap_or_default(),
            context: self.context_window.0.map(|window| RunContext {
                window,
                handoff_threshold: self.handoff_threshold.0,
            }),
            woke: self.woke.0,
        }
    }
}

impl<'de> Deserialize<'de> for ManifestRow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Takes an object field by field and anything else as an empty row.
        struct RowVisitor;

        impl<'de> Visitor<'de> for RowVisitor {
            type Value = ManifestRow;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a manifest row")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ManifestRow, A::Error> {
                RowFields::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RowFields::into_row)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ManifestRow, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ManifestRow::default())
            }

            fn visit_bool<E>(self, _: bool) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }

            fn visit_i64<E>(self, _: i64) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }

            fn visit_u64<E>(self, _: u64) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }

            fn visit_f64<E>(self, _: f64) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }

            fn visit_str<E>(self, _: &str) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }

            fn visit_unit<E>(self) -> Result<ManifestRow, E> {
                Ok(ManifestRow::default())
            }
        }

        deserializer.deserialize_any(RowVisitor)
    }
}

/// The current local time as RFC 3339 with the offset and microseconds
/// (`2026-09-07T01:52:40.123456+08:00`).
pub fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// A fresh run id: `YYYYmmdd-HHMMSS-<6 lowercase hex>`, local time plus 24 random bits.
/// Each `Runtime` makes one for all its rows (the CLI has one runtime per process, so
/// one per process there); two runtimes in one process must not share an id, or each
/// would replace the other's rows on merge.
pub fn new_run_id() -> String {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    // Mix the pid in: processes started in the same second must not share an id.
    let salt = std::process::id().wrapping_mul(0x9E37_79B9);
    format!("{stamp}-{:06x}", (fastrand::u32(..) ^ salt) & 0x00FF_FFFF)
}

/// One run id for the whole process, made on first use and the same ever after: for a
/// program that writes one manifest from several places. `Runtime` does not use it.
pub fn process_run_id() -> &'static str {
    static RUN_ID: OnceLock<String> = OnceLock::new();
    RUN_ID.get_or_init(new_run_id)
}

/// `<step>#retry<N>`: the N-th plain retry of a step.
pub fn retry_name(step: &str, n: u32) -> String {
    AttemptName::new(step, AttemptKind::Retry(n)).to_string()
}

/// `<step>#round<N>`: the step sent back for round N after a failed judgement.
pub fn round_name(step: &str, n: u32) -> String {
    AttemptName::new(step, AttemptKind::Round(n)).to_string()
}

/// `<step>·判定#<N>`: the judge's N-th round on a step.
pub fn judge_name(step: &str, n: u32) -> String {
    AttemptName::new(step, AttemptKind::Judge(n)).to_string()
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{} 用不了({source})", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} 读不成运行清单:{why}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        why: Unreadable,
    },
    /// The shared database did not take the rows; they go out with the next write.
    #[error("数据库里的运行清单:{0}")]
    Shared(#[source] crate::stores::StoreError),
}

/// Why a manifest cannot be read (the `why` of [`ManifestError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("不是由行组成的 JSON 数组({0})")]
    NotRows(#[source] serde_json::Error),
    #[error("JSON 写坏了({0})")]
    Json(serde_json::Error),
}

impl From<serde_json::Error> for Unreadable {
    fn from(e: serde_json::Error) -> Self {
        if e.classify() == serde_json::error::Category::Data {
            Unreadable::NotRows(e)
        } else {
            Unreadable::Json(e)
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a write did, beyond writing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordOutcome {
    /// Where an unparseable `manifest.json` was moved before a new one was started: the
    /// caller should warn the user.
    pub moved_aside: Option<PathBuf>,
    /// Rows in the file after the write, all processes'.
    pub rows: usize,
}

/// This process's view of `run_dir/manifest.json`: its own rows, kept in memory and
/// merged into the file on every write.
#[derive(Debug, Clone)]
pub struct Manifest {
    run_dir: PathBuf,
    path: PathBuf,
    run_id: String,
    /// This process's rows in order of first record, each with its `run` set.
    rows: Vec<ManifestRow>,
    /// What this writer's last write left on disk, while it may still be current.
    last: Option<Written>,
    /// With a shared database, the truth; `manifest.json` is then its mirror.
    shared: Option<SharedRun>,
    /// What this writer's rows say about the run's context (see [`RunContext`]).
    context: Option<RunContext>,
    /// Which wake of the run this writer's rows belong to ([`ManifestRow::woke`]).
    woke: Option<u64>,
}

/// The run's context window and handoff threshold, recorded in every row a runtime
/// writes (`context_window`, `handoff_threshold`, after `run`), so that a reader (`flower
/// report`) draws the lines the run used, whatever settings it runs with itself. A
/// row of an older flower has neither field: readers take the defaults
/// ([`RunContext::default_for`]). Worked out in one place, [`super::handoff`].
pub use super::handoff::RunContext;

impl Manifest {
    /// Opens (creating it) the file whose lock serialises this directory's writers.
    /// After a write under the lock: a fresh token in the lock file and what was written,
    /// so that the next write can tell whether anyone else wrote the file since.
    fn remember_written(
        &mut self,
        lock: &File,
        meta: &fs::Metadata,
        others_len: u64,
        others_count: usize,
        seen: Option<crate::continuity::shared::ManifestSeen>,
    ) {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let token = format!("{} {:016x}\n", self.run_id, fastrand::u64(..));
        if lock
            .set_len(0)
            .and_then(|()| lock.write_all_at(token.as_bytes(), 0))
            .is_ok()
        {
            self.last = Some(Written {
                token,
                dev: meta.dev(),
                ino: meta.ino(),
                len: meta.len(),
                mtime: (meta.mtime(), meta.mtime_nsec()),
                others_len,
                others_count,
                seen,
            });
        }
    }

    fn open_lock(&self) -> Result<File, ManifestError> {
        let lock_path = self.run_dir.join(MANIFEST_LOCK_FILE);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_err(&lock_path))
    }
}

/// The identity and layout of the file this writer last wrote. When both the file and
/// the lock file's token are still exactly as it left them, nobody else has written
/// since, so the next write copies the other processes' part of the file over in the
/// kernel instead of parsing 10,000 rows again.
#[derive(Debug, Clone, PartialEq)]
struct Written {
    /// Also written into the lock file: another writer replaces it.
    token: String,
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    /// Bytes of `[` plus the other processes' rows, where this process's part begins.
    others_len: u64,
    others_count: usize,
    /// The mirror of a shared manifest: the other processes' rows it holds.
    seen: Option<crate::continuity::shared::ManifestSeen>,
}

impl Manifest {
    /// A manifest writer for `run_dir`, stamping rows with `run_id` (a `Runtime` passes
    /// its own [`new_run_id`]). Touches no file.
    pub fn new(run_dir: &Path, run_id: String) -> Self {
        Manifest {
            run_dir: run_dir.to_path_buf(),
            path: run_dir.join(MANIFEST_FILE),
            run_id,
            rows: Vec::new(),
            last: None,
            shared: None,
            context: None,
            woke: None,
        }
    }

    /// This writer with every row it writes carrying `context`.
    pub fn with_context(mut self, context: RunContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Records `woke` (lineage's wake count, this process's number) in every row
    /// written from now on.
    pub fn set_woke(&mut self, woke: u64) {
        self.woke = Some(woke);
    }

    /// A manifest writer whose rows are merged by `run` in the shared database (the
    /// same rule as the file's, in one transaction); every write then replaces
    /// `run_dir/manifest.json` by all of the run's rows, a read-only mirror.
    pub fn shared(run_dir: &Path, run_id: String, shared: SharedRun) -> Self {
        Manifest {
            shared: Some(shared),
            ..Manifest::new(run_dir, run_id)
        }
    }

    /// Every row of the run, all processes': from the database when it is shared,
    /// else from `run_dir/manifest.json`.
    pub fn all_rows(&self) -> Result<Vec<ManifestRow>, ManifestError> {
        rows_of(&self.run_dir, self.shared.as_ref())
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// `run_dir/manifest.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's rows, as they are (or will be) in the file.
    pub fn rows(&self) -> &[ManifestRow] {
        &self.rows
    }

    /// Records one attempt and writes the file. An attempt is identified by its step
    /// name and `started_at`: recording it again (e.g. finished, or rescued on a signal)
    /// replaces its row; a new attempt appends one.
    ///
    /// Synchronous and short, so that a signal handler's task may call it. On error
    /// the row is still kept in memory and goes out with the next successful write.
    pub fn record(&mut self, result: &StepResult) -> Result<RecordOutcome, ManifestError> {
        let row = ManifestRow {
            context: self.context,
            woke: self.woke,
            ..result.to_row(&self.run_id)
        };
        let same_attempt = |r: &ManifestRow| {
            r.result.step == result.step && r.result.started_at == result.started_at
        };
        match self.rows.iter_mut().find(|r| same_attempt(r)) {
            Some(existing) => *existing = row,
            None => self.rows.push(row),
        }
        self.write()
    }

    /// Merges this process's rows into the file (see the module doc), or into the
    /// shared database and then its mirror.
    // Long because the merge with the other processes' rows is one critical section under
    // the lock: read back (or the unchanged shortcut), move a corrupt file aside, write, rename.
    pub fn write(&mut self) -> Result<RecordOutcome, ManifestError> {
        if let Some(shared) = self.shared.clone() {
            return self.write_shared(&shared);
        }
        fs::create_dir_all(&self.run_dir).map_err(io_err(&self.run_dir))?;
        let lock = self.open_lock()?;
        // Without flock (some network mounts) the write still happens, merged as well as
        // it can be; only the shortcut, which relies on the lock, is off.
        let locked = lock.lock().is_ok();
        // Until this write completes, what we knew about the file is void.
        let last = self.last.take().filter(|_| locked);

        let tmp = self.run_dir.join(MANIFEST_TMP_FILE);
        let mut out = File::create(&tmp).map_err(io_err(&tmp))?;
        let mut moved_aside = None;
        let unchanged = last
            .as_ref()
            .and_then(|last| open_if_unchanged(&self.path, &lock, last));
        let (others_len, others_count) = match (unchanged, last) {
            (Some(old), Some(last)) => {
                let copied =
                    io::copy(&mut (&old).take(last.others_len), &mut out).map_err(io_err(&tmp))?;
                if copied != last.others_len {
                    return Err(io_err(&self.path)(io::ErrorKind::UnexpectedEof.into()));
                }
                (last.others_len, last.others_count)
            }
            _ => {
                let text = read_text(&self.path)?;
                let existing = match text.as_deref().map(split_rows) {
                    None => Vec::new(),
                    Some(Ok(rows)) => rows,
                    Some(Err(_)) => {
                        let aside = aside_path(&self.path);
                        fs::rename(&self.path, &aside).map_err(io_err(&self.path))?;
                        moved_aside = Some(aside);
                        Vec::new()
                    }
                };
                let ours = serde_json::to_string(&self.run_id).unwrap_or_default();
                let others: Vec<&str> = existing
                    .iter()
                    .map(|raw| raw.get())
                    .filter(|raw| !row_has_run(raw, &ours))
                    .collect();
                let len = write_others(&mut out, &others).map_err(io_err(&tmp))?;
                (len, others.len())
            }
        };
        let out = write_ours(out, others_count == 0, &self.rows).map_err(io_err(&tmp))?;
        let meta = out.metadata().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &self.path).map_err(io_err(&self.path))?;
        // No fsync of the directory: it costs a second journal commit (it doubled the
        // write time with 10,000 rows). Until the filesystem commits the rename by
        // itself (seconds), a power cut brings back the previous whole file, never half.

        if locked {
            self.remember_written(&lock, &meta, others_len, others_count, None);
        }
        drop(lock);
        Ok(RecordOutcome {
            moved_aside,
            rows: others_count + self.rows.len(),
        })
    }
}

/// The manifest, opened, if it is still the very file `last` describes and no other
/// writer has taken the lock since (its token is still ours).
fn open_if_unchanged(path: &Path, lock: &File, last: &Written) -> Option<File> {
    use std::os::unix::fs::MetadataExt;
    let mut token = vec![0u8; last.token.len() + 1];
    let n = lock.read_at(&mut token, 0).ok()?;
    if &token[..n] != last.token.as_bytes() {
        return None;
    }
    let file = File::open(path).ok()?;
    let m = file.metadata().ok()?;
    let same = m.dev() == last.dev
        && m.ino() == last.ino
        && m.len() == last.len
        && (m.mtime(), m.mtime_nsec()) == last.mtime
        && last.others_len < last.len;
    same.then_some(file)
}

/// Every row of the run's manifest: from the shared database when there is one (the
/// file is then only its mirror), else `run_dir/manifest.json`.
pub fn rows_of(
    run_dir: &Path,
    shared: Option<&SharedRun>,
) -> Result<Vec<ManifestRow>, ManifestError> {
    match shared {
        Some(shared) => shared_rows(shared).map_err(ManifestError::Shared),
        None => read_rows(run_dir),
    }
}

/// Every row of the run's manifest in the shared database.
pub fn shared_rows(shared: &SharedRun) -> Result<Vec<ManifestRow>, StoreError> {
    shared
        .manifest()?
        .iter()
        .map(|text| {
            ManifestRow::from_json(text).map_err(|source| StoreError::Decode {
                what: "运行清单的一行".into(),
                source,
            })
        })
        .collect()
}

/// The generation of a session (换代): see [`super::handoff::generation_of`], over the
/// predecessors the rows list in `retired[]`.
pub fn generation_of(rows: &[ManifestRow], session_id: &str) -> u32 {
    let chains = rows.iter().filter_map(|row| {
        let current = row.result.session_id.as_deref()?;
        Some((current, row.result.retired.as_slice()))
    });
    super::handoff::generation_of(chains, session_id)
}

/// Every row of `run_dir/manifest.json`, all processes'; empty when there is no file.
/// An unparseable file is reported as [`ManifestError::Corrupt`] and left where it is.
pub fn read_rows(run_dir: &Path) -> Result<Vec<ManifestRow>, ManifestError> {
    let path = run_dir.join(MANIFEST_FILE);
    let Some(text) = read_text(&path)? else {
        return Ok(Vec::new());
    };
    let corrupt = |why: Unreadable| ManifestError::Corrupt {
        path: path.clone(),
        why,
    };
    let rows = split_rows(&text).map_err(corrupt)?;
    rows.iter()
        .map(|raw| ManifestRow::from_json(raw.get()).map_err(|e| corrupt(Unreadable::Json(e))))
        .collect()
}

/// The file's text. `None` when it is missing or blank; `Some("")` (which does not
/// parse) when it is not UTF-8 or is a directory, so that it gets moved aside.
fn read_text(path: &Path) -> Result<Option<String>, ManifestError> {
    match fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(None),
        Ok(bytes) => Ok(Some(String::from_utf8(bytes).unwrap_or_default())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(_) if fs::metadata(path).is_ok_and(|m| m.is_dir()) => Ok(Some(String::new())),
        Err(err) => Err(io_err(path)(err)),
    }
}

/// The top-level array's elements, each as its exact source text. Validates the whole
/// document but builds no tree: other processes' rows are copied back byte for byte,
/// and a write stays fast with 10,000 rows in the file.
fn split_rows(text: &str) -> Result<Vec<&RawValue>, Unreadable> {
    Ok(serde_json::from_str::<Vec<&RawValue>>(text)?)
}

/// Whether the row's `run` field is exactly `run_json` (a JSON string literal). Rows
/// that are not objects, or whose `run` is missing or not a string, belong to nobody
/// we know and are kept.
fn row_has_run(raw: &str, run_json: &str) -> bool {
    #[derive(Deserialize)]
    struct RunOnly<'a> {
        #[serde(borrow, default)]
        run: Option<&'a RawValue>,
    }
    // A cheap pre-filter: a row of ours contains the literal; most rows do not.
    raw.contains(run_json)
        && serde_json::from_str::<RunOnly>(raw)
            .is_ok_and(|r| r.run.is_some_and(|run| run.get() == run_json))
}

/// Starts the array in `serde_json`'s pretty layout with the other processes' rows,
/// verbatim. Returns the bytes written: where this process's part will begin.
fn write_others(out: &mut File, others: &[&str]) -> io::Result<u64> {
    let mut buf = BufWriter::with_capacity(1 << 16, out);
    let mut written = 1;
    buf.write_all(b"[")?;
    for (i, raw) in others.iter().enumerate() {
        let sep: &[u8] = if i == 0 { b"\n  " } else { b",\n  " };
        buf.write_all(sep)?;
        buf.write_all(raw.as_bytes())?;
        written += (sep.len() + raw.len()) as u64;
    }
    buf.flush()?;
    Ok(written)
}

/// Ends the array with this process's rows and flushes the file to disk. Rows written
/// by flower come back out of a later merge exactly as they went in.
fn write_ours(out: File, first: bool, ours: &[ManifestRow]) -> io::Result<File> {
    let mut buf = BufWriter::with_capacity(1 << 16, out);
    if !ours.is_empty() {
        // The slice pretty-printed is `[\n  {…},\n  {…}\n]`: keep what is inside.
        let text = serde_json::to_string_pretty(ours).map_err(io::Error::other)?;
        let inner = text
            .strip_prefix("[\n")
            .and_then(|t| t.strip_suffix("\n]"))
            .unwrap_or(&text);
        buf.write_all(if first { b"\n" } else { b",\n" })?;
        buf.write_all(inner.as_bytes())?;
        buf.write_all(b"\n]\n")?;
    } else if first {
        buf.write_all(b"]\n")?;
    } else {
        buf.write_all(b"\n]\n")?;
    }
    let file = buf.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(file)
}
