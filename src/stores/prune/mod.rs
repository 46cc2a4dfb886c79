//! Pruning on load: what a resumed session is fed (DESIGN.md §5, spec 接续 "剪除").
//!
//! The database keeps every entry verbatim; [`prune`] cleans only what is sent back to
//! the model. In order:
//! 1. drop synthetic API-error entries (`isApiErrorMessage: true` or
//!    `message.model == "<synthetic>"`) and replies that ended in `stop_reason: refusal`:
//!    a retry storm must not read as something the model said, and a replayed refusal
//!    only invites another;
//!    A continuation request left unanswered at the end (the request that carried it
//!    failed) goes too: the prompt the resume adds follows the cut reply;
//! 2. repair the structure (see below), so the rules work on well-formed turns;
//! 3. of the denied tool calls (a `tool_use` whose `tool_result` has `is_error: true`
//!    and a denial text, [`is_denial_text`]), keep only the newest `keep_denials`
//!    pairs; an older pair loses both its `tool_use` and its `tool_result` block;
//! 4. a tool result left by an interruption ([`is_interruption_text`]) gets the body
//!    [`INTERRUPTED_BODY`]; the entry stays;
//! 5. with `ephemeral`, a result of a snapshot command ([`SNAPSHOT_COMMANDS`], run
//!    through `Bash`) that was run again later with the same command line gets the body
//!    [`STALE_BODY`]; the newest run stays intact;
//! 6. with `trim`, outside the newest [`TRIM_KEEP_RECENT_TURNS`] turn(s): each image
//!    or PDF of a tool result (an MCP tool's, Read's) is written to a file under
//!    `trim_dir` and replaced by a line naming it ([`IMAGE_POINTER_PREFIX`],
//!    [`DOCUMENT_POINTER_PREFIX`]); then a tool result over
//!    `trim_threshold_bytes` is written to a file under `trim_dir` and replaced by a
//!    pointer naming the file and the original size;
//! 7. repair the structure again.
//!
//! The repair makes the result valid for the Messages API once `user`/`assistant`
//! entries become messages (consecutive same-role entries merged): a user or assistant
//! entry with nothing to send is dropped; assistant messages before the first user
//! message, and assistant messages left with only thinking blocks, are dropped; a
//! `tool_result` that does not answer a `tool_use` of the assistant message just before
//! it (or answers one twice) is removed; a `tool_use` without a result gets a
//! synthesized user entry right after its assistant message, holding a result with
//! [`INTERRUPTED_BODY`] and `is_error: true` (the process died while the tool ran). Its
//! uuid is derived from the tool_use id, so pruning stays idempotent.
//!
//! Every removed entry's children are re-linked to its nearest surviving ancestor, and
//! the entry after a synthesized result is linked to it, so the `parentUuid` chain stays
//! one unbroken chain. Entries that are not `user`/`assistant` pass through unchanged
//! but for that re-link: chain links of other types (`system` lines such as Claude
//! Code's `api_error` retries and `turn_duration`, `attachment` lines) and lines without
//! a uuid (`summary`, `last-prompt`, titles). The engine does not send them to the API
//! ([`crate::transcript::Messages`] takes only user and assistant messages), and a
//! resume continues from the last entry that has a uuid
//! ([`crate::transcript::resume_leaf`]).
//!
//! # A prompt cache that survives (`PruneOptions::cache`)
//!
//! Rules 3–6 change what was already sent, so they make the next request miss the
//! prompt cache. With a [`CacheWindow`], they are applied only while the cache has gone
//! cold anyway: a load within `ttl` of the session's last reply (the last assistant
//! entry's `timestamp`) is *warm*, and then the transcript is fed exactly as it was last
//! sent. What was last sent is the transcript as pruned at the last cold load plus
//! everything appended since, so in warm mode rules 3–6 see only the entries before the
//! last cold load (the first user prompt written more than `ttl` after the reply before
//! it) and everything after stays verbatim; only the tail repairs (rules 1, 2, 7) apply
//! to all of it. A cold load applies every rule to everything, as without a window.
//!
//! `prune(prune(x)) == prune(x)` for every transcript.

mod facts;
mod raw;
mod repair;
mod rules;

use facts::*;
use repair::*;

use super::{SessionHold, SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError, par};
use crate::transcript::markers::SYNTHETIC_MODEL;
use crate::transcript::{
    Block as TypedBlock, Content as TypedContent, Entry, Json, Kind, Loaded, MessageUsage,
};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::transcript::markers::{
    INTERRUPTED_BODY, STALE_BODY, TRIM_POINTER_PREFIX, is_denial_text, is_interruption_text,
};

/// How the line standing for an image moved out of an old tool result starts.
pub const IMAGE_POINTER_PREFIX: &str = "[图片已移出上下文";

/// How the line standing for a PDF moved out of an old tool result starts.
pub const DOCUMENT_POINTER_PREFIX: &str = "[文档已移出上下文";

/// Default size above which an old tool result is trimmed (with `trim` on).
pub const DEFAULT_TRIM_THRESHOLD_BYTES: usize = 16 * 1024;

/// The newest turns (user messages carrying tool results) whose results are never
/// trimmed: the model is working on them.
pub const TRIM_KEEP_RECENT_TURNS: usize = 1;

/// One-shot snapshot commands: their output describes the state at one moment, so a
/// later run of the same command line supersedes it. A command line matches when,
/// whitespace collapsed, it is one of these or starts with one followed by a space
/// (`git diff src/a.rs`, `ls -la`), and it has no shell operator (`|`, `;`, `&`, `>`,
/// `<`, `` ` ``, `$`, parentheses, newline): a compound command may have done more than
/// look.
pub const SNAPSHOT_COMMANDS: &[&str] = &[
    "git status",
    "git diff",
    "git log",
    "git branch",
    "git stash list",
    "ls",
    "pwd",
    "tree",
    "du",
    "df",
    "ps",
    "free",
    "uptime",
    "date",
];

/// What [`prune`] does beyond the rules that always apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneOptions {
    /// How many denied tool calls to keep (the newest). Default 1: the newest denial
    /// stops the model from retrying the same blocked call; older ones only teach it
    /// helplessness.
    pub keep_denials: usize,
    /// Mark results of re-run snapshot commands as stale. Default true.
    pub ephemeral: bool,
    /// Move old large tool results to files. Default false.
    pub trim: bool,
    /// Results larger than this (bytes of text) are trimmed. Default 16 KiB.
    pub trim_threshold_bytes: usize,
    /// Where trimmed results are written (see [`default_trim_dir`]).
    pub trim_dir: PathBuf,
    /// Keep the prompt cache warm (see the module docs). `None`: every load is cold.
    pub cache: Option<CacheWindow>,
}

/// The prompt cache's lifetime, for [`PruneOptions::cache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheWindow {
    /// How long the cache lives after a request: 5 minutes, or 1 hour with the
    /// 1-hour cache.
    pub ttl: std::time::Duration,
    /// The time of the load; `None` is the clock at load time (tests set it).
    pub now: Option<chrono::DateTime<chrono::Utc>>,
}

impl CacheWindow {
    /// The API's default cache lifetime.
    pub const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);

    pub fn new(ttl: std::time::Duration) -> Self {
        CacheWindow { ttl, now: None }
    }
}

impl PruneOptions {
    /// The defaults: keep 1 denial, ephemeral on, trim off (16 KiB threshold).
    pub fn new(trim_dir: impl Into<PathBuf>) -> Self {
        PruneOptions {
            keep_denials: 1,
            ephemeral: true,
            trim: false,
            trim_threshold_bytes: DEFAULT_TRIM_THRESHOLD_BYTES,
            trim_dir: trim_dir.into(),
            cache: None,
        }
    }
}

/// Where trimmed tool results of a run live: `<run_dir>/trimmed` (inside the run dir,
/// which the Read tool may read).
pub fn default_trim_dir(run_dir: &Path) -> PathBuf {
    crate::run_dir::RunDir::new(run_dir).trimmed()
}

/// Whether an entry is a result [`prune`] synthesized for a call that never got one
/// (its uuid is derived from the call's id). A caller resuming a session can append
/// these, so that the chain continues from them; appending one twice is harmless,
/// since its uuid is an idempotency key.
pub fn is_synthesized_entry(entry: &Entry) -> bool {
    let Some(uuid) = entry.uuid() else {
        return false;
    };
    match entry.content() {
        Some(TypedContent::Blocks(blocks)) => match blocks.as_slice() {
            [TypedBlock::ToolResult(result)] => {
                matches!(&result.content, Some(TypedContent::Text(body)) if body == INTERRUPTED_BODY)
                    && result
                        .tool_use_id
                        .as_deref()
                        .is_some_and(|id| synthetic_uuid(id) == uuid)
            }
            _ => false,
        },
        _ => false,
    }
}

/// The normalized command line if `command` is a snapshot command
/// ([`SNAPSHOT_COMMANDS`]), else `None`.
pub fn snapshot_command(command: &str) -> Option<String> {
    const OPERATORS: &[char] = &['|', ';', '&', '>', '<', '`', '$', '(', ')', '\n', '\r'];
    if command.contains(OPERATORS) {
        return None;
    }
    let normalized = command.split_whitespace().collect::<Vec<_>>().join(" ");
    SNAPSHOT_COMMANDS
        .iter()
        .any(|s| {
            normalized == *s
                || normalized
                    .strip_prefix(s)
                    .is_some_and(|rest| rest.starts_with(' '))
        })
        .then_some(normalized)
}

/// Prunes a transcript (see the module documentation). Pure but for `trim`, which
/// writes each trimmed result to a file under `opts.trim_dir` once; a result whose file
/// cannot be written is left whole.
pub fn prune(entries: Vec<Entry>, opts: &PruneOptions) -> Vec<Entry> {
    // Reading the facts is a cold pass over every entry: the one part of pruning
    // worth spreading across cores.
    let prepared = par::map(entries, PARALLEL_MIN_ENTRIES, prepare_entry);
    prune_prepared(prepared, opts)
        .iter()
        .filter_map(|e| e.json.entry())
        .collect()
}

/// An entry with the facts pruning needs read out of it (see [`prepare_entry`]).
pub struct PreparedEntry(Slot);

/// Reads the facts pruning needs from a typed entry (a store's default `load_resume`),
/// kept as the text it serializes to.
pub fn prepare_entry(entry: Entry) -> PreparedEntry {
    let text = entry.to_json().unwrap_or_default().into_boxed_str();
    PreparedEntry(Slot::of_entry(&entry, text))
}

/// Reads the facts pruning needs from an entry's stored JSON text, borrowing from it: the
/// text is kept, and is what [`prune_prepared`] gives back for an entry no rule
/// changes. An error if the text is not valid JSON.
pub fn prepare_text(text: Box<str>) -> Result<PreparedEntry, serde_json::Error> {
    Slot::from_text(text).map(PreparedEntry)
}

/// [`prune`] of entries read with [`prepare_entry`] or [`prepare_text`].
pub fn prune_prepared(entries: Vec<PreparedEntry>, opts: &PruneOptions) -> Vec<Loaded> {
    let mut p = Pruner::new(entries.into_iter().map(|e| e.0).collect());
    if let Some(window) = &opts.cache {
        p.mark_warm_tail(window);
    }
    p.drop_synthetic_errors();
    p.drop_unanswered_continuation();
    p.repair();
    p.drop_old_denials(opts.keep_denials);
    p.neutralize_interruptions();
    if opts.ephemeral {
        p.mark_stale_snapshots();
    }
    if opts.trim {
        // Images first: what is left of a result is text, which the text rule may trim.
        p.move_old_images(opts);
        p.trim_large_results(opts);
    }
    p.repair();
    p.finish()
}

/// A [`SessionStore`] whose `load` returns the pruned transcript. Every other method,
/// and every write, goes to the wrapped store unchanged: the stored transcript is never
/// modified.
pub struct PruningSessionStore {
    inner: Arc<dyn SessionStore>,
    options: PruneOptions,
}

impl PruningSessionStore {
    pub fn new(inner: Arc<dyn SessionStore>, options: PruneOptions) -> Self {
        PruningSessionStore { inner, options }
    }

    /// The stored transcript, unpruned.
    pub fn load_raw(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError> {
        self.inner.load(key)
    }

    /// What `load` returns, each entry kept as its stored text unless pruning changed
    /// it: what a resume feeds into the request history.
    pub fn load_entries(&self, key: &SessionKey) -> Result<Option<Vec<Loaded>>, StoreError> {
        self.inner.load_resume(key, &self.options)
    }

    pub fn options(&self) -> &PruneOptions {
        &self.options
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn SessionStore> {
        &self.inner
    }
}

impl std::fmt::Debug for PruningSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PruningSessionStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SessionStore for PruningSessionStore {
    fn append(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.inner.append(key, entries)
    }

    fn append_deferred(&self, key: &SessionKey, entries: &[Entry]) -> Result<(), StoreError> {
        self.inner.append_deferred(key, entries)
    }

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Entry>>, StoreError> {
        self.inner.load_pruned(key, &self.options)
    }

    /// What was stored, not the pruned view: the usage is a fact of the transcript.
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<MessageUsage>, StoreError> {
        self.inner.last_assistant_usage(key)
    }

    /// Prunes the stored transcript with `options` (not this store's).
    fn load_pruned(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Entry>>, StoreError> {
        self.inner.load_pruned(key, options)
    }

    fn load_resume(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Loaded>>, StoreError> {
        self.inner.load_resume(key, options)
    }

    fn list_sessions(&self, project_key: &str) -> Result<Vec<SessionInfo>, StoreError> {
        self.inner.list_sessions(project_key)
    }

    fn list_session_summaries(&self, project_key: &str) -> Result<Vec<SessionSummary>, StoreError> {
        self.inner.list_session_summaries(project_key)
    }

    fn delete(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.inner.delete(key)
    }

    fn list_subkeys(&self, key: &SessionKey) -> Result<Vec<String>, StoreError> {
        self.inner.list_subkeys(key)
    }

    fn has_session(&self, session_id: &str) -> Result<bool, StoreError> {
        self.inner.has_session(session_id)
    }

    fn hold_session(&self, session_id: &str, shared: bool) -> Result<SessionHold, StoreError> {
        self.inner.hold_session(session_id, shared)
    }
}
