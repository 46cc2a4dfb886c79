//! `manifest.json` as the mirror of a run whose manifest lives in the shared database.
//!
//! A write costs what changed, not the run's length: when the file is still the one
//! this writer left (the same test as the file-only case, [`Written`]), the database
//! sends only the rows other processes added since, the other processes' part of the
//! file is copied over in the kernel, and only the new rows and this process's are laid
//! out. Otherwise (first write, another writer or a person changed the file, a row of
//! another process was replaced) the mirror is written whole from every row.

use super::*;
use crate::continuity::shared::MergedManifest;

impl Manifest {
    /// Merges this process's rows into `shared` and replaces the mirror by every row
    /// of the run, atomically, under the writers' lock, in the file's pretty layout.
    // Long because the shortcut's test, the merge and the file it describes are one
    // critical section under the lock.
    pub(super) fn write_shared(
        &mut self,
        shared: &SharedRun,
    ) -> Result<RecordOutcome, ManifestError> {
        fs::create_dir_all(&self.run_dir).map_err(io_err(&self.run_dir))?;
        let lock = self.open_lock()?;
        let locked = lock.lock().is_ok();
        // Until this write completes, what we knew about the file is void.
        let last = self.last.take().filter(|_| locked);
        let unchanged = last.as_ref().and_then(|last| {
            let seen = last.seen?;
            Some((open_if_unchanged(&self.path, &lock, last)?, last, seen))
        });
        let ours: Vec<String> = self.rows.iter().map(ManifestRow::to_json).collect();
        let merged: MergedManifest = shared
            .merge_manifest_since(&self.run_id, ours.clone(), unchanged.as_ref().map(|u| u.2))
            .map_err(ManifestError::Shared)?;
        // Each row says which store holds the run: the file is only its mirror.
        let store = shared.location();

        let tmp = self.run_dir.join(MANIFEST_TMP_FILE);
        let out = File::create(&tmp).map_err(io_err(&tmp))?;
        let mut buf = BufWriter::with_capacity(1 << 16, out);
        let (mut others_len, mut others_count) = match (&unchanged, merged.appended) {
            (Some((old, last, _)), true) => {
                let copied =
                    io::copy(&mut old.take(last.others_len), &mut buf).map_err(io_err(&tmp))?;
                if copied != last.others_len {
                    return Err(io_err(&self.path)(io::ErrorKind::UnexpectedEof.into()));
                }
                (last.others_len, last.others_count)
            }
            _ => {
                buf.write_all(b"[").map_err(io_err(&tmp))?;
                (1, 0)
            }
        };
        for text in &merged.others {
            others_len += write_row(&mut buf, text, others_count == 0, store.as_deref())
                .map_err(io_err(&tmp))?;
            others_count += 1;
        }
        for (i, text) in ours.iter().enumerate() {
            write_row(&mut buf, text, others_count + i == 0, store.as_deref())
                .map_err(io_err(&tmp))?;
        }
        let end: &[u8] = if others_count + ours.len() == 0 {
            b"]\n"
        } else {
            b"\n]\n"
        };
        buf.write_all(end).map_err(io_err(&tmp))?;
        let out = buf.into_inner().map_err(|e| io_err(&tmp)(e.into_error()))?;
        out.sync_all().map_err(io_err(&tmp))?;
        let meta = out.metadata().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &self.path).map_err(io_err(&self.path))?;

        if locked {
            self.remember_written(&lock, &meta, others_len, others_count, merged.seen);
        }
        drop(lock);
        Ok(RecordOutcome {
            moved_aside: None,
            rows: others_count + ours.len(),
        })
    }
}

/// One row of the mirror, after `[` or the row before it: re-laid out as a tree
/// (every field stays) with the store it lives in, indented as the whole array
/// pretty-printed would be. The bytes written.
fn write_row(
    out: &mut impl Write,
    text: &str,
    first: bool,
    store: Option<&str>,
) -> io::Result<u64> {
    let mut tree: Value = serde_json::from_str(text).map_err(io::Error::other)?;
    if let (Some(store), Some(row)) = (store, tree.as_object_mut()) {
        row.insert("store".into(), Value::String(store.to_string()));
    }
    let pretty = serde_json::to_string_pretty(&tree).map_err(io::Error::other)?;
    // A JSON text holds no raw newline inside a string: each one is layout.
    let piece = format!(
        "{}{}",
        if first { "\n  " } else { ",\n  " },
        pretty.replace('\n', "\n  ")
    );
    out.write_all(piece.as_bytes())?;
    Ok(piece.len() as u64)
}
