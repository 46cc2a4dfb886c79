//! Pruning on load: what a resumed session is fed (DESIGN.md §5, spec 接续 "剪除").
//!
//! The database keeps every entry verbatim; [`prune`] cleans only what is sent back to
//! the model. In order:
//! 1. drop synthetic API-error entries (`isApiErrorMessage: true` or
//!    `message.model == "<synthetic>"`): a retry storm must not read as something the
//!    model said;
//! 2. repair the structure (see below), so the rules work on well-formed turns;
//! 3. of the denied tool calls (a `tool_use` whose `tool_result` has `is_error: true`
//!    and a denial text, [`is_denial_text`]), keep only the newest `keep_denials`
//!    pairs; an older pair loses both its `tool_use` and its `tool_result` block;
//! 4. a tool result left by an interruption ([`is_interruption_text`]) gets the body
//!    [`INTERRUPTED_BODY`]; the entry stays;
//! 5. with `ephemeral`, a result of a snapshot command ([`SNAPSHOT_COMMANDS`], run
//!    through `Bash`) that was run again later with the same command line gets the body
//!    [`STALE_BODY`]; the newest run stays intact;
//! 6. with `trim`, a tool result over `trim_threshold_bytes` outside the newest
//!    [`TRIM_KEEP_RECENT_TURNS`] turn(s) is written to a file under `trim_dir` and
//!    replaced by a pointer naming the file and the original size;
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
//! one unbroken chain. Entries that are not `user`/`assistant` (`system`, and the
//! non-chain lines of imported Claude Code transcripts: `summary`,
//! `file-history-snapshot`, …) pass through unchanged but for that re-link; the engine
//! does not send them to the API.
//!
//! `prune(prune(x)) == prune(x)` for every transcript.

use super::{SessionInfo, SessionKey, SessionStore, SessionSummary, StoreError};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The body of a tool result that an interruption left, or that never came.
pub const INTERRUPTED_BODY: &str = "[上一轮在此处被中断,该工具结果未产生]";

/// The body of a snapshot command's result that a later run of the same command made
/// stale.
pub const STALE_BODY: &str = "[过期:这条命令之后又跑过一次,以最新那次为准]";

/// How a trim pointer starts; a result that starts with it is never trimmed again.
pub const TRIM_POINTER_PREFIX: &str = "[结果过大,已移出上下文";

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
        }
    }
}

/// Where trimmed tool results of a run live: `<run_dir>/trimmed` (inside the run dir,
/// which the Read tool may read).
pub fn default_trim_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("trimmed")
}

/// Whether a tool result's text is a permission denial: flower's ("Permission to use
/// …") or Claude Code's ("… requested permissions to use …", "… needs approval …",
/// "… has been denied …"). Only results with `is_error: true` count as denials.
pub fn is_denial_text(text: &str) -> bool {
    text.trim_start().starts_with("Permission to use ")
        || text.contains("requested permissions to use")
        || text.contains("needs approval")
        || text.contains("has been denied")
}

/// Whether a tool result's text was left by an interruption
/// (`[Request interrupted by user for tool use]` and its kin).
pub fn is_interruption_text(text: &str) -> bool {
    text.trim_start()
        .starts_with("[Request interrupted by user")
}

/// Whether an entry is a synthetic API-error message written by a harness.
pub fn is_synthetic_error(entry: &Value) -> bool {
    entry.get("isApiErrorMessage") == Some(&Value::Bool(true))
        || entry
            .get("message")
            .and_then(|m| m.get("model"))
            .and_then(Value::as_str)
            == Some("<synthetic>")
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
    let mut p = Pruner::new(entries);
    p.drop_synthetic_errors();
    p.repair();
    p.drop_old_denials(opts.keep_denials);
    p.neutralize_interruptions();
    if opts.ephemeral {
        p.mark_stale_snapshots();
    }
    if opts.trim {
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

    fn load(&self, key: &SessionKey) -> Result<Option<Vec<Value>>, StoreError> {
        Ok(self
            .inner
            .load(key)?
            .map(|entries| prune(entries, &self.options)))
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

fn role(entry: &Value) -> Option<Role> {
    match entry.get("type")?.as_str()? {
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        _ => None,
    }
}

fn content(entry: &Value) -> Option<&Value> {
    entry.get("message")?.get("content")
}

fn blocks(entry: &Value) -> &[Value] {
    content(entry)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn blocks_mut(entry: &mut Value) -> Option<&mut Vec<Value>> {
    entry.get_mut("message")?.get_mut("content")?.as_array_mut()
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

fn is_denial(block: &Value) -> bool {
    block.get("is_error") == Some(&Value::Bool(true)) && is_denial_text(&result_text(block))
}

/// A user or assistant entry that gives the API nothing valid to send.
fn is_empty_message(entry: &Value) -> bool {
    match content(entry) {
        Some(Value::String(text)) => text.trim().is_empty(),
        Some(Value::Array(blocks)) => blocks.is_empty(),
        _ => true,
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
    let lo = fnv(0x84222325_cbf29ce4);
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

struct Slot {
    entry: Value,
    removed: bool,
    /// Inserted by this prune (a result for a call that had none).
    synthesized: bool,
}

/// A maximal run of user (or assistant) entries: one API message.
struct Group {
    role: Role,
    members: Vec<usize>,
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
    fn new(entries: Vec<Value>) -> Self {
        Pruner {
            slots: entries
                .into_iter()
                .map(|entry| Slot {
                    entry,
                    removed: false,
                    synthesized: false,
                })
                .collect(),
            removed_links: HashMap::new(),
            redirects: HashMap::new(),
        }
    }

    fn alive(&self) -> impl Iterator<Item = (usize, &Value)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.removed)
            .map(|(i, s)| (i, &s.entry))
    }

    fn remove(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.removed {
            return;
        }
        slot.removed = true;
        if let Some(uuid) = str_field(&slot.entry, "uuid") {
            let parent = str_field(&slot.entry, "parentUuid").map(str::to_string);
            self.removed_links.insert(uuid.to_string(), parent);
        }
    }

    fn groups(&self) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (i, entry) in self.alive() {
            let Some(role) = role(entry) else { continue };
            match groups.last_mut() {
                Some(g) if g.role == role => g.members.push(i),
                _ => groups.push(Group {
                    role,
                    members: vec![i],
                }),
            }
        }
        groups
    }

    /// Ids of the `tool_use` blocks of a group, in order, without repeats.
    fn call_ids(&self, group: &Group) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut ids = Vec::new();
        for &i in &group.members {
            for block in blocks(&self.slots[i].entry) {
                if block_type(block) == Some("tool_use")
                    && let Some(id) = str_field(block, "id")
                    && seen.insert(id)
                {
                    ids.push(id.to_string());
                }
            }
        }
        ids
    }

    /// Where each `tool_result` of the alive user entries is, by tool_use id (the first
    /// one when repeated).
    fn result_locations(&self) -> HashMap<String, (usize, usize)> {
        let mut at = HashMap::new();
        for (i, entry) in self.alive() {
            if role(entry) != Some(Role::User) {
                continue;
            }
            for (b, block) in blocks(entry).iter().enumerate() {
                if block_type(block) == Some("tool_result")
                    && let Some(id) = str_field(block, "tool_use_id")
                {
                    at.entry(id.to_string()).or_insert((i, b));
                }
            }
        }
        at
    }

    fn block_mut(&mut self, (i, b): (usize, usize)) -> Option<&mut Value> {
        blocks_mut(&mut self.slots[i].entry)?.get_mut(b)
    }

    /// Removes content blocks given as (slot, block index).
    fn delete_blocks(&mut self, mut at: Vec<(usize, usize)>) {
        at.sort_unstable();
        at.dedup();
        for &(i, b) in at.iter().rev() {
            if let Some(list) = blocks_mut(&mut self.slots[i].entry)
                && b < list.len()
            {
                list.remove(b);
            }
        }
    }

    fn drop_synthetic_errors(&mut self) {
        for i in 0..self.slots.len() {
            let entry = &self.slots[i].entry;
            if role(entry) == Some(Role::Assistant) && is_synthetic_error(entry) {
                self.remove(i);
            }
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
            .filter(|(_, e)| role(e).is_some() && is_empty_message(e))
            .map(|(i, _)| i)
            .collect();
        if !empty.is_empty() {
            empty.into_iter().for_each(|i| self.remove(i));
            return true;
        }

        let groups = self.groups();
        let mut unsendable = Vec::new();
        let mut seen_user = false;
        for g in &groups {
            match g.role {
                Role::User => seen_user = true,
                Role::Assistant => {
                    let only_thinking = g.members.iter().all(|&i| {
                        let entry = &self.slots[i].entry;
                        content(entry).is_some_and(Value::is_array)
                            && blocks(entry).iter().all(|b| {
                                matches!(block_type(b), Some("thinking" | "redacted_thinking"))
                            })
                    });
                    if !seen_user || only_thinking {
                        unsendable.extend(&g.members);
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
        for (gi, g) in groups.iter().enumerate() {
            match g.role {
                Role::User => {
                    let allowed: HashSet<String> = match gi.checked_sub(1) {
                        Some(prev) => self.call_ids(&groups[prev]).into_iter().collect(),
                        None => HashSet::new(),
                    };
                    let mut answered = HashSet::new();
                    for &i in &g.members {
                        for (b, block) in blocks(&self.slots[i].entry).iter().enumerate() {
                            if block_type(block) != Some("tool_result") {
                                continue;
                            }
                            let id = str_field(block, "tool_use_id").unwrap_or_default();
                            if !allowed.contains(id) || !answered.insert(id) {
                                stray.push((i, b));
                            }
                        }
                    }
                }
                Role::Assistant => {
                    let calls = self.call_ids(g);
                    if calls.is_empty() {
                        continue;
                    }
                    let answered: HashSet<&str> = groups
                        .get(gi + 1)
                        .map(|next| {
                            next.members
                                .iter()
                                .flat_map(|&i| blocks(&self.slots[i].entry))
                                .filter(|b| block_type(b) == Some("tool_result"))
                                .filter_map(|b| str_field(b, "tool_use_id"))
                                .collect()
                        })
                        .unwrap_or_default();
                    let unanswered: Vec<String> = calls
                        .into_iter()
                        .filter(|id| !answered.contains(id.as_str()))
                        .collect();
                    if !unanswered.is_empty()
                        && let Some(&last) = g.members.last()
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
            let assistant = &self.slots[i].entry;
            let assistant_uuid = str_field(assistant, "uuid").map(str::to_string);
            let mut parent = assistant_uuid.clone();
            let mut made = Vec::new();
            for id in ids {
                let entry = synthesized_result(assistant, &id, parent.as_deref());
                parent = str_field(&entry, "uuid").map(str::to_string);
                made.push(Slot {
                    entry,
                    removed: false,
                    synthesized: true,
                });
            }
            if let (Some(from), Some(to)) = (assistant_uuid, parent) {
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
        for (i, entry) in self.alive() {
            if role(entry) != Some(Role::Assistant) {
                continue;
            }
            for (b, block) in blocks(entry).iter().enumerate() {
                if block_type(block) == Some("tool_use")
                    && let Some(id) = str_field(block, "id")
                {
                    calls.entry(id).or_insert((i, b));
                }
            }
        }
        let mut pairs = Vec::new();
        for (i, entry) in self.alive() {
            if role(entry) != Some(Role::User) {
                continue;
            }
            for (b, block) in blocks(entry).iter().enumerate() {
                if block_type(block) == Some("tool_result")
                    && is_denial(block)
                    && let Some(&call) =
                        str_field(block, "tool_use_id").and_then(|id| calls.get(id))
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
        for (i, entry) in self.alive() {
            if role(entry) != Some(Role::User) {
                continue;
            }
            for (b, block) in blocks(entry).iter().enumerate() {
                if block_type(block) == Some("tool_result")
                    && block.get("content").and_then(Value::as_str) != Some(INTERRUPTED_BODY)
                    && is_interruption_text(&result_text(block))
                {
                    hits.push((i, b));
                }
            }
        }
        for at in hits {
            self.set_result_body(at, Value::from(INTERRUPTED_BODY));
        }
    }

    fn set_result_body(&mut self, at: (usize, usize), body: Value) {
        if let Some(Value::Object(block)) = self.block_mut(at) {
            block.insert("content".into(), body);
        }
    }

    fn mark_stale_snapshots(&mut self) {
        let mut runs: Vec<(String, String)> = Vec::new();
        for (_, entry) in self.alive() {
            if role(entry) != Some(Role::Assistant) {
                continue;
            }
            for block in blocks(entry) {
                if block_type(block) == Some("tool_use")
                    && str_field(block, "name") == Some("Bash")
                    && let Some(id) = str_field(block, "id")
                    && let Some(command) = block
                        .get("input")
                        .and_then(|input| str_field(input, "command"))
                        .and_then(snapshot_command)
                {
                    runs.push((id.to_string(), command));
                }
            }
        }
        if runs.is_empty() {
            return;
        }
        let results = self.result_locations();
        let mut newest_seen = HashSet::new();
        let mut stale = Vec::new();
        for (id, command) in runs.iter().rev() {
            let Some(&at) = results.get(id) else { continue };
            let (i, b) = at;
            let block = &blocks(&self.slots[i].entry)[b];
            let text = result_text(block);
            // Only a run that produced output supersedes or can be superseded.
            let real = !is_denial(block)
                && text != INTERRUPTED_BODY
                && text != STALE_BODY
                && !is_interruption_text(&text);
            if !real {
                continue;
            }
            if newest_seen.contains(command.as_str()) {
                stale.push(at);
            } else {
                newest_seen.insert(command.as_str());
            }
        }
        for at in stale {
            self.set_result_body(at, Value::from(STALE_BODY));
        }
    }

    fn trim_large_results(&mut self, opts: &PruneOptions) {
        let groups = self.groups();
        let mut recent = HashSet::new();
        let mut turns = 0;
        for g in groups.iter().rev() {
            if turns == TRIM_KEEP_RECENT_TURNS {
                break;
            }
            let carries_results = g.role == Role::User
                && g.members.iter().any(|&i| {
                    blocks(&self.slots[i].entry)
                        .iter()
                        .any(|b| block_type(b) == Some("tool_result"))
                });
            if carries_results {
                recent.extend(g.members.iter().copied());
                turns += 1;
            }
        }
        let mut trims = Vec::new();
        for (i, entry) in self.alive() {
            if role(entry) != Some(Role::User) || recent.contains(&i) {
                continue;
            }
            let session = str_field(entry, "sessionId").unwrap_or("session");
            for (b, block) in blocks(entry).iter().enumerate() {
                if block_type(block) != Some("tool_result") {
                    continue;
                }
                let only_text = match block.get("content") {
                    Some(Value::String(_)) => true,
                    Some(Value::Array(parts)) => {
                        parts.iter().all(|p| block_type(p) == Some("text"))
                    }
                    _ => false,
                };
                let text = result_text(block);
                if !only_text
                    || text.len() <= opts.trim_threshold_bytes
                    || text.starts_with(TRIM_POINTER_PREFIX)
                {
                    continue;
                }
                let id = str_field(block, "tool_use_id").unwrap_or("result");
                if let Ok(path) = write_trimmed(&opts.trim_dir, session, id, &text) {
                    let pointer = format!(
                        "{TRIM_POINTER_PREFIX}:原结果共 {} 字节,全文在 {} ,需要时用 Read 读取]",
                        text.len(),
                        path.display()
                    );
                    trims.push(((i, b), pointer));
                }
            }
        }
        for (at, pointer) in trims {
            self.set_result_body(at, Value::from(pointer));
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
            if let Some(parent) = str_field(&entry, "parentUuid") {
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
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
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
