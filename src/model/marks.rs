//! Cache marks (`cache_control` breakpoints) on a request message's blocks: which
//! blocks carry one, adding one, taking old ones off. Typed for the blocks that
//! declare the field; a block flower does not type (or types without the field)
//! carries it as a plain key of its object, read and edited as that.

use super::message::RequestMessage;
use crate::content::{Block, Content, Raw, RawObject, TextBlock};
use serde::Serialize;

/// The mark's key in a block flower keeps as written (bytes pass through unread but
/// for this key and [`CONTENT`]).
const CACHE_CONTROL: &str = "cache_control";
/// The key of the blocks nested in a block of a type flower does not type.
const CONTENT: &str = "content";

/// `{"type":"ephemeral"}`: the only kind of mark the API has.
#[derive(Serialize)]
pub(super) struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

pub(super) const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

fn ephemeral() -> Raw {
    Raw::of_tree(&EPHEMERAL)
}

/// Where a mark is: a block's index, and the index of a block nested in it.
pub(super) type Place = (usize, Option<usize>);

/// The mark field of a block whose type declares one.
fn slot(block: &Block) -> Option<&Option<Raw>> {
    match block {
        Block::Text(b) => Some(&b.cache_control),
        Block::ToolUse(b) | Block::ServerToolUse(b) => Some(&b.cache_control),
        Block::ToolResult(b) => Some(&b.cache_control),
        Block::Media(b) => Some(&b.cache_control),
        _ => None,
    }
}

fn slot_mut(block: &mut Block) -> Option<&mut Option<Raw>> {
    match block {
        Block::Text(b) => Some(&mut b.cache_control),
        Block::ToolUse(b) | Block::ServerToolUse(b) => Some(&mut b.cache_control),
        Block::ToolResult(b) => Some(&mut b.cache_control),
        Block::Media(b) => Some(&mut b.cache_control),
        _ => None,
    }
}

/// A block flower keeps as written (or types without a mark field), as its fields;
/// `None` when it cannot carry a mark (not an object, or no mark's key in its text).
fn untyped_fields(block: &Block) -> Option<RawObject> {
    let text = match block {
        Block::Unknown(raw) => raw.get().to_string(),
        other => serde_json::to_string(other).ok()?,
    };
    if !text.contains("\"cache_control\"") {
        return None;
    }
    serde_json::from_str(&text).ok()
}

/// Whether the block itself carries a mark.
fn own_mark(block: &Block) -> bool {
    match (block, slot(block)) {
        (_, Some(mark)) => mark.is_some(),
        (Block::Thinking(b), None) => b.rest.iter().any(|(k, _)| k == CACHE_CONTROL),
        (Block::RedactedThinking(b), None) => b.rest.iter().any(|(k, _)| k == CACHE_CONTROL),
        (other, None) => untyped_fields(other).is_some_and(|f| f.get(CACHE_CONTROL).is_some()),
    }
}

/// The blocks nested in an untyped block's `content`, when it is a list.
fn nested_raw(fields: &RawObject) -> Vec<Raw> {
    fields
        .get(CONTENT)
        .and_then(|c| c.parse::<Vec<Raw>>().ok())
        .unwrap_or_default()
}

fn raw_has_mark(raw: &Raw) -> bool {
    raw.get().contains("\"cache_control\"")
        && raw
            .parse::<RawObject>()
            .is_ok_and(|f| f.get(CACHE_CONTROL).is_some())
}

/// The marks of a message's blocks, those nested in a block (a tool result's) included,
/// in document order (a block's nested marks before its own).
pub(super) fn places(message: &RequestMessage) -> Vec<Place> {
    let mut found = Vec::new();
    let Content::Blocks(blocks) = &message.content else {
        return found;
    };
    for (i, block) in blocks.iter().enumerate() {
        match block {
            Block::ToolResult(result) => {
                if let Some(Content::Blocks(inner)) = &result.content {
                    let marked = inner.iter().enumerate().filter(|(_, b)| own_mark(b));
                    found.extend(marked.map(|(j, _)| (i, Some(j))));
                }
            }
            Block::ServerToolResult(_) | Block::Unknown(_) => {
                if let Some(fields) = untyped_fields(block) {
                    let inner = nested_raw(&fields);
                    let marked = inner.iter().enumerate().filter(|(_, b)| raw_has_mark(b));
                    found.extend(marked.map(|(j, _)| (i, Some(j))));
                }
            }
            _ => {}
        }
        if own_mark(block) {
            found.push((i, None));
        }
    }
    found
}

/// The marks a message carries; `skip_last` leaves its last one (the newest message's
/// own mark) out of the count.
pub(super) fn count(message: &RequestMessage, skip_last: bool) -> usize {
    let n = places(message).len();
    if skip_last { n.saturating_sub(1) } else { n }
}

/// Whether a mark may go on the block: not thinking, not empty text, an object with a
/// type.
fn cacheable(block: &Block) -> bool {
    match block {
        Block::Thinking(_) | Block::RedactedThinking(_) => false,
        Block::Text(b) => b.text.as_deref().is_some_and(|t| !t.is_empty()),
        Block::Unknown(_) => block.type_name().is_some(),
        _ => true,
    }
}

/// A copy of `message` with a mark on its last cacheable block (a string content
/// becomes one text block), or `None` when it has none.
pub(super) fn with_mark(message: &RequestMessage) -> Option<RequestMessage> {
    let mut message = message.clone();
    match &mut message.content {
        Content::Text(text) if !text.is_empty() => {
            message.content = Content::Blocks(vec![Block::Text(TextBlock {
                kind: Some("text".into()),
                text: Some(std::mem::take(text)),
                cache_control: Some(ephemeral()),
                ..TextBlock::default()
            })]);
        }
        Content::Blocks(blocks) => {
            let block = blocks.iter_mut().rev().find(|b| cacheable(b))?;
            set_mark(block);
        }
        Content::Text(_) => return None,
    }
    Some(message)
}

fn set_mark(block: &mut Block) {
    if let Some(mark) = slot_mut(block) {
        *mark = Some(ephemeral());
        return;
    }
    match block {
        // Past the fields it came with: written last, as a new key is.
        Block::ServerToolResult(b) => b.rest.insert(CACHE_CONTROL, ephemeral()),
        Block::Unknown(raw) => {
            if let Ok(mut fields) = raw.parse::<RawObject>() {
                fields.insert(CACHE_CONTROL, ephemeral());
                *raw = Raw::of_tree(&fields);
            }
        }
        _ => {}
    }
}

/// `fields` without `key`.
fn without(fields: RawObject, key: &str) -> RawObject {
    let mut out = RawObject::default();
    for (k, v) in fields.into_fields() {
        if k != key {
            out.push(k, v);
        }
    }
    out
}

/// Takes the block's own mark off; whether it had one.
fn take_own(block: &mut Block) -> bool {
    if let Some(mark) = slot_mut(block) {
        return mark.take().is_some();
    }
    let Some(fields) = untyped_fields(block) else {
        return false;
    };
    if fields.get(CACHE_CONTROL).is_none() {
        return false;
    }
    *block = Block::Unknown(Raw::of_tree(&without(fields, CACHE_CONTROL)));
    true
}

/// Takes the mark of the block nested at `j` off; whether it had one.
fn take_nested(block: &mut Block, j: usize) -> bool {
    if let Block::ToolResult(result) = block {
        return match &mut result.content {
            Some(Content::Blocks(inner)) => inner.get_mut(j).is_some_and(take_own),
            _ => false,
        };
    }
    let Some(mut fields) = untyped_fields(block) else {
        return false;
    };
    let mut inner = nested_raw(&fields);
    let Some(nested) = inner.get_mut(j) else {
        return false;
    };
    let Ok(nested_fields) = nested.parse::<RawObject>() else {
        return false;
    };
    if nested_fields.get(CACHE_CONTROL).is_none() {
        return false;
    }
    *nested = Raw::of_tree(&without(nested_fields, CACHE_CONTROL));
    fields.insert(CONTENT, Raw::of_tree(&inner));
    *block = Block::Unknown(Raw::of_tree(&fields));
    true
}

/// Takes up to `max` marks off `message`, oldest first (its last one stays when
/// `skip_last`); returns how many.
pub(super) fn strip(message: &mut RequestMessage, max: usize, skip_last: bool) -> usize {
    let mut found = places(message);
    if skip_last {
        found.pop();
    }
    found.truncate(max);
    let Content::Blocks(blocks) = &mut message.content else {
        return 0;
    };
    let mut removed = 0;
    for (i, nested) in found {
        let Some(block) = blocks.get_mut(i) else {
            continue;
        };
        let took = match nested {
            None => take_own(block),
            Some(j) => take_nested(block, j),
        };
        removed += usize::from(took);
    }
    removed
}
