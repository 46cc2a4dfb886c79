//! Release builds of the `flower` binary lay out first, at the start of `.text`, the
//! functions a short run executes (`link/hot-symbols.txt`, made by
//! `link/hot-symbols.sh`). The kernel maps a binary's code 64 KiB around each page
//! a process touches, and a one-turn `flower once` touches functions spread over
//! three quarters of the 16 MB of code: the peak RSS was mostly code pages
//! (docs/performance.md, "Peak RSS of one turn"). Behaviour is unchanged; a name
//! the list misses (a new function, another compiler version) is simply placed
//! where it was before.

#![allow(clippy::disallowed_macros)] // cargo reads its directives from stdout

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/hot-symbols.txt");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // Only where the linker is rustc's own LLD (the default of x86_64 Linux since
    // Rust 1.90): other linkers do not know `--symbol-ordering-file`.
    let lld_by_default = var("TARGET") == "x86_64-unknown-linux-gnu"
        && var("RUSTC_LINKER").is_empty()
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("link")
        && rustc_minor().is_some_and(|minor| minor >= 90);
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/hot-symbols.txt");
    if var("PROFILE") == "release" && lld_by_default && list.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=flower=-Wl,--symbol-ordering-file={}",
            list.display()
        );
        println!("cargo:rustc-link-arg-bin=flower=-Wl,--no-warn-symbol-ordering");
    }
}

/// The minor version of the compiler cargo builds with (`rustc 1.95.0 (…)` → 95).
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    version.split('.').nth(1)?.parse().ok()
}
