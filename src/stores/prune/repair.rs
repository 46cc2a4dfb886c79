//! The pruner's structure: entries grouped into messages, removal with re-linking,
//! and the repair that makes the result valid for the Messages API.

use super::*;
use crate::transcript::{
    Block as TypedBlock, Content as TypedContent, Entry, Message, ToolResultBlock,
};

/// The maximal runs of user (or assistant) entries: the API messages. Kept flat (one
/// index list, spans into it): a long transcript has thousands of messages.
pub(super) struct Groups {
    pub(super) members: Vec<usize>,
    pub(super) spans: Vec<(Role, usize, usize)>,
}

impl Groups {
    pub(super) fn len(&self) -> usize {
        self.spans.len()
    }

    pub(super) fn role(&self, g: usize) -> Role {
        self.spans[g].0
    }

    pub(super) fn members(&self, g: usize) -> &[usize] {
        let (_, start, end) = self.spans[g];
        &self.members[start..end]
    }
}

pub(super) struct Pruner {
    pub(super) slots: Vec<Slot>,
    /// uuid of a removed entry → its parentUuid.
    pub(super) removed_links: HashMap<Id, Option<Id>>,
    /// uuid of an assistant entry → the last result synthesized after it; the
    /// assistant's other children hang below that result.
    pub(super) redirects: HashMap<Id, Id>,
}

impl Pruner {
    pub(super) fn new(slots: Vec<Slot>) -> Self {
        Pruner {
            slots,
            removed_links: HashMap::new(),
            redirects: HashMap::new(),
        }
    }

    pub(super) fn alive(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots.iter().enumerate().filter(|(_, s)| !s.removed)
    }

    pub(super) fn alive_with_role(&self, role: Role) -> impl Iterator<Item = (usize, &Slot)> {
        self.alive().filter(move |(_, s)| s.role == Some(role))
    }

    /// The entries the prefix-changing rules may touch (all but a warm tail).
    pub(super) fn ruled_with_role(&self, role: Role) -> impl Iterator<Item = (usize, &Slot)> {
        self.alive_with_role(role).filter(|(_, s)| !s.warm)
    }

    pub(super) fn remove(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.removed {
            return;
        }
        slot.removed = true;
        if let Some(uuid) = &slot.uuid {
            self.removed_links.insert(uuid.clone(), slot.parent.clone());
        }
    }

    pub(super) fn groups(&self) -> Groups {
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
    pub(super) fn call_ids(&self, members: &[usize]) -> Vec<&str> {
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
    pub(super) fn result_ids(&self, members: &[usize]) -> Vec<&str> {
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
    pub(super) fn delete_blocks(&mut self, mut at: Vec<(usize, usize)>) {
        at.sort_unstable();
        at.dedup();
        for &(i, b) in at.iter().rev() {
            self.slots[i].delete_block(b);
        }
    }

    pub(super) fn repair(&mut self) {
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
    /// Long because its three checks (empty entries, unsendable leading groups, stray
    /// and missing tool results) run in a fixed order over one grouping, and each one
    /// that changes something ends the round.
    pub(super) fn repair_round(&mut self) -> bool {
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
    pub(super) fn insert_missing_results(&mut self, missing: Vec<(usize, Vec<String>)>) {
        let mut after: BTreeMap<usize, Vec<Slot>> = BTreeMap::new();
        for (i, ids) in missing {
            let assistant = &self.slots[i];
            let mut parent = assistant.uuid.clone();
            let mut made = Vec::new();
            for id in ids {
                let parent_text = parent.as_ref().map(Id::text);
                let assistant_entry = assistant.entry().unwrap_or_default();
                let entry = synthesized_result(&assistant_entry, &id, parent_text.as_deref());
                let Some(mut slot) = Slot::built(entry) else {
                    continue;
                };
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

    pub(super) fn finish(self) -> Vec<Loaded> {
        let Pruner {
            slots,
            removed_links,
            redirects,
        } = self;
        let resolve = |start: &Id, synthesized: bool| -> Option<Id> {
            let mut current = start.clone();
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
        for mut slot in slots {
            if slot.removed {
                continue;
            }
            if let Some(parent) = slot.parent.clone()
                && (removed_links.contains_key(&parent) || redirects.contains_key(&parent))
            {
                let linked = resolve(&parent, slot.synthesized);
                if linked.as_ref() != Some(&parent)
                    && let Some(entry) = slot.entry_mut()
                {
                    entry.parent_uuid = Some(linked.map(|id| id.text().into_owned()));
                }
            }
            let entry = match slot.entry {
                Stored::Text(text) => Json::new(text),
                Stored::Edited(entry) => match entry.to_json() {
                    Ok(text) => Json::new(text.into_boxed_str()),
                    // Strings and kept JSON text only: this does not fail.
                    Err(_) => continue,
                },
            };
            let kind = match slot.role {
                Some(Role::User) => Kind::User,
                Some(Role::Assistant) => Kind::Assistant,
                None if slot.system => Kind::System,
                None => Kind::Other,
            };
            // Only user and assistant entries have their blocks read.
            let maybe_synthesized = slot.role.is_none()
                || matches!(
                    slot.blocks.as_slice(),
                    [Block::ToolResult {
                        body: Body::Interrupted,
                        ..
                    }]
                );
            out.push(Loaded {
                json: entry,
                kind,
                maybe_synthesized,
            });
        }
        out
    }
}

/// The user entry that answers a call that never got a result.
pub(super) fn synthesized_result(
    assistant: &Entry,
    tool_use_id: &str,
    parent: Option<&str>,
) -> Entry {
    let result = ToolResultBlock {
        kind: Some("tool_result".into()),
        tool_use_id: Some(tool_use_id.into()),
        content: Some(TypedContent::Text(INTERRUPTED_BODY.into())),
        is_error: Some(true),
        ..ToolResultBlock::default()
    };
    Entry {
        parent_uuid: Some(parent.map(str::to_string)),
        is_sidechain: Some(assistant.is_sidechain()),
        kind: Some("user".into()),
        message: Some(Message {
            role: Some("user".into()),
            content: Some(TypedContent::Blocks(vec![TypedBlock::ToolResult(result)])),
            ..Message::default()
        }),
        uuid: Some(synthetic_uuid(tool_use_id)),
        timestamp: assistant.timestamp.clone(),
        cwd: assistant.cwd.clone(),
        session_id: assistant.session_id.clone(),
        ..Entry::default()
    }
}
