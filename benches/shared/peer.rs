//! Claude Code beside flower, on one fake API (#46 item 4): the `claude` binary bundled
//! in the `claude-agent-sdk` wheel (`.ci/run` installs it into `target/py-venv`), run
//! with `ANTHROPIC_BASE_URL` pointing at the fake on loopback, the same session as
//! flower's: N `Read` calls of one small file, then a final text.

use crate::support::{FakeServer, Recorded, Reply};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Claude Code is: `FLOWER_BENCH_CLAUDE`, else the wheel's bundled binary in
/// `target/py-venv`; why not when it is absent.
pub fn claude_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("FLOWER_BENCH_CLAUDE") {
        return Ok(PathBuf::from(path));
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/py-venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| {
                d.path()
                    .join("site-packages/claude_agent_sdk/_bundled/claude")
            })
            .find(|p| p.is_file())
    });
    found.ok_or_else(|| {
        format!(
            "no Claude Code: no {}/python*/site-packages/claude_agent_sdk/_bundled/claude (`target/py-venv/bin/pip install claude-agent-sdk`, as .ci/run does) and no FLOWER_BENCH_CLAUDE",
            lib.display()
        )
    })
}

/// Claude Code's version line (`2.1.337 (Claude Code)`).
pub fn claude_version(claude: &Path) -> String {
    Command::new(claude)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Answers a session of `tool_turns` Read calls of `file`, then a final text, for
/// either harness: a request offering `Read` gets a call until it carries
/// `tool_turns` results; anything else (Claude Code's side requests) a short text.
pub fn read_session(file: PathBuf, tool_turns: usize) -> FakeServer {
    FakeServer::with_handler(move |req: &Recorded, _| {
        let offers_read = req.body["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == "Read"));
        let results = req
            .messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .count();
        if offers_read && results < tool_turns {
            Reply::tool_use("Read", json!({"file_path": file.to_string_lossy()})).usage(2000, 30)
        } else {
            Reply::text("done").usage(2000, 2)
        }
    })
}

/// Claude Code in print mode in `dir` with its own `home`, against `server`, allowed
/// `Read`.
pub fn claude_command(
    claude: &Path,
    server: &FakeServer,
    home: &Path,
    dir: &Path,
    prompt: &str,
) -> Command {
    let mut cmd = Command::new(claude);
    cmd.env_clear();
    for var in ["PATH", "TMPDIR", "LANG", "USER"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    server.configure(&mut cmd);
    cmd.env("HOME", home)
        // Nothing but the model's API: no updater, telemetry or error reports.
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .current_dir(dir)
        .args([
            "-p",
            prompt,
            "--allowedTools",
            "Read",
            "--max-turns",
            "100000",
            "--output-format",
            "json",
        ])
        .stdin(Stdio::null());
    cmd
}

/// [`claude_command`], run; fails the bench when it does not finish.
pub fn run_claude(claude: &Path, server: &FakeServer, home: &Path, dir: &Path, prompt: &str) {
    let out = claude_command(claude, server, home, dir, prompt)
        .output()
        .expect("run claude");
    assert!(
        out.status.success(),
        "claude: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file under `root` with its bytes, largest first (what a harness left).
pub fn tree_files(root: &Path) -> Vec<(String, u64)> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                let rel = entry.path().strip_prefix(root).map_or_else(
                    |_| entry.path().display().to_string(),
                    |p| p.display().to_string(),
                );
                files.push((rel, meta.len()));
            }
        }
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    files
}
