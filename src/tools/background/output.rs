//! A background command's output on disk, capped: when the file would pass the cap,
//! the older half is dropped and the tail kept, and the count of dropped bytes is
//! remembered, so a reader still knows where "new since the last read" begins.
//!
//! Positions are logical: byte `n` of everything the command ever printed. The file
//! holds the bytes from `dropped` to `written`.

use crate::tools::bash::Capture;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// The default cap of one command's kept output (`FLOWER_BACKGROUND_OUTPUT_CAP`).
pub const DEFAULT_OUTPUT_CAP: u64 = 8 * 1024 * 1024;

/// The smallest cap the settings accept.
pub const MIN_OUTPUT_CAP: u64 = 1024;

/// The kept output of one command.
#[derive(Debug)]
pub(super) struct Output {
    path: PathBuf,
    cap: u64,
    /// Bytes the command printed, in all.
    pub(super) written: u64,
    /// Bytes dropped from the front to stay under the cap.
    pub(super) dropped: u64,
}

/// What one read found: the new output (capped like a foreground result) and how
/// much of it had already been dropped from the file.
#[derive(Debug, Default)]
pub(super) struct NewOutput {
    pub(super) text: String,
    pub(super) bytes: u64,
    pub(super) lost: u64,
}

impl Output {
    /// Creates (truncates) the file.
    pub(super) fn create(path: &Path, cap: u64) -> std::io::Result<Output> {
        std::fs::File::create(path)?;
        Ok(Output {
            path: path.to_path_buf(),
            cap: cap.max(MIN_OUTPUT_CAP),
            written: 0,
            dropped: 0,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends what the command printed, dropping the older half of the file first
    /// when it would pass the cap.
    pub(super) fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
        let kept = self.written - self.dropped;
        if kept + data.len() as u64 > self.cap {
            self.shrink(data)?;
        } else {
            let mut file = std::fs::OpenOptions::new().append(true).open(&self.path)?;
            file.write_all(data)?;
        }
        self.written += data.len() as u64;
        Ok(())
    }

    /// Rewrites the file as the last half-cap bytes of its content followed by `data`
    /// (or `data`'s own tail when it alone is that long).
    fn shrink(&mut self, data: &[u8]) -> std::io::Result<()> {
        let keep = self.cap / 2;
        let kept = self.written - self.dropped;
        let total = kept + data.len() as u64;
        let mut tail = Vec::with_capacity(keep as usize);
        if (data.len() as u64) < keep {
            let from_file = keep - data.len() as u64;
            let mut file = std::fs::File::open(&self.path)?;
            file.seek(SeekFrom::Start(kept.saturating_sub(from_file)))?;
            file.take(from_file).read_to_end(&mut tail)?;
            tail.extend_from_slice(data);
        } else {
            tail.extend_from_slice(&data[data.len() - keep as usize..]);
        }
        // A reader (the Read tool, a person with `tail -f`) sees the old file or the
        // new one, never half of it.
        crate::atomic::write(&self.path, &tail)?;
        self.dropped += total - tail.len() as u64;
        Ok(())
    }

    /// The output from logical position `from` to the end, capped as a foreground
    /// result is ([`Capture`]).
    pub(super) fn read_from(&self, from: u64) -> std::io::Result<NewOutput> {
        let start = from.max(self.dropped);
        let lost = start - from;
        let mut capture = Capture::default();
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(start - self.dropped))?;
        let mut left = self.written - start;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            let n = n.min(left as usize);
            capture.push(&buf[..n]);
            left -= n as u64;
        }
        Ok(NewOutput {
            text: capture.text(),
            bytes: self.written - from,
            lost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_tail_and_counts_what_it_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = Output::create(&dir.path().join("x.out"), 1024).unwrap();
        for i in 0..100u32 {
            out.append(format!("line {i:04}\n").as_bytes()).unwrap();
        }
        assert_eq!(out.written, 1000);
        assert_eq!(out.dropped, 0);
        out.append(&[b'y'; 100]).unwrap();
        assert!(out.dropped > 0);
        let file = std::fs::read(out.path()).unwrap();
        assert_eq!(file.len() as u64, out.written - out.dropped);
        assert!(file.len() as u64 <= 1024);
        assert!(file.ends_with(&[b'y'; 100]));
        let read = out.read_from(0).unwrap();
        assert_eq!(read.lost, out.dropped);
        assert_eq!(read.bytes, 1100);
        let later = out.read_from(1050).unwrap();
        assert_eq!(later.text, "y".repeat(50));
        assert_eq!(later.lost, 0);
        // One write longer than the cap keeps its own tail.
        out.append(&[b'z'; 5000]).unwrap();
        let file = std::fs::read(out.path()).unwrap();
        assert_eq!(file, vec![b'z'; 512]);
    }
}
