//! The flower command line.

pub mod store;
