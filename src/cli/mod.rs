//! The flower command line: the default command (the workflow), `once`, `state`, `store`.

pub mod args;
pub mod config;
pub mod flow;
pub mod input;
pub mod model_config;
pub mod once;
pub mod render;
pub mod state;
pub mod store;

use std::path::Path;

/// A path for display: the home directory shown as `~`.
pub fn tilde(path: &Path) -> String {
    let text = path.to_string_lossy().into_owned();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let home = home.to_string_lossy().trim_end_matches('/').to_string();
        if !home.is_empty() {
            if text == home {
                return "~".into();
            }
            if let Some(rest) = text.strip_prefix(&format!("{home}/")) {
                return format!("~/{rest}");
            }
        }
    }
    text
}
