//! The tools an agent can call. Names and input schemas follow Claude Code's (Read,
//! Write, Edit, Glob, Grep, Bash), because Claude models are trained on them.
//!
//! A tool never panics and never fails the session: a bad input or a failed operation
//! becomes a [`ToolOutput`] with `is_error: true`, which the model reads and handles.
//! Tools that need the engine itself (Task, AskUser) live in `engine`.

pub mod background;
pub mod bash;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod input;
pub mod mcp;
pub mod media;
pub mod notebook;
pub use crate::transcript::tools as names;
pub mod paths;
pub mod pdf;
pub mod process;
pub mod protected;
pub mod read;
pub mod sandbox;
pub mod walk;
pub mod web;

pub use process::ProcessGroups;
pub mod write;

use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use crate::model::ToolDef;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// What a tool call may use.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The workspace root (canonical). Writes are confined to it.
    pub workspace: PathBuf,
    /// The run directory (canonical). Reads are confined to the workspace and this
    /// directory (trimmed tool results are written under it for the model to read back).
    pub run_dir: PathBuf,
    /// Cancelled when the user interrupts (Ctrl-C once): a long tool stops and says so.
    pub cancel: CancellationToken,
    /// Where Bash registers the process groups it starts, for the signal handlers.
    pub processes: ProcessGroups,
    /// How Bash commands are confined (off by default in the library).
    pub sandbox: sandbox::SandboxPolicy,
    /// Variables Bash commands get on top of flower's environment (the settings
    /// files' `env` that the environment does not set).
    pub env: std::sync::Arc<Vec<(String, String)>>,
}

/// The result of a tool call, as it goes into the `tool_result` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    /// Images and PDFs after the text (an MCP tool's images, what Read shows of an
    /// image, a PDF or a notebook's image outputs).
    pub images: Vec<Attachment>,
}

/// An image or a PDF in a tool result: base64 data and its media type (`image/png`,
/// `application/pdf`), sent as an image or a document block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub media_type: String,
    pub data: String,
}

/// What MCP results call their attachments (only images).
pub type Image = Attachment;

impl ToolOutput {
    /// Whether a Ctrl-C stopped the call (its result is Claude Code's interruption
    /// marker).
    pub fn is_interrupted(&self) -> bool {
        self.is_error && self.content == crate::transcript::markers::INTERRUPTED_TOOL_RESULT
    }

    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// The `content` of its `tool_result` block: the text, or with attachments the
    /// text block followed by image and document blocks (as Claude Code stores them).
    pub fn content(&self) -> crate::content::Content {
        use crate::content::{Block, Content, MediaBlock};
        if self.images.is_empty() {
            return Content::Text(self.content.clone());
        }
        #[derive(serde::Serialize)]
        struct Source<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            media_type: &'a str,
            data: &'a str,
        }
        let mut blocks = vec![Block::text_block(&self.content)];
        for image in &self.images {
            let kind = if image.media_type.starts_with("image/") {
                "image"
            } else {
                "document"
            };
            let source = Source {
                kind: "base64",
                media_type: &image.media_type,
                data: &image.data,
            };
            blocks.push(Block::Media(MediaBlock {
                kind: Some(kind.into()),
                source: Some(Raw::of_tree(&source)),
                ..MediaBlock::default()
            }));
        }
        Content::Blocks(blocks)
    }

    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    /// What the harness knows about this tool (name, summary and path fields).
    fn info(&self) -> &'static names::ToolInfo;
    fn name(&self) -> &'static str {
        self.info().name
    }
    /// Shown to the model.
    fn description(&self) -> String;
    /// JSON Schema of the input: sent to the model, never read.
    fn input_schema(&self) -> Raw;
    /// Runs a call; the tool reads `input` into its own struct ([`input::parse`]).
    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput>;

    fn definition(&self) -> ToolDef {
        ToolDef {
            name: self.name().to_string(),
            description: self.description(),
            input_schema: self.input_schema(),
        }
    }
}

/// The built-in file and shell tools, in the order they are offered to the model.
pub fn builtin() -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(read::Read),
        Box::new(write::Write),
        Box::new(edit::Edit),
        Box::new(glob::Glob),
        Box::new(grep::Grep),
        Box::new(bash::Bash),
    ]
}
