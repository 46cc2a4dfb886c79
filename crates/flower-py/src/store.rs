//! flower's session stores as a Claude Agent SDK `SessionStore`: async `append`,
//! `load`, `list_sessions`, `list_session_summaries`, `delete`, `list_subkeys`. Each
//! call runs on a blocking thread of the extension's tokio runtime; the event loop and
//! the GIL are free meanwhile.

use crate::convert::{from_py, serialized};
use crate::errors::{FlowerError, store_error};
use flower::stores::prune::PruneOptions;
use flower::stores::{
    PostgresStore, PostgresUrl, PruningSessionStore, SessionKey, SessionStore, SqliteSessionStore,
};
use flower::transcript::Entry;
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// What every store class shares: the Rust store and the SDK's methods.
#[pyclass(subclass, frozen, module = "flower", name = "SessionStore")]
pub struct PySessionStore {
    pub store: Arc<dyn SessionStore>,
}

/// Runs `work` on a blocking thread and hands its result to Python as `make` builds it.
fn blocking<'py, T, W, M>(py: Python<'py>, work: W, make: M) -> PyResult<Bound<'py, PyAny>>
where
    T: Send + 'static,
    W: FnOnce() -> Result<T, flower::stores::StoreError> + Send + 'static,
    M: for<'a> FnOnce(Python<'a>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let value = tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| FlowerError::new_err(format!("存储调用异常结束({e})")))?
            .map_err(store_error)?;
        Python::attach(|py| make(py, value))
    })
}

/// The SDK's `SessionKey`: `{"project_key", "session_id", "subpath"?}`.
fn key_of(key: &Bound<'_, PyAny>) -> PyResult<SessionKey> {
    let dict = key
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("a session key is a dict"))?;
    let field = |name: &str| -> PyResult<Option<String>> {
        match dict.get_item(name)? {
            Some(v) if !v.is_none() => Ok(Some(v.extract::<String>()?)),
            _ => Ok(None),
        }
    };
    let project_key = field("project_key")?.ok_or_else(|| PyKeyError::new_err("project_key"))?;
    let session_id = field("session_id")?.ok_or_else(|| PyKeyError::new_err("session_id"))?;
    let key = SessionKey {
        project_key,
        session_id,
        subpath: field("subpath")?.filter(|s| !s.is_empty()),
    };
    key.validate().map_err(store_error)?;
    Ok(key)
}

/// The SDK's entries (JSON objects) as the typed entries a store appends: each field
/// kept as written. Anything but an object is refused, as the protocol says.
fn typed(entries: &[Value]) -> Result<Vec<Entry>, flower::stores::StoreError> {
    use serde::Deserialize;
    entries
        .iter()
        .enumerate()
        .map(|(index, value)| {
            if !value.is_object() {
                return Err(flower::stores::StoreError::NotAnObject { index });
            }
            Entry::deserialize(value)
                .map_err(|source| flower::stores::StoreError::Encode { index, source })
        })
        .collect()
}

fn base(store: Arc<dyn SessionStore>) -> PyClassInitializer<PySessionStore> {
    PyClassInitializer::from(PySessionStore { store })
}

/// A store class over the store `open` opens, opened without the GIL (a database may
/// take its time to answer).
fn opened<S, C>(
    py: Python<'_>,
    open: impl FnOnce() -> Result<S, flower::stores::StoreError> + Send,
    class: C,
) -> PyResult<PyClassInitializer<C>>
where
    S: SessionStore + Send + 'static,
    C: pyo3::PyClass<BaseType = PySessionStore>,
{
    let store = py.detach(open).map_err(store_error)?;
    Ok(base(Arc::new(store)).add_subclass(class))
}

fn none(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py.None())
}

#[pymethods]
impl PySessionStore {
    /// Appends a batch of entries (JSON objects) atomically, in call order.
    fn append<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        entries: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = key_of(key)?;
        let entries: Vec<Value> = match from_py(entries)? {
            Value::Array(items) => items,
            _ => return Err(PyTypeError::new_err("entries is a list")),
        };
        let store = self.store.clone();
        blocking(
            py,
            move || store.append(&key, &typed(&entries)?),
            |py, ()| none(py),
        )
    }

    /// The entries of a key, in append order; `None` for a key never written. Through
    /// a `PruningSessionStore`, what a resumed session is fed.
    fn load<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = key_of(key)?;
        let store = self.store.clone();
        blocking(
            py,
            move || store.load(&key),
            |py, entries| match entries {
                None => none(py),
                // Each entry as the JSON object it is, fields in their order.
                Some(entries) => Ok(serialized(py, &entries)?.unbind()),
            },
        )
    }

    /// `[{"session_id", "mtime"}]` of a project's main sessions (mtime: epoch ms).
    fn list_sessions<'py>(
        &self,
        py: Python<'py>,
        project_key: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.clone();
        blocking(
            py,
            move || store.list_sessions(&project_key),
            |py, sessions| Ok(serialized(py, &sessions)?.unbind()),
        )
    }

    /// `[{"session_id", "mtime", "data"}]`: the SDK's incrementally kept summaries.
    fn list_session_summaries<'py>(
        &self,
        py: Python<'py>,
        project_key: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.clone();
        blocking(
            py,
            move || store.list_session_summaries(&project_key),
            |py, summaries| Ok(serialized(py, &summaries)?.unbind()),
        )
    }

    /// Deletes a key; a main key takes its subkeys with it.
    fn delete<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = key_of(key)?;
        let store = self.store.clone();
        blocking(py, move || store.delete(&key), |py, ()| none(py))
    }

    /// The subpaths stored under a session.
    fn list_subkeys<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = key_of(key)?.main_key();
        let store = self.store.clone();
        blocking(
            py,
            move || store.list_subkeys(&key),
            |py, subkeys| Ok(PyList::new(py, subkeys)?.into_any().unbind()),
        )
    }

    /// Whether a main transcript with this session id exists, in any project
    /// (synchronous: one indexed lookup).
    fn has_session(&self, py: Python<'_>, session_id: String) -> PyResult<bool> {
        let store = self.store.clone();
        py.detach(move || store.has_session(&session_id))
            .map_err(store_error)
    }
}

/// Transcripts in one SQLite file (a run's `runs/sessions.db`), created if missing.
#[pyclass(extends = PySessionStore, frozen, module = "flower", name = "SqliteSessionStore")]
pub struct PySqliteStore;

#[pymethods]
impl PySqliteStore {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<PyClassInitializer<Self>> {
        opened(py, move || SqliteSessionStore::open(&path), PySqliteStore)
    }
}

/// Transcripts in a PostgreSQL database (`postgres://user:pass@host/db`), shared by
/// hosts.
#[pyclass(extends = PySessionStore, frozen, module = "flower", name = "PostgresSessionStore")]
pub struct PyPostgresStore;

#[pymethods]
impl PyPostgresStore {
    #[new]
    fn new(py: Python<'_>, url: String) -> PyResult<PyClassInitializer<Self>> {
        let url: PostgresUrl = url.parse().map_err(|e: flower::stores::UrlError| {
            crate::errors::ConfigError::new_err(e.to_string())
        })?;
        opened(py, move || PostgresStore::open(&url), PyPostgresStore)
    }
}

/// Another store, with `load` feeding back what a resumed session should see: synthetic
/// API errors dropped, only the newest `keep_denials` denied calls, interrupted tool
/// results neutralised, re-run snapshot commands marked stale (`ephemeral`), and with
/// `trim` old large tool results moved to files in `trim_dir`. What is stored is never
/// changed.
#[pyclass(extends = PySessionStore, frozen, module = "flower", name = "PruningSessionStore")]
pub struct PyPruningStore;

#[pymethods]
impl PyPruningStore {
    #[new]
    #[pyo3(signature = (inner, *, trim = false, ephemeral = true, keep_denials = 1, trim_dir = None))]
    fn new(
        inner: PyRef<'_, PySessionStore>,
        trim: bool,
        ephemeral: bool,
        keep_denials: usize,
        trim_dir: Option<PathBuf>,
    ) -> PyClassInitializer<Self> {
        let mut options =
            PruneOptions::new(trim_dir.unwrap_or_else(|| PathBuf::from("runs/trimmed")));
        options.trim = trim;
        options.ephemeral = ephemeral;
        options.keep_denials = keep_denials;
        let store = PruningSessionStore::new(inner.store.clone(), options);
        base(Arc::new(store)).add_subclass(PyPruningStore)
    }
}
