//! TODO (issue #3)
