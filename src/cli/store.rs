//! `flower store`: inspect and move the transcripts in `sessions.db`.
//!
//! Every subcommand prints JSON on stdout. A failure prints one line on stderr
//! (`flower store <command>: <what is wrong, naming the file>`) and exits non-zero;
//! a failed write leaves the database as it was. Reading commands open the database
//! read-only and never create it.

use crate::cli::out::errln;
use clap::{Args, Subcommand};
use flower::run_dir::RunDir;
use flower::settings::{ConfigError, Environment, Flags};
use flower::stores::prune::{PruneOptions, default_trim_dir};
use flower::stores::{
    PostgresStore, PostgresUrl, SessionKey, SessionStore, SqliteSessionStore, StoreError,
    project_key,
};
use flower::transcript::{Entry, Raw};
use serde_json::json;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `flower store [--db PATH] <command>`.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// 会话库(默认 runs/sessions.db;给了就不看 FLOWER_STORE)
    #[arg(long, value_name = "PATH", global = true)]
    pub db: Option<PathBuf>,
    /// 用 PostgreSQL 存储(postgres://user@host:port/db)代替 `--db`;`sqlite` 是会话库。没给就看 FLOWER_STORE;`import` 不能用
    #[arg(long, value_name = "URL", global = true)]
    pub store: Option<String>,
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// Which store a `flower store` command works on, as the settings resolved it.
enum Target {
    Sqlite(PathBuf),
    Postgres(Box<PostgresUrl>),
}

impl StoreArgs {
    /// `--store` and `FLOWER_STORE` through the settings, as a run resolves them; an
    /// explicit `--db` is a flag too, so it wins over the variable (not over `--store`).
    fn target(&self, env: &Environment) -> Result<Target, ConfigError> {
        let flags = Flags {
            store: self.store.clone(),
            ..Flags::default()
        };
        let settings = super::config::settings(&flags, env)?;
        let postgres = match (&self.store, &self.db) {
            (None, Some(_)) => None,
            _ => settings.store().cloned(),
        };
        Ok(match postgres {
            Some(url) => Target::Postgres(Box::new(url)),
            None => Target::Sqlite(
                self.db
                    .clone()
                    .unwrap_or_else(|| RunDir::new(settings.run_dir()).sessions_db()),
            ),
        })
    }
}

/// KEY is `project_key/session_id[/subpath]`. Project keys start with `-`
/// (`-home-me-proj`), so keys and project keys are taken even when they look like
/// options.
#[derive(Debug, Clone, Subcommand)]
pub enum StoreCommand {
    /// 把标准输入里的条目(JSON 数组或 JSON Lines)一批追加到 KEY
    Append {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// 把 KEY 的 transcript 打印成 JSON 数组(没写过就是 `null`)
    Load {
        #[arg(allow_hyphen_values = true)]
        key: String,
        /// 打印续跑时喂给会话的样子(剪除后),而不是存着的原样
        #[arg(long)]
        pruned: bool,
        /// 和 --pruned 一起:也裁剪旧的大工具结果(写到 `<库所在目录>/trimmed` 下)
        #[arg(long, requires = "pruned")]
        trim: bool,
    },
    /// 列出一个项目的会话(session_id、mtime,epoch 毫秒),新的在前。默认:这个工作区的 project key(当前目录的真实路径,`/`、`_`、`.` 换成 `-`)
    Sessions {
        #[arg(allow_hyphen_values = true)]
        project_key: Option<String>,
    },
    /// 列出一个项目各会话的摘要,新的在前。默认:这个工作区的 project key
    Summaries {
        #[arg(allow_hyphen_values = true)]
        project_key: Option<String>,
    },
    /// 列出 KEY 那条会话下存着的 subpath
    Subkeys {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// 删除 KEY(主键连同它的子键一起删)
    Delete {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// 导入一份 Claude Code 的 transcript(`~/.claude/projects/<key>/<session>.jsonl`):每一行带 uuid 的(parentUuid 链,含 `attachment` 和 `system` 行)和摘要行(`summary`、标题、`tag`、`last-prompt`)
    Import {
        file: PathBuf,
        /// 默认:transcript 里第一个 `cwd` 的 project key,没有就用文件所在目录的名字
        #[arg(long)]
        project_key: Option<String>,
        /// 默认:去掉 `.jsonl` 的文件名
        #[arg(long)]
        session_id: Option<String>,
    },
}

impl StoreCommand {
    fn name(&self) -> &'static str {
        match self {
            StoreCommand::Append { .. } => "append",
            StoreCommand::Load { .. } => "load",
            StoreCommand::Sessions { .. } => "sessions",
            StoreCommand::Summaries { .. } => "summaries",
            StoreCommand::Subkeys { .. } => "subkeys",
            StoreCommand::Delete { .. } => "delete",
            StoreCommand::Import { .. } => "import",
        }
    }
}

/// Line types without a uuid that `import` takes besides the chain: they feed the
/// session summary. Every line that has a uuid is taken whatever its type (`user`,`assistant`, `system`, `attachment`, …): each is a link of the `parentUuid` chain,
/// and skipping one would leave its children pointing at nothing.
const IMPORTED_META_TYPES: [&str; 5] =
    ["summary", "custom-title", "ai-title", "tag", "last-prompt"];

/// Runs `flower store`. Errors are printed here, as one line; the exit code says
/// whether it worked.
pub fn run(mut args: StoreArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let name = args.command.name();
    let target = match args.target(env) {
        Ok(target) => target,
        Err(error) => {
            errln!("flower store {name}: {}", one_line(&error.to_string()));
            return Ok(ExitCode::from(super::config::EXIT_USAGE));
        }
    };
    // No project key: this workspace's, as a run here stores its sessions under.
    if let StoreCommand::Sessions { project_key: key }
    | StoreCommand::Summaries { project_key: key } = &mut args.command
        && key.is_none()
    {
        let here = env.current_dir().unwrap_or(Path::new("."));
        let here = here.canonicalize().unwrap_or_else(|_| here.to_path_buf());
        *key = Some(project_key(&here));
    }
    match execute(&args.command, &target) {
        Ok(output) => match print_json(&output) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
            Err(e) => {
                errln!("flower store {name}: 写不了标准输出({e})");
                Ok(ExitCode::FAILURE)
            }
        },
        Err(failed) => {
            let message = super::said::said(&failed);
            errln!("flower store {name}: {}", one_line(&message));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A project key argument, filled in by [`run`] when it was left out.
fn key_of(project_key: &Option<String>) -> &str {
    project_key.as_deref().unwrap_or_default()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn print_json(doc: &str) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    out.write_all(doc.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// A command's output: the JSON document printed.
fn doc(value: impl serde::Serialize) -> Result<String, Failed> {
    serde_json::to_string_pretty(&value).map_err(|e| Failed::because(e.to_string(), e))
}

/// Why a `flower store` command failed: the line it prints (which may quote the
/// cause), and the error behind it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Failed {
    message: String,
    #[source]
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Failed {
    fn new(message: impl Into<String>) -> Failed {
        Failed {
            message: message.into(),
            cause: None,
        }
    }

    fn because(
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Failed {
        Failed {
            message: message.into(),
            cause: Some(Box::new(cause)),
        }
    }
}

fn execute(command: &StoreCommand, target: &Target) -> Result<String, Failed> {
    let db = match target {
        Target::Sqlite(db) => db.as_path(),
        Target::Postgres(url) => {
            let shown = url.to_string();
            if matches!(command, StoreCommand::Import { .. }) {
                return Err(Failed::new(format!(
                    "import 只导进 SQLite 文件(--db);{shown} 没有动"
                )));
            }
            // Opened, and migrated, as a run would open it; it always exists.
            let open = || -> Result<Option<Box<dyn Counting>>, Failed> {
                let store =
                    PostgresStore::open(url).map_err(|e| Failed::because(e.to_string(), e))?;
                Ok(Some(Box::new(store)))
            };
            let backend = Backend {
                shown,
                trim_dir: default_trim_dir(Path::new(flower::settings::DEFAULT_RUN_DIR)),
                open_rw: &open,
                open_ro: &open,
                exists: true,
                describe: &|e| Failed::because(e.to_string(), e),
            };
            return backend.run(command);
        }
    };
    if let StoreCommand::Import {
        file,
        project_key: project,
        session_id,
    } = command
    {
        return import(db, file, project.as_deref(), session_id.as_deref());
    }
    let backend = Backend {
        shown: db.display().to_string(),
        trim_dir: default_trim_dir(db.parent().unwrap_or(Path::new("."))),
        open_rw: &|| Ok(Some(Box::new(open_rw(db)?) as Box<dyn Counting>)),
        open_ro: &|| Ok(open_ro(db)?.map(|s| Box::new(s) as Box<dyn Counting>)),
        // Deleting from a database that does not exist deletes nothing; don't create it.
        exists: db.exists(),
        describe: &|e| describe(e, db),
    };
    backend.run(command)
}

/// What `flower store` needs of a backend beyond the protocol: how much a write did.
trait Counting: SessionStore {
    fn append_entries(&self, key: &SessionKey, entries: Vec<Entry>) -> Result<usize, StoreError>;
    fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError>;
}

impl Counting for SqliteSessionStore {
    fn append_entries(&self, key: &SessionKey, entries: Vec<Entry>) -> Result<usize, StoreError> {
        SqliteSessionStore::append_counted(self, key, &entries)
    }
    fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError> {
        SqliteSessionStore::delete_counted(self, key)
    }
}

impl Counting for PostgresStore {
    fn append_entries(&self, key: &SessionKey, entries: Vec<Entry>) -> Result<usize, StoreError> {
        PostgresStore::append_counted(self, key, &entries)
    }
    fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError> {
        PostgresStore::delete_counted(self, key)
    }
}

type Open<'a> = &'a dyn Fn() -> Result<Option<Box<dyn Counting>>, Failed>;

/// One store the commands run on, SQLite file or PostgreSQL database.
struct Backend<'a> {
    /// How messages name it.
    shown: String,
    /// Where `load --pruned` says trimmed results would go.
    trim_dir: PathBuf,
    open_rw: Open<'a>,
    /// `None`: there is no database (reads find nothing; nothing is created).
    open_ro: Open<'a>,
    exists: bool,
    describe: &'a dyn Fn(StoreError) -> Failed,
}

impl Backend<'_> {
    // Long because it is one match over the store subcommands, a few lines each.
    fn run(&self, command: &StoreCommand) -> Result<String, Failed> {
        let shown = &self.shown;
        let key = |text: &str| {
            SessionKey::parse(text).map_err(|e| Failed::because(format!("{e}(数据库 {shown})"), e))
        };
        let err = |e: StoreError| (self.describe)(e);
        let rw = || -> Result<Box<dyn Counting>, Failed> {
            (self.open_rw)()?.ok_or_else(|| Failed::new(format!("打不开 {shown}")))
        };
        match command {
            StoreCommand::Append { key: text } => {
                let key = key(text)?;
                let mut input = Vec::new();
                std::io::stdin().read_to_end(&mut input).map_err(|e| {
                    Failed::because(format!("读不了标准输入({e});{shown} 什么都没写"), e)
                })?;
                let entries = parse_entries(&input)
                    .map_err(|e| Failed::because(format!("标准输入:{e};{shown} 什么都没写"), e))?;
                if entries.is_empty() {
                    return doc(json!({"key": key.to_string(), "received": 0, "stored": 0}));
                }
                let received = entries.len();
                let stored = rw()?.append_entries(&key, entries).map_err(err)?;
                doc(json!({"key": key.to_string(), "received": received, "stored": stored}))
            }
            StoreCommand::Load {
                key: text,
                pruned,
                trim,
            } => {
                let key = key(text)?;
                let Some(store) = (self.open_ro)()? else {
                    return doc(());
                };
                let entries = if *pruned {
                    let mut options = PruneOptions::new(self.trim_dir.clone());
                    options.trim = *trim;
                    store.load_pruned(&key, &options)
                } else {
                    store.load(&key)
                };
                doc(entries.map_err(err)?)
            }
            StoreCommand::Sessions { project_key: k } => match (self.open_ro)()? {
                None => doc(json!([])),
                Some(store) => doc(store.list_sessions(key_of(k)).map_err(err)?),
            },
            StoreCommand::Summaries { project_key: k } => match (self.open_ro)()? {
                None => doc(json!([])),
                Some(store) => doc(store.list_session_summaries(key_of(k)).map_err(err)?),
            },
            StoreCommand::Subkeys { key: text } => {
                let key = key(text)?.main_key();
                match (self.open_ro)()? {
                    None => doc(json!([])),
                    Some(store) => doc(store.list_subkeys(&key).map_err(err)?),
                }
            }
            StoreCommand::Delete { key: text } => {
                let key = key(text)?;
                if !self.exists {
                    return doc(json!({"key": key.to_string(), "deleted_entries": 0}));
                }
                let deleted = rw()?.delete_counted(&key).map_err(err)?;
                doc(json!({"key": key.to_string(), "deleted_entries": deleted}))
            }
            StoreCommand::Import { .. } => Err(Failed::new(format!("不能导进 {shown}"))),
        }
    }
}

fn open_rw(db: &Path) -> Result<SqliteSessionStore, Failed> {
    SqliteSessionStore::open(db).map_err(|e| describe(e, db))
}

fn open_ro(db: &Path) -> Result<Option<SqliteSessionStore>, Failed> {
    SqliteSessionStore::open_read_only(db).map_err(|e| describe(e, db))
}

/// A store error as one line that names the database file.
fn describe(e: StoreError, db: &Path) -> Failed {
    let line = match e {
        StoreError::Database { .. }
        | StoreError::Unavailable { .. }
        | StoreError::NewerSchema { .. } => e.to_string(),
        _ => format!("{e}(数据库 {})", db.display()),
    };
    Failed::because(line, e)
}

/// Reads a JSON array, or JSON Lines (one entry per non-blank line). Every entry must
/// be a JSON object; each is kept as written (its unknown fields and blocks included).
fn parse_entries(input: &[u8]) -> Result<Vec<Entry>, Failed> {
    let text = std::str::from_utf8(input)
        .map_err(|e| Failed::because(format!("不是 UTF-8 文本({e})"), e))?;
    if text.trim_start().starts_with('[') {
        let items: Vec<Raw> = serde_json::from_str::<Raw>(text)
            .map_err(|e| Failed::because(format!("JSON 数组写坏了({e})"), e))?
            .parse()
            .map_err(|e| Failed::because("要的是 JSON 数组", e))?;
        return items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                object(item.get())
                    .ok_or_else(|| Failed::new(format!("数组第 {index} 项不是 JSON 对象")))
            })
            .collect();
    }
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = serde_json::from_str::<Raw>(line)
            .map_err(|e| Failed::because(format!("第 {} 行:JSON 写坏了({e})", n + 1), e))?;
        let entry = object(item.get())
            .ok_or_else(|| Failed::new(format!("第 {} 行:这一条不是 JSON 对象", n + 1)))?;
        entries.push(entry);
    }
    Ok(entries)
}

/// The entry of valid JSON text, `None` unless it is an object.
fn object(json: &str) -> Option<Entry> {
    json.starts_with('{')
        .then(|| Entry::parse(json).ok())
        .flatten()
}

/// Whether every reader of a store can read the line: they read rows as JSON trees,
/// and a tree cannot hold what Rust strings cannot (a lone surrogate JavaScript wrote).
fn readable(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line).is_ok()
}

// Long because one pass reads, filters, keys and deduplicates the file, and each
// refusal names the file and what was (not) written.
fn import(
    db: &Path,
    file: &Path,
    project: Option<&str>,
    session_id: Option<&str>,
) -> Result<String, Failed> {
    let bytes = std::fs::read(file)
        .map_err(|e| Failed::because(format!("读不了 {}({e})", file.display()), e))?;
    let text = String::from_utf8_lossy(&bytes);
    let (mut lines, mut malformed, mut skipped) = (0usize, 0usize, 0usize);
    let mut taken = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let entry = match object(line.trim()) {
            Some(entry) if readable(line) => entry,
            // A Claude Code process killed mid-write leaves a torn last line.
            _ => {
                malformed += 1;
                continue;
            }
        };
        let kind = entry.kind.as_deref().unwrap_or_default();
        if entry.uuid().is_some() || IMPORTED_META_TYPES.contains(&kind) {
            taken.push(entry);
        } else {
            skipped += 1;
        }
    }
    if taken.is_empty() {
        return Err(Failed::new(format!(
            "{}:没有能导入的 transcript 行(共 {lines} 行:{malformed} 行写坏了,{skipped} 行是别的类型);\
             {} 什么都没写",
            file.display(),
            db.display()
        )));
    }
    let project = match project {
        Some(p) => p.to_string(),
        None => default_project_key(file, &taken),
    };
    let session = match session_id {
        Some(s) => s.to_string(),
        None => file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let key = SessionKey::main(project, session);
    key.validate().map_err(|e| {
        let line = format!(
            "{e}(导入 {} 时;用 --project-key / --session-id 指定)",
            file.display()
        );
        Failed::because(line, e)
    })?;
    let store = open_rw(db)?;
    // Lines with a uuid are deduplicated by the store; the others (summary, titles) are
    // skipped when already stored verbatim, so importing a file twice stores it once.
    let existing: HashSet<String> = store
        .load(&key)
        .map_err(|e| describe(e, db))?
        .unwrap_or_default()
        .iter()
        .filter(|e| e.uuid.is_none())
        .filter_map(canonical)
        .collect();
    let taken_count = taken.len();
    let fresh: Vec<Entry> = taken
        .into_iter()
        .filter(|e| e.uuid.is_some() || canonical(e).is_none_or(|text| !existing.contains(&text)))
        .collect();
    let stored = store
        .append_entries(&key, fresh)
        .map_err(|e| describe(e, db))?;
    doc(json!({
        "key": key.to_string(),
        "file": file.display().to_string(),
        "lines": lines,
        "taken": taken_count,
        "stored": stored,
        "skipped": skipped,
        "malformed": malformed,
    }))
}

/// An entry as serde_json writes it (compact, keys in their order), to tell a line
/// already stored from a new one whichever way it was written.
fn canonical(entry: &Entry) -> Option<String> {
    let json = entry.to_json().ok()?;
    if flower::model::canonical::is_canonical(&json) {
        return Some(json);
    }
    serde_json::from_str::<serde_json::Value>(&json)
        .ok()
        .map(|v| v.to_string())
}

/// The project key of the transcript's first `cwd`, else the name of the directory
/// holding the file (Claude Code's `projects/<key>/`).
fn default_project_key(file: &Path, entries: &[Entry]) -> String {
    if let Some(cwd) = entries
        .iter()
        .find_map(|e| e.cwd.as_deref())
        .filter(|c| !c.is_empty())
    {
        return project_key(Path::new(cwd));
    }
    std::fs::canonicalize(file)
        .ok()
        .and_then(|p| {
            p.parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
}
