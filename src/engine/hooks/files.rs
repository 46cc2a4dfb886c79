//! The files a configured hook runs: protected from agents' writes, because a
//! `PreToolUse` hook's `allow` answer skips `ask` rules, and a hook script an agent
//! could rewrite would answer `allow` to whatever it liked.
//!
//! A hook's command is read twice, independently: with the bash parser (every word of
//! every simple command, `bash -c` scripts included) and as plain tokens (split at
//! blanks, quotes and shell operators), so a word the parser only knows at run time
//! (`"$(dirname "$0")/x.sh"`) still counts where it is spelled out. After
//! `$CLAUDE_PROJECT_DIR` is replaced by the workspace, a word is a path from the
//! workspace (where hooks run). Protected, inside a root the agents write: every
//! existing file a word names, and a missing one spelled as a path that the hook would
//! run (a program, an interpreter's script), which an agent must not create either.
//! Not protected: directories (`.` or `src` would freeze the workspace), and the
//! target of a redirection (a hook's log stays writable). Not seen: what a script
//! reads itself (a module it imports, a file it sources); `docs/sandbox.md` says so.

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
        for (word, runs) in words(&text) {
            // `--config=x` names `x` too.
            let candidates = [Some(word.as_str()), word.split_once('=').map(|(_, v)| v)];
            for w in candidates.into_iter().flatten().filter(|w| !w.is_empty()) {
                let path = paths::lexical(workspace, Path::new(w));
                let inside = roots.iter().any(|r| path.starts_with(r) && &path != r);
                let file = match path.symlink_metadata() {
                    Ok(m) => !path.is_dir() && !m.is_dir(),
                    // Missing: only a program the hook would run, spelled as a path.
                    Err(_) => runs && w.contains('/'),
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

/// Programs whose first operand is a script they run.
const INTERPRETERS: [&str; 16] = [
    "sh", "bash", "zsh", "dash", "ksh", "fish", "python", "node", "deno", "bun", "ruby", "perl",
    "php", "lua", "Rscript", "pwsh",
];

/// The script an interpreter runs: its first operand, unless an option gives the
/// code itself (`bash -c`, `-lc`, `node -e`, `python -m`), which the parser reads.
fn script_operand(args: &[Option<String>]) -> Option<String> {
    for arg in args {
        let arg = arg.as_deref()?;
        if !arg.starts_with('-') {
            return Some(arg.to_string());
        }
        let code = ["-e", "-m", "--eval", "-Command", "-r"].contains(&arg)
            || (!arg.starts_with("--") && arg.ends_with('c'));
        if code {
            return None;
        }
    }
    None
}

/// The words of `text`, each with whether it is run as code (a program, or an
/// interpreter's script): the parser's words of every simple command (redirection
/// targets are not words), and the plain tokens, except those after a `>` (a file the
/// hook writes, such as its log, must stay writable).
fn words(text: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    if let Ok(view) = bash_rules::deny_view(text) {
        for &(index, start) in &view.starts {
            let words = &view.commands[index][start..];
            let Some(Some(program)) = words.first() else {
                continue;
            };
            out.push((program.clone(), true));
            let name = program.rsplit('/').next().unwrap_or(program);
            if INTERPRETERS.iter().any(|i| name.starts_with(i)) {
                out.extend(script_operand(&words[1..]).map(|s| (s, true)));
            }
        }
        out.extend(
            view.commands
                .into_iter()
                .flatten()
                .flatten()
                .map(|w| (w, false)),
        );
    }
    let mut after_redirect = false;
    for token in text.split_inclusive(|c: char| c.is_whitespace() || "'\"`;&|<>()$".contains(c)) {
        let redirect = token.ends_with('>');
        let word =
            token.trim_end_matches(|c: char| c.is_whitespace() || "'\"`;&|<>()$".contains(c));
        if !word.is_empty() {
            if !after_redirect {
                out.push((word.to_string(), false));
            }
            after_redirect = false;
        }
        after_redirect |= redirect;
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
            {"type": "command", "command": "ls . src $(cat scripts) > \"$CLAUDE_PROJECT_DIR/lib.sh\""},
            {"type": "command", "command": "tee out/log.txt >> out/other.log; python3 -u tools/new.py"},
        ]}]});
        let hooks = serde_json::from_value(hooks).unwrap();
        set.add_from(&hooks, Path::new("s.json")).unwrap();
        let got = named_files(&set, std::slice::from_ref(&ws));
        let want: Vec<PathBuf> = [
            "guard.py",
            "later/new.sh",
            "lib.sh",
            "scripts/check.sh",
            "tools/new.py",
        ]
        .iter()
        .map(|f| ws.join(f))
        .collect();
        assert_eq!(got, want);
    }
}
