//! The Read tool, through the `Tool` trait.

use crate::support;

use flower::tools::read::Read;
use flower::tools::{Tool, ToolOutput};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use support::{ToolEnv, tool_env};

async fn read(e: &ToolEnv, input: Value) -> ToolOutput {
    Read.call(&flower::content::ToolInput::of_tree(&input), &e.ctx)
        .await
}

#[tokio::test]
async fn numbers_lines_like_cat_n() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("a.txt"), "first\n\tsecond\r\nthird").unwrap();
    let out = read(&e, json!({"file_path": "a.txt"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "     1\tfirst\n     2\t\tsecond\n     3\tthird\n"
    );
    // Absolute paths too.
    let abs = e.ctx.workspace.join("a.txt");
    let out = read(&e, json!({"file_path": abs})).await;
    assert_eq!(
        out.content,
        "     1\tfirst\n     2\t\tsecond\n     3\tthird\n"
    );
}

#[tokio::test]
async fn offset_and_limit_select_lines_and_say_how_to_read_more() {
    let e = tool_env();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    fs::write(e.ctx.workspace.join("a.txt"), text).unwrap();
    let out = read(&e, json!({"file_path": "a.txt", "offset": 4, "limit": 2})).await;
    assert!(!out.is_error);
    assert!(
        out.content.starts_with("     4\tline 4\n     5\tline 5\n"),
        "{}",
        out.content
    );
    assert!(!out.content.contains("line 6"));
    assert!(
        out.content.contains("Showing lines 4-5 of 10"),
        "{}",
        out.content
    );
    assert!(out.content.contains("offset=6"), "{}", out.content);
    // Numbers sent as strings or floats are accepted.
    let out = read(
        &e,
        json!({"file_path": "a.txt", "offset": "9", "limit": 5.0}),
    )
    .await;
    assert!(
        out.content.starts_with("     9\tline 9\n    10\tline 10\n"),
        "{}",
        out.content
    );
    let out = read(&e, json!({"file_path": "a.txt", "offset": 50})).await;
    assert!(out.content.contains("has only 10 lines"), "{}", out.content);
}

#[tokio::test]
async fn reads_at_most_2000_lines_by_default() {
    let e = tool_env();
    let text: String = (1..=2500).map(|i| format!("{i}\n")).collect();
    fs::write(e.ctx.workspace.join("big.txt"), text).unwrap();
    let out = read(&e, json!({"file_path": "big.txt"})).await;
    assert!(out.content.contains("  2000\t2000\n"));
    assert!(!out.content.contains("\t2001\n"));
    assert!(
        out.content.contains("Showing lines 1-2000 of 2500"),
        "{}",
        tail(&out)
    );
    assert!(out.content.contains("offset=2001"));
}

#[tokio::test]
async fn long_lines_are_cut_with_a_note() {
    let e = tool_env();
    let long = "é".repeat(5000);
    fs::write(
        e.ctx.workspace.join("long.txt"),
        format!("short\n{long}\nend\n"),
    )
    .unwrap();
    let out = read(&e, json!({"file_path": "long.txt"})).await;
    let line2 = out.content.lines().nth(1).unwrap();
    assert_eq!(line2, format!("     2\t{}", "é".repeat(2000)));
    assert!(out.content.contains("     3\tend"));
    assert!(
        out.content
            .contains("1 line(s) longer than 2000 characters"),
        "{}",
        tail(&out)
    );
}

#[tokio::test]
async fn a_huge_single_line_costs_little() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("one.txt"), "x".repeat(20 << 20)).unwrap();
    let out = read(&e, json!({"file_path": "one.txt"})).await;
    assert!(!out.is_error);
    assert!(out.content.len() < 3000, "{}", out.content.len());
}

#[tokio::test]
async fn output_stays_bounded_for_wide_files() {
    let e = tool_env();
    let text: String = (0..2000)
        .map(|_| format!("{}\n", "y".repeat(1500)))
        .collect();
    fs::write(e.ctx.workspace.join("wide.txt"), text).unwrap();
    let out = read(&e, json!({"file_path": "wide.txt"})).await;
    assert!(out.content.len() <= 101_000, "{}", out.content.len());
    assert!(out.content.contains("Use offset="), "{}", tail(&out));
}

#[tokio::test]
async fn empty_files_say_so() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("empty"), "").unwrap();
    let out = read(&e, json!({"file_path": "empty"})).await;
    assert!(!out.is_error);
    assert!(
        out.content.contains("exists but is empty"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn binary_files_are_described_not_dumped() {
    let e = tool_env();
    // A PNG whose header is all there is: its size is read, it cannot be shown.
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x03\0\0\0\x02".to_vec();
    png.extend_from_slice(&[0u8; 100]);
    fs::write(e.ctx.workspace.join("pic.png"), &png).unwrap();
    let out = read(&e, json!({"file_path": "pic.png"})).await;
    assert!(out.content.contains("pic.png"), "{}", out.content);
    assert!(out.content.len() < 400, "{}", out.content);

    fs::write(e.ctx.workspace.join("blob.bin"), b"abc\0def\x01\x02").unwrap();
    let out = read(&e, json!({"file_path": "blob.bin"})).await;
    assert!(out.content.contains("binary"), "{}", out.content);
    assert!(!out.content.contains("def"), "{}", out.content);
}

#[tokio::test]
async fn directories_and_missing_files_are_errors() {
    let e = tool_env();
    fs::create_dir(e.ctx.workspace.join("dir")).unwrap();
    let out = read(&e, json!({"file_path": "dir"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("is a directory"), "{}", out.content);
    assert!(out.content.contains("Glob"), "{}", out.content);

    let out = read(&e, json!({"file_path": "nope.txt"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("does not exist"), "{}", out.content);
    assert!(out.content.contains("nope.txt"), "{}", out.content);
}

/// The workspace's resolved form is remembered between calls (#46), but only while the
/// given path still leads to the same directory: a workspace given through a link
/// that is re-pointed is the new directory from then on, and the old one is outside.
async fn refused_as_outside(e: &ToolEnv, path: &std::path::Path) {
    let out = read(e, json!({ "file_path": path })).await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("outside the workspace"),
        "{}",
        out.content
    );
}

/// A workspace given as a link to `first/` (holding `f.txt`: "one"), read once so its
/// root is remembered: the environment, `first` and the link.
async fn workspace_behind_link() -> (ToolEnv, PathBuf, PathBuf) {
    let mut e = tool_env();
    let first = e.root.join("first");
    fs::create_dir(&first).unwrap();
    fs::write(first.join("f.txt"), "one").unwrap();
    let link = e.root.join("ws-link");
    symlink(&first, &link).unwrap();
    e.ctx.workspace = link.clone();
    let out = read(&e, json!({"file_path": "f.txt"})).await;
    assert!(out.content.contains("one"), "{}", out.content);
    (e, first, link)
}

#[tokio::test]
async fn a_workspace_link_re_pointed_confines_to_its_new_target() {
    let (e, first, link) = workspace_behind_link().await;
    let second = e.root.join("second");
    fs::create_dir(&second).unwrap();
    fs::write(second.join("f.txt"), "two").unwrap();

    fs::remove_file(&link).unwrap();
    symlink(&second, &link).unwrap();
    let out = read(&e, json!({"file_path": "f.txt"})).await;
    assert!(out.content.contains("two"), "{}", out.content);
    refused_as_outside(&e, &first.join("f.txt")).await;
}

/// The remembered root (src/tools/paths.rs, `root`) when the workspace directory is
/// renamed and its link re-pointed at it: the link leads to the same inode, so only
/// checking the remembered form too notices. The workspace is where it now is, and a
/// directory made at its old place is outside it.
#[tokio::test]
async fn a_workspace_renamed_under_its_re_pointed_link_is_where_it_now_is() {
    let (e, first, link) = workspace_behind_link().await;
    let moved = e.root.join("moved");

    fs::rename(&first, &moved).unwrap();
    fs::remove_file(&link).unwrap();
    symlink(&moved, &link).unwrap();
    fs::create_dir(&first).unwrap();
    fs::write(first.join("f.txt"), "planted").unwrap();
    let out = read(&e, json!({"file_path": "f.txt"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("one"), "{}", out.content);
    refused_as_outside(&e, &first.join("f.txt")).await;
}

#[tokio::test]
async fn reads_are_confined_to_workspace_and_run_dir() {
    let e = tool_env();
    let root = e.ctx.workspace.parent().unwrap().to_path_buf();
    fs::write(root.join("outside.txt"), "secret").unwrap();
    fs::write(e.ctx.run_dir.join("trimmed.txt"), "kept").unwrap();
    symlink(root.join("outside.txt"), e.ctx.workspace.join("link")).unwrap();

    for path in [
        json!("../outside.txt"),
        json!(root.join("outside.txt")),
        json!("link"),
        json!("/etc/passwd"),
    ] {
        let out = read(&e, json!({ "file_path": path })).await;
        assert!(out.is_error, "{path}: {}", out.content);
        assert!(!out.content.contains("secret"));
        assert!(
            out.content.contains("outside the workspace"),
            "{}",
            out.content
        );
        assert!(
            out.content.contains(&e.ctx.workspace.display().to_string()),
            "names the workspace: {}",
            out.content
        );
    }
    let out = read(
        &e,
        json!({ "file_path": e.ctx.run_dir.join("trimmed.txt") }),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("kept"));
}

#[tokio::test]
async fn bad_input_names_the_field() {
    let e = tool_env();
    for (input, field) in [
        (json!({}), "file_path"),
        (json!({"file_path": 3}), "file_path"),
        (json!({"file_path": "a", "offset": "abc"}), "offset"),
        (json!({"file_path": "a", "limit": -1}), "limit"),
        (json!({"file_path": "a", "limit": 0}), "limit"),
    ] {
        let out = read(&e, input.clone()).await;
        assert!(out.is_error, "{input}");
        assert!(out.content.contains(field), "{input}: {}", out.content);
    }
    let out = read(&e, json!("not an object")).await;
    assert!(out.is_error);
}

#[test]
fn definition_follows_claude_code() {
    let d = Read.definition();
    assert_eq!(d.name, "Read");
    let schema: serde_json::Value = d.input_schema.parse().unwrap();
    assert_eq!(schema["required"], json!(["file_path"]));
    assert!(schema["properties"]["offset"].is_object());
    assert!(schema["properties"]["limit"].is_object());
    assert!(!d.description.is_empty());
}

fn tail(o: &ToolOutput) -> &str {
    let n = o.content.len();
    let mut start = n.saturating_sub(400);
    while !o.content.is_char_boundary(start) {
        start += 1;
    }
    &o.content[start..]
}

/// A PNG of `width`×`height` with some detail in it.
pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, ((x * y) % 239) as u8])
    });
    let mut bytes = Vec::new();
    image::DynamicImage::ImageRgb8(img)
        .write_to(std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)
        .unwrap();
    bytes
}

/// A small well-formed PDF of `pages` empty pages.
pub(crate) fn pdf(pages: usize) -> Vec<u8> {
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {pages} >>",
            (0..pages)
                .map(|i| format!("{} 0 R", i + 3))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ];
    for _ in 0..pages {
        objects.push("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>".into());
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// A notebook: a markdown cell, a code cell printing text, one showing a PNG, one
/// failing.
pub(crate) fn notebook(png_bytes: &[u8]) -> String {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(png_bytes);
    json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [
            {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Sales\n", "by month"]},
            {"cell_type": "code", "id": "sum", "metadata": {}, "execution_count": 1,
             "source": "print(sum([1, 2]))",
             "outputs": [{"output_type": "stream", "name": "stdout", "text": ["3\n"]}]},
            {"cell_type": "code", "id": "plot", "metadata": {}, "execution_count": 2,
             "source": "plot()",
             "outputs": [{"output_type": "display_data", "metadata": {},
                          "data": {"image/png": data, "text/plain": ["<Figure>"],
                                   "application/json": {"a": 1}}}]},
            {"cell_type": "code", "id": "oops", "metadata": {}, "execution_count": 3,
             "source": "1/0",
             "outputs": [{"output_type": "error", "ename": "ZeroDivisionError",
                          "evalue": "division by zero",
                          "traceback": ["\u{1b}[0;31mZeroDivisionError\u{1b}[0m: division by zero"]}]}
        ]
    })
    .to_string()
}

fn decoded(data: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap()
}

#[tokio::test]
async fn images_are_sent_as_images_and_large_ones_scaled_down() {
    let e = tool_env();
    let small = png(40, 30);
    fs::write(e.ctx.workspace.join("small.png"), &small).unwrap();
    let out = read(&e, json!({"file_path": "small.png"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(out.images.len(), 1);
    assert_eq!(out.images[0].media_type, "image/png");
    assert_eq!(decoded(&out.images[0].data), small, "sent as it is");
    let content = out.content();
    assert_eq!(content.blocks()[1].kind(), Some("image"), "{content:?}");

    fs::write(e.ctx.workspace.join("big.png"), png(2000, 500)).unwrap();
    let out = read(&e, json!({"file_path": "big.png"})).await;
    assert!(
        out.content.contains("scaled down to 1568x392"),
        "{}",
        out.content
    );
    let sent = image::load_from_memory(&decoded(&out.images[0].data)).unwrap();
    assert_eq!((sent.width(), sent.height()), (1568, 392));
    assert!(out.images[0].data.len() <= 5 * 1024 * 1024);
}

#[tokio::test]
async fn pdfs_are_sent_as_documents_within_their_cap() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("spec.pdf"), pdf(2)).unwrap();
    let out = read(&e, json!({"file_path": "spec.pdf"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("2 pages"), "{}", out.content);
    assert_eq!(out.images[0].media_type, "application/pdf");
    assert_eq!(out.content().blocks()[1].kind(), Some("document"));

    fs::write(e.ctx.workspace.join("book.pdf"), pdf(25)).unwrap();
    let out = read(&e, json!({"file_path": "book.pdf"})).await;
    assert!(out.is_error);
    assert!(out.images.is_empty());
    assert!(out.content.contains("25 pages"), "{}", out.content);
    assert!(
        out.content.contains("\"pages\" parameter"),
        "{}",
        out.content
    );
}

/// The pages of a PDF that `pages` names, counted in what was sent.
fn pages_sent(out: &flower::tools::ToolOutput) -> usize {
    lopdf::Document::load_mem(&decoded(&out.images[0].data))
        .unwrap()
        .get_pages()
        .len()
}

#[tokio::test]
async fn a_long_pdf_is_read_in_page_ranges() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("book.pdf"), pdf(25)).unwrap();
    let out = read(&e, json!({"file_path": "book.pdf", "pages": "3-7"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("pages 3-7 of 25"), "{}", out.content);
    assert_eq!(out.images[0].media_type, "application/pdf");
    assert_eq!(pages_sent(&out), 5);
    let out = read(&e, json!({"file_path": "book.pdf", "pages": "25"})).await;
    assert_eq!(pages_sent(&out), 1, "{}", out.content);
    let out = read(&e, json!({"file_path": "book.pdf", "pages": "6-25"})).await;
    assert_eq!(pages_sent(&out), 20, "{}", out.content);

    for (pages, says) in [
        ("1-21", "at most 20"),
        ("24-26", "has 25 pages"),
        ("0", "counted from 1"),
        ("5-2", "such as"),
    ] {
        let out = read(&e, json!({"file_path": "book.pdf", "pages": pages})).await;
        assert!(out.is_error, "{pages}: {}", out.content);
        assert!(out.images.is_empty());
        assert!(out.content.contains(says), "{pages}: {}", out.content);
    }
    // Not a PDF: the parameter is refused, not ignored.
    fs::write(e.ctx.workspace.join("notes.txt"), "a\nb\n").unwrap();
    let out = read(&e, json!({"file_path": "notes.txt", "pages": "1"})).await;
    assert!(
        out.is_error && out.content.contains("PDF files only"),
        "{}",
        out.content
    );
    // A malformed PDF with a range: an error result, no crash.
    fs::write(
        e.ctx.workspace.join("broken.pdf"),
        b"%PDF-1.4\n1 0 obj <<\n",
    )
    .unwrap();
    let out = read(&e, json!({"file_path": "broken.pdf", "pages": "1"})).await;
    assert!(
        out.is_error && out.content.contains("could not be parsed"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn notebooks_are_cells_with_their_outputs() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("sales.ipynb"), notebook(&png(20, 10))).unwrap();
    let out = read(&e, json!({"file_path": "sales.ipynb"})).await;
    assert!(!out.is_error, "{}", out.content);
    for wanted in [
        "<cell id=\"intro\" type=\"markdown\">\n# Sales\nby month\n</cell>",
        "<cell id=\"sum\" type=\"code\">\nprint(sum([1, 2]))\n</cell>",
        "<output cell=\"sum\" type=\"stream\">\n3\n</output>",
        "[image 1 below]",
        "ZeroDivisionError: division by zero\nZeroDivisionError: division by zero",
    ] {
        assert!(
            out.content.contains(wanted),
            "{wanted} missing:\n{}",
            out.content
        );
    }
    assert_eq!(out.images.len(), 1);
    assert_eq!(out.images[0].media_type, "image/png");
}
