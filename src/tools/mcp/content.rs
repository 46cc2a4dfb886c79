//! An MCP tool result as a flower tool result: text stays text, images become image
//! blocks, resource links and embedded resources a line each (the model reads a
//! link's URI, or the embedded text), structured content its JSON when there is no
//! text. A very large text is written under the run directory's `trimmed/` and the
//! result holds its start and where the rest is, as the pruning layer would later.

use crate::tools::{Image, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use std::fmt::Write as _;
use std::path::Path;

/// Bytes of text a result keeps in the conversation; beyond, the whole text goes to a
/// file and the result points to it.
pub const MAX_TEXT_BYTES: usize = 50_000;

/// Bytes of an image's base64 data accepted (the Messages API refuses larger images).
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// Converts `result` of a call identified by `call_id` (for the spill file's name).
/// Long because it is one match arm per MCP content kind (text, image, audio,
/// resource, link), each kept beside the limit that applies to it.
pub fn to_output(result: CallToolResult, spill_dir: &Path, call_id: &str) -> ToolOutput {
    let mut text = String::new();
    let mut images = Vec::new();
    let push = |text: &mut String, line: &str| {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(line);
    };
    for block in result.content {
        match block {
            ContentBlock::Text(t) => push(&mut text, &t.text),
            ContentBlock::Image(image) => {
                if image.data.len() > MAX_IMAGE_BYTES {
                    push(
                        &mut text,
                        &format!(
                            "[an image ({}) of {} bytes was left out: over the {} MiB limit]",
                            image.mime_type,
                            image.data.len(),
                            MAX_IMAGE_BYTES / (1024 * 1024)
                        ),
                    );
                } else {
                    images.push(Image {
                        media_type: image.mime_type.clone(),
                        data: image.data.clone(),
                    });
                }
            }
            ContentBlock::Audio(audio) => push(
                &mut text,
                &format!(
                    "[audio ({}), {} bytes of base64: not shown]",
                    audio.mime_type,
                    audio.data.len()
                ),
            ),
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link] {} <{}>", link.name, link.uri);
                if let Some(mime) = &link.mime_type {
                    let _ = write!(line, " ({mime})");
                }
                if let Some(description) = &link.description {
                    let _ = write!(line, ": {description}");
                }
                push(&mut text, &line);
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents {
                    uri, text: body, ..
                } => {
                    push(&mut text, &format!("[resource] {uri}\n{body}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    if mime.starts_with("image/") && blob.len() <= MAX_IMAGE_BYTES {
                        push(&mut text, &format!("[resource] {uri} ({mime})"));
                        images.push(Image {
                            media_type: mime.to_string(),
                            data: blob.clone(),
                        });
                    } else {
                        push(
                            &mut text,
                            &format!(
                                "[resource] {uri} ({mime}, {} bytes of base64: not shown)",
                                blob.len()
                            ),
                        );
                    }
                }
                #[allow(unreachable_patterns)]
                _ => push(&mut text, "[resource of an unknown kind: not shown]"),
            },
            #[allow(unreachable_patterns)]
            _ => push(&mut text, "[content of an unknown kind: not shown]"),
        }
    }
    if text.is_empty()
        && images.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    let is_error = result.is_error == Some(true);
    if text.is_empty() && images.is_empty() {
        text = if is_error {
            "(the tool reported an error without saying more)".into()
        } else {
            "(the tool returned nothing)".into()
        };
    }
    let text = spill(text, spill_dir, call_id);
    ToolOutput {
        content: text,
        is_error,
        images,
    }
}

/// A text over [`MAX_TEXT_BYTES`]: its start, and where the whole is.
fn spill(text: String, dir: &Path, call_id: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text;
    }
    let safe: String = call_id
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("mcp-{safe}.txt"));
    let written =
        std::fs::create_dir_all(dir).and_then(|()| crate::atomic::write(&path, text.as_bytes()));
    let mut cut = MAX_TEXT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut short = text[..cut].to_string();
    match written {
        Ok(()) => {
            let _ = write!(
                short,
                "\n\n[结果过大:共 {} 字节,上面是开头;全文在 {} ,需要时用 Read 读取]",
                text.len(),
                path.display()
            );
        }
        Err(e) => {
            let _ = write!(
                short,
                "\n\n[结果过大:共 {} 字节,上面是开头;其余未能保存({e})]",
                text.len()
            );
        }
    }
    short
}
