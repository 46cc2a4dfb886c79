//! What an agent is: its name, instructions, tools and limits.

use super::permissions::{Permissions, RuleError};
use crate::tools::names::{ASK_USER, TASK};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// An agent's definition. One run of it is one session.
///
/// `allowed_tools` and `disallowed_tools` hold permission rules (`Read`, `Bash(git
/// status:*)`, `Edit(src/**)` …; see [`super::permissions`]). An empty `allowed_tools`
/// allows every tool the engine has; deny rules always win, and bind the sub-agents it
/// starts too ([`AgentSpec::bound_by`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    pub name: String,
    /// What it is for, shown to the agent that starts it (`Task`); custom sub-agents'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The system prompt.
    pub instructions: String,
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Turn limit (model requests); `None` means no limit.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Model override; `None` uses the client's default.
    #[serde(default)]
    pub model: Option<String>,
    /// `output_config.effort` for this agent; `None`: the run's (`--effort`).
    #[serde(skip)]
    pub effort: Option<crate::model::Effort>,
    /// The built-in tools offered to the model, whatever the rules allow; empty: those
    /// the rules allow. A pipeline offers all its agents the same list so that the
    /// prompt cache's prefix (tools, then the shared system block) is one for all of
    /// them; the permission layer still refuses what an agent's rules do not allow,
    /// and its instructions say which tools it may use.
    #[serde(skip)]
    pub offer: Vec<String>,
}

impl AgentSpec {
    pub fn new(name: impl Into<String>, instructions: impl Into<String>) -> Self {
        AgentSpec {
            name: name.into(),
            instructions: instructions.into(),
            ..AgentSpec::default()
        }
    }

    pub fn allowed_tools<I, S>(mut self, rules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_tools = rules.into_iter().map(Into::into).collect();
        self
    }

    pub fn disallowed_tools<I, S>(mut self, rules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disallowed_tools = rules.into_iter().map(Into::into).collect();
        self
    }

    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = Some(turns);
        self
    }

    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Offers these built-in tools whatever the rules allow (see [`AgentSpec::offer`]).
    pub fn offer<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.offer = tools.into_iter().map(Into::into).collect();
        self
    }

    /// This agent's effort, whatever the run's.
    pub fn effort(mut self, effort: crate::model::Effort) -> Self {
        self.effort = Some(effort);
        self
    }

    /// This agent as a sub-agent of `parent`: the parent's deny rules added to its own.
    /// What a caller may not do (`flower once --disallowed-tools`), the agents it starts
    /// may not do either; allow rules are not inherited (an agent's own say what it may).
    pub fn bound_by(&self, parent: &AgentSpec) -> AgentSpec {
        let mut spec = self.clone();
        for rule in &parent.disallowed_tools {
            if !spec.disallowed_tools.contains(rule) {
                spec.disallowed_tools.push(rule.clone());
            }
        }
        spec
    }

    /// This agent (a team's custom sub-agent) within the boundary of `role`, the agent
    /// it stands in for: it never gets more than the role allows. Its allow rules are
    /// kept where the role allows the whole tool, narrowed to the role's rules where
    /// the role allows only some uses of it, and dropped where the role does not allow
    /// the tool; no allow rules means the role's. The role's deny rules are added, and
    /// it starts no sub-agents and asks nobody. `None` when nothing it may use is left.
    pub fn within(&self, role: &AgentSpec) -> Option<AgentSpec> {
        let mut spec = self.bound_by(role);
        for tool in [TASK, ASK_USER] {
            if !spec.disallowed_tools.iter().any(|r| r == tool) {
                spec.disallowed_tools.push(tool.to_string());
            }
        }
        if self.allowed_tools.is_empty() {
            spec.allowed_tools = role.allowed_tools.clone();
            return Some(spec);
        }
        if role.allowed_tools.is_empty() {
            return Some(spec);
        }
        let bounds = Permissions::new(&role.allowed_tools, &[]).ok()?;
        let mut allowed: Vec<String> = Vec::new();
        for rule in &self.allowed_tools {
            let (tool, whole) = match rule.split_once('(') {
                Some((tool, _)) => (tool.trim(), false),
                None => (rule.trim(), true),
            };
            let narrowed: Vec<String> = if bounds.allows_whole(tool) {
                vec![rule.clone()]
            } else if whole {
                role.allowed_tools
                    .iter()
                    .filter(|r| r.split_once('(').is_some_and(|(t, _)| t.trim() == tool))
                    .cloned()
                    .collect()
            } else {
                role.allowed_tools
                    .iter()
                    .filter(|r| *r == rule)
                    .cloned()
                    .collect()
            };
            for rule in narrowed {
                if !allowed.contains(&rule) {
                    allowed.push(rule);
                }
            }
        }
        if allowed.is_empty() {
            return None;
        }
        spec.allowed_tools = allowed;
        Some(spec)
    }

    /// The parsed permission rules; the first malformed rule is the error. Callers
    /// check this before starting anything (the workflow checks every step's agent
    /// before its first step, `flower once` before any request), so a typo in a rule
    /// fails up front, never in the middle of a run.
    pub fn permissions(&self) -> Result<Permissions, RuleError> {
        Permissions::new(&self.allowed_tools, &self.disallowed_tools)
    }

    /// [`AgentSpec::permissions`] with the home directory that `~/` rules mean (the
    /// settings' `HOME`); what the engine and the workflow's check use.
    pub fn permissions_in(&self, home: Option<&Path>) -> Result<Permissions, RuleError> {
        Permissions::with_home(&self.allowed_tools, &self.disallowed_tools, home)
    }
}
