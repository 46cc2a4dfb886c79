//! The runtime's checkpoints and rewind for Python (`Runtime.checkpoints()`,
//! `Runtime.rewind(point)`, and the Agent SDK's `Runtime.rewind_files(user_message_id)`).
//! The library decides; this converts.

use crate::convert::serialized;
use crate::errors::FlowerError;
use flower::Run;
use flower::continuity::rewind::{RewindError, Rewound};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn failed(error: RewindError) -> PyErr {
    FlowerError::new_err(flower::error::chain(&error))
}

/// Every checkpoint, oldest first (none when the runtime takes none).
pub fn list<'py>(py: Python<'py>, run: &Run) -> PyResult<Bound<'py, PyAny>> {
    let list = match run.runtime().checkpoints() {
        Some(checkpoints) => checkpoints
            .list()
            .map_err(|e| failed(RewindError::Checkpoint(e)))?,
        None => Vec::new(),
    };
    serialized(py, &list)
}

/// `{"point": <checkpoint>, "files": n, "sessions": {step: fork id or None}}`.
pub fn outcome(
    py: Python<'_>,
    result: Result<Rewound, RewindError>,
) -> PyResult<Bound<'_, PyDict>> {
    let rewound = result.map_err(failed)?;
    let dict = PyDict::new(py);
    dict.set_item("point", serialized(py, &rewound.point)?)?;
    dict.set_item("files", rewound.files)?;
    let sessions = PyDict::new(py);
    for (step, fork) in &rewound.sessions {
        sessions.set_item(step, fork)?;
    }
    dict.set_item("sessions", sessions)?;
    Ok(dict)
}

/// A point as `flower rewind` takes it: a checkpoint's number or a step attempt's name.
pub fn point_text(point: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(n) = point.extract::<u32>() {
        return Ok(n.to_string());
    }
    point.extract::<String>().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(
            "a point is a checkpoint's number (int) or a step attempt's name (str)",
        )
    })
}
