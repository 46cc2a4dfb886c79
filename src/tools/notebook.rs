//! What `Read` returns for a Jupyter notebook (`.ipynb`): its cells with their outputs,
//! as Claude Code's Read does: each cell's source and each output's text, and the
//! outputs' images as image blocks after the text (scaled down as any image,
//! [`super::media`]). Long outputs are cut, and the whole stays within Read's usual
//! size; a notebook too large for that says where it stopped.

use super::media;
use super::{Attachment, ToolOutput};
use base64::Engine as _;
use serde::Deserialize;
use std::path::Path;

/// The most characters of one output's text shown.
pub const MAX_OUTPUT_CHARS: usize = 10_000;
/// The most image outputs sent from one notebook.
pub const MAX_IMAGES: usize = 20;

#[derive(Deserialize)]
struct Notebook {
    cells: Vec<Cell>,
}

#[derive(Deserialize)]
struct Cell {
    cell_type: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    source: Lines,
    #[serde(default)]
    outputs: Vec<Output>,
}

#[derive(Deserialize)]
struct Output {
    output_type: String,
    /// A stream's text.
    #[serde(default)]
    text: Option<Lines>,
    /// An execution result's or a display's data, by MIME type.
    #[serde(default)]
    data: OutputData,
    #[serde(default)]
    ename: Option<String>,
    #[serde(default)]
    evalue: Option<String>,
    #[serde(default)]
    traceback: Vec<String>,
}

/// Text as the format writes it: one string, or a list of lines.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Lines {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Lines {
    fn text(&self) -> String {
        match self {
            Lines::None => String::new(),
            Lines::One(text) => text.clone(),
            Lines::Many(lines) => lines.concat(),
        }
    }
}

/// The MIME types of an output's data flower shows (the others, HTML, JSON, …, not).
#[derive(Deserialize, Default)]
struct OutputData {
    #[serde(rename = "text/plain", default)]
    plain: Option<Lines>,
    #[serde(rename = "image/png", default)]
    png: Option<Lines>,
    #[serde(rename = "image/jpeg", default)]
    jpeg: Option<Lines>,
}

/// The notebook at `path`, as text with its outputs' images after it.
pub fn read_notebook(path: &Path) -> ToolOutput {
    let shown = path.display();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    let notebook: Notebook = match serde_json::from_slice(&bytes) {
        Ok(n) => n,
        Err(e) => {
            return ToolOutput::error(format!(
                "{shown} is not a Jupyter notebook flower can read ({e}); read it as text \
                 with Bash (cat) instead."
            ));
        }
    };
    let mut text = String::new();
    let mut images: Vec<Attachment> = Vec::new();
    let mut left_out_images = 0;
    for (n, cell) in notebook.cells.iter().enumerate() {
        let id = cell.id.clone().unwrap_or_else(|| format!("cell-{n}"));
        let mut part = format!(
            "<cell id=\"{id}\" type=\"{}\">\n{}\n</cell>\n",
            cell.cell_type,
            cell.source.text().trim_end()
        );
        for output in &cell.outputs {
            let (said, image) = output_text(output);
            if !said.is_empty() {
                part.push_str(&format!(
                    "<output cell=\"{id}\" type=\"{}\">\n{}\n</output>\n",
                    output.output_type,
                    cut(said.trim_end())
                ));
            }
            if let Some((media_type, data)) = image {
                if images.len() >= MAX_IMAGES {
                    left_out_images += 1;
                    continue;
                }
                match decoded_image(&data, media_type) {
                    Ok(attachment) => {
                        images.push(attachment);
                        part.push_str(&format!(
                            "<output cell=\"{id}\" type=\"{}\">[image {} below]</output>\n",
                            output.output_type,
                            images.len()
                        ));
                    }
                    Err(why) => part.push_str(&format!(
                        "<output cell=\"{id}\" type=\"{}\">[{media_type} not shown: {why}]</output>\n",
                        output.output_type
                    )),
                }
            }
        }
        if text.len() + part.len() > super::read::MAX_OUTPUT_BYTES && !text.is_empty() {
            text.push_str(&format!(
                "[Output stopped before cell {n} of {} to stay under {} characters; read the \
                 rest with Bash (for example jq '.cells[{n}:]' {shown}).]",
                notebook.cells.len(),
                super::read::MAX_OUTPUT_BYTES
            ));
            break;
        }
        text.push_str(&part);
    }
    if left_out_images > 0 {
        text.push_str(&format!(
            "[{left_out_images} more image output(s) not shown: at most {MAX_IMAGES} a Read.]\n"
        ));
    }
    if notebook.cells.is_empty() {
        text = format!("The notebook {shown} has no cells.");
    }
    let mut output = ToolOutput::ok(text);
    output.images = images;
    output
}

/// An output's text, and its image (media type, base64) when it has one.
fn output_text(output: &Output) -> (String, Option<(&'static str, String)>) {
    if output.output_type == "error" {
        let mut said = format!(
            "{}: {}",
            output.ename.as_deref().unwrap_or("Error"),
            output.evalue.as_deref().unwrap_or_default()
        );
        for line in &output.traceback {
            said.push('\n');
            said.push_str(&strip_ansi(line));
        }
        return (said, None);
    }
    if let Some(text) = &output.text {
        return (text.text(), None);
    }
    let data = &output.data;
    let image = match (&data.png, &data.jpeg) {
        (Some(png), _) => Some(("image/png", png.text())),
        (None, Some(jpeg)) => Some(("image/jpeg", jpeg.text())),
        (None, None) => None,
    };
    let said = match &data.plain {
        Some(lines) if image.is_none() => lines.text(),
        _ => String::new(),
    };
    (said, image)
}

fn decoded_image(base64_text: &str, media_type: &str) -> Result<Attachment, String> {
    let compact: String = base64_text.split_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| format!("not base64 ({e})"))?;
    media::image_attachment(&bytes, media_type).map(|(attachment, _)| attachment)
}

/// At most [`MAX_OUTPUT_CHARS`] characters, saying so when cut.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_OUTPUT_CHARS) {
        None => text.to_string(),
        Some((at, _)) => format!(
            "{}\n[output cut at {MAX_OUTPUT_CHARS} characters of {}]",
            &text[..at],
            text.chars().count()
        ),
    }
}

/// A traceback line without its terminal colours.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}
