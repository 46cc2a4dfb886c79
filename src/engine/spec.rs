//! What an agent is: its name, instructions, tools and limits.

use super::permissions::{Permissions, RuleError};
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
