//! `flower serve`'s knobs: where it listens (`--listen`) and the token a request must
//! carry (`--token`, else `FLOWER_SERVE_TOKEN`). Off the loopback a token is required:
//! the pages show a run's transcripts.

use super::ConfigError;
use super::sources::{Flags, Vars};
use std::net::SocketAddr;

/// Where `flower serve` listens when `--listen` is not given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";

/// A token shorter than this is refused: it is all that guards the pages off the
/// loopback.
pub const MIN_TOKEN_CHARS: usize = 16;

/// What `flower serve` was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    /// Required of every request when set (a bearer header, or the cookie `?token=`
    /// sets); always set when `listen` is not a loopback address.
    pub token: Option<String>,
}

pub(super) fn serve(flags: &Flags, vars: &Vars<'_>) -> Result<ServeSettings, ConfigError> {
    let raw = flags.listen.as_deref().unwrap_or(DEFAULT_LISTEN).trim();
    let listen: SocketAddr = raw.parse().map_err(|_| {
        ConfigError::invalid(
            "--listen",
            format!("--listen {raw:?}:要 地址:端口,比如 127.0.0.1:7411 或 [::1]:7411"),
        )
    })?;
    let (token, setting) = match &flags.serve_token {
        Some(given) => (Some(given.clone()), "--token"),
        None => (vars.unblank("FLOWER_SERVE_TOKEN"), "FLOWER_SERVE_TOKEN"),
    };
    if let Some(token) = &token {
        let visible = token.chars().all(|c| c.is_ascii_graphic());
        if token.chars().count() < MIN_TOKEN_CHARS || !visible {
            return Err(ConfigError::invalid(
                setting,
                format!(
                    "{setting}:要至少 {MIN_TOKEN_CHARS} 个可见 ASCII 字符(没有空格),比如 openssl rand -hex 16 的输出"
                ),
            ));
        }
    }
    if token.is_none() && !listen.ip().is_loopback() {
        return Err(ConfigError::invalid(
            "--listen",
            format!(
                "--listen {listen}:不是本机回环地址,页面里有 transcript。要加 --token(或 FLOWER_SERVE_TOKEN);或者监听 127.0.0.1,由反向代理做认证"
            ),
        ));
    }
    Ok(ServeSettings { listen, token })
}
