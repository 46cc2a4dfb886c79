//! Model names: aliases, the `[1m]` suffix, context windows and thinking styles.
//!
//! Ids and the current lineup were taken from the official SDK's model list
//! (anthropic-sdk-python `src/anthropic/types/model_param.py`, 2026-08-07) and
//! Anthropic's model overview pages (platform.claude.com, read 2026-12-02).

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

/// Model ids whose standard window is already 1M (no beta needed).
const ONE_M_NATIVE: &[&str] = &[
    "claude-sonnet-5",
    "claude-opus-5",
    "claude-haiku-5",
    "claude-fable-",
    "claude-mythos-",
    "claude-opus-4-6",
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-sonnet-4-6",
];

/// Models that think adaptively and refuse a fixed `budget_tokens` (the 5 generation).
const ADAPTIVE_ONLY: &[&str] = &[
    "claude-sonnet-5",
    "claude-opus-5",
    "claude-haiku-5",
    "claude-fable-",
    "claude-mythos-5",
];

/// A model name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelNameError {
    #[error("unknown model alias {0:?}: use one of opus, sonnet, haiku, or a full model id")]
    UnknownAlias(String),
    #[error("empty model name")]
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

/// The context window of `model`, tokens: 1M with the `[1m]` suffix or for a model whose
/// standard window is 1M, else 200K (also for unknown models).
pub fn context_window(model: &str) -> u64 {
    let (id, one_m) = wire_id(model);
    if one_m || ONE_M_NATIVE.iter().any(|p| id.starts_with(p)) {
        LARGE_CONTEXT_WINDOW
    } else {
        STANDARD_CONTEXT_WINDOW
    }
}

/// Whether `model` only thinks adaptively (`thinking: {type: adaptive}`); a fixed
/// budget is an error there.
pub fn adaptive_thinking_only(model: &str) -> bool {
    let (id, _) = wire_id(model);
    ADAPTIVE_ONLY.iter().any(|p| id.starts_with(p))
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
}
