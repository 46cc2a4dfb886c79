//! The flower command line.
