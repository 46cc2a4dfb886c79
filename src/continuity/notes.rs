//! The frozen notes of flower's pipeline (DESIGN.md §1): `notes/需求.md` (the brief)
//! and `notes/目标.md` (the checklist the judge reads).

use crate::run_dir::RunDir;
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
    append_wake_line(workspace, &wake_line(utterance))
}

/// The brief's line for an utterance: `- <time>:<what was said>`.
pub fn wake_line(utterance: &str) -> String {
    let now = chrono::Local::now().format("%Y-%m-%d %H:%M");
    format!("- {now}:{}", utterance.trim())
}

/// Appends `line` to the brief's `## 唤醒时追加` section (made when missing).
fn append_wake_line(workspace: &Path, line: &str) -> std::io::Result<()> {
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
    text.push_str(&format!("\n{line}\n"));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    crate::atomic::write(&path, text.as_bytes())
}

/// The largest `said.json` read: what a person says fits many times over; a bigger
/// file was not written by flower.
const SAID_MAX_BYTES: u64 = 256 * 1024;

/// What the person said on waking that the pipeline has not finished with: kept in the
/// run directory's `said.json` from before the brief is appended to until 目标.md has
/// been re-derived from it, 干活 has worked it and the judge has judged it. A run cut
/// short anywhere in between leaves it, and the next plain `flower` finishes the job
/// (spec 接续.md, "唤醒时说的那句话,要落到三个地方": the three effects happen together
/// or the next run completes them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Said {
    /// What was said, oldest first.
    pub utterances: Vec<Utterance>,
    /// Whether 目标.md has been re-derived since the newest utterance.
    pub derived: bool,
}

/// One utterance and the line it adds to the brief.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utterance {
    pub text: String,
    pub line: String,
}

impl Said {
    /// What the run directory holds: `None` when nothing is pending. A file that does
    /// not parse (or is implausibly large) still means something was said and not
    /// finished: an empty `Said`, so that the goal is re-derived from the brief.
    pub fn read(dir: &RunDir) -> Option<Said> {
        let path = dir.said();
        let meta = std::fs::metadata(&path).ok()?;
        if meta.len() > SAID_MAX_BYTES {
            return Some(Said::default());
        }
        let bytes = std::fs::read(&path).ok()?;
        Some(serde_json::from_slice(&bytes).unwrap_or_default())
    }

    /// Records `utterance` in the run directory first, then appends it to the brief: a
    /// kill between the two leaves the record, and [`Said::append_missing`] adds the
    /// line the next time.
    pub fn record(dir: &RunDir, workspace: &Path, utterance: &str) -> std::io::Result<Said> {
        let mut said = Said::read(dir).unwrap_or_default();
        said.utterances.push(Utterance {
            text: utterance.trim().to_string(),
            line: wake_line(utterance),
        });
        said.derived = false;
        said.save(dir)?;
        said.append_missing(workspace)?;
        Ok(said)
    }

    /// Appends to the brief each utterance whose line is not in it yet.
    pub fn append_missing(&self, workspace: &Path) -> std::io::Result<()> {
        for utterance in &self.utterances {
            let brief = read(&brief_path(workspace)).unwrap_or_default();
            if !brief.contains(&utterance.line) {
                append_wake_line(workspace, &utterance.line)?;
            }
        }
        Ok(())
    }

    /// What 干活 is told: every pending utterance, oldest first; `None` for none.
    pub fn prompt(&self) -> Option<String> {
        let texts: Vec<&str> = self.utterances.iter().map(|u| u.text.as_str()).collect();
        Some(texts.join("\n\n")).filter(|text| !text.is_empty())
    }

    /// 目标.md has been re-derived: a later run need not derive it again.
    pub fn mark_derived(dir: &RunDir) -> std::io::Result<()> {
        match Said::read(dir) {
            Some(mut said) if !said.derived => {
                said.derived = true;
                said.save(dir)
            }
            _ => Ok(()),
        }
    }

    /// Derived, worked and judged: nothing is pending any more.
    pub fn clear(dir: &RunDir) -> std::io::Result<()> {
        match std::fs::remove_file(dir.said()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn save(&self, dir: &RunDir) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(dir.path())?;
        crate::atomic::write(&dir.said(), &bytes)
    }
}
