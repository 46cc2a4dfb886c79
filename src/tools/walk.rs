//! The directory walk shared by Glob and Grep: ripgrep's rules (the `ignore` crate).
//!
//! `.gitignore`, `.ignore` and `.git/info/exclude` are honoured, even outside a git
//! repository (a workspace need not be one); hidden files are included, because
//! agents often need `.github/` or `.env.example`, but the `.git` directory itself is
//! skipped. Symbolic links are not followed, so a walk stays inside its root.

use ignore::WalkBuilder;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub fn walker(root: &Path) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.hidden(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git");
    b
}

/// The `cap` most recently modified of many paths, in bounded memory (a walk of a
/// huge tree keeps `cap` entries, not one per file), and how many there were in all.
pub struct Newest {
    cap: usize,
    total: usize,
    /// A min-heap on "goodness": newest first, then path order; the worst kept entry
    /// is on top, ready to be evicted.
    heap: BinaryHeap<Reverse<(SystemTime, Reverse<PathBuf>)>>,
}

impl Newest {
    pub fn new(cap: usize) -> Self {
        Newest {
            cap,
            total: 0,
            heap: BinaryHeap::new(),
        }
    }

    pub fn push(&mut self, mtime: SystemTime, path: PathBuf) {
        self.total += 1;
        self.heap.push(Reverse((mtime, Reverse(path))));
        if self.heap.len() > self.cap {
            self.heap.pop();
        }
    }

    /// How many paths were pushed.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The kept paths, newest first (ties in path order).
    pub fn into_sorted(self) -> Vec<PathBuf> {
        // `into_sorted_vec` is ascending in `Reverse(goodness)`: best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse((_, Reverse(p)))| p)
            .collect()
    }
}
