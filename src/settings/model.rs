//! The model part of [`super::Settings`]: credential, base URL, headers, betas, the
//! model id, `max_tokens`, extended thinking, the prompt cache's lifetime, the stream
//! idle timeout and the price table. No error message quotes a credential or a header
//! value.

use super::ConfigError;
use super::sources::{Flags, Vars};
use crate::model::anthropic::{
    self, ClientConfig, Credential, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT, DEFAULT_MODEL,
};
use crate::model::models::{self, MIN_THINKING_BUDGET, ThinkingForm};
use crate::model::prices::PriceTable;
use crate::model::{Effort, WebLimits};
use crate::stores::CacheWindow;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The thinking budget of a bare `--thinking`, tokens.
pub const DEFAULT_THINKING_BUDGET: u32 = 10_000;

/// How to reach the model and what to ask it, resolved.
#[derive(Clone, PartialEq)]
pub struct ModelSettings {
    /// The model id (`--model`, else `ANTHROPIC_MODEL`, else the settings files'
    /// `model`, else [`DEFAULT_MODEL`]), aliases resolved, `[1m]` kept: the one source the client,
    /// the engine, the handoff threshold and the status line all read.
    pub id: String,
    /// Whether `--model`, `ANTHROPIC_MODEL` or a settings file named it (else it is
    /// the default).
    pub named: bool,
    /// `ANTHROPIC_AUTH_TOKEN` (Bearer, wins) or `ANTHROPIC_API_KEY`; `None` when neither
    /// is set: read-only commands need none, a run is refused
    /// ([`ConfigError::MissingCredential`]) before anything is sent or written.
    pub credential: Option<Credential>,
    /// `ANTHROPIC_BASE_URL` (checked: an http(s) URL), else [`DEFAULT_BASE_URL`].
    pub base_url: String,
    /// `ANTHROPIC_CUSTOM_HEADERS`, one `Name: value` per line.
    pub headers: Vec<(String, String)>,
    /// `ANTHROPIC_BETAS`, comma-separated.
    pub betas: Vec<String>,
    /// `FLOWER_STREAM_IDLE_TIMEOUT` (seconds), else [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// `FLOWER_MAX_TOKENS`, else the engine's default (plus the thinking budget when
    /// thinking is on); always above the thinking budget.
    pub max_tokens: u32,
    /// `--thinking[=N]`, else `MAX_THINKING_TOKENS`; `None`: off.
    pub thinking_budget: Option<u32>,
    /// `--effort`, else `CLAUDE_CODE_EFFORT_LEVEL` (Claude Code's); `None`: not sent.
    /// Checked against the model's table row.
    pub effort: Option<Effort>,
    /// The judge's effort (`FLOWER_JUDGE_EFFORT`): a verdict is where effort pays, so
    /// by default the judge never runs below `high` (an `--effort` below it is raised to
    /// `high` for the judge); `None`: the run's.
    pub judge_effort: Option<Effort>,
    /// `max_uses` of the web tools per request (`FLOWER_WEB_SEARCH_MAX_USES`,
    /// `FLOWER_WEB_FETCH_MAX_USES`); whether an agent has them is its permission rules'.
    pub web: WebLimits,
    /// `FLOWER_CACHE_TTL` (`5m`, `1h`, `0`); `None` (`0`): every resume prunes as if
    /// the cache were cold.
    pub cache_ttl: Option<Duration>,
    /// `FLOWER_PRICES`: the built-in table with that file merged over it; `None`: the
    /// built-in table. Made the process's table by [`super::Settings::install_prices`].
    pub prices: Option<PriceTable>,
}

impl fmt::Debug for ModelSettings {
    // By hand: header values may be credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ModelSettings")
            .field("id", &self.id)
            .field("named", &self.named)
            .field("credential", &self.credential)
            .field("base_url", &self.base_url)
            .field("headers", &header_names)
            .field("betas", &self.betas)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget", &self.thinking_budget)
            .field("effort", &self.effort)
            .field("judge_effort", &self.judge_effort)
            .field("web", &self.web)
            .field("cache_ttl", &self.cache_ttl)
            .field("prices", &self.prices.is_some())
            .finish()
    }
}

impl ModelSettings {
    /// The client configuration; [`ConfigError::MissingCredential`] without a
    /// credential.
    pub fn client_config(&self) -> Result<ClientConfig, ConfigError> {
        let credential = self
            .credential
            .clone()
            .ok_or(ConfigError::MissingCredential)?;
        Ok(ClientConfig {
            base_url: self.base_url.clone(),
            credential,
            default_model: self.id.clone(),
            headers: self.headers.clone(),
            betas: self.betas.clone(),
            idle_timeout: self.idle_timeout,
        })
    }

    /// The price of the model is unknown: its cost is reported as null.
    pub(super) fn price_warning(&self) -> Option<String> {
        let known = match &self.prices {
            Some(table) => table.get(&self.id).is_some(),
            None => PriceTable::builtin().get(&self.id).is_some(),
        };
        (!known).then(|| format!("模型 {} 不在价格表里:它的花费记为 null", self.id))
    }
}

/// Resolves the model settings from the flags and the variables.
// Long because every model setting resolves here, once, in the order their precedence
// and cross-checks need (the model before its thinking budget and window), each with
// the message naming its source.
pub(super) fn resolve(flags: &Flags, vars: &Vars<'_>) -> Result<ModelSettings, ConfigError> {
    let usage = |setting: &str, message: String| ConfigError::invalid(setting, message);
    let credential = match (
        vars.trimmed("ANTHROPIC_AUTH_TOKEN"),
        vars.trimmed("ANTHROPIC_API_KEY"),
    ) {
        (Some(token), _) => Some(Credential::Bearer(token)),
        (None, Some(key)) => Some(Credential::ApiKey(key)),
        (None, None) => None,
    };
    let base_url = vars
        .trimmed("ANTHROPIC_BASE_URL")
        .unwrap_or_else(|| DEFAULT_BASE_URL.into());
    let base_url = anthropic::check_base_url(&base_url)
        .map_err(|e| ConfigError::invalid_because("ANTHROPIC_BASE_URL", e.to_string(), e))?;
    let flag_model = flags.model.as_deref().filter(|m| !m.trim().is_empty());
    // `--model`, else `ANTHROPIC_MODEL` (the environment's, else a settings file's
    // `env`), else the settings files' `model`.
    let (setting, named_model) = match (flag_model, vars.trimmed("ANTHROPIC_MODEL")) {
        (Some(model), _) => ("--model", Some(model.to_string())),
        (None, Some(model)) => ("ANTHROPIC_MODEL", Some(model)),
        (None, None) => ("model (settings file)", vars.files.model.clone()),
    };
    let named = named_model.is_some();
    let id = crate::model::models::resolve(named_model.as_deref().unwrap_or(DEFAULT_MODEL))
        .map_err(|e| ConfigError::invalid_because(setting, e.to_string(), e))?;
    let headers = match vars.raw("ANTHROPIC_CUSTOM_HEADERS") {
        Some(text) => anthropic::parse_custom_headers(&text).map_err(|e| {
            ConfigError::invalid_because("ANTHROPIC_CUSTOM_HEADERS", e.to_string(), e)
        })?,
        None => Vec::new(),
    };
    let betas = vars
        .raw("ANTHROPIC_BETAS")
        .map(|list| anthropic::parse_betas(&list))
        .unwrap_or_default();

    let explicit_max = match vars.unblank("FLOWER_MAX_TOKENS") {
        Some(raw) => Some(
            raw.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    usage(
                        "FLOWER_MAX_TOKENS",
                        format!("FLOWER_MAX_TOKENS={raw:?}:要一个 ≥ 1 的整数"),
                    )
                })?,
        ),
        None => None,
    };
    let from_env = match vars.unblank("MAX_THINKING_TOKENS") {
        Some(raw) => Some(raw.trim().parse::<u32>().map_err(|_| {
            usage(
                "MAX_THINKING_TOKENS",
                format!("MAX_THINKING_TOKENS={raw:?}:要一个整数(token 数)"),
            )
        })?),
        None => None,
    };
    // The flag wins; a bare flag takes the variable's budget, else the default.
    let thinking_budget = match flags.thinking {
        Some(Some(budget)) => Some(budget),
        Some(None) => Some(from_env.unwrap_or(DEFAULT_THINKING_BUDGET)),
        None => from_env.filter(|b| *b > 0),
    };
    let thinking_setting = if flags.thinking.is_some() {
        "--thinking"
    } else {
        "MAX_THINKING_TOKENS"
    };
    if let Some(budget) = thinking_budget
        && budget < MIN_THINKING_BUDGET
    {
        return Err(usage(
            thinking_setting,
            format!(
                "{thinking_setting} {budget}:思考预算低于 API 的下限 {MIN_THINKING_BUDGET} token"
            ),
        ));
    }
    let info = models::info(&id);
    if thinking_budget.is_some() && info.thinking == ThinkingForm::Unsupported {
        return Err(usage(
            thinking_setting,
            format!("模型 {id} 没有扩展思考:去掉 {thinking_setting}"),
        ));
    }
    if let (Some(max), Some(limit)) = (explicit_max, info.max_output)
        && max > limit
    {
        return Err(usage(
            "FLOWER_MAX_TOKENS",
            format!("FLOWER_MAX_TOKENS={max}:模型 {id} 最多写 {limit} token"),
        ));
    }
    let effort = resolve_effort(
        flags.effort.as_deref(),
        "CLAUDE_CODE_EFFORT_LEVEL",
        vars,
        &id,
        &info,
    )?;
    let judge_effort = match resolve_effort(None, "FLOWER_JUDGE_EFFORT", vars, &id, &info)? {
        Some(effort) => Some(effort),
        None => effort.filter(|e| *e < Effort::High).map(|_| Effort::High),
    };
    // Without FLOWER_MAX_TOKENS, the default, within what the model can write.
    let cap = |n: u32| info.max_output.map_or(n, |limit| n.min(limit));
    let max_tokens = match (explicit_max, thinking_budget) {
        (Some(max), Some(budget)) if budget >= max => {
            return Err(usage(
                thinking_setting,
                format!(
                    "{thinking_setting} {budget}:思考预算必须小于 max_tokens({max},FLOWER_MAX_TOKENS)"
                ),
            ));
        }
        (Some(max), _) => max,
        // Room to answer after thinking.
        (None, Some(budget)) => {
            let max = cap(budget.saturating_add(crate::engine::DEFAULT_MAX_TOKENS));
            if budget >= max {
                return Err(usage(
                    thinking_setting,
                    format!(
                        "{thinking_setting} {budget}:思考预算必须小于 max_tokens({max},{id} 最多能写这么多)"
                    ),
                ));
            }
            max
        }
        (None, None) => cap(crate::engine::DEFAULT_MAX_TOKENS),
    };

    let cache_ttl = match vars
        .raw("FLOWER_CACHE_TTL")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => Some(CacheWindow::DEFAULT_TTL),
        Some(v) if v.is_empty() || v == "5m" => Some(CacheWindow::DEFAULT_TTL),
        Some(v) if v == "1h" => Some(Duration::from_secs(3600)),
        Some(v) if v == "0" => None,
        Some(v) => {
            return Err(usage(
                "FLOWER_CACHE_TTL",
                format!("FLOWER_CACHE_TTL={v:?}:要 5m、1h 或 0(0:每次续跑都当缓存已冷来剪)"),
            ));
        }
    };

    let idle_timeout = match vars.trimmed("FLOWER_STREAM_IDLE_TIMEOUT") {
        None => DEFAULT_IDLE_TIMEOUT,
        Some(raw) => match raw.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Duration::from_secs_f64(s),
            _ => {
                return Err(usage(
                    "FLOWER_STREAM_IDLE_TIMEOUT",
                    format!("FLOWER_STREAM_IDLE_TIMEOUT={raw:?}:要一个 > 0 的秒数"),
                ));
            }
        },
    };

    let max_uses = |var: &str| -> Result<u32, ConfigError> {
        match vars.unblank(var) {
            None => Ok(WebLimits::DEFAULT_MAX_USES),
            Some(raw) => raw
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| usage(var, format!("{var}={raw:?}:要 1 到 100 的整数"))),
        }
    };
    let enabled = match vars
        .unblank("FLOWER_WEB_TOOLS")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => true,
        Some(v) if v == "on" => true,
        Some(v) if v == "off" => false,
        Some(v) => {
            return Err(usage(
                "FLOWER_WEB_TOOLS",
                format!("FLOWER_WEB_TOOLS={v:?}:要 on 或 off"),
            ));
        }
    };
    let web = WebLimits {
        enabled,
        search_max_uses: max_uses("FLOWER_WEB_SEARCH_MAX_USES")?,
        fetch_max_uses: max_uses("FLOWER_WEB_FETCH_MAX_USES")?,
    };

    let prices = match vars.trimmed("FLOWER_PRICES") {
        None => None,
        Some(path) => {
            let path = PathBuf::from(path);
            Some(PriceTable::with_override(&path).map_err(|e| {
                usage(
                    "FLOWER_PRICES",
                    format!("FLOWER_PRICES={}:{e}", path.display()),
                )
            })?)
        }
    };

    Ok(ModelSettings {
        id,
        named,
        credential,
        base_url,
        headers,
        betas,
        idle_timeout,
        max_tokens,
        thinking_budget,
        effort,
        judge_effort,
        web,
        cache_ttl,
        prices,
    })
}

/// `flag` (`--effort`), else the variable `var` (for `CLAUDE_CODE_EFFORT_LEVEL`, else
/// the settings files' `effortLevel`, as Claude Code reads it): a level the model
/// accepts.
fn resolve_effort(
    flag: Option<&str>,
    var: &'static str,
    vars: &Vars<'_>,
    id: &str,
    info: &models::ModelInfo,
) -> Result<Option<Effort>, ConfigError> {
    let file = (var == "CLAUDE_CODE_EFFORT_LEVEL")
        .then(|| vars.files.effort.clone())
        .flatten();
    let (setting, raw) = match (flag, vars.unblank(var), file) {
        (Some(raw), _, _) => ("--effort", raw.to_string()),
        (None, Some(raw), _) => (var, raw),
        (None, None, Some(raw)) => ("effortLevel (settings file)", raw),
        (None, None, None) => return Ok(None),
    };
    let effort = Effort::parse(&raw).ok_or_else(|| {
        ConfigError::invalid(
            setting,
            format!("{setting} {raw:?}:要 low、medium、high、xhigh 或 max"),
        )
    })?;
    if info.accepts_effort(effort) {
        return Ok(Some(effort));
    }
    let message = if info.efforts.is_empty() {
        format!("{setting} {effort}:模型 {id} 不接受 effort(output_config.effort);去掉它")
    } else {
        let levels: Vec<&str> = info.efforts.iter().map(|e| e.as_str()).collect();
        format!("{setting} {effort}:模型 {id} 只接受 {}", levels.join("、"))
    };
    Err(ConfigError::invalid(setting, message))
}
