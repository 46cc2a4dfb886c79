//! Server-sent events parsing.
