//! What the processes flower starts get of its environment: all of it but its secrets
//! (`tools::process::withheld_names`, unless `FLOWER_PASS_ENV` names them), and the
//! settings files' `env` variables on top.

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

/// The settings files' `env` variables the environment does not set: what children
/// get explicitly.
pub(super) fn child_env(env: &Environment, files: &FileLayer) -> Vec<(String, String)> {
    files
        .vars
        .iter()
        .filter(|(name, _)| env.var(name).is_none())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}
