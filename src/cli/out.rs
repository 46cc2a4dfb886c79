//! Every line the binary prints goes through here, never through `println!`/`eprintln!`
//! (clippy.toml disallows them): those panic when the reader went away (`flower … | head`,
//! a `less` quit early, a dying `tee`), killing a run in the middle of a step.
//!
//! A write that finds its pipe closed (`EPIPE`) tells the run to stop as on SIGTERM
//! ([`flower::continuity::signals::output_closed`]: the in-flight step's row written,
//! running commands stopped, the process then dies by SIGPIPE, as a writer to a closed
//! pipe does). Any other write error (a full disk behind `>`) loses that text, not the run.

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to stdout and flushes.
pub fn to_stdout(args: fmt::Arguments<'_>) {
    write_to(&mut io::stdout().lock(), args);
}

/// Writes `args` to stderr.
pub fn to_stderr(args: fmt::Arguments<'_>) {
    write_to(&mut io::stderr().lock(), args);
}

fn write_to(w: &mut impl Write, args: fmt::Arguments<'_>) {
    if let Err(e) = w.write_fmt(args).and_then(|()| w.flush())
        && e.kind() == io::ErrorKind::BrokenPipe
    {
        flower::continuity::signals::output_closed();
    }
}

/// `println!` that never panics (see the module doc).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::to_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics (see the module doc).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::out::to_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics (see the module doc).
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::cli::out::to_stderr(format_args!($($arg)*))
    };
}

pub(crate) use {err, errln, outln};
