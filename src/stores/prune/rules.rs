//! The rules that change what was already sent (denials, interruptions, stale
//! snapshots, trimming) and the warm tail they leave alone.

use super::*;
use crate::transcript::{Block as TypedBlock, Content as TypedContent, Raw};
use serde::Deserialize;

impl Pruner {
    /// With the cache warm, marks the entries appended since the last cold load (see
    /// the module docs). A cold load marks nothing.
    pub(super) fn mark_warm_tail(&mut self, window: &CacheWindow) {
        let ttl = chrono::Duration::from_std(window.ttl).unwrap_or(chrono::Duration::MAX);
        let now = window.now.unwrap_or_else(chrono::Utc::now);
        let mut last_reply: Option<chrono::DateTime<chrono::Utc>> = None;
        let mut boundary = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(role) = slot.role else { continue };
            let Some(at) = slot.timestamp else {
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

    pub(super) fn drop_synthetic_errors(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].synthetic_error {
                self.remove(i);
            }
        }
    }

    /// A continuation request the model never answered (the request after it failed
    /// or the process died) goes: the prompt the resume adds follows the cut reply.
    pub(super) fn drop_unanswered_continuation(&mut self) {
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

    pub(super) fn drop_old_denials(&mut self, keep: usize) {
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

    pub(super) fn neutralize_interruptions(&mut self) {
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

    pub(super) fn mark_stale_snapshots(&mut self) {
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
    pub(super) fn recent_result_entries(&self) -> HashSet<usize> {
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

    /// Rewrites the bodies of old tool results that carry output (outside the newest
    /// turns and the warm tail): `edit` is given the entry, the block's index, the
    /// call's id and the text's size (`None`: not only text) and says the new body.
    fn rewrite_old_results(
        &mut self,
        mut edit: impl FnMut(&Slot, usize, &str, Option<usize>) -> Option<(String, Body)>,
    ) {
        let recent = self.recent_result_entries();
        let mut edits = Vec::new();
        for (i, slot) in self.ruled_with_role(Role::User) {
            if recent.contains(&i) {
                continue;
            }
            for (b, block) in slot.blocks.iter().enumerate() {
                if let Block::ToolResult {
                    id,
                    body: Body::Output,
                    text_len,
                } = block
                    && let Some(body) = edit(slot, b, id, *text_len)
                {
                    edits.push((i, b, body));
                }
            }
        }
        for (i, b, (text, body)) in edits {
            self.slots[i].set_result_body(b, text, body);
        }
    }

    /// Images and PDFs in old tool results (an MCP tool's, Read's) are written to files
    /// under `trim_dir`; the result keeps its text and a line per attachment naming the
    /// file.
    pub(super) fn move_old_images(&mut self, opts: &PruneOptions) {
        self.rewrite_old_results(|slot, b, id, text_len| {
            if text_len.is_some() {
                return None;
            }
            let entry = slot.entry()?;
            let Some(TypedBlock::ToolResult(result)) = entry.blocks().get(b) else {
                return None;
            };
            let Some(TypedContent::Blocks(parts)) = &result.content else {
                return None;
            };
            // An image or a PDF (Read's, an MCP tool's).
            let attachment = |p: &TypedBlock| match p {
                TypedBlock::Media(m) => match m.kind.as_deref() {
                    Some("image") => Some(("image", IMAGE_POINTER_PREFIX)),
                    Some("document") => Some(("document", DOCUMENT_POINTER_PREFIX)),
                    _ => None,
                },
                _ => None,
            };
            if !parts.iter().any(|p| attachment(p).is_some()) {
                return None;
            }
            let session = entry.session_id.as_deref().unwrap_or("session");
            let mut lines: Vec<String> = Vec::new();
            for (n, part) in parts.iter().enumerate() {
                match part {
                    TypedBlock::Text(text) => lines.extend(text.text.clone()),
                    TypedBlock::Media(media) if attachment(part).is_some() => {
                        let (kind, prefix) =
                            attachment(part).unwrap_or(("image", IMAGE_POINTER_PREFIX));
                        #[derive(Default, Deserialize)]
                        struct Source {
                            media_type: Option<Raw>,
                            data: Option<Raw>,
                        }
                        let source: Source = media
                            .source
                            .as_ref()
                            .filter(|r| r.get().starts_with('{'))
                            .and_then(|r| r.parse().ok())
                            .unwrap_or_default();
                        let media =
                            Lenient::string(&source.media_type).unwrap_or_else(|| kind.into());
                        let data = Lenient::string(&source.data).unwrap_or_default();
                        let media = media.as_str();
                        lines.push(
                            match write_image(&opts.trim_dir, session, id, n, media, &data) {
                                Some((path, bytes)) => {
                                    format!("{prefix}:{media},{bytes} 字节,在 {} ]", path.display())
                                }
                                None => format!("{prefix}:{media},未能保存]"),
                            },
                        );
                    }
                    _ => {}
                }
            }
            Some((lines.join("\n"), Body::Output))
        });
    }

    pub(super) fn trim_large_results(&mut self, opts: &PruneOptions) {
        self.rewrite_old_results(|slot, b, id, text_len| {
            if text_len? <= opts.trim_threshold_bytes {
                return None;
            }
            let entry = slot.entry()?;
            let session = entry.session_id.as_deref().unwrap_or("session");
            let TypedBlock::ToolResult(result) = entry.blocks().get(b)? else {
                return None;
            };
            let text = result_text(result);
            let path = write_trimmed(&opts.trim_dir, session, id, &text).ok()?;
            let pointer = format!(
                "{TRIM_POINTER_PREFIX}:原结果共 {} 字节,全文在 {} ,需要时用 Read 读取]",
                text.len(),
                path.display()
            );
            Some((pointer, Body::Pointer))
        });
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
                let Some(entry) = slot.entry() else {
                    continue;
                };
                let blocks = entry.blocks();
                let (Some(call_block), Some(result)) = (blocks.get(call), blocks.get(b)) else {
                    continue;
                };
                let (what, text) = server_result_text(call_block, result);
                let session = entry.session_id.as_deref().unwrap_or("session");
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
            if let Some(list) = slot.content_blocks()
                && let Some(block) = list.get_mut(b)
            {
                *block = TypedBlock::text_block(&pointer);
            }
            if let Some(block) = slot.blocks.get_mut(b) {
                *block = Block::Other;
            }
            slot.delete_block(call);
        }
    }
}

/// Writes a trimmed result to `<dir>/<session>-<tool_use_id>.txt` once (an existing
/// file of the same size is kept), atomically, and returns its path.
pub(super) fn write_trimmed(
    dir: &Path,
    session: &str,
    id: &str,
    text: &str,
) -> std::io::Result<PathBuf> {
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

/// What a server tool call was (`web_fetch https://…`) and the text worth keeping of
/// its result: a fetched document's text, or the search results' titles and addresses.
fn server_result_text(call: &TypedBlock, result: &TypedBlock) -> (String, String) {
    #[derive(Default, Deserialize)]
    struct Target {
        url: Option<Raw>,
        query: Option<Raw>,
    }
    #[derive(Default, Deserialize)]
    struct Found {
        title: Option<Raw>,
        url: Option<Raw>,
    }
    /// A fetched document: `content.source.data`.
    #[derive(Default, Deserialize)]
    struct Fetched {
        content: Option<Document>,
    }
    #[derive(Deserialize)]
    struct Document {
        source: Option<Source>,
    }
    #[derive(Deserialize)]
    struct Source {
        data: Option<Raw>,
    }
    fn object<T: serde::de::DeserializeOwned + Default>(raw: Option<&Raw>) -> T {
        raw.filter(|r| r.get().starts_with('{'))
            .and_then(|r| r.parse().ok())
            .unwrap_or_default()
    }
    let (name, input) = match call {
        TypedBlock::ServerToolUse(call) => (
            call.name.as_deref(),
            call.input.as_ref().map(|input| input.raw()),
        ),
        _ => (None, None),
    };
    let name = name.unwrap_or("server tool");
    let input: Target = object(input);
    let target = Lenient::string(&input.url)
        .or_else(|| Lenient::string(&input.query))
        .unwrap_or_default();
    let what = format!("{name} {target} ");
    let content = match result {
        TypedBlock::ServerToolResult(result) => result.content.clone(),
        TypedBlock::Unknown(raw) => Lenient::of(raw).and_then(|r| r.content),
        _ => None,
    };
    let json = content.as_ref().map_or("null", Raw::get);
    let text = match serde_json::from_str::<Vec<Raw>>(json) {
        Ok(results) => results
            .iter()
            .map(|r| {
                let found: Found = object(Some(r));
                format!(
                    "{}\n{}\n",
                    Lenient::string(&found.title).unwrap_or_default(),
                    Lenient::string(&found.url).unwrap_or_default()
                )
            })
            .collect::<String>(),
        Err(_) => {
            let fetched: Fetched = object(content.as_ref());
            fetched
                .content
                .and_then(|d| d.source?.data)
                .and_then(|data| data.parse::<String>().ok())
                .unwrap_or_else(|| canonical(json))
        }
    };
    (what, format!("{name} {target}\n\n{text}"))
}

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
        "application/pdf" => "pdf",
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
