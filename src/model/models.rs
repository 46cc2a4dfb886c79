//! Model names: aliases, the `[1m]` suffix, and the model table (context windows,
//! output limits, thinking forms, prefill, effort levels).
//!
//! Ids and the current lineup were taken from the official SDK's model list
//! (anthropic-sdk-python `src/anthropic/types/model_param.py`, 2026-08-07) and
//! Anthropic's model overview pages (platform.claude.com, read 2026-12-02).

use crate::model::Effort;
use ThinkingForm::{Adaptive, Budget, Unsupported};

/// The model used when nobody names one: the current Sonnet.
pub const DEFAULT_MODEL: &str = "claude-sonnet-5-5";

/// Short names, as Claude Code accepts them, and the model each stands for.
pub const ALIASES: &[(&str, &str)] = &[
    ("opus", "claude-opus-5-5"),
    ("sonnet", "claude-sonnet-5-5"),
    ("haiku", "claude-haiku-5-5"),
];

/// Appended to a model id (`claude-sonnet-4-5[1m]`, `sonnet[1m]`): ask for the 1M-token
/// context window. It never goes over the wire: the id is sent without it, with the
/// [`CONTEXT_1M_BETA`] header.
pub const ONE_M_SUFFIX: &str = "[1m]";

/// The beta header value that turns on the 1M context window.
pub const CONTEXT_1M_BETA: &str = "context-1m-2025-08-07";

/// The beta header value that lets a model think between tool calls.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// The smallest thinking budget the API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The context window of most models, tokens.
pub const STANDARD_CONTEXT_WINDOW: u64 = 200_000;

/// The 1M context window, tokens.
pub const LARGE_CONTEXT_WINDOW: u64 = 1_000_000;

/// How a model is asked to think.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingForm {
    /// No extended thinking: asking for it is a configuration error.
    Unsupported,
    /// `{type: enabled, budget_tokens: N}`; with tools, the interleaved-thinking beta
    /// when [`ModelInfo::interleaved_beta`] says so.
    Budget,
    /// `{type: adaptive}`: the model chooses its budget and interleaves thinking with
    /// tool calls by itself (no beta). A fixed budget is deprecated (4.6) or refused
    /// (4.7 and later) there.
    Adaptive,
}

/// What flower needs to know about a model to build its requests. One row of
/// [`MODELS`], or [`ModelInfo::UNKNOWN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelInfo {
    /// The id prefix the row is for (empty for an unknown model).
    pub prefix: &'static str,
    pub thinking: ThinkingForm,
    /// Budget thinking with tools needs [`INTERLEAVED_THINKING_BETA`] to think between
    /// tool calls.
    pub interleaved_beta: bool,
    /// Whether a request may end with an assistant message (prefill) that the model
    /// continues. Claude 4.6 and later answer 400 ("This model does not support
    /// assistant message prefill…"); no model accepts it with thinking on.
    pub prefill: bool,
    /// The standard context window, tokens (the `[1m]` suffix asks for 1M).
    pub window: u64,
    /// The most `max_tokens` may be; `None`: not known, not checked.
    pub max_output: Option<u32>,
    /// The `output_config.effort` levels the model accepts; empty: it refuses the
    /// parameter.
    pub efforts: &'static [crate::model::Effort],
    /// Whether the row is a known model (else the conservative defaults).
    pub known: bool,
}

const EFFORT_ALL: &[Effort] = &[
    Effort::Low,
    Effort::Medium,
    Effort::High,
    Effort::Xhigh,
    Effort::Max,
];
const EFFORT_TO_MAX: &[Effort] = &[Effort::Low, Effort::Medium, Effort::High, Effort::Max];
const EFFORT_TO_HIGH: &[Effort] = &[Effort::Low, Effort::Medium, Effort::High];
const EFFORT_NONE: &[Effort] = &[];

const fn row(
    prefix: &'static str,
    thinking: ThinkingForm,
    prefill: bool,
    window: u64,
    max_output: u32,
    efforts: &'static [Effort],
) -> ModelInfo {
    ModelInfo {
        prefix,
        thinking,
        interleaved_beta: matches!(thinking, ThinkingForm::Budget),
        prefill,
        window,
        max_output: Some(max_output),
        efforts,
        known: true,
    }
}

/// The model table, first matching prefix wins (so a longer prefix comes first).
/// Sources: Anthropic's model overview, migration guide ("prefilling assistant messages
/// returns a 400 error" on 4.6 models and later), adaptive thinking and effort pages
/// (platform.claude.com, read 2026-12-05).
#[rustfmt::skip]
pub const MODELS: &[ModelInfo] = &[
    row("claude-mythos-", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-fable-", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-opus-5", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-sonnet-5", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-haiku-5", Adaptive, false, LARGE_CONTEXT_WINDOW, 64_000, EFFORT_ALL),
    row("claude-opus-4-8", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-opus-4-7", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_ALL),
    row("claude-opus-4-6", Adaptive, false, LARGE_CONTEXT_WINDOW, 128_000, EFFORT_TO_MAX),
    row("claude-sonnet-4-6", Adaptive, false, LARGE_CONTEXT_WINDOW, 64_000, EFFORT_TO_MAX),
    row("claude-opus-4-5", Budget, true, STANDARD_CONTEXT_WINDOW, 64_000, EFFORT_TO_HIGH),
    row("claude-sonnet-4-5", Budget, true, STANDARD_CONTEXT_WINDOW, 64_000, EFFORT_NONE),
    row("claude-haiku-4-5", Budget, true, STANDARD_CONTEXT_WINDOW, 64_000, EFFORT_NONE),
    row("claude-opus-4", Budget, true, STANDARD_CONTEXT_WINDOW, 32_000, EFFORT_NONE),
    row("claude-sonnet-4", Budget, true, STANDARD_CONTEXT_WINDOW, 64_000, EFFORT_NONE),
    ModelInfo {
        // Thinks with a budget, but the interleaved-thinking beta is Claude 4's.
        interleaved_beta: false,
        ..row("claude-3-7-sonnet", Budget, true, STANDARD_CONTEXT_WINDOW, 64_000, EFFORT_NONE)
    },
    row("claude-3-5-haiku", Unsupported, true, STANDARD_CONTEXT_WINDOW, 8_192, EFFORT_NONE),
    row("claude-3-opus", Unsupported, true, STANDARD_CONTEXT_WINDOW, 4_096, EFFORT_NONE),
    row("claude-3-haiku", Unsupported, true, STANDARD_CONTEXT_WINDOW, 4_096, EFFORT_NONE),
];

impl ModelInfo {
    /// A model the table does not know (a gateway's own id): the conservative form.
    /// No prefill (a user turn continues on every model), budget thinking with the
    /// interleaved beta (what every thinking model before 4.7 accepts), 200K, no
    /// output limit checked, and an effort the user asked for is sent as asked.
    pub const UNKNOWN: ModelInfo = ModelInfo {
        prefix: "",
        thinking: Budget,
        interleaved_beta: true,
        prefill: false,
        window: STANDARD_CONTEXT_WINDOW,
        max_output: None,
        efforts: EFFORT_ALL,
        known: false,
    };

    /// Whether the model accepts this effort level.
    pub fn accepts_effort(&self, effort: Effort) -> bool {
        self.efforts.contains(&effort)
    }
}

/// The table row of `model` (aliases resolved; a `[1m]` suffix and a date are ignored).
pub fn info(model: &str) -> ModelInfo {
    let (id, _) = wire_id(model);
    MODELS
        .iter()
        .find(|row| id.starts_with(row.prefix))
        .copied()
        .unwrap_or(ModelInfo::UNKNOWN)
}

/// A model name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelNameError {
    #[error("没有 {0:?} 这个模型别名:用 opus、sonnet、haiku 之一,或写完整的模型 id")]
    UnknownAlias(String),
    #[error("模型名是空的")]
    Empty,
}

/// Resolves what a user wrote (`sonnet`, `opus[1m]`, `claude-sonnet-4-5[1m]`, a gateway's
/// own id) to the model id flower uses (aliases expanded, the `[1m]` suffix kept). A
/// bare word of letters that is not an alias is refused: it is a typo of one, never a
/// model id. Any other id is taken as written (an unknown model works, unpriced).
pub fn resolve(name: &str) -> Result<String, ModelNameError> {
    let name = name.trim();
    let (base, suffix) = match name.strip_suffix(ONE_M_SUFFIX) {
        Some(base) => (base, ONE_M_SUFFIX),
        None => (name, ""),
    };
    if base.is_empty() {
        return Err(ModelNameError::Empty);
    }
    if let Some((_, id)) = ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(base))
    {
        return Ok(format!("{id}{suffix}"));
    }
    if base.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(ModelNameError::UnknownAlias(name.to_string()));
    }
    Ok(format!("{base}{suffix}"))
}

/// The id sent to the API and whether the 1M window was asked for.
pub fn wire_id(model: &str) -> (&str, bool) {
    match model.strip_suffix(ONE_M_SUFFIX) {
        Some(base) => (base, true),
        None => (model, false),
    }
}

/// The context window of `model`, tokens: 1M with the `[1m]` suffix, else the table's
/// (200K for unknown models).
pub fn context_window(model: &str) -> u64 {
    let (_, one_m) = wire_id(model);
    if one_m {
        LARGE_CONTEXT_WINDOW
    } else {
        info(model).window
    }
}

/// Whether `model` thinks adaptively (`thinking: {type: adaptive}`).
pub fn adaptive_thinking(model: &str) -> bool {
    info(model).thinking == ThinkingForm::Adaptive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_suffixes_and_windows() {
        assert_eq!(resolve("sonnet").unwrap(), "claude-sonnet-5-5");
        assert_eq!(resolve("opus[1m]").unwrap(), "claude-opus-5-5[1m]");
        assert_eq!(resolve("claude-x-9").unwrap(), "claude-x-9");
        assert!(matches!(
            resolve("sonet"),
            Err(ModelNameError::UnknownAlias(_))
        ));
        assert_eq!(
            context_window("claude-sonnet-4-5[1m]"),
            LARGE_CONTEXT_WINDOW
        );
        assert_eq!(context_window("claude-sonnet-4-5"), STANDARD_CONTEXT_WINDOW);
        assert_eq!(
            wire_id("claude-sonnet-4-5[1m]"),
            ("claude-sonnet-4-5", true)
        );
    }

    #[test]
    fn the_table_knows_prefill_thinking_and_effort_per_model() {
        let sonnet = info(DEFAULT_MODEL);
        assert!(!sonnet.prefill);
        assert_eq!(sonnet.thinking, ThinkingForm::Adaptive);
        assert!(sonnet.accepts_effort(Effort::Xhigh));
        let old = info("claude-sonnet-4-5-20250929");
        assert!(old.prefill && old.interleaved_beta && old.efforts.is_empty());
        assert_eq!(old.max_output, Some(64_000));
        let opus46 = info("claude-opus-4-6");
        assert!(opus46.accepts_effort(Effort::Max) && !opus46.accepts_effort(Effort::Xhigh));
        assert!(!info("claude-opus-4-7").prefill);
        assert!(!info("claude-3-7-sonnet-latest").interleaved_beta);
        let unknown = info("my-gateway/model");
        assert!(!unknown.known && !unknown.prefill && unknown.max_output.is_none());
        assert_eq!(context_window("claude-opus-4-6"), LARGE_CONTEXT_WINDOW);
        assert_eq!(context_window("my-gateway/model"), STANDARD_CONTEXT_WINDOW);
    }
}
