//! What the processes flower starts get of its environment on purpose: the settings
//! files' `env` variables, and the variables `FLOWER_PASS_ENV` names. Everything else
//! they inherit minus its secrets (`tools::process::withhold_secrets`).

use super::sources::FileLayer;
use super::{ConfigError, Environment};

/// The variable that names the variables children get although they look secret.
pub const PASS_ENV: &str = "FLOWER_PASS_ENV";

/// `FLOWER_PASS_ENV`: names or patterns (`*` matches any run of characters), separated
/// by commas or blanks. Read from the process environment only: a settings file in
/// the workspace is something an agent can write, and it must not hand the next run's
/// commands the keys.
pub(super) fn pass_env(env: &Environment) -> Result<Vec<String>, ConfigError> {
    let Some(value) = env.var(PASS_ENV) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in value
        .split([',', ' ', '\t', '\n'])
        .filter(|e| !e.is_empty())
    {
        let name_like = entry
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*')
            && !entry.starts_with(|c: char| c.is_ascii_digit())
            && entry != "*";
        if !name_like {
            return Err(ConfigError::invalid(
                PASS_ENV,
                format!(
                    "{PASS_ENV}={value:?}:{entry:?} 不是变量名。要逗号分隔的变量名,可用 * \
                     通配(不能只写 *),例如 {PASS_ENV}=GITHUB_TOKEN,NPM_*"
                ),
            ));
        }
        out.push(entry.to_string());
    }
    Ok(out)
}

/// Whether `name` matches `pattern` (`*`: any run of characters).
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| matches(tail, &rest[i..]))
        }
    }
}

/// The variables children are given explicitly: the files' `env` ones the
/// environment does not set, then the environment's that `pass` names.
pub(super) fn child_env(
    env: &Environment,
    files: &FileLayer,
    pass: &[String],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = files
        .vars
        .iter()
        .filter(|(name, _)| env.var(name).is_none())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let mut passed: Vec<(String, String)> = env
        .vars()
        .filter(|(name, _)| pass.iter().any(|p| matches(p, name)))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    passed.sort();
    out.extend(passed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("GITHUB_TOKEN", "GITHUB_TOKEN"));
        assert!(!matches("GITHUB_TOKEN", "GITHUB_TOKENS"));
        assert!(matches("NPM_*", "NPM_TOKEN"));
        assert!(matches("*_TOKEN", "GH_TOKEN"));
        assert!(matches("A*B*C", "AxxBxC"));
        assert!(!matches("A*B*C", "AxxBx"));
    }
}
