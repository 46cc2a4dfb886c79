//! The Anthropic Messages API client (streaming). See issue #2.
