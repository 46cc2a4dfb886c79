//! The arguments of `AgentSpec` and `Workflow`, checked when they are constructed: a
//! `TypeError` or `ValueError` that names the argument and the value, in a
//! programmer's terms, instead of a conversion error or a failure once the run began.

use crate::PyStep;
use flower::engine::permissions::Permissions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::path::Path;

/// A list of str (`None`: empty). A str alone is refused: Python would take it as its
/// characters.
pub fn strings(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_str()?;
        return Err(PyTypeError::new_err(format!(
            "{name} must be a list of str, not a str: write {name}=[{text:?}]"
        )));
    }
    let items = value.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a list of str, not {}",
            type_name(value)
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        let text = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{name}[{i}] must be a str, not {}: {}",
                type_name(&item),
                repr(&item)
            ))
        })?;
        out.push(text.to_str()?.to_owned());
    }
    Ok(out)
}

/// Each rule parses as a permission rule. A `~/` rule is parsed against a stand-in
/// home: the real one is the settings' when the run opens.
pub fn rules(name: &str, rules: &[String]) -> PyResult<()> {
    for (i, rule) in rules.iter().enumerate() {
        if let Err(e) =
            Permissions::with_home(std::slice::from_ref(rule), &[], Some(Path::new("/")))
        {
            return Err(PyValueError::new_err(format!(
                "{name}[{i}] = {rule:?} is not a permission rule such as \"Read\" or \"Bash(git status)\" (flower says: {})",
                e.why
            )));
        }
    }
    Ok(())
}

/// A turn limit: `None`, or an int of at least 1.
pub fn max_turns(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u32>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(value) => count("max_turns", value, 1, " (or None for no limit)").map(Some),
    }
}

/// An int of at least `min` that fits a `u32` (`also`: what else the argument may be,
/// for the message; not empty when it may be None).
pub fn count(name: &str, value: &Bound<'_, PyAny>, min: u32, also: &str) -> PyResult<u32> {
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !value.is_instance_of::<pyo3::types::PyInt>()
    {
        let or_none = if also.is_empty() { "" } else { " or None" };
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int{or_none}, not {}: {}",
            type_name(value),
            repr(value)
        )));
    }
    let out_of_range = || {
        PyValueError::new_err(format!(
            "{name} must be at least {min}{also}, got {}",
            repr(value)
        ))
    };
    let n: i128 = value.extract().map_err(|_| out_of_range())?;
    match u32::try_from(n) {
        Ok(n) if n >= min => Ok(n),
        _ => Err(out_of_range()),
    }
}

/// A non-empty list of `Step`.
pub fn steps(value: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyStep>>> {
    if value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "Workflow(steps) must be a list of Step, not a str",
        ));
    }
    let items = value.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "Workflow(steps) must be a list of Step, not {}",
            type_name(value)
        ))
    })?;
    let mut steps = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        let step = item.cast::<PyStep>().map_err(|_| {
            PyTypeError::new_err(format!(
                "Workflow(steps): steps[{i}] must be a Step, not {}: {}",
                type_name(&item),
                repr(&item)
            ))
        })?;
        steps.push(step.clone().unbind());
    }
    if steps.is_empty() {
        return Err(PyValueError::new_err(
            "Workflow(steps) needs at least one Step; it got none",
        ));
    }
    Ok(steps)
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `Runtime(setting_sources=…)`: the Agent SDK's names, each at most once.
pub fn setting_sources(names: &[String]) -> PyResult<Vec<flower::settings::files::Scope>> {
    use flower::settings::files::Scope;
    let mut sources = Vec::new();
    for name in names {
        let scope = match name.as_str() {
            "user" => Scope::User,
            "project" => Scope::Project,
            "local" => Scope::Local,
            other => {
                return Err(PyValueError::new_err(format!(
                    "setting_sources: {other:?} is not a source (\"user\", \"project\" or \"local\")"
                )));
            }
        };
        if !sources.contains(&scope) {
            sources.push(scope);
        }
    }
    Ok(sources)
}
