//! What `Read` returns for images and PDFs: the bytes themselves, as Claude Code's Read
//! does, in a tool result's image and document blocks ([`super::Attachment`]).
//!
//! An image is sent as it is when the API takes it without scaling it down itself
//! (long edge at most [`MAX_IMAGE_EDGE`] pixels, at most [`MAX_IMAGE_BYTES`]); a larger
//! one is decoded (pure Rust, the `image` crate with only these four codecs), scaled to
//! fit and sent as PNG, or as JPEG when the PNG is still too large. PDFs are
//! [`super::pdf`]'s. The caps bound the share of the context one Read takes; pruning
//! moves old attachments out to files like large results.

use super::{Attachment, ToolOutput};
use base64::Engine as _;
use std::io::Cursor;
use std::path::Path;

/// The long edge the API scales an image down to (its documentation's 1568 px).
pub const MAX_IMAGE_EDGE: u32 = 1568;
/// The most bytes of one image sent (the API's limit is 5 MB of it, base64-encoded;
/// base64 adds a third).
pub const MAX_IMAGE_BYTES: usize = 3_750_000;
/// An image file larger than this is not even opened.
pub const MAX_IMAGE_FILE_BYTES: u64 = 64 << 20;

/// The image kinds the API takes, by their first bytes.
pub fn image_media_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// `path`'s image as an image block (scaled down when the API would not take it as it
/// is), after a line saying what it is.
pub fn read_image(path: &Path, media_type: &str, size: u64) -> ToolOutput {
    let shown = path.display();
    if size > MAX_IMAGE_FILE_BYTES {
        return ToolOutput::error(format!(
            "{shown} is an image of {}, more than the {} Read opens; scale it down \
             first (for example with ImageMagick via Bash) and read the smaller copy.",
            super::read::human_size(size),
            super::read::human_size(MAX_IMAGE_FILE_BYTES)
        ));
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    match image_attachment(&bytes, media_type) {
        Ok((attachment, note)) => {
            let mut output = ToolOutput::ok(format!("Image {shown} ({note})."));
            output.images.push(attachment);
            output
        }
        Err(why) => ToolOutput::error(format!("{shown} could not be read as an image: {why}")),
    }
}

/// The image as sent, and a note on its size (and on its scaling).
pub fn image_attachment(bytes: &[u8], media_type: &str) -> Result<(Attachment, String), String> {
    let reader = |bytes: &[u8]| {
        let mut reader = image::ImageReader::new(Cursor::new(bytes.to_vec()));
        reader.set_format(format_of(media_type));
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(20_000);
        limits.max_image_height = Some(20_000);
        limits.max_alloc = Some(512 << 20);
        reader.limits(limits);
        reader
    };
    // Decoded even when sent as it is: an image the API cannot read would fail every
    // later request of the session, so a broken one is refused here.
    let decoded = reader(bytes).decode().map_err(|e| e.to_string())?;
    let (width, height) = (decoded.width(), decoded.height());
    if width.max(height) <= MAX_IMAGE_EDGE && bytes.len() <= MAX_IMAGE_BYTES {
        let note = format!("{media_type}, {width}x{height}, {} bytes", bytes.len());
        return Ok((attachment(media_type, bytes), note));
    }
    let scaled = if width.max(height) > MAX_IMAGE_EDGE {
        decoded.resize(
            MAX_IMAGE_EDGE,
            MAX_IMAGE_EDGE,
            image::imageops::FilterType::Triangle,
        )
    } else {
        decoded
    };
    let (new_width, new_height) = (scaled.width(), scaled.height());
    let mut encoded = Vec::new();
    scaled
        .write_to(Cursor::new(&mut encoded), image::ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    let mut sent_as = "image/png";
    if encoded.len() > MAX_IMAGE_BYTES {
        encoded.clear();
        image::DynamicImage::ImageRgb8(scaled.to_rgb8())
            .write_to(Cursor::new(&mut encoded), image::ImageFormat::Jpeg)
            .map_err(|e| e.to_string())?;
        sent_as = "image/jpeg";
    }
    if encoded.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "still {} bytes after scaling to {new_width}x{new_height}",
            encoded.len()
        ));
    }
    let note = format!(
        "{media_type}, {width}x{height}, {} bytes; scaled down to {new_width}x{new_height} \
         ({sent_as}, {} bytes) to fit the API's limits",
        bytes.len(),
        encoded.len()
    );
    Ok((attachment(sent_as, &encoded), note))
}

fn format_of(media_type: &str) -> image::ImageFormat {
    match media_type {
        "image/jpeg" => image::ImageFormat::Jpeg,
        "image/gif" => image::ImageFormat::Gif,
        "image/webp" => image::ImageFormat::WebP,
        _ => image::ImageFormat::Png,
    }
}

pub(super) fn attachment(media_type: &str, bytes: &[u8]) -> Attachment {
    Attachment {
        media_type: media_type.to_string(),
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}
