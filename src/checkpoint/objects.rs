//! Reading the checkpoints' objects in-process (`gix-odb`'s loose store, `gix-object`'s
//! tree decoding): the changes between two trees, and the blobs a restore writes. No
//! `git` runs for a restore.

use super::CheckpointError;
use super::git::{Change, EMPTY_TREE};
use gix_object::bstr::BString;
use gix_object::tree::EntryMode;
use gix_object::{Kind, TreeRefIter};
use gix_odb::loose;
use std::collections::BTreeMap;

const HASH: gix_hash::Kind = gix_hash::Kind::Sha1;
const NO_BLOB: &str = "0000000000000000000000000000000000000000";

fn missing(id: &str) -> CheckpointError {
    CheckpointError::Objects {
        what: "读对象",
        source: format!("对象 {id} 不在检查点里").into(),
    }
}

/// The object `id`'s content, which must be of `kind`.
pub(super) fn read(store: &loose::Store, id: &str, kind: Kind) -> Result<Vec<u8>, CheckpointError> {
    if kind == Kind::Tree && id == EMPTY_TREE {
        return Ok(Vec::new()); // git's empty tree needs no object
    }
    let oid = gix_hash::ObjectId::from_hex(id.as_bytes()).map_err(|_| missing(id))?;
    let mut buffer = Vec::new();
    match store.try_find(&oid, &mut buffer) {
        Ok(Some(data)) if data.kind == kind => Ok(data.data.to_vec()),
        Ok(_) => Err(missing(id)),
        Err(source) => Err(CheckpointError::Objects {
            what: "读对象",
            source: Box::new(source),
        }),
    }
}

type Entries = BTreeMap<BString, (EntryMode, gix_hash::ObjectId)>;

fn entries(store: &loose::Store, tree: &str) -> Result<Entries, CheckpointError> {
    let data = read(store, tree, Kind::Tree)?;
    let mut entries = Entries::new();
    for entry in TreeRefIter::from_bytes(&data, HASH) {
        let entry = entry.map_err(|_| missing(tree))?;
        entries.insert(
            entry.filename.to_owned(),
            (entry.mode, entry.oid.to_owned()),
        );
    }
    Ok(entries)
}

/// The paths that differ from tree `from` to tree `to`, recursively, with the "after"
/// mode and blob (as `git diff-tree -r --no-renames --raw` reports them).
pub(super) fn changes(
    store: &loose::Store,
    from: &str,
    to: &str,
) -> Result<Vec<Change>, CheckpointError> {
    let mut out = Vec::new();
    diff(store, Some(from), Some(to), "", &mut out)?;
    Ok(out)
}

fn diff(
    store: &loose::Store,
    from: Option<&str>,
    to: Option<&str>,
    prefix: &str,
    out: &mut Vec<Change>,
) -> Result<(), CheckpointError> {
    let before = from
        .map(|t| entries(store, t))
        .transpose()?
        .unwrap_or_default();
    let after = to
        .map(|t| entries(store, t))
        .transpose()?
        .unwrap_or_default();
    let names: std::collections::BTreeSet<&BString> = before.keys().chain(after.keys()).collect();
    for name in names {
        let path = format!("{prefix}{}", String::from_utf8_lossy(name));
        let (a, b) = (before.get(name), after.get(name));
        if a == b {
            continue;
        }
        let tree_of = |side: Option<&(EntryMode, gix_hash::ObjectId)>| {
            side.filter(|(mode, _)| mode.is_tree())
                .map(|(_, id)| id.to_string())
        };
        let (a_tree, b_tree) = (tree_of(a), tree_of(b));
        if a_tree.is_some() || b_tree.is_some() {
            let sub = format!("{path}/");
            diff(store, a_tree.as_deref(), b_tree.as_deref(), &sub, out)?;
        }
        let a_blob = a.filter(|(mode, _)| !mode.is_tree());
        let b_blob = b.filter(|(mode, _)| !mode.is_tree());
        let status = match (a_blob, b_blob) {
            (None, None) => continue,
            (None, Some(_)) => 'A',
            (Some(_), None) => 'D',
            (Some((ma, _)), Some((mb, _))) if ma.is_link() != mb.is_link() => 'T',
            (Some(_), Some(_)) => 'M',
        };
        let (mode, blob) = match b_blob {
            Some((mode, id)) => (format!("{:06o}", mode.value()), id.to_string()),
            None => ("000000".to_string(), NO_BLOB.to_string()),
        };
        out.push(Change {
            status,
            path,
            mode,
            blob,
        });
    }
    Ok(())
}
