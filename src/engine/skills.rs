//! Agent Skills (`.claude/skills/<name>/SKILL.md`, Anthropic's format): progressive
//! disclosure. A session's system prompt names each skill with its description (the
//! section [`listing`] writes, pinned with the memory when the session begins); the
//! body reaches the model only when it calls the `Skill` tool ([`invoke`]), and the
//! files beside it when it reads them (Read, or Bash: a skill's scripts run as Bash
//! commands, in the sandbox like any other).
//!
//! The skills are read once per process with the settings (`crate::settings`), and the
//! workspace's are pinned there, so the body a call returns is the one a person
//! approved; no agent can write `.claude/skills` (`crate::tools::protected`).

use crate::model::ToolDef;
use crate::tools::ToolOutput;
use crate::tools::names::SKILL;
use serde_json::json;
use std::path::PathBuf;

/// One skill as its `SKILL.md` defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// `project` or `user`.
    pub scope: &'static str,
    /// The skill's directory (where `SKILL.md` is).
    pub dir: PathBuf,
    /// `SKILL.md` after its front matter: what an invocation returns.
    pub body: String,
    /// The other files of its directory, relative to it (at most [`MAX_FILES`]).
    pub files: Vec<String>,
}

/// How many of a skill's other files its invocation lists.
pub const MAX_FILES: usize = 100;

/// The `Skill` tool's input (Claude Code's).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct SkillInput {
    pub skill: String,
    #[serde(default)]
    pub args: Option<String>,
}

const HEADER: &str = "# Skills\n\nThe skills below are instructions for particular kinds \
of task, installed by the team or the user. When a task matches a skill's description, \
call the Skill tool with its name before you start: it returns the skill's instructions \
and the files that come with it (read them with Read, run its scripts with Bash). Only \
the skills listed here exist.";

/// The system prompt's section naming each skill, `- name: description` a line (as
/// `Task` lists the custom agents); empty without skills. Its size grows with the
/// names and descriptions only.
pub fn listing(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut text = format!("{HEADER}\n");
    for skill in skills {
        // One line each, whatever line breaks a `|` block left in it.
        let description: Vec<&str> = skill.description.split_whitespace().collect();
        text.push_str(&format!("\n- {}: {}", skill.name, description.join(" ")));
    }
    text
}

/// The `Skill` tool (its description stays the same whatever is installed: the list
/// is in the system prompt, so the tool list, the cache's first part, does not move).
pub fn definition() -> ToolDef {
    ToolDef {
        name: SKILL.into(),
        description: "Load a skill: its instructions, and the files that come with it. \
                      The skills there are, with what each is for, are listed in the \
                      system prompt under \"Skills\". Call it when a task matches a \
                      skill's description, then follow what it says."
            .into(),
        input_schema: crate::content::Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "skill": {"type": "string", "description": "The skill's name, as listed"},
                "args": {"type": "string", "description": "Optional arguments for the skill"}
            },
            "required": ["skill"],
            "additionalProperties": false
        })),
    }
}

/// A call of the `Skill` tool: the skill's body, with its directory and its files.
pub fn invoke(skills: &[Skill], input: Result<SkillInput, serde_json::Error>) -> ToolOutput {
    let input = match input {
        Ok(input) => input,
        Err(e) => return ToolOutput::error(format!("Invalid input for Skill: {e}")),
    };
    let wanted = input.skill.trim().trim_start_matches('/');
    let Some(skill) = skills.iter().find(|s| s.name == wanted) else {
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        return ToolOutput::error(format!(
            "Unknown skill: {wanted}. The skills there are: {}.",
            names.join(", ")
        ));
    };
    let mut text = format!(
        "Base directory for this skill: {}\n\n{}",
        skill.dir.display(),
        skill.body
    );
    if !skill.files.is_empty() {
        text.push_str("\n\nFiles in this skill's directory (read them when you need them):\n");
        for file in &skill.files {
            text.push_str(&format!("- {}\n", skill.dir.join(file).display()));
        }
    }
    if let Some(args) = input.args.filter(|a| !a.trim().is_empty()) {
        text.push_str(&format!("\n\nARGUMENTS: {args}"));
    }
    ToolOutput::ok(text)
}

/// A session's memory text and files with the skills' listing and `SKILL.md` files
/// after them: what the session pins (the memory entry) and sends.
pub fn with_listing(
    mut text: String,
    mut files: Vec<String>,
    skills: &[Skill],
) -> (String, Vec<String>) {
    if skills.is_empty() {
        return (text, files);
    }
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(&listing(skills));
    files.extend(
        skills
            .iter()
            .map(|s| s.dir.join("SKILL.md").to_string_lossy().into_owned()),
    );
    (text, files)
}
