//! Issue #45 item 3: a worker's Read of a PNG, a PDF (whole, and three pages of a long
//! one) and a notebook reaches the model as
//! image and document blocks in its tool results, as the official Anthropic Python
//! SDK's types validate them (`anthropic.types.MessageParam` through pydantic); old
//! ones are moved out to files by pruning, like large results.

use crate::support;
use crate::tools_read::{notebook, pdf, png};

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use support::pipeline::{Agent, Project, agent_or_once, simple_reply, text, turn_of};
use support::{FakeServer, Recorded, Reply};

/// The Python with the `anthropic` package: `FLOWER_TEST_PYTHON`, else the virtualenv
/// `.ci/run` makes (`target/py-venv`); `None` (the test skips) when neither has it.
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("FLOWER_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py-venv/bin/python")
        });
    let ok = Command::new(&python)
        .args(["-c", "import anthropic, pydantic"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

/// Validates each message with the SDK's `MessageParam` (pydantic, every lazy iterable
/// walked) and each tool result's blocks with their own types; prints the kinds of the
/// tool results' blocks. Checks first that it can fail: a BMP image is refused.
const VALIDATE: &str = r#"
import json, sys
from pydantic import TypeAdapter, ValidationError
from anthropic.types import MessageParam, ImageBlockParam, DocumentBlockParam, TextBlockParam

def walk(x):
    if isinstance(x, dict):
        return {k: walk(v) for k, v in x.items()}
    if isinstance(x, (str, bytes)):
        return x
    if hasattr(x, "__iter__"):
        return [walk(v) for v in x]
    return x

message = TypeAdapter(MessageParam)
by_type = {"image": TypeAdapter(ImageBlockParam), "document": TypeAdapter(DocumentBlockParam),
           "text": TypeAdapter(TextBlockParam)}
bad = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": [
    {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "AA=="}}]}]}
try:
    walk(message.validate_python(bad))
    sys.exit("the check cannot fail")
except ValidationError:
    pass
kinds = []
for m in json.load(open(sys.argv[1])):
    walk(message.validate_python(m))
    if isinstance(m["content"], str):
        continue
    for block in m["content"]:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            for part in block["content"]:
                walk(by_type[part["type"]].validate_python(part, strict=True))
                kinds.append(part["type"] + ":" + part.get("source", {}).get("media_type", ""))
print(" ".join(kinds))
"#;

fn reply(req: &Recorded) -> Reply {
    let read = |path: &str| Reply::tool_use("Read", json!({"file_path": path}));
    match (agent_or_once(req), turn_of(req)) {
        (Agent::Worker, 0) => read("shot.png"),
        (Agent::Worker, 1) => read("spec.pdf"),
        (Agent::Worker, 2) => read("sales.ipynb"),
        (Agent::Worker, 3) => {
            Reply::tool_use("Read", json!({"file_path": "book.pdf", "pages": "2-4"}))
        }
        (Agent::Worker, 4) => Reply::tool_use(
            "Write",
            json!({"file_path": "hello.txt", "content": "hello"}),
        ),
        (Agent::Worker, _) => Reply::text("看过了。"),
        _ => simple_reply(req),
    }
}

#[test]
fn a_png_a_pdf_and_a_notebook_arrive_as_the_sdks_types_validate_them() {
    let Some(python) = sdk_python() else {
        support::skip::skip(
            support::skip::ANTHROPIC_SDK,
            "it needs a Python with the anthropic package (target/py-venv, FLOWER_TEST_PYTHON)",
        );
        return;
    };
    let project = Project::new();
    std::fs::write(project.dir.join("shot.png"), png(1700, 850)).unwrap();
    std::fs::write(project.dir.join("spec.pdf"), pdf(3)).unwrap();
    std::fs::write(project.dir.join("sales.ipynb"), notebook(&png(30, 20))).unwrap();
    std::fs::write(project.dir.join("book.pdf"), pdf(25)).unwrap();
    let server = FakeServer::with_handler(|req, _| reply(req));
    let out = project.run(&server, &["看看截图"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let last = requests
        .iter()
        .rfind(|r| agent_or_once(r) == Agent::Worker)
        .unwrap();
    let messages = Value::Array(last.messages().to_vec());
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), messages.to_string()).unwrap();
    let checked = Command::new(&python)
        .args(["-c", VALIDATE])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "the SDK's types refused what flower sent: {}",
        text(&checked.stderr)
    );
    let kinds = text(&checked.stdout);
    assert_eq!(
        kinds.split_whitespace().collect::<Vec<_>>(),
        [
            "text:",
            "image:image/png",
            "text:",
            "document:application/pdf",
            "text:",
            "image:image/png",
            "text:",
            "document:application/pdf"
        ],
        "{kinds}"
    );
    // Three of the 25 pages went, not the whole book.
    assert!(
        last.raw_body.contains("pages 2-4 of 25"),
        "{}",
        &last.raw_body[..2000]
    );
    // The screenshot went scaled down to the API's limits.
    assert!(
        last.raw_body.contains("scaled down to 1568x784"),
        "{}",
        &last.raw_body[..2000]
    );
}
