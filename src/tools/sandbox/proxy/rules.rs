//! The network policy of sandboxed commands: which hosts the proxy connects them to.
//!
//! Claude Code's keys (`sandbox.network.*`), merged across settings scopes by the
//! settings (`src/settings/network.rs`) so that a project can narrow the user's policy,
//! never widen it:
//! - `allowedDomains`: every list must match the host (the user's list, `["*"]` when
//!   it says none, then each project or local list that says one);
//! - `deniedDomains`: any list that matches refuses;
//! - a name that resolves to a local address (loopback, private, link-local, the
//!   host's own) is refused unless every list names it by a pattern other than `*`.

use super::addr;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

/// One entry of `allowedDomains` / `deniedDomains`: `*`, `example.com`,
/// `*.example.com` (subdomains only), an IP address, each with an optional `:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Host {
    Any,
    Exact(String),
    Subdomains(String),
    Ip(IpAddr),
}

/// Why a pattern cannot be used (the settings quote it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadPattern(String);

impl std::str::FromStr for HostPattern {
    type Err = BadPattern;

    fn from_str(text: &str) -> Result<HostPattern, BadPattern> {
        let bad = |why: &str| BadPattern(format!("{text:?}:{why}"));
        let text = text.trim();
        let (host, port) = split_port(text).map_err(|why| bad(&why))?;
        let host = host.to_ascii_lowercase();
        // A trailing dot is the root, not a wildcard's: `*.` is no `*`.
        let host = match host.strip_suffix('.') {
            Some(h) if !h.ends_with('*') => h.to_string(),
            _ => host.clone(),
        };
        let parsed = if host == "*" {
            Host::Any
        } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Host::Ip(ip)
        } else if let Some(rest) = host.strip_prefix("*.") {
            check_name(rest).map_err(bad)?;
            Host::Subdomains(rest.to_string())
        } else {
            check_name(&host).map_err(bad)?;
            Host::Exact(host)
        };
        Ok(HostPattern { host: parsed, port })
    }
}

/// `host[:port]`, `[v6][:port]`; a bare IPv6 address has no port.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("端口 {p:?} 要 1 到 65535")),
    };
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or("`[` 没有配对的 `]`")?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((ip, port(p)?)),
            None if after.is_empty() => Ok((ip, None)),
            None => Err("`]` 后面只能跟 `:端口`".into()),
        };
    }
    if text.matches(':').count() > 1 {
        return Ok((text, None));
    }
    match text.split_once(':') {
        Some((host, p)) => Ok((host, port(p)?)),
        None => Ok((text, None)),
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err("要一个域名(`example.com`、`*.example.com`)、IP 地址或 `*`,可带 `:端口`");
    }
    Ok(())
}

impl HostPattern {
    /// Whether the pattern covers `host` (normalized: lower case, no trailing dot, an
    /// IPv6 address without brackets) at `port`.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match &self.host {
            Host::Any => true,
            Host::Exact(name) => host == name,
            Host::Subdomains(parent) => host
                .strip_suffix(parent.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            Host::Ip(ip) => host.parse::<IpAddr>().is_ok_and(|h| h == *ip),
        }
    }

    /// Whether it names hosts (anything but a bare `*`): only such an entry lets a
    /// name reach a local address.
    pub fn is_explicit(&self) -> bool {
        self.host != Host::Any
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Any => write!(f, "*")?,
            Host::Exact(n) => write!(f, "{n}")?,
            Host::Subdomains(n) => write!(f, "*.{n}")?,
            Host::Ip(IpAddr::V6(ip)) if self.port.is_some() => write!(f, "[{ip}]")?,
            Host::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// What the proxy lets commands reach, merged from every settings scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRules {
    /// Every list must match the host; the first is the user's (`*` by default).
    pub allowed: Vec<Vec<HostPattern>>,
    /// Any entry that matches refuses.
    pub denied: Vec<HostPattern>,
    /// Path UNIX sockets outside the workspace a command may connect to (enforced by
    /// Landlock ABI 9 and later; before it, see [`Self::all_unix_sockets`]).
    pub unix_sockets: Vec<PathBuf>,
    /// `allowAllUnixSockets`: no refusal of UNIX sockets at all.
    pub all_unix_sockets: bool,
    /// `allowLocalBinding`: commands may listen (on the namespace's own loopback);
    /// false: `listen` is refused.
    pub local_binding: bool,
}

impl Default for NetworkRules {
    /// Every public host by name or address; nothing local; listening allowed.
    fn default() -> Self {
        NetworkRules {
            allowed: vec![vec![HostPattern {
                host: Host::Any,
                port: None,
            }]],
            denied: Vec::new(),
            unix_sockets: Vec::new(),
            all_unix_sockets: false,
            local_binding: true,
        }
    }
}

/// Why the proxy refused a connection: what the command sees and which rule to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An entry of `deniedDomains` matches.
    Denied { host: String, entry: String },
    /// An `allowedDomains` list does not match.
    NotAllowed { host: String },
    /// The host is, or resolves to, a local address no explicit entry names.
    Local { host: String, addr: IpAddr },
}

/// The settings key a refusal names.
pub const ALLOWED_KEY: &str = "sandbox.network.allowedDomains";
pub const DENIED_KEY: &str = "sandbox.network.deniedDomains";

impl Refusal {
    /// One Chinese sentence: what was refused and which rule lets it through.
    pub fn explain(&self, port: u16) -> String {
        match self {
            Refusal::Denied { host, entry } => format!(
                "flower 的网络代理拒绝了 {host}:{port}:它在 {DENIED_KEY} 里(\"{entry}\")。要放行,从设置文件的 {DENIED_KEY} 去掉这一项。"
            ),
            Refusal::NotAllowed { host } => format!(
                "flower 的网络代理拒绝了 {host}:{port}:它不在 {ALLOWED_KEY} 里。要放行,在每个写了 {ALLOWED_KEY} 的设置文件里加上 \"{host}\"。"
            ),
            Refusal::Local { host, addr } => format!(
                "flower 的网络代理拒绝了 {host}:{port}:它指向本机或内网地址 {addr},默认不让命令碰本机和内网的服务。要放行,在 ~/.claude/settings.json 的 {ALLOWED_KEY} 里写明 \"{host}:{port}\"(项目的设置文件只能收紧)。"
            ),
        }
    }
}

/// `host` normalized the way patterns are: lower case, no trailing dot, no brackets.
pub fn normalize(host: &str) -> String {
    let host = host.trim().trim_matches(['[', ']']).to_ascii_lowercase();
    host.strip_suffix('.').unwrap_or(&host).to_string()
}

impl NetworkRules {
    /// The check by name, before any resolution: `Err` when a list refuses it.
    pub fn check_name(&self, host: &str, port: u16) -> Result<(), Refusal> {
        if let Some(entry) = self.denied.iter().find(|p| p.matches(host, port)) {
            return Err(Refusal::Denied {
                host: host.to_string(),
                entry: entry.to_string(),
            });
        }
        if !self
            .allowed
            .iter()
            .all(|list| list.iter().any(|p| p.matches(host, port)))
        {
            return Err(Refusal::NotAllowed {
                host: host.to_string(),
            });
        }
        Ok(())
    }

    /// Whether every list names `host` explicitly (a local address is then allowed).
    pub fn names_explicitly(&self, host: &str, port: u16) -> bool {
        self.allowed.iter().all(|list| {
            list.iter()
                .any(|p| p.is_explicit() && p.matches(host, port))
        })
    }

    /// The addresses of `host` the proxy may connect to, or why none: a local address
    /// only when every list names the host explicitly. `local` says which addresses
    /// are the host's own (its interfaces).
    pub fn check_addresses(
        &self,
        host: &str,
        port: u16,
        addrs: &[IpAddr],
        local: &dyn Fn(&IpAddr) -> bool,
    ) -> Result<Vec<IpAddr>, Refusal> {
        let explicit = self.names_explicitly(host, port);
        let mut ok = Vec::new();
        let mut refused = None;
        for a in addrs {
            if explicit || (addr::is_public(a) && !local(a)) {
                ok.push(*a);
            } else {
                refused.get_or_insert(*a);
            }
        }
        match (ok.is_empty(), refused) {
            (true, Some(addr)) => Err(Refusal::Local {
                host: host.to_string(),
                addr,
            }),
            _ => Ok(ok),
        }
    }
}
