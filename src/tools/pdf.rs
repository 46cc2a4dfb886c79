//! What `Read` returns for a PDF: a document block, as Claude Code's Read sends it, of
//! the whole file or of the pages its `pages` parameter names ("3", "1-5").
//!
//! A PDF goes whole when it is at most [`MAX_PDF_BYTES`] and [`MAX_PDF_PAGES`] pages;
//! a larger one is refused with a result that says how many pages it has and to ask for
//! a range. A range is cut out with `lopdf` (pure Rust): the other pages are deleted,
//! objects only they used are pruned, and the smaller file is sent. The caps bound the
//! share of the context one Read takes (the API reads a page as text and an image).
//!
//! The file is the workspace's, so anybody's: parsing is bounded by
//! [`MAX_PDF_FILE_BYTES`] and a parser panic on a malformed file becomes an error
//! result, never a crashed run.

use super::ToolOutput;
use super::media::attachment;
use std::path::Path;

/// The largest PDF (or cut-out range) sent (the API takes 32 MB requests, base64 adds
/// a third, and a page costs context: this keeps one Read a bounded share).
pub const MAX_PDF_BYTES: u64 = 10 << 20;
/// The most pages of a PDF sent in one Read (Claude Code's limit too).
pub const MAX_PDF_PAGES: usize = 20;
/// A PDF larger than this is not opened to cut pages out of it.
pub const MAX_PDF_FILE_BYTES: u64 = 256 << 20;

/// The pages a Read asks for: `first..=last`, counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRange {
    pub first: u32,
    pub last: u32,
}

impl PageRange {
    /// `"3"` or `"1-5"` (spaces allowed around the numbers); an error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "Invalid input for Read: \"pages\" must be one page or a range such as \
                 \"3\" or \"1-5\" (pages counted from 1), not {text:?}."
            )
        };
        let number = |part: &str| part.trim().parse::<u32>().ok().filter(|n| *n >= 1);
        let (first, last) = match text.split_once('-') {
            Some((a, b)) => (number(a).ok_or_else(bad)?, number(b).ok_or_else(bad)?),
            None => {
                let n = number(text).ok_or_else(bad)?;
                (n, n)
            }
        };
        if last < first {
            return Err(bad());
        }
        if (last - first) as usize >= MAX_PDF_PAGES {
            return Err(format!(
                "Invalid input for Read: \"pages\" asks for {} pages; at most {MAX_PDF_PAGES} \
                 are read at once.",
                last - first + 1
            ));
        }
        Ok(Self { first, last })
    }
}

/// `path`'s PDF, or the pages `pages` names, as a document block after a line saying
/// what it is; refused when it is over the caps.
pub fn read_pdf(path: &Path, size: u64, pages: Option<PageRange>) -> ToolOutput {
    let shown = path.display();
    let cap = if pages.is_some() {
        MAX_PDF_FILE_BYTES
    } else {
        MAX_PDF_BYTES
    };
    if size > cap {
        let hint = if pages.is_some() {
            "; extract the pages you need with Bash (qpdf --pages, or pdftotext -f FIRST -l \
             LAST) and read that"
        } else {
            "; read it in parts with the \"pages\" parameter (for example \"1-20\")"
        };
        return ToolOutput::error(format!(
            "{shown} is a PDF of {}, more than the {} Read opens{hint}.",
            super::read::human_size(size),
            super::read::human_size(cap)
        ));
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    let parsed = parse(&bytes);
    let count = match &parsed {
        Ok(doc) => Some(doc.get_pages().len()),
        Err(_) => scanned_page_count(&bytes),
    };
    let Some(range) = pages else {
        if let Some(n) = count.filter(|n| *n > MAX_PDF_PAGES) {
            return ToolOutput::error(format!(
                "{shown} is a PDF of {n} pages, more than the {MAX_PDF_PAGES} Read sends at \
                 once; read it in parts with the \"pages\" parameter (for example \"1-20\")."
            ));
        }
        let pages = count.map_or_else(String::new, |n| format!(", {n} pages"));
        let mut output = ToolOutput::ok(format!("PDF {shown} ({} bytes{pages}).", bytes.len()));
        output.images.push(attachment("application/pdf", &bytes));
        return output;
    };
    match parsed {
        Ok(doc) => send_range(path, doc, bytes, range),
        Err(why) => ToolOutput::error(format!(
            "{shown} could not be parsed as a PDF to cut pages out of it ({why}); read it \
             whole without \"pages\", or extract the pages with Bash (qpdf --pages)."
        )),
    }
}

/// `range`'s pages of the parsed `doc` (whose file is `bytes`) as a document block.
fn send_range(
    path: &Path,
    mut doc: lopdf::Document,
    bytes: Vec<u8>,
    range: PageRange,
) -> ToolOutput {
    let shown = path.display();
    let size = bytes.len() as u64;
    let total = doc.get_pages().len() as u32;
    if range.last > total {
        return ToolOutput::error(format!(
            "{shown} has {total} pages; \"pages\" asks for {}-{}.",
            range.first, range.last
        ));
    }
    let cut = if range.first == 1 && range.last == total && size <= MAX_PDF_BYTES {
        bytes
    } else {
        match cut_pages(&mut doc, range, total) {
            Ok(cut) => cut,
            Err(why) => {
                return ToolOutput::error(format!(
                    "Pages {}-{} of {shown} could not be cut out ({why}); extract them with Bash \
                     (qpdf --pages) and read that.",
                    range.first, range.last
                ));
            }
        }
    };
    if cut.len() as u64 > MAX_PDF_BYTES {
        return ToolOutput::error(format!(
            "Pages {}-{} of {shown} are {}, more than the {} Read sends at once; ask for fewer \
             pages.",
            range.first,
            range.last,
            super::read::human_size(cut.len() as u64),
            super::read::human_size(MAX_PDF_BYTES)
        ));
    }
    let mut output = ToolOutput::ok(format!(
        "PDF {shown}, pages {}-{} of {total} ({} bytes sent).",
        range.first,
        range.last,
        cut.len()
    ));
    output.images.push(attachment("application/pdf", &cut));
    output
}

/// The parsed document; a parser panic on a malformed file is an error like any other.
fn parse(bytes: &[u8]) -> Result<lopdf::Document, String> {
    std::panic::catch_unwind(|| lopdf::Document::load_mem(bytes))
        .map_err(|_| "the PDF parser failed on it".to_string())?
        .map_err(|e| e.to_string())
}

/// A PDF of `range`'s pages of `doc` (which has `total`).
fn cut_pages(doc: &mut lopdf::Document, range: PageRange, total: u32) -> Result<Vec<u8>, String> {
    let outside: Vec<u32> = (1..=total)
        .filter(|n| *n < range.first || *n > range.last)
        .collect();
    let work = std::panic::AssertUnwindSafe(|| {
        doc.delete_pages(&outside);
        doc.prune_objects();
        let mut out = Vec::new();
        doc.save_to(&mut out).map(|()| out)
    });
    std::panic::catch_unwind(work)
        .map_err(|_| "the PDF writer failed on it".to_string())?
        .map_err(|e| e.to_string())
}

/// How many pages a PDF has, from its page objects (`/Type /Page`), when the parser
/// could not read it and they are not inside compressed object streams; `None` when
/// none is found.
fn scanned_page_count(bytes: &[u8]) -> Option<usize> {
    let mut count = 0;
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], b"/Type") {
        let mut i = at + found + 5;
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\r' | b'\n' | b'\t') {
            i += 1;
        }
        if bytes[i..].starts_with(b"/Page")
            && !bytes.get(i + 5).is_some_and(|c| c.is_ascii_alphanumeric())
        {
            count += 1;
        }
        at = i;
    }
    (count > 0).then_some(count)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::PageRange;

    #[test]
    fn page_ranges_parse_as_claude_codes_read_takes_them() {
        assert_eq!(PageRange::parse("3"), Ok(PageRange { first: 3, last: 3 }));
        assert_eq!(
            PageRange::parse(" 1 - 5 "),
            Ok(PageRange { first: 1, last: 5 })
        );
        assert_eq!(
            PageRange::parse("1-20"),
            Ok(PageRange { first: 1, last: 20 })
        );
        for bad in ["", "0", "5-3", "a", "1-", "-2", "1-21", "2,3"] {
            assert!(PageRange::parse(bad).is_err(), "{bad:?}");
        }
    }
}
