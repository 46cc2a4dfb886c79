//! The `Read` tool: a file's lines, numbered like `cat -n`.
//!
//! The file is streamed line by line, never loaded whole: a multi-gigabyte log or a
//! single 1 GB line costs no more memory than the lines shown. Images (PNG, JPEG, GIF,
//! WebP) and PDFs are sent as image and document blocks ([`super::media`]), notebooks
//! as cells with their outputs ([`super::notebook`]); other binary files get a
//! one-line description (kind, size) instead of bytes.

use super::input::{self, Field, numbered_line};
use super::names;
use super::{Tool, ToolContext, ToolOutput, paths};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _};
use std::path::Path;

/// Lines shown when the model gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// The whole result stays under this many bytes; the rest is left for another call.
pub const MAX_OUTPUT_BYTES: usize = 100_000;
/// Beyond this many unread bytes the remaining lines are not counted (too slow).
const MAX_COUNT_BYTES: u64 = 64 << 20;
/// How much of the file's start is inspected to tell text from binary.
const SNIFF_BYTES: usize = 8192;

pub struct Read;

const DESCRIPTION: &str = "Reads a file from the workspace (or the run directory, where \
long tool results are saved).

Usage:
- The file_path parameter should be an absolute path; a relative path is resolved against \
the workspace.
- By default, it reads up to 2000 lines starting from the beginning of the file.
- You can optionally specify a line offset and limit (especially handy for long files), but \
it's recommended to read the whole file by not providing these parameters.
- Any lines longer than 2000 characters will be truncated.
- Results are returned using cat -n format, with line numbers starting at 1.
- Images (PNG, JPEG, GIF, WebP) are shown to you as images (large ones scaled down), \
PDFs as documents (at most 20 pages and 10 MiB at once: for a longer PDF give the \
pages parameter, e.g. \"1-20\"), Jupyter notebooks (.ipynb) as \
their cells with outputs (images included). Other binary files are described (kind and \
size), not shown.
- This tool can only read files, not directories. To list a directory, use the Glob tool or \
ls via the Bash tool.
- You can call multiple tools in a single response. It is always better to speculatively \
read multiple potentially useful files in parallel.
- If you read a file that exists but has empty contents you will receive a note saying so.";

/// Read's input.
#[derive(Deserialize)]
struct ReadInput {
    #[serde(default)]
    file_path: Field<String>,
    #[serde(default)]
    offset: Field<u64>,
    #[serde(default)]
    limit: Field<u64>,
    #[serde(default)]
    pages: Field<String>,
}

impl Tool for Read {
    fn info(&self) -> &'static names::ToolInfo {
        &names::READ_INFO
    }

    fn description(&self) -> String {
        DESCRIPTION.to_string()
    }

    fn input_schema(&self) -> Raw {
        Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The absolute path to the file to read"
                },
                "offset": {
                    "type": "number",
                    "description": "The line number to start reading from. Only provide if the file is too large to read at once"
                },
                "limit": {
                    "type": "number",
                    "description": "The number of lines to read. Only provide if the file is too large to read at once."
                },
                "pages": {
                    "type": "string",
                    "description": "Page range for PDF files (e.g., \"1-5\", \"3\", \"10-20\"). Only applicable to PDF files. Maximum 20 pages per request."
                }
            },
            "required": ["file_path"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let parsed = (|| {
                let fields: ReadInput = input::parse(names::READ, input)?;
                let path = fields.file_path.required(names::READ, "file_path")?;
                let offset = fields.offset.optional(names::READ, "offset")?;
                let limit = fields.limit.optional(names::READ, "limit")?;
                let pages = fields.pages.optional(names::READ, "pages")?;
                let pages = pages
                    .map(|p| super::pdf::PageRange::parse(&p))
                    .transpose()
                    .map_err(ToolOutput::error)?;
                Ok::<_, ToolOutput>((path, offset, limit, pages))
            })();
            let (path, offset, limit, pages) = match parsed {
                Ok(p) => p,
                Err(e) => return e,
            };
            if limit == Some(0) {
                return ToolOutput::error("Invalid input for Read: \"limit\" must be at least 1.");
            }
            let resolved = match paths::resolve_for_read(ctx, &path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            let first = offset.unwrap_or(1).max(1);
            let limit = limit.unwrap_or(DEFAULT_LIMIT);
            input::blocking(names::READ, move || {
                read_file(&resolved, first, limit, pages)
            })
            .await
        })
    }
}

fn read_file(
    path: &Path,
    first: u64,
    limit: u64,
    pages: Option<super::pdf::PageRange>,
) -> ToolOutput {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("File does not exist: {shown}"));
        }
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!(
            "{shown} is a directory, not a file. Use the Glob tool to find files in it, or ls \
             via the Bash tool to list it."
        ));
    }
    if !meta.is_file() {
        return ToolOutput::error(format!(
            "{shown} is not a regular file (it is a FIFO, socket or device); it cannot be read."
        ));
    }
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    let head = match sniff(&mut file) {
        Ok(h) => h,
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if head.is_empty() {
        return ToolOutput::ok(format!("The file {shown} exists but is empty."));
    }
    let is_pdf = head.starts_with(b"%PDF-");
    if pages.is_some() && !is_pdf {
        return ToolOutput::error(format!(
            "{shown} is not a PDF: \"pages\" applies to PDF files only (use offset and \
             limit for a text file's lines)."
        ));
    }
    if let Some(media_type) = super::media::image_media_type(&head) {
        return super::media::read_image(path, media_type, meta.len());
    }
    if is_pdf {
        return super::pdf::read_pdf(path, meta.len(), pages);
    }
    if path.extension().is_some_and(|e| e == "ipynb") {
        return super::notebook::read_notebook(path);
    }
    if let Some(kind) = binary_kind(&head) {
        return ToolOutput::ok(format!(
            "{shown} is a binary file ({kind}, {}); its contents are not shown.",
            human_size(meta.len())
        ));
    }
    match numbered(&mut reader, path, first, limit, meta.len()) {
        Ok(out) => ToolOutput::ok(out),
        Err(e) => ToolOutput::error(format!("Cannot read {shown}: {e}")),
    }
}

/// The first bytes of the file (to tell text from binary); the file is rewound.
fn sniff(file: &mut File) -> io::Result<Vec<u8>> {
    use std::io::Seek as _;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    file.by_ref()
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    file.seek(io::SeekFrom::Start(0))?;
    Ok(head)
}

fn numbered<R: BufRead>(
    reader: &mut R,
    path: &Path,
    first: u64,
    limit: u64,
    size: u64,
) -> io::Result<String> {
    let cap = MAX_LINE_CHARS * 4 + 4;
    let mut buf = Vec::with_capacity(1024);
    let mut out = String::new();
    let mut n: u64 = 0;
    let mut consumed: u64 = 0;
    let mut cut_lines = 0u64;
    let mut last_shown = 0u64;
    let mut stopped_for_size = false;
    let last_wanted = first.saturating_add(limit - 1);
    while let Some(len) = next_line(reader, &mut buf, if n + 1 >= first { cap } else { 0 })? {
        n += 1;
        consumed += len as u64 + 1;
        if n < first {
            continue;
        }
        let (text, cut) = render_line(&buf, len);
        if out.len() + text.len() + 8 > MAX_OUTPUT_BYTES && last_shown > 0 {
            stopped_for_size = true;
            break;
        }
        if cut {
            cut_lines += 1;
        }
        numbered_line(&mut out, n, &text);
        last_shown = n;
        if n >= last_wanted {
            break;
        }
    }
    if last_shown == 0 {
        return Ok(format!(
            "The file {} has only {n} lines; offset {first} is past its end.",
            path.display()
        ));
    }
    // How many lines the file has, unless counting would mean reading a huge rest.
    let remaining_bytes = size.saturating_sub(consumed);
    let total = if stopped_for_size {
        None
    } else if remaining_bytes <= MAX_COUNT_BYTES {
        let mut more = 0u64;
        while next_line(reader, &mut buf, 0)?.is_some() {
            more += 1;
        }
        Some(n + more)
    } else {
        None
    };
    let notes = notes(first, last_shown, total, stopped_for_size, size, cut_lines);
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes.join("\n"));
    }
    Ok(out)
}

/// What follows the lines: where the output stopped, which lines of how many were
/// shown, which lines were cut.
fn notes(
    first: u64,
    last_shown: u64,
    total: Option<u64>,
    stopped_for_size: bool,
    size: u64,
    cut_lines: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if stopped_for_size {
        notes.push(format!(
            "[Output stopped after line {last_shown} to stay under {MAX_OUTPUT_BYTES} characters. \
             Use offset={} to read more.]",
            last_shown + 1
        ));
    } else {
        match total {
            Some(t) if t > last_shown || first > 1 => {
                let more = if t > last_shown {
                    format!(" Use offset={} to read more.", last_shown + 1)
                } else {
                    String::new()
                };
                notes.push(format!(
                    "[Showing lines {first}-{last_shown} of {t}.{more}]"
                ));
            }
            Some(_) => {}
            None => notes.push(format!(
                "[Showing lines {first}-{last_shown}; the file ({}) has more. Use offset={} to \
                 read more.]",
                human_size(size),
                last_shown + 1
            )),
        }
    }
    if cut_lines > 0 {
        notes.push(format!(
            "[{cut_lines} line(s) longer than {MAX_LINE_CHARS} characters were cut at \
             {MAX_LINE_CHARS} characters. Use Grep or Bash to see them in full.]"
        ));
    }
    notes
}

/// A stored line as text: lossy UTF-8, without a trailing `\r`, cut at
/// [`MAX_LINE_CHARS`]. Returns whether it was cut.
fn render_line(buf: &[u8], full_len: usize) -> (String, bool) {
    let mut bytes = buf;
    let mut cut = full_len > buf.len();
    if !cut && bytes.last() == Some(&b'\r') {
        bytes = &bytes[..bytes.len() - 1];
    }
    let text = String::from_utf8_lossy(bytes);
    if text.chars().nth(MAX_LINE_CHARS).is_some() {
        cut = true;
        return (text.chars().take(MAX_LINE_CHARS).collect(), cut);
    }
    if cut {
        // The stored prefix holds at least MAX_LINE_CHARS characters unless they were
        // wider than four bytes, which UTF-8 does not have; keep what there is.
        return (text.chars().take(MAX_LINE_CHARS).collect(), cut);
    }
    (text.into_owned(), cut)
}

/// Reads one line (without its `\n`), keeping at most `cap` bytes of it in `buf`.
/// Returns the line's full length in bytes, or `None` at end of file.
fn next_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, cap: usize) -> io::Result<Option<usize>> {
    buf.clear();
    let mut total = 0usize;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(any.then_some(total));
        }
        any = true;
        let (take, newline) = match chunk.iter().position(|&b| b == b'\n') {
            Some(p) => (p, true),
            None => (chunk.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        total += take;
        r.consume(take + usize::from(newline));
        if newline {
            return Ok(Some(total));
        }
    }
}

/// What kind of binary file these first bytes belong to, if any.
fn binary_kind(head: &[u8]) -> Option<String> {
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let le16 = |b: &[u8]| u16::from_le_bytes([b[0], b[1]]);
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        if head.len() >= 24 && &head[12..16] == b"IHDR" {
            return Some(format!(
                "PNG image, {}x{}",
                be32(&head[16..20]),
                be32(&head[20..24])
            ));
        }
        return Some("PNG image".into());
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        if head.len() >= 10 {
            return Some(format!(
                "GIF image, {}x{}",
                le16(&head[6..8]),
                le16(&head[8..10])
            ));
        }
        return Some("GIF image".into());
    }
    if head.starts_with(b"\xff\xd8\xff") {
        return Some("JPEG image".into());
    }
    if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        return Some("WebP image".into());
    }
    if head.starts_with(b"%PDF-") {
        return Some("PDF document".into());
    }
    let magic: [(&[u8], &str); 6] = [
        (b"PK\x03\x04", "ZIP archive"),
        (b"\x1f\x8b", "gzip data"),
        (b"\x7fELF", "ELF executable"),
        (b"SQLite format 3\0", "SQLite database"),
        (b"\x28\xb5\x2f\xfd", "zstd data"),
        (b"BZh", "bzip2 data"),
    ];
    for (m, kind) in magic {
        if head.starts_with(m) && (kind != "bzip2 data" || head.contains(&0)) {
            return Some(kind.into());
        }
    }
    if head.contains(&0) {
        return Some("binary data".into());
    }
    None
}

/// `1234 bytes`, `12.3 KiB`, `4.0 MiB` …
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {} ({n} bytes)", UNITS[unit])
}
