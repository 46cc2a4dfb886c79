//! STUB with the agreed API; replaced by branch wt-cont.
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StepResult {
    pub step: String,
    pub session_id: Option<String>,
    pub ok: bool,
    pub cost_usd: Option<f64>,
    pub num_turns: u32,
    pub text: String,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: String,
    pub attempts: u32,
    pub errors: Vec<String>,
    pub resumed: bool,
    pub retired: Vec<String>,
    pub context: u64,
}
impl StepResult {
    pub fn started(step: &str) -> Self {
        StepResult {
            step: step.into(),
            session_id: None,
            ok: false,
            cost_usd: None,
            num_turns: 0,
            text: String::new(),
            error: None,
            started_at: String::new(),
            ended_at: String::new(),
            attempts: 0,
            errors: vec![],
            resumed: false,
            retired: vec![],
            context: 0,
        }
    }
    pub fn finish(&mut self) {}
    pub fn duration_s(&self) -> f64 {
        0.0
    }
}
pub fn new_run_id() -> String {
    String::new()
}
pub fn retry_name(step: &str, n: u32) -> String {
    format!("{step}#retry{n}")
}
pub fn round_name(step: &str, n: u32) -> String {
    format!("{step}#round{n}")
}
pub fn judge_name(step: &str, n: u32) -> String {
    format!("{step}·判定#{n}")
}
#[derive(Debug, thiserror::Error)]
#[error("manifest")]
pub struct ManifestError;
#[derive(Debug, Default)]
pub struct RecordOutcome {
    pub moved_aside: Option<PathBuf>,
}
pub struct Manifest;
impl Manifest {
    pub fn new(_run_dir: &Path, _run_id: String) -> Self {
        Manifest
    }
    pub fn record(&mut self, _r: &StepResult) -> Result<RecordOutcome, ManifestError> {
        Ok(RecordOutcome::default())
    }
}
