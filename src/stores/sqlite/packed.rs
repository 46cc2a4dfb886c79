//! How an entry's JSON is kept in `entries.data` (since schema 3): as its text, or,
//! when that saves enough, compressed into a blob (an LZ4 block). SQLite's column type
//! is the format marker: a TEXT value is the JSON as given; a BLOB starts with a format
//! byte.
//!
//! Why: rows are appended at a table's end and SQLite starts a new page for a row that
//! does not fit in the last one, so a few-KB tool result took a 4 KB page of its own
//! (docs/performance.md, "Disk per turn"). Compressed, JSON of code or of a
//! transcript's repeated fields is about half its size and rows share pages.
//!
//! Why LZ4 and not deflate: reading must stay about as cheap as reading text (a resume
//! and `show` read every row). Inflating costs about 20 instructions a byte (measured
//! with callgrind: 466 M for a 20.8 MB transcript against 17 M to read it as text);
//! LZ4 blocks decompress several times faster. Deflate's blobs (format 1, written for
//! an hour on 2026-12-06) still read.
//!
//! Reading gives back the JSON byte for byte: decompression is exact. Rows written
//! before schema 3 are all TEXT and read as before.

use rusqlite::types::{FromSqlError, Type, ValueRef};

/// Format byte of a blob: raw deflate (RFC 1951) of the JSON text, preceded by the
/// text's length (u32, little endian). Read, no longer written.
const DEFLATE: u8 = 1;
/// Format byte of a blob: an LZ4 block of the JSON text, preceded by the text's length
/// (u32, little endian). What is written.
const LZ4: u8 = 2;

/// Texts shorter than this stay text: a short row fits a page's rest anyway and
/// deflate's gain on it is small.
const MIN_PACKED: usize = 256;

/// What `data` should hold for `text`: a blob when compressing saves at least an
/// eighth, else `None` (store the text).
pub(super) fn pack(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let len = u32::try_from(bytes.len()).ok()?;
    if bytes.len() < MIN_PACKED {
        return None;
    }
    let mut out = vec![0; HEADER + lz4_flex::block::get_maximum_output_size(bytes.len())];
    out[0] = LZ4;
    out[1..HEADER].copy_from_slice(&len.to_le_bytes());
    let size = lz4_flex::block::compress_into(bytes, &mut out[HEADER..]).ok()?;
    out.truncate(HEADER + size);
    (out.len() < bytes.len() - bytes.len() / 8).then_some(out)
}

/// The format byte and the text's length.
const HEADER: usize = 5;

/// The JSON bytes of a `data` value: a text as it is, a blob inflated into `scratch`
/// (reused from row to row). Errors like a column of the wrong type, so they travel
/// with SQLite's.
pub(super) fn json_bytes<'a>(
    value: ValueRef<'a>,
    scratch: &'a mut Vec<u8>,
) -> rusqlite::Result<&'a [u8]> {
    match value {
        ValueRef::Text(text) => Ok(text),
        ValueRef::Blob(blob) => {
            scratch.clear();
            inflate_into(blob, scratch).map_err(|why| {
                rusqlite::Error::FromSqlConversionFailure(0, Type::Blob, why.into())
            })?;
            Ok(scratch)
        }
        other => Err(wrong_type(other.data_type())),
    }
}

/// Appends the JSON bytes of a `data` value to `out` (the batches of parallel loads).
pub(super) fn append_json(value: ValueRef<'_>, out: &mut Vec<u8>) -> rusqlite::Result<()> {
    match value {
        ValueRef::Text(text) => {
            out.extend_from_slice(text);
            Ok(())
        }
        ValueRef::Blob(blob) => inflate_into(blob, out)
            .map_err(|why| rusqlite::Error::FromSqlConversionFailure(0, Type::Blob, why.into())),
        other => Err(wrong_type(other.data_type())),
    }
}

fn wrong_type(kind: Type) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, kind, Box::new(FromSqlError::InvalidType))
}

#[derive(Debug, thiserror::Error)]
enum Unpack {
    #[error("记录的格式字节 {0} 不认识(更新的 flower 写的?)")]
    Format(u8),
    #[error("压缩的记录坏了({0})")]
    Corrupt(String),
}

fn inflate_into(blob: &[u8], out: &mut Vec<u8>) -> Result<(), Unpack> {
    let (&format, rest) = blob
        .split_first()
        .ok_or_else(|| Unpack::Corrupt("空的".into()))?;
    if format != DEFLATE && format != LZ4 {
        return Err(Unpack::Format(format));
    }
    let (len, stream) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| Unpack::Corrupt("太短".into()))?;
    let len = u32::from_le_bytes(*len) as usize;
    if format == LZ4 {
        // LZ4 expands at most 255:1.
        if len > stream.len().saturating_mul(255) {
            return Err(Unpack::Corrupt(format!("长度 {len} 不可能")));
        }
        let start = out.len();
        out.resize(start + len, 0);
        let made = lz4_flex::block::decompress_into(stream, &mut out[start..]);
        return match made {
            Ok(n) if n == len => Ok(()),
            Ok(n) => {
                out.truncate(start);
                Err(Unpack::Corrupt(format!("解出 {n} 字节,应是 {len}")))
            }
            Err(e) => {
                out.truncate(start);
                Err(Unpack::Corrupt(e.to_string()))
            }
        };
    }
    // Deflate expands at most about 1032:1: a larger length is a damaged row, not an
    // allocation to make.
    if len > stream.len().saturating_mul(1032) {
        return Err(Unpack::Corrupt(format!("长度 {len} 不可能")));
    }
    let start = out.len();
    out.reserve_exact(len);
    let mut inflate = flate2::Decompress::new(false);
    let status = inflate
        .decompress_vec(stream, out, flate2::FlushDecompress::Finish)
        .map_err(|e| Unpack::Corrupt(e.to_string()))?;
    if status != flate2::Status::StreamEnd || out.len() - start != len {
        return Err(Unpack::Corrupt(format!(
            "解出 {} 字节,应是 {len}",
            out.len() - start
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_text_reads_back_byte_for_byte() {
        let text = format!(
            "{{\"type\":\"user\",\"content\":\"{}\"}}",
            "fn main() {\\n    println!(\\\"hi\\\");\\n}\\n".repeat(40)
        );
        let blob = pack(&text).unwrap();
        assert!(
            blob.len() < text.len() / 2,
            "{} of {}",
            blob.len(),
            text.len()
        );
        let mut scratch = Vec::new();
        let back = json_bytes(ValueRef::Blob(&blob), &mut scratch).unwrap();
        assert_eq!(back, text.as_bytes());
        let mut appended = b"x".to_vec();
        append_json(ValueRef::Blob(&blob), &mut appended).unwrap();
        assert_eq!(&appended[1..], text.as_bytes());
    }

    /// A blob of the first format (deflate), as written before LZ4, still reads.
    #[test]
    fn a_deflated_row_still_reads() {
        let text = "{\"a\":\"".to_string() + &"bc".repeat(500) + "\"}";
        let mut blob = vec![DEFLATE];
        blob.extend_from_slice(&(text.len() as u32).to_le_bytes());
        let mut deflate = flate2::Compress::new(flate2::Compression::new(1), false);
        blob.reserve(text.len());
        deflate
            .compress_vec(text.as_bytes(), &mut blob, flate2::FlushCompress::Finish)
            .unwrap();
        let mut scratch = Vec::new();
        assert_eq!(
            json_bytes(ValueRef::Blob(&blob), &mut scratch).unwrap(),
            text.as_bytes()
        );
    }

    #[test]
    fn short_or_random_text_stays_text() {
        assert!(pack("{\"type\":\"user\"}").is_none());
        let noise: String = (0..2000).map(|_| fastrand::alphanumeric()).collect();
        assert!(pack(&noise).is_none());
    }

    #[test]
    fn a_damaged_blob_is_an_error_not_a_panic() {
        let text = "{\"a\":\"".to_string() + &"b".repeat(1000) + "\"}";
        let mut blob = pack(&text).unwrap();
        let mut scratch = Vec::new();
        let last = blob.len() - 1;
        blob.truncate(last);
        assert!(json_bytes(ValueRef::Blob(&blob), &mut scratch).is_err());
        blob[0] = 9;
        assert!(json_bytes(ValueRef::Blob(&blob), &mut scratch).is_err());
        assert!(json_bytes(ValueRef::Blob(&[LZ4, 255, 255, 255, 255]), &mut scratch).is_err());
        assert!(json_bytes(ValueRef::Blob(&[DEFLATE, 255, 255, 255, 255]), &mut scratch).is_err());
    }
}
