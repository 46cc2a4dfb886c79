//! The frozen notes of flower's pipeline (DESIGN.md §1): `notes/需求.md` (the brief)
//! and `notes/目标.md` (the checklist the judge reads).

use std::path::{Path, PathBuf};

pub const NOTES_DIR: &str = "notes";
pub const BRIEF_FILE: &str = "需求.md";
pub const GOAL_FILE: &str = "目标.md";
/// The brief's four sections; "complete" means each exists and is non-empty.
pub const BRIEF_SECTIONS: [&str; 4] = ["目标", "范围", "约束", "验收"];
/// Where a wake-time utterance is appended (not one of the four).
pub const WAKE_SECTION: &str = "唤醒时追加";

pub fn brief_path(workspace: &Path) -> PathBuf {
    workspace.join(NOTES_DIR).join(BRIEF_FILE)
}

pub fn goal_path(workspace: &Path) -> PathBuf {
    workspace.join(NOTES_DIR).join(GOAL_FILE)
}

/// Reads a note; `None` when it is missing or unreadable.
pub fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The body of each `## ` section, by heading, in order.
pub fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            out.push((heading.trim().to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Whether a brief has all four sections, each non-empty.
pub fn brief_complete(text: &str) -> bool {
    let sections = sections(text);
    BRIEF_SECTIONS.iter().all(|wanted| {
        sections
            .iter()
            .any(|(heading, body)| heading == wanted && !body.trim().is_empty())
    })
}

/// The number of checklist items (`- [ ] …` or `- [x] …`) in a goal file.
pub fn count_checks(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter(|line| {
            ["- [ ]", "- [x]", "- [X]", "* [ ]", "* [x]"]
                .iter()
                .any(|prefix| line.starts_with(prefix))
        })
        .count()
}

/// Appends what the user said on waking to the brief, under `## 唤醒时追加`, with the time.
pub fn append_wake_note(workspace: &Path, utterance: &str) -> std::io::Result<()> {
    let path = brief_path(workspace);
    let mut text = read(&path).unwrap_or_default();
    if !sections(&text).iter().any(|(h, _)| h == WAKE_SECTION) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("\n## {WAKE_SECTION}\n"));
    } else if !text.ends_with('\n') {
        text.push('\n');
    }
    let now = chrono::Local::now().format("%Y-%m-%d %H:%M");
    text.push_str(&format!("\n- {now}:{}\n", utterance.trim()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    crate::atomic::write(&path, text.as_bytes())
}
