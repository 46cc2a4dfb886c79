//! The network policy (issue 40 item 3), through the binary: a command runs in a
//! network namespace of its own whose only way out is flower's proxy (HTTP CONNECT,
//! plain-HTTP forwarding, SOCKS5 with remote names), set in its `HTTP_PROXY` /
//! `ALL_PROXY` variables; `sandbox.network.*` decide where it may go; the host's
//! loopback and private ranges are never reached unless the user's file names them.
//!
//! "The internet" is a server behind a veth pair whose far side has a TEST-NET address
//! (root; component `netns`); everything else needs only Landlock and user namespaces.

use crate::sandbox::{Setup, content, landlock_or_skip, run_commands, setup};
use crate::support::netns::DroppingLink;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An HTTP server on the host's loopback that answers `hello` and counts connections.
struct Upstream {
    port: u16,
    seen: Arc<AtomicUsize>,
}

fn upstream() -> Upstream {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let port = serve_loopback(move |mut conn| {
        count.fetch_add(1, Ordering::SeqCst);
        read_head(&mut conn);
        let _ = conn
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n");
    });
    Upstream { port, seen }
}

/// Listens on the host's loopback and hands each connection to `handle` on a thread of
/// its own; the port.
pub(crate) fn serve_loopback(handle: impl Fn(TcpStream) + Clone + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let handle = handle.clone();
            std::thread::spawn(move || handle(conn));
        }
    });
    port
}

/// An HTTP request's head, read byte by byte through its blank line (or what came
/// before the connection ended).
pub(crate) fn read_head(conn: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && conn.read(&mut b).is_ok_and(|n| n == 1) {
        head.push(b[0]);
    }
    head
}

/// The `Content-Length` a request head names (0 when none).
pub(crate) fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes `network` as `sandbox.network` of the settings file at `path`.
pub(crate) fn settings(path: &std::path::Path, network: Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        serde_json::to_string(&json!({ "sandbox": { "network": network } })).unwrap(),
    )
    .unwrap();
}

pub(crate) fn user_settings(s: &Setup, network: Value) {
    settings(&s.home.join(".claude/settings.json"), network);
}

pub(crate) fn results(s: &Setup, commands: &[String]) -> Vec<String> {
    let (out, results) = run_commands(s, commands, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(results.len(), commands.len());
    results.iter().map(content).collect()
}

#[test]
fn a_denied_or_unlisted_domain_is_refused_naming_the_rule() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    user_settings(
        &s,
        json!({
            "allowedDomains": ["example.com", "*.example.org"],
            "deniedDomains": ["bad.example.org"],
        }),
    );
    let out = results(
        &s,
        &[
            "curl -sS http://bad.example.org/".into(),
            "curl -sS -p http://other.example.net/; echo \"exit=$?\"".into(),
            "curl -sS -x \"$ALL_PROXY\" http://other.example.net/; echo \"exit=$?\"".into(),
            "env | grep -i _proxy= | sort".into(),
        ],
    );
    // The proxy's answer names the rule, and so does the note flower adds.
    assert!(
        out[0].contains("sandbox.network.deniedDomains"),
        "{}",
        out[0]
    );
    assert!(out[0].contains("\"bad.example.org\""), "{}", out[0]);
    assert!(out[1].contains("403"), "{}", out[1]);
    assert!(!out[1].contains("exit=0"), "{}", out[1]);
    assert!(
        out[1].contains("flower 的网络代理拒绝了 other.example.net:80"),
        "{}",
        out[1]
    );
    assert!(
        out[1].contains("sandbox.network.allowedDomains"),
        "{}",
        out[1]
    );
    // SOCKS5 says "not allowed by ruleset"; the note says which rule.
    assert!(!out[2].contains("exit=0"), "{}", out[2]);
    assert!(
        out[2].contains("sandbox.network.allowedDomains"),
        "{}",
        out[2]
    );
    for var in [
        "HTTP_PROXY=http://127.0.0.1:",
        "ALL_PROXY=socks5h://127.0.0.1:",
    ] {
        assert!(out[3].contains(var), "{}", out[3]);
    }
    assert!(
        out[3].contains("NO_PROXY=localhost,127.0.0.1,::1"),
        "{}",
        out[3]
    );
}

#[test]
fn the_host_loopback_is_unreachable_directly_and_through_the_proxy() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let up = upstream();
    let p = up.port;
    let proxied = |how: &str, host: &str| {
        format!("curl -sS --noproxy '' {how} http://{host}:{p}/; echo \"exit=$?\"")
    };
    let commands = [
        format!("exec 3<>/dev/tcp/127.0.0.1/{p} && echo connected"),
        proxied("-x \"$HTTP_PROXY\"", "127.0.0.1"),
        proxied("-x \"$HTTP_PROXY\"", "localhost"),
        proxied("-p -x \"$HTTP_PROXY\"", "localhost"),
        proxied("-x \"$ALL_PROXY\"", "localhost"),
        proxied("-x \"$ALL_PROXY\"", "[::ffff:127.0.0.1]"),
        "curl -sS http://169.254.169.254/latest/meta-data/; echo \"exit=$?\"".into(),
    ];
    let out = results(&s, &commands);
    assert!(!out[0].contains("connected"), "{}", out[0]);
    for (c, o) in commands.iter().zip(&out).skip(1) {
        assert!(!o.contains("hello"), "{c}: {o}");
        assert!(o.contains("本机或内网地址"), "{c}: {o}");
        assert!(o.contains("~/.claude/settings.json"), "{c}: {o}");
    }
    assert_eq!(
        up.seen.load(Ordering::SeqCst),
        0,
        "the host's listener saw a connection"
    );

    // One line in the user's file lets a name through to the local service …
    user_settings(
        &s,
        json!({ "allowedDomains": ["*", format!("localhost:{p}")] }),
    );
    let through = [
        proxied("-x \"$HTTP_PROXY\"", "localhost"),
        proxied("-x \"$ALL_PROXY\"", "localhost"),
        proxied("-x \"$HTTP_PROXY\"", "127.0.0.1"),
    ];
    let out = results(&s, &through);
    assert!(out[0].contains("hello"), "{}", out[0]);
    assert!(out[1].contains("hello"), "{}", out[1]);
    assert!(
        !out[2].contains("hello"),
        "only the name was allowed: {}",
        out[2]
    );
    // … which a project's file may narrow …
    settings(
        &s.ws.join(".claude/settings.local.json"),
        json!({ "allowedDomains": ["example.com"] }),
    );
    let out = results(&s, &through[..1]);
    assert!(!out[0].contains("hello"), "{}", out[0]);
    // … but never widen: a project's rule alone does not open the host.
    std::fs::remove_file(s.home.join(".claude/settings.json")).unwrap();
    settings(
        &s.ws.join(".claude/settings.local.json"),
        json!({ "allowedDomains": ["*", format!("localhost:{p}")], "allowAllUnixSockets": true }),
    );
    let out = results(&s, &through[..1]);
    assert!(!out[0].contains("hello"), "{}", out[0]);
    assert!(out[0].contains("本机或内网地址"), "{}", out[0]);
}

#[test]
fn a_public_address_is_reached_through_the_proxy_only() {
    if !landlock_or_skip() {
        return;
    }
    let Some(mut link) = DroppingLink::public() else {
        return;
    };
    let s = setup();
    let up = upstream();
    let at = link.forward(format!("127.0.0.1:{}", up.port).parse().unwrap());
    let commands = [
        format!("curl -sS http://{at}/"),
        format!("curl -sS -p http://{at}/"),
        format!("curl -sS -x \"$ALL_PROXY\" http://{at}/"),
        format!(
            "exec 3<>/dev/tcp/{}/{} && echo connected",
            at.ip(),
            at.port()
        ),
    ];
    let out = results(&s, &commands);
    for o in &out[..3] {
        assert!(o.contains("hello"), "{o}");
    }
    assert!(!out[3].contains("connected"), "{}", out[3]);
    // A narrower list refuses it.
    user_settings(&s, json!({ "allowedDomains": ["example.com"] }));
    let out = results(&s, &commands[..1]);
    assert!(
        out[0].contains("sandbox.network.allowedDomains"),
        "{}",
        out[0]
    );
}

/// An HTTP server on the host's loopback that streams every request's body back as
/// the answer's while it still reads it: both directions at once.
fn echo_upstream() -> u16 {
    serve_loopback(|mut conn| {
        let length = content_length(&read_head(&mut conn));
        let answer =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
        let mut back = conn.try_clone().unwrap();
        let _ = std::io::copy(&mut (&conn).take(length as u64), &mut back);
    })
}

/// The relay bounds what it queues and splices in pieces: every byte still arrives,
/// in order, both ways at once, through each of the proxy's three ways.
#[test]
fn a_large_transfer_through_the_proxy_arrives_whole_both_ways() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let p = echo_upstream();
    user_settings(
        &s,
        json!({ "allowedDomains": ["*", format!("localhost:{p}")] }),
    );
    let commands: Vec<String> = [
        "-x \"$HTTP_PROXY\"",
        "-p -x \"$HTTP_PROXY\"",
        "-x \"$ALL_PROXY\"",
    ]
    .iter()
    .enumerate()
    .map(|(i, how)| {
        format!(
            "head -c 24000000 /dev/urandom > in{i} && curl -sS --noproxy '' {how} \
                 -H 'Expect:' --data-binary @in{i} -o out{i} http://localhost:{p}/ \
                 && cmp in{i} out{i} && echo \"whole $(wc -c < out{i})\""
        )
    })
    .collect();
    let out = results(&s, &commands);
    for (c, o) in commands.iter().zip(&out) {
        assert!(o.contains("whole 24000000"), "{c}: {o}");
    }
}

pub(crate) fn python() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        crate::support::skip::skip(crate::support::skip::PYTHON, "it needs python3");
    }
    ok
}

#[test]
fn a_server_the_command_starts_on_loopback_answers_it() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    let serve = "python3 -m http.server 18080 --bind 127.0.0.1 >/dev/null 2>&1 & \
                 for i in $(seq 400); do curl -s -o /dev/null http://127.0.0.1:18080/ \
                 && echo served && break; sleep 0.05; done"
        .to_string();
    let listen = "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); \
                  s.listen(); print(\"listening\")'"
        .to_string();
    let out = results(&s, &[serve.clone(), listen.clone()]);
    assert!(out[0].contains("served"), "{}", out[0]);
    assert!(out[1].contains("listening"), "{}", out[1]);
    user_settings(&s, json!({ "allowLocalBinding": false }));
    let out = results(&s, &[listen]);
    assert!(!out[0].contains("listening"), "{}", out[0]);
    assert!(out[0].contains("Operation not permitted"), "{}", out[0]);
}

#[test]
fn a_bad_network_setting_exits_2_before_any_request() {
    let s = setup();
    for network in [
        json!({ "allowedDomains": ["exa mple.com"] }),
        json!({ "deniedDomains": "example.com" }),
        json!({ "allowedDomains": ["example.com:99999"] }),
        json!({ "allowUnixSockets": ["relative.sock"] }),
        json!({ "allowLocalBinding": "yes" }),
    ] {
        user_settings(&s, network.clone());
        let server = crate::support::FakeServer::start(vec![crate::support::Reply::text("never")]);
        let out = crate::sandbox::once_in(&s, &server, &[]);
        assert_eq!(out.status.code(), Some(2), "{network}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("sandbox.network"), "{network}: {stderr}");
        assert_eq!(server.request_count(), 0);
    }
}

/// The address classes the proxy refuses, through the library: an IPv4 address inside
/// an IPv6 one is judged as that address.
#[test]
fn local_addresses_are_told_from_public_ones() {
    use flower::tools::sandbox::proxy::is_public;
    for local in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "::1",
        "::",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        // Each range's edges.
        "0.255.255.255",
        "240.0.0.1",
        "100.127.255.255",
        "192.0.0.8",
        "198.19.255.255",
        "febf::1",
        "fec0::1",
        "feff::1",
        "fdff::1",
        "::2",
        "::0.1.0.0",
        "64:ff9b::7f00:1",
        "2002:a00:1::",
    ] {
        assert!(!is_public(&local.parse().unwrap()), "{local}");
    }
    for public in [
        "1.1.1.1",
        "198.51.100.2",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
        "1.0.0.1",
        "100.63.255.255",
        "100.128.0.1",
        "8.64.0.1",
        "192.0.1.1",
        "192.1.0.1",
        "198.17.255.255",
        "198.20.0.1",
        "8.18.0.1",
        "223.255.255.254",
        "fe7f::1",
        "fbff::1",
        "::1.2.3.4",
        // Not a form that carries an IPv4 address: judged as IPv6.
        "1::ffff:7f00:1",
        "::1:7f00:1",
        "64:ff9b:1::7f00:1",
        "2002:808:808::",
    ] {
        assert!(is_public(&public.parse().unwrap()), "{public}");
    }
}

#[test]
fn host_patterns_match_as_claude_code_writes_them() {
    use flower::tools::sandbox::proxy::HostPattern;
    let p = |s: &str| s.parse::<HostPattern>().unwrap();
    assert!(p("*.example.com").matches("a.b.example.com", 443));
    assert!(!p("*.example.com").matches("example.com", 443));
    assert!(!p("*.example.com").matches("badexample.com", 443));
    assert!(p("example.com:8080").matches("example.com", 8080));
    assert!(!p("example.com:8080").matches("example.com", 80));
    assert!(p("[::1]:5432").matches("::1", 5432));
    assert!(p("Example.COM.").matches("example.com", 1));
    assert!(!p("*").is_explicit());
    for bad in [
        "exa mple.com",
        "*.",
        "a..b",
        "example.com:0",
        "[::1",
        "ex*ample.com",
    ] {
        assert!(bad.parse::<HostPattern>().is_err(), "{bad}");
    }
}

/// The merged policy through the library: every allowed list must match, any denied
/// entry refuses, and a local address needs an explicit entry in every list.
#[test]
fn network_rules_refuse_and_explain_as_documented() {
    use flower::tools::sandbox::proxy::{HostPattern, NetworkRules, Refusal};
    use std::net::IpAddr;
    let p = |s: &str| s.parse::<HostPattern>().unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let rules = NetworkRules {
        allowed: vec![
            vec![p("*")],
            vec![p("*.example.com"), p("db.internal:5432")],
        ],
        denied: vec![p("bad.example.com")],
        ..NetworkRules::default()
    };
    assert_eq!(rules.check_name("a.example.com", 443), Ok(()));
    assert_eq!(
        rules.check_name("bad.example.com", 443),
        Err(Refusal::Denied {
            host: "bad.example.com".into(),
            entry: "bad.example.com".into()
        })
    );
    // The first list (`*`) matches; the second does not.
    assert_eq!(
        rules.check_name("example.org", 443),
        Err(Refusal::NotAllowed {
            host: "example.org".into()
        })
    );
    // Only the second list names `db.internal` explicitly: the first is `*`.
    assert!(!rules.names_explicitly("db.internal", 5432));
    let both = NetworkRules {
        allowed: vec![vec![p("db.internal")], vec![p("db.internal:5432")]],
        ..NetworkRules::default()
    };
    assert!(both.names_explicitly("db.internal", 5432));
    assert!(!both.names_explicitly("db.internal", 5433));
    assert!(!NetworkRules::default().names_explicitly("example.com", 443));

    let none = |_: &IpAddr| false;
    let public = [ip("198.51.100.7"), ip("2606:4700::1111")];
    // Public addresses pass; a local one among them is dropped; only local: refused,
    // naming the first; the host's own addresses count as local.
    assert_eq!(
        rules.check_addresses("a.example.com", 443, &public, &none),
        Ok(public.to_vec())
    );
    assert_eq!(
        rules.check_addresses("a.example.com", 443, &[ip("10.0.0.1"), public[0]], &none),
        Ok(vec![public[0]])
    );
    assert_eq!(
        rules.check_addresses("a.example.com", 443, &[ip("10.0.0.1"), ip("::1")], &none),
        Err(Refusal::Local {
            host: "a.example.com".into(),
            addr: ip("10.0.0.1")
        })
    );
    let own = |a: &IpAddr| *a == public[0];
    assert_eq!(
        rules.check_addresses("a.example.com", 443, &public[..1], &own),
        Err(Refusal::Local {
            host: "a.example.com".into(),
            addr: public[0]
        })
    );
    assert_eq!(
        rules.check_addresses("a.example.com", 443, &[], &none),
        Ok(vec![])
    );
    // Named in every list: local addresses too.
    assert_eq!(
        both.check_addresses("db.internal", 5432, &[ip("10.0.0.1")], &own),
        Ok(vec![ip("10.0.0.1")])
    );

    assert_eq!(
        Refusal::NotAllowed {
            host: "example.org".into()
        }
        .explain(8080),
        "flower 的网络代理拒绝了 example.org:8080:它不在 sandbox.network.allowedDomains 里。\
         要放行,在每个写了 sandbox.network.allowedDomains 的设置文件里加上 \"example.org\"。"
    );
}

/// Patterns print as they are written (the settings and the refusals quote them), and
/// a host is compared in the form patterns are stored.
#[test]
fn host_patterns_print_and_hosts_normalize() {
    use flower::tools::sandbox::proxy::HostPattern;
    use flower::tools::sandbox::proxy::rules::normalize;
    for (written, shown) in [
        ("*", "*"),
        ("*:8080", "*:8080"),
        ("Example.com.", "example.com"),
        ("*.example.com:443", "*.example.com:443"),
        ("10.0.0.1:22", "10.0.0.1:22"),
        ("[::1]:5432", "[::1]:5432"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("db_1.internal", "db_1.internal"),
    ] {
        assert_eq!(written.parse::<HostPattern>().unwrap().to_string(), shown);
    }
    assert_eq!(normalize(" [::1] "), "::1");
    assert_eq!(normalize("Example.COM."), "example.com");
    let p = |s: &str| s.parse::<HostPattern>().unwrap();
    assert!(p("*:8080").matches("anything", 8080));
    assert!(!p("*:8080").matches("anything", 80));
    assert!(p("10.0.0.1").matches("10.0.0.1", 1));
    assert!(!p("10.0.0.1").matches("10.0.0.2", 1));
    assert!(!p("10.0.0.1").matches("host", 1));
    assert!(!p("*.example.com").matches(".example.com", 1));
    assert!(p("*.example.com").is_explicit());
    for bad in [
        "",
        "[::1]x",
        "example.com:",
        "example.com:http",
        &format!("{}.com", "a".repeat(64)),
        &format!("{}.com", ["a"; 127].join(".")),
        "ex!ample.com",
    ] {
        assert!(bad.parse::<HostPattern>().is_err(), "{bad}");
    }
    for good in [
        &format!("{}.com", "a".repeat(63)),
        &format!("{}.com", ["a"; 125].join(".")),
        "-a.com",
    ] {
        assert!(good.parse::<HostPattern>().is_ok(), "{good}");
    }
    let err = "exa mple.com"
        .parse::<HostPattern>()
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("\"exa mple.com\":要一个域名"), "{err}");
    let err = "example.com:0"
        .parse::<HostPattern>()
        .unwrap_err()
        .to_string();
    assert_eq!(err, "\"example.com:0\":端口 \"0\" 要 1 到 65535");
}

/// An address of one of the host's own interfaces is the host, however public its
/// range: a service listening there is refused like one on loopback.
#[test]
fn the_hosts_own_public_addresses_are_local() {
    if !landlock_or_skip() {
        return;
    }
    let Some(link) = DroppingLink::public() else {
        return;
    };
    let s = setup();
    let mut at = vec![std::net::IpAddr::V4(link.host_ip())];
    at.extend(link.host_ipv6().map(std::net::IpAddr::V6));
    let mut seen = Vec::new();
    let mut commands = Vec::new();
    for ip in at {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        std::thread::spawn(move || {
            for _ in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        seen.push(count);
        let host = match ip {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        commands.push(format!(
            "curl -sS -m 5 http://{host}:{port}/; echo \"exit=$?\""
        ));
    }
    let out = results(&s, &commands);
    for (c, o) in commands.iter().zip(&out) {
        assert!(o.contains("本机或内网地址"), "{c}: {o}");
    }
    for count in seen {
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }
}
