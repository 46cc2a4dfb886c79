//! STUB with the agreed API; replaced by branch wt-cont.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LineageFile {
    pub workspace: String,
    pub woke: u64,
    pub steps: BTreeMap<String, String>,
}
#[derive(Debug)]
pub struct Lineage {
    path: PathBuf,
    woke: u64,
    steps: BTreeMap<String, String>,
}
pub fn is_plain_step_name(name: &str) -> bool {
    !name.contains('#')
}
impl Lineage {
    pub fn load(run_dir: &Path, _workspace: &Path, _is_alive: impl Fn(&str) -> bool) -> Lineage {
        Lineage {
            path: run_dir.join("lineage.json"),
            woke: 0,
            steps: BTreeMap::new(),
        }
    }
    pub fn read(_run_dir: &Path, _workspace: &Path) -> Option<LineageFile> {
        None
    }
    pub fn woke(&self) -> u64 {
        self.woke
    }
    pub fn steps(&self) -> &BTreeMap<String, String> {
        &self.steps
    }
    pub fn session(&self, step: &str) -> Option<&str> {
        self.steps.get(step).map(String::as_str)
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn remember(&mut self, step: &str, session_id: &str) {
        self.steps.insert(step.into(), session_id.into());
    }
    pub fn wake(&mut self) -> u64 {
        self.woke += 1;
        self.woke
    }
    pub fn archive(&mut self, _into: &Path, _extra: &[PathBuf]) -> std::io::Result<()> {
        Ok(())
    }
}
