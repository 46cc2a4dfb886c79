//! The directory walk shared by Glob and Grep: ripgrep's rules (the `ignore` crate).
//!
//! `.gitignore`, `.ignore` and `.git/info/exclude` are honoured, even outside a git
//! repository (a workspace need not be one); hidden files are included, because
//! agents often need `.github/` or `.env.example`, but the `.git` directory itself is
//! skipped. Symbolic links are not followed, so a walk stays inside its root.

use ignore::WalkBuilder;
use std::path::Path;

pub fn walker(root: &Path) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.hidden(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git");
    b
}
