//! The files a configured hook runs: protected from agents' writes, because a
//! `PreToolUse` hook's `allow` answer skips `ask` rules, and a hook script an agent
//! could rewrite would answer `allow` to whatever it liked.
//!
//! A hook's command is read twice, independently: with the bash parser (every word of
//! every simple command, `bash -c` scripts included) and as plain tokens (split at
//! blanks, quotes and shell operators), so a word the parser only knows at run time
//! (`"$(dirname "$0")/x.sh"`) still counts where it is spelled out. Every word that
//! names a file inside a root the agents write (after `$CLAUDE_PROJECT_DIR` is
//! replaced by the workspace; relative words from the workspace, where hooks run) is
//! protected: an existing file, or a missing one spelled as a path (with a `/`), which
//! an agent must not create either. Directories are not: protecting `.` or `src`
//! would freeze the workspace. Not seen: what a script reads itself (a module it
//! imports, a file it sources); `docs/sandbox.md` says so.

use super::HookSet;
use crate::engine::bash_rules;
use crate::tools::paths;
use std::path::{Path, PathBuf};

/// The files the commands of `set` name inside `roots` (canonical; the first is the
/// workspace), absolute and lexical, sorted.
pub fn named_files(set: &HookSet, roots: &[PathBuf]) -> Vec<PathBuf> {
    let Some(workspace) = roots.first() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for command in set.commands() {
        let text = with_project_dir(&command.command, workspace);
        for word in words(&text) {
            // `--config=x` names `x` too.
            let candidates = [Some(word.as_str()), word.split_once('=').map(|(_, v)| v)];
            for w in candidates.into_iter().flatten().filter(|w| !w.is_empty()) {
                let path = paths::lexical(workspace, Path::new(w));
                let inside = roots.iter().any(|r| path.starts_with(r) && &path != r);
                let spelled_as_path = w.contains('/');
                let file = match path.symlink_metadata() {
                    Ok(m) => !path.is_dir() && !m.is_dir(),
                    Err(_) => spelled_as_path,
                };
                if inside && file && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
    }
    out.sort();
    out
}

/// `$CLAUDE_PROJECT_DIR` and `${CLAUDE_PROJECT_DIR}` replaced by the workspace, as the
/// hook's shell will.
fn with_project_dir(command: &str, workspace: &Path) -> String {
    let ws = workspace.to_string_lossy();
    command
        .replace("${CLAUDE_PROJECT_DIR}", &ws)
        .replace("$CLAUDE_PROJECT_DIR", &ws)
}

/// The parser's words (those known before the command runs) and the plain tokens.
fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Ok(view) = bash_rules::deny_view(text) {
        out.extend(view.commands.into_iter().flatten().flatten());
    }
    let tokens = text
        .split(|c: char| c.is_whitespace() || "'\"`;&|<>()$".contains(c))
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    for t in tokens {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_that_name_files_inside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("scripts")).unwrap();
        for f in ["scripts/check.sh", "guard.py", "lib.sh"] {
            std::fs::write(ws.join(f), "").unwrap();
        }
        let mut set = HookSet::default();
        let hooks = json!({"PreToolUse": [{"matcher": "", "hooks": [
            {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/scripts/check.sh --x"},
            {"type": "command", "command": "python3 guard.py --rc=lib.sh && echo ok"},
            {"type": "command", "command": "bash -c 'sh ./later/new.sh' ; cat /etc/passwd"},
            {"type": "command", "command": "ls . src $(cat scripts)"},
        ]}]});
        set.add_from(&hooks, Path::new("s.json")).unwrap();
        let got = named_files(&set, std::slice::from_ref(&ws));
        let want: Vec<PathBuf> = ["guard.py", "later/new.sh", "lib.sh", "scripts/check.sh"]
            .iter()
            .map(|f| ws.join(f))
            .collect();
        assert_eq!(got, want);
    }
}
