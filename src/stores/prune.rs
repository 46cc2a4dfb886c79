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
//!    of a tool result (an MCP tool's) is written to a file under `trim_dir` and
//!    replaced by a line naming it ([`IMAGE_POINTER_PREFIX`]); then a tool result over
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

use super::{SessionHold, SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError, par};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::transcript::markers::{
    INTERRUPTED_BODY, STALE_BODY, TRIM_POINTER_PREFIX, is_denial_text, is_interruption_text,
    is_refusal, is_synthetic_error,
};

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
pub fn is_synthesized_result(entry: &Value) -> bool {
    let Some(uuid) = str_field(entry, "uuid") else {
        return false;
    };
    let blocks = entry
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array);
    match blocks.map(Vec::as_slice) {
        Some([block]) => {
            block_type(block) == Some("tool_result")
                && block.get("content").and_then(Value::as_str) == Some(INTERRUPTED_BODY)
                && str_field(block, "tool_use_id").is_some_and(|id| synthetic_uuid(id) == uuid)
        }
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
pub fn prune(entries: Vec<Value>, opts: &PruneOptions) -> Vec<Value> {
    // Reading the facts is a cold pass over every entry: the one part of pruning
    // worth spreading across cores.
    prune_prepared(par::map(entries, PARALLEL_MIN_ENTRIES, prepare), opts)
}

/// An entry with the facts pruning needs read out of it (see [`prepare`]).
pub struct PreparedEntry(Slot);

/// Reads the facts pruning needs from an entry. A store that parses entries itself
/// calls this right after parsing each one (while it is in cache) and hands the
/// results to [`prune_prepared`]: on a long transcript that costs a fraction of a
/// separate pass.
pub fn prepare(entry: Value) -> PreparedEntry {
    PreparedEntry(Slot::new(entry))
}

/// [`prune`] of entries read with [`prepare`].
pub fn prune_prepared(entries: Vec<PreparedEntry>, opts: &PruneOptions) -> Vec<Value> {
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
    pub fn load_raw(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        self.inner.load(key)
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
    fn append(&self, key: &SessionKey, entries: &[Value]) -> Result<(), StoreError> {
        self.inner.append(key, entries)
    }

    fn append_deferred(&self, key: &SessionKey, entries: &[Value]) -> Result<(), StoreError> {
        self.inner.append_deferred(key, entries)
    }

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        self.inner.load_pruned(key, &self.options)
    }

    /// What was stored, not the pruned view: the usage is a fact of the transcript.
    fn last_assistant_usage(&self, key: &SessionKey) -> Result<Option<Value>, StoreError> {
        self.inner.last_assistant_usage(key)
    }

    /// Prunes the stored transcript with `options` (not this store's).
    fn load_pruned(
        &self,
        key: &SessionKey,
        options: &PruneOptions,
    ) -> Result<Option<Vec<Value>>, StoreError> {
        self.inner.load_pruned(key, options)
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

fn timestamp(entry: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = str_field(entry, "timestamp")?;
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

fn block_type(block: &Value) -> Option<&str> {
    block.get("type")?.as_str()
}

fn str_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field)?.as_str()
}

/// The text of a tool result's `content`: a string, or its text blocks joined.
fn result_text(block: &Value) -> Cow<'_, str> {
    match block.get("content") {
        Some(Value::String(text)) => Cow::Borrowed(text),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts.iter().filter_map(|p| str_field(p, "text")).collect();
            if texts.len() == 1 {
                Cow::Borrowed(texts[0])
            } else {
                Cow::Owned(texts.join("\n"))
            }
        }
        _ => Cow::Borrowed(""),
    }
}

/// A uuid-shaped id derived from a tool_use id (two FNV-1a hashes), so the result
/// synthesized for a call has the same uuid every time the transcript is pruned.
fn synthetic_uuid(tool_use_id: &str) -> String {
    let fnv = |seed: u64| {
        tool_use_id.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let hi = fnv(0xcbf2_9ce4_8422_2325);
    let lo = fnv(0x8422_2325_cbf2_9ce4);
    let n = (u128::from(hi) << 64) | u128::from(lo);
    // Version nibble 8 (custom), RFC 4122 variant.
    let n = (n & !(0xf << 76) & !(0x3 << 62)) | (0x8 << 76) | (0x2 << 62);
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// What a tool result's body is, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Output of a run.
    Output,
    /// `is_error` with a denial text.
    Denial,
    /// Left by an interruption, not yet neutralized.
    Interruption,
    /// [`INTERRUPTED_BODY`].
    Interrupted,
    /// [`STALE_BODY`].
    Stale,
    /// A trim pointer.
    Pointer,
}

impl Body {
    /// Whether the result carries output of a run (that can supersede or be stale).
    fn is_output(self) -> bool {
        matches!(self, Body::Output | Body::Pointer)
    }
}

/// The facts about one content block the rules use.
#[derive(Debug)]
enum Block {
    ToolUse {
        id: String,
        /// The normalized command line, for a `Bash` call of a snapshot command.
        snapshot: Option<String>,
    },
    ToolResult {
        id: String,
        body: Body,
        /// Bytes of text, when the content is only text (so it can be trimmed).
        text_len: Option<usize>,
    },
    Thinking,
    /// A `server_tool_use` block (the API ran the tool).
    ServerToolUse {
        id: String,
    },
    /// Its result (`web_search_tool_result`, `web_fetch_tool_result`), with the size of
    /// its content in bytes of JSON.
    ServerResult {
        id: String,
        len: usize,
    },
    Other,
}

impl Block {
    fn read(block: &Value) -> Block {
        match block_type(block) {
            Some("tool_use") => Block::ToolUse {
                id: str_field(block, "id").unwrap_or_default().to_string(),
                snapshot: (str_field(block, "name") == Some(crate::transcript::tools::BASH))
                    .then(|| {
                        block
                            .get("input")
                            .and_then(|input| str_field(input, "command"))
                            .and_then(snapshot_command)
                    })
                    .flatten(),
            },
            Some("tool_result") => {
                let text = result_text(block);
                let is_error = block.get("is_error") == Some(&Value::Bool(true));
                let body = if is_error && is_denial_text(&text) {
                    Body::Denial
                } else if text == INTERRUPTED_BODY {
                    Body::Interrupted
                } else if text == STALE_BODY {
                    Body::Stale
                } else if text.starts_with(TRIM_POINTER_PREFIX) {
                    Body::Pointer
                } else if is_interruption_text(&text) {
                    Body::Interruption
                } else {
                    Body::Output
                };
                let only_text = match block.get("content") {
                    Some(Value::String(_)) => true,
                    Some(Value::Array(parts)) => {
                        parts.iter().all(|p| block_type(p) == Some("text"))
                    }
                    _ => false,
                };
                Block::ToolResult {
                    id: str_field(block, "tool_use_id")
                        .unwrap_or_default()
                        .to_string(),
                    body,
                    text_len: only_text.then_some(text.len()),
                }
            }
            Some("thinking" | "redacted_thinking") => Block::Thinking,
            Some("server_tool_use") => Block::ServerToolUse {
                id: str_field(block, "id").unwrap_or_default().to_string(),
            },
            Some(kind) if kind.ends_with("_tool_result") => Block::ServerResult {
                id: str_field(block, "tool_use_id")
                    .unwrap_or_default()
                    .to_string(),
                len: block.get("content").map_or(0, |c| c.to_string().len()),
            },
            _ => Block::Other,
        }
    }
}

/// What a user or assistant entry's `message.content` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// Missing, not a string or array, or a blank string: nothing the API accepts.
    Unusable,
    Text,
    Blocks,
}

/// One entry and the facts about it, read once: the rules work on these facts and
/// touch an entry's JSON only to change it (a cold pass over 20 MB of entries costs
/// more than all the rules together).
struct Slot {
    entry: Value,
    role: Option<Role>,
    uuid: Option<String>,
    parent: Option<String>,
    synthetic_error: bool,
    /// A continuation request ([`crate::transcript::markers::is_continuation`]).
    continuation: bool,
    content: Content,
    /// Parallel to the content array (empty unless `content` is `Blocks`).
    blocks: Vec<Block>,
    removed: bool,
    /// Inserted by this prune (a result for a call that had none).
    synthesized: bool,
    /// Appended since the last cold load while the cache is warm: sent verbatim.
    warm: bool,
}

impl Slot {
    fn new(entry: Value) -> Slot {
        let role = match str_field(&entry, "type") {
            Some("user") => Some(Role::User),
            Some("assistant") => Some(Role::Assistant),
            _ => None,
        };
        let (content, blocks) = match role.and_then(|_| entry.get("message")?.get("content")) {
            Some(Value::String(text)) if !text.trim().is_empty() => (Content::Text, Vec::new()),
            Some(Value::Array(list)) => (Content::Blocks, list.iter().map(Block::read).collect()),
            _ => (Content::Unusable, Vec::new()),
        };
        Slot {
            role,
            uuid: str_field(&entry, "uuid").map(str::to_string),
            parent: str_field(&entry, "parentUuid").map(str::to_string),
            synthetic_error: role == Some(Role::Assistant)
                && (is_synthetic_error(&entry) || is_refusal(&entry)),
            continuation: role == Some(Role::User)
                && crate::transcript::markers::is_continuation(&entry),
            content,
            blocks,
            removed: false,
            synthesized: false,
            warm: false,
            entry,
        }
    }

    /// A user entry a person or the runtime wrote (text, no tool results): what a
    /// load is followed by.
    fn is_prompt(&self) -> bool {
        match self.content {
            Content::Text => true,
            Content::Blocks => !self
                .blocks
                .iter()
                .any(|b| matches!(b, Block::ToolResult { .. })),
            Content::Unusable => false,
        }
    }

    /// A user or assistant entry that gives the API nothing to send.
    fn is_empty_message(&self) -> bool {
        self.role.is_some()
            && match self.content {
                Content::Unusable => true,
                Content::Text => false,
                Content::Blocks => self.blocks.is_empty(),
            }
    }

    fn content_array(&mut self) -> Option<&mut Vec<Value>> {
        self.entry
            .get_mut("message")?
            .get_mut("content")?
            .as_array_mut()
    }

    fn delete_block(&mut self, b: usize) {
        if b < self.blocks.len() {
            self.blocks.remove(b);
            if let Some(list) = self.content_array()
                && b < list.len()
            {
                list.remove(b);
            }
        }
    }

    fn set_result_body(&mut self, b: usize, text: String, body: Body) {
        let len = text.len();
        if let Some(Block::ToolResult {
            body: old,
            text_len,
            ..
        }) = self.blocks.get_mut(b)
        {
            *old = body;
            *text_len = Some(len);
        }
        if let Some(Value::Object(block)) = self.content_array().and_then(|l| l.get_mut(b)) {
            block.insert("content".into(), Value::from(text));
        }
    }
}

/// Below this many entries a transcript is pruned on the calling thread.
const PARALLEL_MIN_ENTRIES: usize = 2000;

/// The maximal runs of user (or assistant) entries: the API messages. Kept flat (one
/// index list, spans into it): a long transcript has thousands of messages.
struct Groups {
    members: Vec<usize>,
    spans: Vec<(Role, usize, usize)>,
}

impl Groups {
    fn len(&self) -> usize {
        self.spans.len()
    }

    fn role(&self, g: usize) -> Role {
        self.spans[g].0
    }

    fn members(&self, g: usize) -> &[usize] {
        let (_, start, end) = self.spans[g];
        &self.members[start..end]
    }
}

struct Pruner {
    slots: Vec<Slot>,
    /// uuid of a removed entry → its parentUuid.
    removed_links: HashMap<String, Option<String>>,
    /// uuid of an assistant entry → the last result synthesized after it; the
    /// assistant's other children hang below that result.
    redirects: HashMap<String, String>,
}

impl Pruner {
    fn new(slots: Vec<Slot>) -> Self {
        Pruner {
            slots,
            removed_links: HashMap::new(),
            redirects: HashMap::new(),
        }
    }

    fn alive(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots.iter().enumerate().filter(|(_, s)| !s.removed)
    }

    fn alive_with_role(&self, role: Role) -> impl Iterator<Item = (usize, &Slot)> {
        self.alive().filter(move |(_, s)| s.role == Some(role))
    }

    /// The entries the prefix-changing rules may touch (all but a warm tail).
    fn ruled_with_role(&self, role: Role) -> impl Iterator<Item = (usize, &Slot)> {
        self.alive_with_role(role).filter(|(_, s)| !s.warm)
    }

    /// With the cache warm, marks the entries appended since the last cold load (see
    /// the module docs). A cold load marks nothing.
    fn mark_warm_tail(&mut self, window: &CacheWindow) {
        let ttl = chrono::Duration::from_std(window.ttl).unwrap_or(chrono::Duration::MAX);
        let now = window.now.unwrap_or_else(chrono::Utc::now);
        let mut last_reply: Option<chrono::DateTime<chrono::Utc>> = None;
        let mut boundary = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(role) = slot.role else { continue };
            let Some(at) = timestamp(&slot.entry) else {
                continue;
            };
            match role {
                Role::Assistant if !slot.synthetic_error => last_reply = Some(at),
                Role::User if slot.is_prompt() && last_reply.is_some_and(|r| at - r > ttl) => {
                    boundary = i;
                }
                _ => {}
            }
        }
        if last_reply.is_some_and(|r| now - r <= ttl) {
            for slot in &mut self.slots[boundary..] {
                slot.warm = true;
            }
        }
    }

    fn remove(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.removed {
            return;
        }
        slot.removed = true;
        if let Some(uuid) = &slot.uuid {
            self.removed_links.insert(uuid.clone(), slot.parent.clone());
        }
    }

    fn groups(&self) -> Groups {
        let mut groups = Groups {
            members: Vec::with_capacity(self.slots.len()),
            spans: Vec::new(),
        };
        for (i, slot) in self.alive() {
            let Some(role) = slot.role else { continue };
            groups.members.push(i);
            let end = groups.members.len();
            match groups.spans.last_mut() {
                Some(span) if span.0 == role => span.2 = end,
                _ => groups.spans.push((role, end - 1, end)),
            }
        }
        groups
    }

    /// Ids of the `tool_use` blocks of some entries, in order, without repeats. A
    /// message has a handful, so a list beats a set.
    fn call_ids(&self, members: &[usize]) -> Vec<&str> {
        let mut ids: Vec<&str> = Vec::new();
        for &i in members {
            for block in &self.slots[i].blocks {
                if let Block::ToolUse { id, .. } = block
                    && !ids.contains(&id.as_str())
                {
                    ids.push(id);
                }
            }
        }
        ids
    }

    /// Ids of the `tool_result` blocks of some entries, in order.
    fn result_ids(&self, members: &[usize]) -> Vec<&str> {
        members
            .iter()
            .flat_map(|&i| &self.slots[i].blocks)
            .filter_map(|b| match b {
                Block::ToolResult { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Removes content blocks given as (slot, block index).
    fn delete_blocks(&mut self, mut at: Vec<(usize, usize)>) {
        at.sort_unstable();
        at.dedup();
        for &(i, b) in at.iter().rev() {
            self.slots[i].delete_block(b);
        }
    }

    fn drop_synthetic_errors(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].synthetic_error {
                self.remove(i);
            }
        }
    }

    /// A continuation request the model never answered (the request after it failed
    /// or the process died) goes: the prompt the resume adds follows the cut reply.
    fn drop_unanswered_continuation(&mut self) {
        let last = self
            .slots
            .iter()
            .rposition(|s| !s.removed && s.role.is_some());
        if let Some(i) = last
            && self.slots[i].continuation
        {
            self.remove(i);
        }
    }

    fn repair(&mut self) {
        // Each round removes something or answers some calls, so this ends; the bound
        // only guards against a bug turning into a hang.
        let rounds = 2 * self.slots.len() + 8;
        for _ in 0..rounds {
            if !self.repair_round() {
                return;
            }
        }
    }

    /// One repair step; `true` when it changed something (and grouping must be redone).
    fn repair_round(&mut self) -> bool {
        let empty: Vec<usize> = self
            .alive()
            .filter(|(_, s)| s.is_empty_message())
            .map(|(i, _)| i)
            .collect();
        if !empty.is_empty() {
            empty.into_iter().for_each(|i| self.remove(i));
            return true;
        }

        let groups = self.groups();
        let mut unsendable = Vec::new();
        let mut seen_user = false;
        for g in 0..groups.len() {
            match groups.role(g) {
                Role::User => seen_user = true,
                Role::Assistant => {
                    let only_thinking = groups.members(g).iter().all(|&i| {
                        let slot = &self.slots[i];
                        slot.content == Content::Blocks
                            && slot.blocks.iter().all(|b| matches!(b, Block::Thinking))
                    });
                    if !seen_user || only_thinking {
                        unsendable.extend(groups.members(g));
                    }
                }
            }
        }
        if !unsendable.is_empty() {
            unsendable.into_iter().for_each(|i| self.remove(i));
            return true;
        }

        let mut stray = Vec::new();
        let mut missing: Vec<(usize, Vec<String>)> = Vec::new();
        for g in 0..groups.len() {
            let members = groups.members(g);
            match groups.role(g) {
                Role::User => {
                    let allowed = match g.checked_sub(1) {
                        Some(prev) => self.call_ids(groups.members(prev)),
                        None => Vec::new(),
                    };
                    let mut answered: Vec<&str> = Vec::new();
                    for &i in members {
                        for (b, block) in self.slots[i].blocks.iter().enumerate() {
                            let Block::ToolResult { id, .. } = block else {
                                continue;
                            };
                            if allowed.contains(&id.as_str()) && !answered.contains(&id.as_str()) {
                                answered.push(id);
                            } else {
                                stray.push((i, b));
                            }
                        }
                    }
                }
                Role::Assistant => {
                    let calls = self.call_ids(members);
                    if calls.is_empty() {
                        continue;
                    }
                    let answered = if g + 1 < groups.len() {
                        self.result_ids(groups.members(g + 1))
                    } else {
                        Vec::new()
                    };
                    let unanswered: Vec<String> = calls
                        .into_iter()
                        .filter(|id| !answered.contains(id))
                        .map(str::to_string)
                        .collect();
                    if !unanswered.is_empty()
                        && let Some(&last) = members.last()
                    {
                        missing.push((last, unanswered));
                    }
                }
            }
        }
        let changed = !stray.is_empty() || !missing.is_empty();
        self.delete_blocks(stray);
        if !missing.is_empty() {
            self.insert_missing_results(missing);
        }
        changed
    }

    /// Inserts, right after each given assistant entry, one synthesized user entry per
    /// unanswered call, chained below it.
    fn insert_missing_results(&mut self, missing: Vec<(usize, Vec<String>)>) {
        let mut after: BTreeMap<usize, Vec<Slot>> = BTreeMap::new();
        for (i, ids) in missing {
            let assistant = &self.slots[i];
            let mut parent = assistant.uuid.clone();
            let mut made = Vec::new();
            for id in ids {
                let mut slot =
                    Slot::new(synthesized_result(&assistant.entry, &id, parent.as_deref()));
                slot.synthesized = true;
                slot.warm = assistant.warm;
                parent = slot.uuid.clone();
                made.push(slot);
            }
            if let (Some(from), Some(to)) = (assistant.uuid.clone(), parent) {
                self.redirects.insert(from, to);
            }
            after.insert(i, made);
        }
        let old = std::mem::take(&mut self.slots);
        self.slots
            .reserve(old.len() + after.values().map(Vec::len).sum::<usize>());
        for (i, slot) in old.into_iter().enumerate() {
            self.slots.push(slot);
            if let Some(made) = after.remove(&i) {
                self.slots.extend(made);
            }
        }
    }

    fn drop_old_denials(&mut self, keep: usize) {
        let mut calls: HashMap<&str, (usize, usize)> = HashMap::new();
        for (i, slot) in self.ruled_with_role(Role::Assistant) {
            for (b, block) in slot.blocks.iter().enumerate() {
                if let Block::ToolUse { id, .. } = block {
                    calls.entry(id.as_str()).or_insert((i, b));
                }
            }
        }
        let mut pairs = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            for (b, block) in slot.blocks.iter().enumerate() {
                if let Block::ToolResult {
                    id,
                    body: Body::Denial,
                    ..
                } = block
                    && let Some(&call) = calls.get(id.as_str())
                {
                    pairs.push((call, (i, b)));
                }
            }
        }
        pairs.sort_unstable();
        let drop = pairs.len().saturating_sub(keep);
        let doomed = pairs[..drop]
            .iter()
            .flat_map(|&(call, result)| [call, result])
            .collect();
        self.delete_blocks(doomed);
    }

    fn neutralize_interruptions(&mut self) {
        let mut hits = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            for (b, block) in slot.blocks.iter().enumerate() {
                if let Block::ToolResult {
                    body: Body::Interruption,
                    ..
                } = block
                {
                    hits.push((i, b));
                }
            }
        }
        for (i, b) in hits {
            self.slots[i].set_result_body(b, INTERRUPTED_BODY.into(), Body::Interrupted);
        }
    }

    fn mark_stale_snapshots(&mut self) {
        let mut runs: Vec<(&str, &str)> = Vec::new();
        for (_, slot) in self.ruled_with_role(Role::Assistant) {
            for block in &slot.blocks {
                if let Block::ToolUse {
                    id,
                    snapshot: Some(command),
                } = block
                {
                    runs.push((id, command));
                }
            }
        }
        if runs.is_empty() {
            return;
        }
        let mut results: HashMap<&str, (usize, usize, Body)> = HashMap::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            for (b, block) in slot.blocks.iter().enumerate() {
                if let Block::ToolResult { id, body, .. } = block {
                    results.entry(id.as_str()).or_insert((i, b, *body));
                }
            }
        }
        let mut newest_seen = HashSet::new();
        let mut stale = Vec::new();
        for (id, command) in runs.iter().rev() {
            // Only a run that produced output supersedes or can be superseded.
            let Some(&(i, b, _)) = results.get(id).filter(|r| r.2.is_output()) else {
                continue;
            };
            if newest_seen.contains(command) {
                stale.push((i, b));
            } else {
                newest_seen.insert(*command);
            }
        }
        for (i, b) in stale {
            self.slots[i].set_result_body(b, STALE_BODY.into(), Body::Stale);
        }
    }

    /// The entries of the newest turns with tool results (never trimmed).
    fn recent_result_entries(&self) -> HashSet<usize> {
        let groups = self.groups();
        let mut recent = HashSet::new();
        let mut turns = 0;
        for g in (0..groups.len()).rev() {
            if turns == TRIM_KEEP_RECENT_TURNS {
                break;
            }
            let warm = groups.members(g).iter().any(|&i| self.slots[i].warm);
            if !warm
                && groups.role(g) == Role::User
                && !self.result_ids(groups.members(g)).is_empty()
            {
                recent.extend(groups.members(g).iter().copied());
                turns += 1;
            }
        }
        recent
    }

    /// Images in old tool results (an MCP tool's) are written to files under
    /// `trim_dir`; the result keeps its text and a line per image naming the file.
    fn move_old_images(&mut self, opts: &PruneOptions) {
        let recent = self.recent_result_entries();
        let mut moves = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            if recent.contains(&i) {
                continue;
            }
            for (b, block) in slot.blocks.iter().enumerate() {
                let Block::ToolResult {
                    id,
                    body: Body::Output,
                    text_len: None,
                } = block
                else {
                    continue;
                };
                let Some(Value::Array(parts)) = slot.entry["message"]["content"]
                    .get(b)
                    .and_then(|result| result.get("content"))
                else {
                    continue;
                };
                if !parts.iter().any(|p| block_type(p) == Some("image")) {
                    continue;
                }
                let session = str_field(&slot.entry, "sessionId").unwrap_or("session");
                let mut lines: Vec<String> = Vec::new();
                for (n, part) in parts.iter().enumerate() {
                    match block_type(part) {
                        Some("text") => lines.extend(str_field(part, "text").map(str::to_string)),
                        Some("image") => {
                            let media = part["source"]["media_type"].as_str().unwrap_or("image");
                            let data = part["source"]["data"].as_str().unwrap_or_default();
                            lines.push(
                                match write_image(&opts.trim_dir, session, id, n, media, data) {
                                    Some((path, bytes)) => format!(
                                        "{IMAGE_POINTER_PREFIX}:{media},{bytes} 字节,在 {} ]",
                                        path.display()
                                    ),
                                    None => format!("{IMAGE_POINTER_PREFIX}:{media},未能保存]"),
                                },
                            );
                        }
                        _ => {}
                    }
                }
                moves.push((i, b, lines.join("\n")));
            }
        }
        for (i, b, text) in moves {
            self.slots[i].set_result_body(b, text, Body::Output);
        }
    }

    fn trim_large_results(&mut self, opts: &PruneOptions) {
        let recent = self.recent_result_entries();
        let mut trims = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            if recent.contains(&i) {
                continue;
            }
            for (b, block) in slot.blocks.iter().enumerate() {
                let Block::ToolResult {
                    id,
                    body: Body::Output,
                    text_len: Some(len),
                } = block
                else {
                    continue;
                };
                if *len <= opts.trim_threshold_bytes {
                    continue;
                }
                let session = str_field(&slot.entry, "sessionId").unwrap_or("session");
                let Some(value) = slot.entry["message"]["content"].get(b) else {
                    continue;
                };
                let text = result_text(value);
                if let Ok(path) = write_trimmed(&opts.trim_dir, session, id, &text) {
                    let pointer = format!(
                        "{TRIM_POINTER_PREFIX}:原结果共 {} 字节,全文在 {} ,需要时用 Read 读取]",
                        text.len(),
                        path.display()
                    );
                    trims.push((i, b, pointer));
                }
            }
        }
        for (i, b, pointer) in trims {
            self.slots[i].set_result_body(b, pointer, Body::Pointer);
        }
        self.trim_server_results(opts);
    }

    /// Large results of server tools (a fetched page, search results) in assistant
    /// messages before the newest one: the call and its result become one text block
    /// pointing to a file with the page's text (or the results' titles and addresses).
    fn trim_server_results(&mut self, opts: &PruneOptions) {
        let groups = self.groups();
        let newest = (0..groups.len())
            .rev()
            .find(|&g| groups.role(g) == Role::Assistant)
            .map(|g| groups.members(g).to_vec())
            .unwrap_or_default();
        let mut edits: Vec<(usize, usize, usize, String)> = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::Assistant) {
            if newest.contains(&i) {
                continue;
            }
            for (b, block) in slot.blocks.iter().enumerate() {
                let Block::ServerResult { id, len } = block else {
                    continue;
                };
                if *len <= opts.trim_threshold_bytes {
                    continue;
                }
                let Some(call) = slot.blocks[..b]
                    .iter()
                    .rposition(|c| matches!(c, Block::ServerToolUse { id: c_id } if c_id == id))
                else {
                    continue;
                };
                let content = &slot.entry["message"]["content"];
                let (what, text) = server_result_text(&content[call], &content[b]);
                let session = str_field(&slot.entry, "sessionId").unwrap_or("session");
                if let Ok(path) = write_trimmed(&opts.trim_dir, session, id, &text) {
                    let pointer = format!(
                        "{TRIM_POINTER_PREFIX}:{what}的结果原共 {len} 字节,内容在 {} ,需要时用 Read 读取]",
                        path.display()
                    );
                    edits.push((i, call, b, pointer));
                }
            }
        }
        // Last first, so that the indices of earlier edits in the same entry hold.
        for (i, call, b, pointer) in edits.into_iter().rev() {
            let slot = &mut self.slots[i];
            if let Some(list) = slot.content_array()
                && let Some(block) = list.get_mut(b)
            {
                *block = serde_json::json!({"type": "text", "text": pointer});
            }
            if let Some(block) = slot.blocks.get_mut(b) {
                *block = Block::Other;
            }
            slot.delete_block(call);
        }
    }

    fn finish(self) -> Vec<Value> {
        let Pruner {
            slots,
            removed_links,
            redirects,
        } = self;
        let resolve = |start: &str, synthesized: bool| -> Option<String> {
            let mut current = start.to_string();
            // Each step follows a removed entry or a redirect; more steps than there are
            // links means a cycle in the input.
            for _ in 0..=(removed_links.len() + redirects.len()) {
                if !synthesized && let Some(to) = redirects.get(&current) {
                    if !removed_links.contains_key(to) {
                        return Some(to.clone());
                    }
                    current = to.clone();
                }
                match removed_links.get(&current) {
                    Some(Some(parent)) => current = parent.clone(),
                    Some(None) => return None,
                    None => return Some(current),
                }
            }
            Some(current)
        };
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            if slot.removed {
                continue;
            }
            let mut entry = slot.entry;
            if let Some(parent) = slot.parent.as_deref()
                && (removed_links.contains_key(parent) || redirects.contains_key(parent))
            {
                let linked = resolve(parent, slot.synthesized);
                if linked.as_deref() != Some(parent)
                    && let Some(object) = entry.as_object_mut()
                {
                    object.insert("parentUuid".into(), linked.map_or(Value::Null, Value::from));
                }
            }
            out.push(entry);
        }
        out
    }
}

/// What a server tool call was (`web_fetch https://…`) and the text worth keeping of
/// its result: a fetched document's text, or the search results' titles and addresses.
fn server_result_text(call: &Value, result: &Value) -> (String, String) {
    let name = str_field(call, "name").unwrap_or("server tool");
    let input = call.get("input").unwrap_or(&Value::Null);
    let target = ["url", "query"]
        .iter()
        .find_map(|k| str_field(input, k))
        .unwrap_or("");
    let what = format!("{name} {target} ");
    let content = result.get("content").unwrap_or(&Value::Null);
    let text = match content {
        Value::Array(results) => results
            .iter()
            .map(|r| {
                format!(
                    "{}\n{}\n",
                    str_field(r, "title").unwrap_or(""),
                    str_field(r, "url").unwrap_or("")
                )
            })
            .collect::<String>(),
        other => other
            .pointer("/content/source/data")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_string),
    };
    (what, format!("{name} {target}\n\n{text}"))
}

/// The user entry that answers a call that never got a result.
fn synthesized_result(assistant: &Value, tool_use_id: &str, parent: Option<&str>) -> Value {
    let mut entry = Map::new();
    entry.insert("parentUuid".into(), parent.map_or(Value::Null, Value::from));
    entry.insert(
        "isSidechain".into(),
        assistant
            .get("isSidechain")
            .cloned()
            .unwrap_or(Value::Bool(false)),
    );
    entry.insert("type".into(), Value::from("user"));
    let mut result = Map::new();
    result.insert("type".into(), Value::from("tool_result"));
    result.insert("tool_use_id".into(), Value::from(tool_use_id));
    result.insert("content".into(), Value::from(INTERRUPTED_BODY));
    result.insert("is_error".into(), Value::Bool(true));
    let mut message = Map::new();
    message.insert("role".into(), Value::from("user"));
    message.insert("content".into(), Value::Array(vec![Value::Object(result)]));
    entry.insert("message".into(), Value::Object(message));
    entry.insert("uuid".into(), Value::from(synthetic_uuid(tool_use_id)));
    for field in ["timestamp", "cwd", "sessionId"] {
        if let Some(value) = assistant.get(field) {
            entry.insert(field.into(), value.clone());
        }
    }
    Value::Object(entry)
}

/// Writes a trimmed result to `<dir>/<session>-<tool_use_id>.txt` once (an existing
/// file of the same size is kept), atomically, and returns its path.
/// How the line standing for an image moved out of an old tool result starts.
pub const IMAGE_POINTER_PREFIX: &str = "[图片已移出上下文";

/// Writes an image of a tool result (base64 `data`) under `dir`; its path and size, or
/// `None` when the data is not base64 or the file cannot be written.
fn write_image(
    dir: &Path,
    session: &str,
    id: &str,
    n: usize,
    media: &str,
    data: &str,
) -> Option<(PathBuf, usize)> {
    let bytes = decode_base64(data)?;
    let ext = match media {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => "bin",
    };
    let path = dir.join(format!(
        "{}-{}-{n}.{ext}",
        safe_name(session),
        safe_name(id)
    ));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Some((path, bytes.len()));
    }
    std::fs::create_dir_all(dir).ok()?;
    crate::atomic::write(&path, &bytes).ok()?;
    Some((path, bytes.len()))
}

/// Standard base64 (padding optional, whitespace ignored); `None` on any other byte.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn safe_name(s: &str) -> String {
    s.chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_trimmed(dir: &Path, session: &str, id: &str, text: &str) -> std::io::Result<PathBuf> {
    let safe = |s: &str| -> String {
        s.chars()
            .take(100)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("{}-{}.txt", safe(session), safe(id));
    let path = dir.join(&name);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == text.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    crate::atomic::write(&path, text.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_uuids_are_stable_uuid_shaped_and_distinct() {
        let a = synthetic_uuid("toolu_01");
        assert_eq!(a, synthetic_uuid("toolu_01"));
        assert_ne!(a, synthetic_uuid("toolu_02"));
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'8');
        assert!(uuid::Uuid::parse_str(&a).is_ok());
    }
}
