//! The boxed future of the object-safe async traits ([`crate::model::ModelClient`],
//! [`crate::tools::Tool`], the workflow's gates). Its own module at the bottom of the
//! layer line, so that every layer names it without importing from above.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
