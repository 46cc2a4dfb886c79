//! The network proxy: a sandboxed command's only way out of its network namespace.
//!
//! The namespace helper ([`super::namespaces`]) brings the namespace's loopback up,
//! listens on `127.0.0.1:PORT` inside it and hands the listening socket to flower over
//! `SCM_RIGHTS`. flower accepts on it here, on a thread and runtime of its own (a busy
//! engine never stalls a download), and connects out from the host's namespace. One
//! port speaks both protocols, told apart by the first byte: SOCKS5 (`0x05`, with the
//! name resolved here: `socks5h`) and HTTP (`CONNECT host:port`, and a plain-HTTP
//! request with an absolute URI, forwarded with `Connection: close`). The command gets
//! the standard variables pointing at it ([`proxy_env`]).
//!
//! Every connection is checked by [`NetworkRules`]: by name first, then on the
//! addresses the name resolves to, and the proxy connects to exactly the address it
//! checked. A refusal is an HTTP 403 with the reason and the rule to add in its body,
//! or SOCKS5 reply 2 ("not allowed by ruleset"), and a line in the listener's
//! [`Refusals`] log, which the Bash tool adds to the command's result.

mod addr;
pub mod rules;
mod splice;
mod wire;

pub use addr::is_public;
pub use rules::{HostPattern, NetworkRules, Refusal};

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a client may take to say where it goes, and a connection to be made.
const HANDSHAKE: Duration = Duration::from_secs(30);
/// Copy buffers per direction: large enough that the proxy is not the bottleneck.
const BUFFER: usize = 256 * 1024;
/// Refusals a listener remembers.
const LOG_MAX: usize = 256;

/// The variables a command gets: HTTP(S) through the proxy's HTTP side, everything
/// else through SOCKS5 with the name resolved by the proxy, loopback direct (the
/// namespace's own, for servers the command starts).
pub fn proxy_env(port: u16) -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    vec![
        ("HTTP_PROXY", http.clone()),
        ("HTTPS_PROXY", http.clone()),
        ("http_proxy", http.clone()),
        ("https_proxy", http),
        ("ALL_PROXY", socks.clone()),
        ("all_proxy", socks),
        ("NO_PROXY", no_proxy.clone()),
        ("no_proxy", no_proxy),
    ]
}

/// The refusals of one listener, newest last, numbered from its start.
#[derive(Debug, Default)]
pub(super) struct RefusalLog {
    inner: Mutex<(usize, VecDeque<String>)>,
}

impl RefusalLog {
    fn push(&self, line: String) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0 += 1;
        g.1.push_back(line);
        if g.1.len() > LOG_MAX {
            g.1.pop_front();
        }
    }

    fn total(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// The proxy's refusals since a command started (commands running at the same time
/// in the same namespaces share the log, so one may see the other's).
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    log: Option<Arc<RefusalLog>>,
    from: usize,
}

impl Refusals {
    /// One Chinese sentence per refused host (at most five), for the command's result.
    pub fn notes(&self) -> Vec<String> {
        let Some(log) = &self.log else {
            return Vec::new();
        };
        let g = log.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (total, lines) = (&g.0, &g.1);
        let new = total.saturating_sub(self.from).min(lines.len());
        let mut out: Vec<String> = Vec::new();
        for line in lines.iter().skip(lines.len() - new) {
            if !out.contains(line) {
                out.push(line.clone());
            }
        }
        if out.len() > 5 {
            let more = out.len() - 5;
            out.truncate(5);
            out.push(format!("(还有 {more} 条网络拒绝没有列出。)"));
        }
        out
    }
}

/// A listener being served: its port inside the namespace and its refusal log. It is
/// served for the rest of the process, even after the namespaces are made anew: a
/// long-lived process started in them (an MCP server) keeps its way out.
pub(super) struct Proxy {
    pub port: u16,
    log: Arc<RefusalLog>,
}

impl Proxy {
    /// Refusals from now on.
    pub fn refusals(&self) -> Refusals {
        Refusals {
            log: Some(self.log.clone()),
            from: self.log.total(),
        }
    }
}

/// The proxy's runtime: a current-thread runtime on a thread of its own.
fn runtime() -> std::io::Result<tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("flower-netproxy".into())
                .spawn(move || {
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => {
                            let _ = tx.send(Ok(rt.handle().clone()));
                            rt.block_on(std::future::pending::<()>());
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                });
            match spawned {
                Ok(_) => rx
                    .recv()
                    .unwrap_or_else(|_| Err("the proxy thread died".into())),
                Err(e) => Err(e.to_string()),
            }
        })
        .clone()
        .map_err(std::io::Error::other)
}

/// Serves the listening socket `listener` (made inside a command's namespace) under
/// `rules`.
pub(super) fn start(listener: OwnedFd, rules: &NetworkRules) -> std::io::Result<Proxy> {
    let listener = std::net::TcpListener::from(listener);
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let handle = runtime()?;
    let rules = Arc::new(rules.clone());
    let log = Arc::new(RefusalLog::default());
    let served = log.clone();
    handle.spawn(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        loop {
            let Ok((client, _)) = listener.accept().await else {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let (rules, log) = (rules.clone(), served.clone());
            tokio::spawn(async move {
                let _ = client.set_nodelay(true);
                wire::serve(client, &Gate { rules, log }).await;
            });
        }
    });
    Ok(Proxy { port, log })
}

/// Why a connection was not made.
#[derive(Debug)]
pub(super) enum Failure {
    Refused(Refusal),
    Unreachable(String),
}

/// The policy and the log, as the protocol handlers use them.
pub(super) struct Gate {
    rules: Arc<NetworkRules>,
    log: Arc<RefusalLog>,
}

impl Gate {
    /// Connects to `host:port` if the rules allow it, to an address that was checked.
    pub(super) async fn open(&self, host: &str, port: u16) -> Result<TcpStream, Failure> {
        let host = rules::normalize(host);
        let refuse = |r: Refusal| {
            self.log.push(r.explain(port));
            Failure::Refused(r)
        };
        self.rules.check_name(&host, port).map_err(refuse)?;
        let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let found =
                    tokio::time::timeout(HANDSHAKE, tokio::net::lookup_host((&*host, port)))
                        .await
                        .map_err(|_| Failure::Unreachable(format!("解析 {host} 超时")))?
                        .map_err(|e| Failure::Unreachable(format!("解析不了 {host}({e})")))?;
                found.map(|a| a.ip()).collect()
            }
        };
        let own = addr::host_addresses();
        let ok = self
            .rules
            .check_addresses(&host, port, &addrs, &|a| own.contains(a))
            .map_err(refuse)?;
        let mut last = format!("{host} 没有地址");
        for ip in ok {
            let to = SocketAddr::new(ip, port);
            match tokio::time::timeout(HANDSHAKE, TcpStream::connect(to)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = format!("连不上 {to}({e})"),
                Err(_) => last = format!("连 {to} 超时"),
            }
        }
        Err(Failure::Unreachable(last))
    }
}

/// Copies both ways until both sides are done: with `splice(2)`, else through buffers.
pub(super) async fn splice(client: TcpStream, upstream: TcpStream) {
    if let Err((mut client, mut upstream)) = splice::both_ways(client, upstream).await {
        let _ =
            tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, BUFFER, BUFFER)
                .await;
    }
}
