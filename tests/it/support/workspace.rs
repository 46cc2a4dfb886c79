//! A [`ToolContext`] over a fresh workspace (`ws/`) and run directory (`runs/`) in a
//! temporary directory, for driving tools through the `Tool` trait.

use flower::tools::ToolContext;
use std::path::PathBuf;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

pub struct ToolEnv {
    _tmp: TempDir,
    /// The (canonical) temporary directory holding `ws/` and `runs/`.
    pub root: PathBuf,
    pub ctx: ToolContext,
}

pub fn tool_env() -> ToolEnv {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    let run = root.join("runs");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    ToolEnv {
        _tmp: tmp,
        root,
        ctx: ToolContext {
            workspace: ws,
            run_dir: run,
            cancel: CancellationToken::new(),
            processes: flower::tools::ProcessGroups::new(),
            sandbox: Default::default(),
            env: Default::default(),
        },
    }
}
