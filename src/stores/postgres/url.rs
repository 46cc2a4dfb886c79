//! The store URL, validated once and shown without its password.

use super::*;

/// A validated store URL: `postgres://` or `postgresql://`, parseable by the driver.
#[derive(Clone)]
pub struct PostgresUrl {
    /// The async driver's settings (the append connection, `pipe.rs`); the blocking
    /// driver's are made from them ([`Self::blocking`]).
    pub(super) config: tokio_postgres::Config,
    pub(super) shown: String,
}

impl PostgresUrl {
    /// The settings for the blocking driver (the pool, the lock and lease connections).
    pub(super) fn blocking(&self) -> ::postgres::Config {
        ::postgres::Config::from(self.config.clone())
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Display for PostgresUrl {
    /// The URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Why a store URL was refused. Never repeats the password.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("要 postgres:// 或 postgresql:// 开头的 URL")]
    Scheme,
    #[error("不是 PostgreSQL 的 URL({0})")]
    Driver(#[source] ::postgres::Error),
    #[error("URL 里没有主机")]
    NoHost,
    #[error("URL 里没有数据库名(postgres://host:port/DATABASE)")]
    NoDatabase,
}

impl FromStr for PostgresUrl {
    type Err = UrlError;

    /// Accepts `postgres://[user[:password]@]host[:port]/database[?options]`. The reason
    /// of an error never repeats the password.
    fn from_str(text: &str) -> Result<Self, UrlError> {
        let text = text.trim();
        let Some(rest) = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
        else {
            return Err(UrlError::Scheme);
        };
        let mut config = tokio_postgres::Config::from_str(text).map_err(UrlError::Driver)?;
        network_timeouts(&mut config);
        if config.get_hosts().is_empty() {
            return Err(UrlError::NoHost);
        }
        if config.get_dbname().is_none_or(str::is_empty) {
            return Err(UrlError::NoDatabase);
        }
        // Shown without the password: everything after `user:` up to the last `@`
        // before the host part.
        let shown = match rest.split_once('/') {
            Some((authority, path)) => format!("postgres://{}/{path}", redact(authority)),
            None => format!("postgres://{}", redact(rest)),
        };
        Ok(PostgresUrl { config, shown })
    }
}

pub(super) fn redact(authority: &str) -> String {
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_string(),
    }
}

/// Keepalives, a connect timeout and a user timeout on every connection (see the module
/// docs), where the URL left the driver's defaults (keepalives after 2 hours idle, no
/// timeouts).
/// `tcp_user_timeout` in the URL counts milliseconds, as in libpq (the driver reads
/// seconds: `tcp_user_timeout=30000`, meant as 30 s, would wait over 8 hours).
fn network_timeouts(config: &mut tokio_postgres::Config) {
    use std::time::Duration;
    if config.get_keepalives() {
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(Duration::from_secs(30));
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(10));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
    }
    // Without it, a connection to a host that drops packets waits for the kernel's
    // SYN retries (about two minutes) before the outage wait can begin.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // The driver stored the URL's whole number N as N seconds.
    let timeout = match config.get_tcp_user_timeout() {
        Some(given) => Duration::from_millis(given.as_secs()),
        None => TCP_USER_TIMEOUT,
    };
    config.tcp_user_timeout(timeout);
}
