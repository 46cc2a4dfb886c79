//! Support shared by the integration tests and the benches.
//!
//! Use it as `mod support;` from a file in `tests/`, or from a bench with
//! `#[path = "../tests/support/mod.rs"] mod support;`. Each test binary uses a different
//! part of it, hence the blanket `allow`s.
#![allow(dead_code, unused_imports)]

pub mod bin;
pub mod cdp;
pub mod fake;
pub mod netns;
pub mod pipeline;
pub mod postgres;
pub mod roles;
pub mod skip;
pub mod snapshot;
pub mod workspace;

pub use bin::Flower;
pub use fake::{
    Block, CacheUsage, CountTokens, FAKE_API_KEY, FakeServer, Gate, Recorded, Reply, content_text,
};
pub use workspace::{ToolEnv, tool_env};

/// A tool call's input, as the model would send `value`.
pub fn tool_input(value: &serde_json::Value) -> flower::transcript::ToolInput {
    flower::transcript::ToolInput::of(value).unwrap()
}

/// A JSON object's keys in its order (as written: serde_json keeps the order), for the
/// tests that hold a document to its fields.
pub fn object_keys(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// Request messages given as JSON (`{"role": …, "content": …}`), as a history.
pub fn history(values: Vec<serde_json::Value>) -> flower::model::History {
    values
        .iter()
        .map(|v| serde_json::from_str(&v.to_string()).expect("a request message"))
        .collect()
}

/// A history's messages as JSON.
pub fn history_json(history: &flower::model::History) -> Vec<serde_json::Value> {
    serde_json::from_str(&serde_json::to_string(&history.to_messages()).unwrap()).unwrap()
}

/// JSON objects as the typed entries a store appends (every field kept as written).
pub fn typed(values: &[serde_json::Value]) -> Vec<flower::transcript::Entry> {
    values.iter().map(typed_one).collect()
}

/// [`typed`] of one object.
pub fn typed_one(value: &serde_json::Value) -> flower::transcript::Entry {
    serde::Deserialize::deserialize(value).expect("an entry is a JSON object")
}

/// A store's reads as JSON objects, for tests that compare them with the JSON they
/// appended (deep equality, as the SDK's protocol states it).
pub trait LoadJson {
    fn load_json(
        &self,
        key: &flower::stores::SessionKey,
    ) -> Result<Option<Vec<serde_json::Value>>, flower::stores::StoreError>;
    fn load_pruned_json(
        &self,
        key: &flower::stores::SessionKey,
        options: &flower::stores::PruneOptions,
    ) -> Result<Option<Vec<serde_json::Value>>, flower::stores::StoreError>;
    fn last_usage_json(
        &self,
        key: &flower::stores::SessionKey,
    ) -> Result<Option<serde_json::Value>, flower::stores::StoreError>;
}

impl<S: flower::stores::SessionStore + ?Sized> LoadJson for S {
    fn load_json(
        &self,
        key: &flower::stores::SessionKey,
    ) -> Result<Option<Vec<serde_json::Value>>, flower::stores::StoreError> {
        Ok(self.load(key)?.map(|entries| untyped(&entries)))
    }
    fn load_pruned_json(
        &self,
        key: &flower::stores::SessionKey,
        options: &flower::stores::PruneOptions,
    ) -> Result<Option<Vec<serde_json::Value>>, flower::stores::StoreError> {
        Ok(self
            .load_pruned(key, options)?
            .map(|entries| untyped(&entries)))
    }
    fn last_usage_json(
        &self,
        key: &flower::stores::SessionKey,
    ) -> Result<Option<serde_json::Value>, flower::stores::StoreError> {
        Ok(self
            .last_assistant_usage(key)?
            .map(|usage| serde_json::to_value(usage).expect("usage is JSON")))
    }
}

/// [`LoadJson::load_json`] of what a pruning store wraps (its `load_raw`).
pub fn load_raw_json(
    store: &flower::stores::PruningSessionStore,
    key: &flower::stores::SessionKey,
) -> Result<Option<Vec<serde_json::Value>>, flower::stores::StoreError> {
    store.inner().load_json(key)
}

/// [`flower::stores::prune::prune`] of JSON objects, as JSON objects.
pub fn prune_json(
    entries: Vec<serde_json::Value>,
    opts: &flower::stores::PruneOptions,
) -> Vec<serde_json::Value> {
    untyped(&flower::stores::prune::prune(typed(&entries), opts))
}

/// Whether a JSON object is a result pruning synthesized
/// ([`flower::stores::prune::is_synthesized_entry`]).
pub fn is_synthesized_json(entry: &serde_json::Value) -> bool {
    serde::Deserialize::deserialize(entry)
        .is_ok_and(|e: flower::transcript::Entry| flower::stores::prune::is_synthesized_entry(&e))
}

/// Typed entries as the JSON objects they are (to compare with what was appended).
pub fn untyped(entries: &[flower::transcript::Entry]) -> Vec<serde_json::Value> {
    entries
        .iter()
        .map(|e| serde_json::from_str(&e.to_json().expect("serializes")).expect("JSON"))
        .collect()
}

/// The process group of a command a test's Bash call runs in `dir`, found from outside:
/// a process whose working directory is `dir` and whose name is `comm`, and its group.
/// `echo $$` inside the sandbox says 1 (the command is its PID namespace's init), which
/// must never reach `kill(-pid, …)`. Waits (bounded) for the process to appear.
pub fn command_group(dir: &std::path::Path, comm: &str) -> i32 {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let same_dir = std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == dir);
            let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if same_dir && name.trim() == comm {
                // SAFETY: getpgid only reads.
                let group = unsafe { libc::getpgid(pid) };
                if group > 1 {
                    return group;
                }
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no `{comm}` process runs in {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
