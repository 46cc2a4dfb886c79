//! `runs/manifest.json`: the run list, accumulated across processes, one row per step
//! attempt (spec 接续.md; DESIGN.md §3). It is the one place to look up a step's
//! session id after the fact.
//!
//! A row is every field of [`StepResult`] plus `duration_s` and `run` (the process's run
//! id, `YYYYmmdd-HHMMSS-<6 hex>`). Writes never overwrite other processes' work: each
//! write takes an exclusive lock on `manifest.json.lock`, re-reads the file, replaces
//! only this process's rows by its current ones and keeps every other row exactly as it
//! was, then renames a fully written `manifest.json.tmp` over the file. So several flower
//! processes may share one run dir.

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::lineage::{aside_path, sync_dir};

/// The file name inside the run dir.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The temporary file a write goes through.
pub const MANIFEST_TMP_FILE: &str = "manifest.json.tmp";
/// The sidecar file whose `flock` serialises writers across processes.
pub const MANIFEST_LOCK_FILE: &str = "manifest.json.lock";

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
    /// Requests made for this step, the first included.
    pub attempts: u32,
    /// Every error met on the way, oldest first (also those that a retry got past).
    pub errors: Vec<String>,
    /// Whether a retry resumed the step's session instead of starting over.
    pub resumed: bool,
    /// Sessions that handed over to a successor (generation handoff), oldest first.
    pub retired: Vec<String>,
    /// Context size (tokens) of the session's last turn.
    pub context: u64,
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

    /// The manifest row: every field, then `duration_s`, then `run`.
    pub fn to_row(&self, run: &str) -> Value {
        let mut row = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // A struct of plain fields always serialises to an object.
            _ => serde_json::Map::new(),
        };
        row.insert("duration_s".into(), Value::from(self.duration_s()));
        row.insert("run".into(), Value::from(run));
        Value::Object(row)
    }
}

/// The current local time as RFC 3339 with the offset and microseconds
/// (`2026-09-07T01:52:40.123456+08:00`).
pub fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// A fresh run id: `YYYYmmdd-HHMMSS-<6 lowercase hex>`, local time plus 24 random bits.
/// A process uses one for all its rows; see [`process_run_id`].
pub fn new_run_id() -> String {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    // Mix the pid in: processes started in the same second must not share an id.
    let salt = std::process::id().wrapping_mul(0x9E37_79B9);
    format!("{stamp}-{:06x}", (fastrand::u32(..) ^ salt) & 0x00FF_FFFF)
}

/// This process's run id, made on first use and the same ever after.
pub fn process_run_id() -> &'static str {
    static RUN_ID: OnceLock<String> = OnceLock::new();
    RUN_ID.get_or_init(new_run_id)
}

/// `<step>#retry<N>`: the N-th plain retry of a step.
pub fn retry_name(step: &str, n: u32) -> String {
    format!("{step}#retry{n}")
}

/// `<step>#round<N>`: the step sent back for round N after a failed judgement.
pub fn round_name(step: &str, n: u32) -> String {
    format!("{step}#round{n}")
}

/// `<step>·判定#<N>`: the judge's N-th round on a step.
pub fn judge_name(step: &str, n: u32) -> String {
    format!("{step}·判定#{n}")
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a JSON array of rows: {why}", path.display())]
    Corrupt { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io { path: path.to_path_buf(), source }
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
    rows: Vec<Value>,
}

impl Manifest {
    /// A manifest writer for `run_dir`, stamping rows with `run_id` (normally
    /// [`process_run_id`]). Touches no file.
    pub fn new(run_dir: &Path, run_id: String) -> Self {
        Manifest {
            run_dir: run_dir.to_path_buf(),
            path: run_dir.join(MANIFEST_FILE),
            run_id,
            rows: Vec::new(),
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// `run_dir/manifest.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's rows, as they are (or will be) in the file.
    pub fn rows(&self) -> &[Value] {
        &self.rows
    }

    /// Records one attempt and writes the file. An attempt is identified by its step
    /// name and `started_at`: recording it again (e.g. finished, or rescued on a signal)
    /// replaces its row; a new attempt appends one.
    ///
    /// Synchronous and short, so that a signal handler's task may call it. On error
    /// the row is still kept in memory and goes out with the next successful write.
    pub fn record(&mut self, result: &StepResult) -> Result<RecordOutcome, ManifestError> {
        let row = result.to_row(&self.run_id);
        let same_attempt = |r: &Value| {
            r.get("step").and_then(Value::as_str) == Some(result.step.as_str())
                && r.get("started_at").and_then(Value::as_str) == Some(result.started_at.as_str())
        };
        match self.rows.iter_mut().find(|r| same_attempt(r)) {
            Some(existing) => *existing = row,
            None => self.rows.push(row),
        }
        self.write()
    }

    /// Merges this process's rows into the file (see the module doc).
    pub fn write(&self) -> Result<RecordOutcome, ManifestError> {
        fs::create_dir_all(&self.run_dir).map_err(io_err(&self.run_dir))?;
        let lock_path = self.run_dir.join(MANIFEST_LOCK_FILE);
        let lock = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        lock.lock().map_err(io_err(&lock_path))?;

        let (existing, moved_aside) = match read_array(&self.path) {
            Ok(rows) => (rows, None),
            Err(ManifestError::Corrupt { .. }) => {
                let aside = aside_path(&self.path);
                fs::rename(&self.path, &aside).map_err(io_err(&self.path))?;
                (Vec::new(), Some(aside))
            }
            Err(err) => return Err(err),
        };
        let mine = |row: &Value| row.get("run").and_then(Value::as_str) == Some(self.run_id.as_str());
        let merged: Vec<&Value> = existing.iter().filter(|r| !mine(r)).chain(self.rows.iter()).collect();

        let tmp = self.run_dir.join(MANIFEST_TMP_FILE);
        write_file(&tmp, &merged).map_err(io_err(&tmp))?;
        fs::rename(&tmp, &self.path).map_err(io_err(&self.path))?;
        sync_dir(&self.run_dir);
        drop(lock);
        Ok(RecordOutcome { moved_aside, rows: merged.len() })
    }
}

/// Every row of `run_dir/manifest.json`, all processes'; empty when there is no file.
pub fn read_rows(run_dir: &Path) -> Result<Vec<Value>, ManifestError> {
    read_array(&run_dir.join(MANIFEST_FILE))
}

/// The file's rows. Missing or blank → empty; anything but a JSON array (including a
/// directory in its place) → [`ManifestError::Corrupt`].
fn read_array(path: &Path) -> Result<Vec<Value>, ManifestError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) if fs::metadata(path).is_ok_and(|m| m.is_dir()) => {
            return Err(ManifestError::Corrupt { path: path.to_path_buf(), why: err.to_string() });
        }
        Err(err) => return Err(io_err(path)(err)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(rows)) => Ok(rows),
        Ok(other) => Err(ManifestError::Corrupt {
            path: path.to_path_buf(),
            why: format!("the top level is {}", json_kind(&other)),
        }),
        Err(err) => Err(ManifestError::Corrupt { path: path.to_path_buf(), why: err.to_string() }),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn write_file(path: &Path, rows: &[&Value]) -> io::Result<()> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 16, file);
    serde_json::to_writer_pretty(&mut out, rows).map_err(io::Error::other)?;
    out.write_all(b"\n")?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}
