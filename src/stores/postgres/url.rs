//! The store URL, validated once and shown without its password.

use super::*;

/// A validated store URL: `postgres://` or `postgresql://`, parseable by the driver.
#[derive(Clone)]
pub struct PostgresUrl {
    pub(super) config: ::postgres::Config,
    pub(super) shown: String,
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

impl FromStr for PostgresUrl {
    type Err = String;

    /// Accepts `postgres://[user[:password]@]host[:port]/database[?options]`. The reason
    /// of an error never repeats the password.
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let Some(rest) = text
            .strip_prefix("postgres://")
            .or_else(|| text.strip_prefix("postgresql://"))
        else {
            return Err("expected a URL starting with postgres:// or postgresql://".into());
        };
        let mut config =
            ::postgres::Config::from_str(text).map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
        network_timeouts(&mut config);
        if config.get_hosts().is_empty() {
            return Err("the URL names no host".into());
        }
        if config.get_dbname().is_none_or(str::is_empty) {
            return Err("the URL names no database (postgres://host:port/DATABASE)".into());
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

/// Keepalives and a user timeout on every connection (see the module docs), where the
/// URL left the driver's defaults (keepalives after 2 hours idle, no user timeout).
fn network_timeouts(config: &mut ::postgres::Config) {
    use std::time::Duration;
    if config.get_keepalives() && config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
}
