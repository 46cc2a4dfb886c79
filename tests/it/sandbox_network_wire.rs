//! The network proxy's two protocols, byte by byte, through the binary: a Python client
//! inside the sandbox speaks raw SOCKS5 and HTTP to the proxy's port (from its
//! `HTTP_PROXY`), and an upstream on the host's loopback answers every request with the
//! request it received, so the test sees what the proxy forwarded. Then the refusal
//! notes the Bash tool adds to a command's result: at most five, each host once, only
//! the command's own, from a log of bounded length.

use crate::sandbox::{Setup, bash_calls, landlock_or_skip, once_command, setup};
use crate::sandbox_network::{
    content_length, python, read_head, results, serve_loopback, user_settings,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;

/// An HTTP server on the host's loopback whose answer's body is the request it read:
/// the head, then `Content-Length` bytes of body.
fn mirror_upstream() -> u16 {
    serve_loopback(|mut conn| {
        let mut got = read_head(&mut conn);
        let mut body = vec![0u8; content_length(&got)];
        if conn.read_exact(&mut body).is_err() {
            return;
        }
        got.extend_from_slice(&body);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            got.len()
        );
        let _ = conn.write_all(head.as_bytes());
        let _ = conn.write_all(&got);
    })
}

/// A port on the host's loopback nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The client: each exchange prints one line, `name <JSON string of what came back>`
/// (bytes as Latin-1, then `<eof>` or `<reset>` after the proxy closed, `<open>` when it
/// kept waiting).
const CLIENT: &str = r#"
import json, os, socket, sys, time
PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
P, C = int(sys.argv[1]), int(sys.argv[2])

def connect():
    return socket.create_connection(("127.0.0.1", PROXY), timeout=20)

def rest(s, wait=20):
    s.settimeout(wait)
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except socket.timeout:
            return out + b"<open>"
        except ConnectionResetError:
            return out + b"<reset>"
        if not b:
            return out + b"<eof>"
        out += b

def exactly(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            break
        out += b
    return out

def show(name, data):
    print(name, json.dumps(data.decode("latin-1")), flush=True)

def port(n):
    return n.to_bytes(2, "big")

NAME = b"\x03\x09localhost"

def socks(name, greeting, request, then=None):
    s = connect()
    s.sendall(greeting)
    g = exactly(s, 2)
    if g != b"\x05\x00":
        return show(name, g + rest(s))
    s.sendall(request)
    reply = exactly(s, 10)
    if then is not None and reply[1:2] == b"\x00":
        s.sendall(then)
        return show(name, reply + rest(s))
    show(name, reply + rest(s))

GET = b"GET /through HTTP/1.0\r\n\r\n"
socks("socks-no-method", b"\x05\x01\x02", b"")
socks("socks-name", b"\x05\x02\x02\x00", b"\x05\x01\x00" + NAME + port(P), GET)
socks("socks-v4-local", b"\x05\x01\x00", b"\x05\x01\x00\x01\x7f\x00\x00\x01" + port(P))
socks("socks-v6-local", b"\x05\x01\x00", b"\x05\x01\x00\x04" + b"\x00" * 15 + b"\x01" + port(P))
socks("socks-atyp", b"\x05\x01\x00", b"\x05\x01\x00\x09")
socks("socks-bind", b"\x05\x01\x00", b"\x05\x02\x00" + NAME + port(P))
socks("socks-version", b"\x05\x01\x00", b"\x04\x01\x00" + NAME + port(P))
socks("socks-closed", b"\x05\x01\x00", b"\x05\x01\x00" + NAME + port(C))

def http(name, *parts):
    s = connect()
    for i, part in enumerate(parts):
        if i:
            time.sleep(0.3)
        s.sendall(part)
    show(name, rest(s))

def pf(text):
    return text.replace("{P}", str(P)).replace("{C}", str(C)).encode("latin-1")

http("http-garbage", b"GARBAGE\r\n\r\n")
http("http-two-words", b"GET /\r\n\r\n")
http("http-https", b"GET https://localhost/ HTTP/1.1\r\n\r\n")
http("http-not-utf8", pf("GET http://localhost:{P}/\xff HTTP/1.1\r\n\r\n"))
http("http-forward", pf(
    "GET HTTP://u:pw@LOCALHOST.:{P}/a/b?c=d HTTP/1.1\r\nHost: localhost\r\n"
    "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n"
    "Proxy-Authorization: Basic eA==\r\nX-Kept: yes\r\n\r\n"))
http("http-query", pf("GET http://localhost:{P}?q=1 HTTP/1.1\r\n\r\n"))
http("http-bare", pf("GET http://localhost:{P} HTTP/1.1\r\n\r\n"))
http("http-body", pf("POST http://localhost:{P}/up HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"))
http("http-split", pf("GET http://localhost:{P}/split HTTP/1.1\r\nX-A: 1\r\n\r"), b"\n")
s = connect()
PAD = b"X-Pad: " + b"a" * 60000 + b"\r\n"
s.sendall(pf("GET http://localhost:{P}/long HTTP/1.1\r\n") + PAD + b"\r\n")
got = rest(s)
show("http-long-head", got[:got.index(b"\r\n")] + (b" padded" if PAD in got else b" cut"))
http("http-v6-local", pf("GET http://[::1]:{P}/ HTTP/1.1\r\n\r\n"))
http("http-default-port", b"GET http://localhost/ HTTP/1.1\r\n\r\n")
http("http-no-host", b"GET http:///x HTTP/1.1\r\n\r\n")
http("connect-default-port", b"CONNECT localhost HTTP/1.1\r\n\r\n")
http("connect-v6-default-port", b"CONNECT [::1] HTTP/1.1\r\n\r\n")
http("connect-v6-port", pf("CONNECT [::1]:{P} HTTP/1.1\r\n\r\n"))
http("connect-no-host", b"CONNECT :80 HTTP/1.1\r\n\r\n")
http("connect-v6-unclosed", b"CONNECT [::1 HTTP/1.1\r\n\r\n")
http("connect-v6-junk", b"CONNECT [::1]x HTTP/1.1\r\n\r\n")
http("connect-bad-port", b"CONNECT localhost:http HTTP/1.1\r\n\r\n")
http("connect-closed", pf("CONNECT localhost:{C} HTTP/1.1\r\n\r\n"))
http("connect-tunnel", pf("CONNECT localhost:{P} HTTP/1.1\r\n\r\n") + GET)

# One byte alone first, so that the proxy's reads (4 KiB each) never add up to 64 KiB
# exactly: the limit must hold past it, not only at it.
s = connect()
s.sendall(b"G")
time.sleep(0.3)
try:
    s.sendall(pf("ET http://localhost:{P}/ HTTP/1.1\r\nX-Long: ") + b"a" * 70000)
except OSError:
    pass
show("head-too-long", rest(s))
"#;

/// Runs the client in a sandboxed command; its lines by exchange name.
fn exchanges(s: &Setup, upstream: u16, closed: u16) -> BTreeMap<String, String> {
    std::fs::write(s.ws.join("client.py"), CLIENT).unwrap();
    let out = results(s, &[format!("python3 client.py {upstream} {closed}")]);
    let mut map = BTreeMap::new();
    for line in out[0].lines() {
        if let Some((name, data)) = line.split_once(' ')
            && let Ok(Value::String(data)) = serde_json::from_str::<Value>(data)
        {
            // Latin-1 back to bytes, then the UTF-8 the proxy wrote.
            let bytes: Vec<u8> = data.chars().map(|c| c as u32 as u8).collect();
            map.insert(
                name.to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            );
        }
    }
    assert_eq!(map.len(), 31, "{:?}\n{}", map.keys(), out[0]);
    map
}

#[test]
fn the_proxy_speaks_socks5_and_http_as_their_rfcs_say() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    let (p, c) = (mirror_upstream(), closed_port());
    user_settings(
        &s,
        json!({
            "allowedDomains": ["*", "localhost"],
            "deniedDomains": ["localhost:443", "localhost:80"],
        }),
    );
    let got = exchanges(&s, p, c);
    let at = |name: &str| got[name].as_str();
    let reply = |code: u8| String::from_utf8_lossy(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).into_owned();

    // SOCKS5: no acceptable method; the name resolved here; local addresses by
    // number refused (2); an unknown address type (8); only CONNECT, only version 5
    // (7); a port nothing listens on (4).
    // 0xFF (no acceptable method), read lossily.
    assert_eq!(at("socks-no-method"), "\u{5}\u{fffd}<eof>");
    let name = at("socks-name");
    assert!(name.starts_with(&reply(0)), "{name:?}");
    assert!(name.contains("GET /through HTTP/1.0"), "{name:?}");
    assert_eq!(at("socks-v4-local"), format!("{}<eof>", reply(2)));
    assert_eq!(at("socks-v6-local"), format!("{}<eof>", reply(2)));
    assert_eq!(at("socks-atyp"), format!("{}<eof>", reply(8)));
    assert_eq!(at("socks-bind"), format!("{}<eof>", reply(7)));
    assert_eq!(at("socks-version"), format!("{}<eof>", reply(7)));
    assert_eq!(at("socks-closed"), format!("{}<eof>", reply(4)));

    // HTTP: what it cannot read is a 400 that says why.
    let status = |name: &str, line: &str, why: &str| {
        let got = at(name);
        assert!(
            got.starts_with(&format!("HTTP/1.1 {line}\r\n")),
            "{name}: {got:?}"
        );
        assert!(got.contains(why), "{name}: {got:?}");
        assert!(got.ends_with("\n<eof>"), "{name}: {got:?}");
    };
    status("http-garbage", "400 Bad Request", "看不懂请求行");
    status("http-two-words", "400 Bad Request", "看不懂请求行");
    status("http-https", "400 Bad Request", "只转发 http://");
    status("http-not-utf8", "400 Bad Request", "请求头不是 UTF-8");
    status("http-no-host", "400 Bad Request", "URI 里没有主机");
    status("connect-no-host", "400 Bad Request", "CONNECT 要 host:port");
    status(
        "connect-v6-unclosed",
        "400 Bad Request",
        "CONNECT 要 host:port",
    );
    status("connect-v6-junk", "400 Bad Request", "CONNECT 要 host:port");
    status(
        "connect-bad-port",
        "400 Bad Request",
        "CONNECT 要 host:port",
    );
    // The default ports are 80 and 443: the rules that deny them answer.
    status("http-default-port", "403 Forbidden", "拒绝了 localhost:80:");
    status(
        "connect-default-port",
        "403 Forbidden",
        "拒绝了 localhost:443:",
    );
    status(
        "connect-v6-default-port",
        "403 Forbidden",
        "拒绝了 ::1:443:",
    );
    status(
        "connect-v6-port",
        "403 Forbidden",
        &format!("拒绝了 ::1:{p}:它指向本机"),
    );
    status(
        "http-v6-local",
        "403 Forbidden",
        &format!("拒绝了 ::1:{p}:它指向本机"),
    );
    status("connect-closed", "502 Bad Gateway", "连不上");

    // A forwarded request: origin-form path, its own headers but none of the hop's,
    // one request per connection, and the bytes after the head with it.
    let forward = at("http-forward");
    assert!(forward.starts_with("HTTP/1.1 200 OK\r\n"), "{forward:?}");
    let sent = forward.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(
        sent,
        "GET /a/b?c=d HTTP/1.1\r\nHost: localhost\r\nX-Kept: yes\r\nConnection: close\r\n\r\n<eof>"
    );
    for (name, line) in [
        ("http-query", "GET /?q=1 HTTP/1.1\r\n"),
        ("http-bare", "GET / HTTP/1.1\r\n"),
        (
            "http-split",
            "GET /split HTTP/1.1\r\nX-A: 1\r\nConnection: close\r\n\r\n",
        ),
    ] {
        assert!(
            at(name).contains(&format!("\r\n\r\n{line}")),
            "{name}: {:?}",
            at(name)
        );
    }
    // A head under 64 KiB, however long, goes through whole.
    assert_eq!(at("http-long-head"), "HTTP/1.1 200 OK padded");
    assert!(
        at("http-body").ends_with("Content-Length: 5\r\nConnection: close\r\n\r\nhello<eof>"),
        "{:?}",
        at("http-body")
    );
    // A tunnel: the proxy's 200, then the bytes that followed CONNECT, relayed.
    let tunnel = at("connect-tunnel");
    assert!(
        tunnel.starts_with("HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{tunnel:?}"
    );
    assert!(
        tunnel.ends_with("GET /through HTTP/1.0\r\n\r\n<eof>"),
        "{tunnel:?}"
    );
    // A head past 64 KiB is dropped unanswered.
    let long = at("head-too-long");
    assert!(long == "<eof>" || long == "<reset>", "{long:?}");
}

/// Curl, quietly, to each of `hosts` through the proxy's HTTP side.
fn fetch_all(hosts: &[String]) -> String {
    hosts
        .iter()
        .map(|h| format!("curl -s -o /dev/null http://{h}/"))
        .collect::<Vec<_>>()
        .join("; ")
        + "; echo fetched"
}

/// The notes after the command's own output (curl prints nothing).
fn notes(result: &str) -> Vec<&str> {
    result
        .lines()
        .filter(|l| !l.is_empty() && *l != "fetched")
        .collect()
}

#[test]
fn a_commands_refusals_are_noted_once_each_at_most_five() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    user_settings(&s, json!({ "deniedDomains": ["*.denied.test"] }));
    let host = |i: usize| format!("h{i}.denied.test");
    // Five hosts, each twice: five notes, no "more".
    let five: Vec<String> = (1..=5).chain(1..=5).map(host).collect();
    // Seven hosts: five notes and the count of the rest; then a command with none.
    let seven: Vec<String> = (1..=7).map(host).collect();
    let out = results(&s, &[fetch_all(&five)]);
    let lines = notes(&out[0]);
    assert_eq!(lines.len(), 5, "{:?}", out[0]);
    for (i, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("flower 的网络代理拒绝了 {}:80:", host(i + 1))),
            "{line}"
        );
    }
    let out = results(&s, &[fetch_all(&seven)]);
    let lines = notes(&out[0]);
    assert_eq!(lines.len(), 6, "{:?}", out[0]);
    assert_eq!(lines[5], "(还有 2 条网络拒绝没有列出。)");
}

/// 300 requests the rules refuse, each to a host of its own.
const MANY: &str = r#"
import os, socket
port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
for i in range(300):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET http://h%d.denied.test/ HTTP/1.1\r\n\r\n" % i)
    while s.recv(65536):
        pass
print("fetched")
"#;

#[test]
fn the_refusal_log_keeps_the_last_256() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    user_settings(&s, json!({ "deniedDomains": ["*.denied.test"] }));
    // 300 refusals in one command, then one more command that is refused nothing.
    std::fs::write(s.ws.join("many.py"), MANY).unwrap();
    let many = "python3 many.py".to_string();
    let out = results(&s, &[many, "echo fetched".into()]);
    let lines = notes(&out[0]);
    assert_eq!(lines.len(), 6, "{:?}", out[0]);
    // The oldest 44 fell out of the log: the first note is the 45th host.
    assert!(
        lines[0].starts_with("flower 的网络代理拒绝了 h44.denied.test:80:"),
        "{}",
        lines[0]
    );
    assert_eq!(lines[5], "(还有 251 条网络拒绝没有列出。)");
    assert_eq!(notes(&out[1]), Vec::<&str>::new(), "{}", out[1]);
}

/// Holds 20 tunnels open, twice, each batch until the test says `go`.
const HOLDER: &str = r#"
import os, socket, sys, time
PROXY = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
P = int(sys.argv[1])

def wait_for(name):
    while not os.path.exists(name):
        time.sleep(0.02)

for batch in (1, 2):
    if batch == 2:
        wait_for("next")
    held = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", PROXY), timeout=20)
        s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % P)
        got = b""
        while not got.endswith(b"\r\n\r\n"):
            got += s.recv(1)
        held.append(s)
    open("held%d" % batch, "w").close()
    wait_for("go%d" % batch)
    for s in held:
        s.close()
print("done")
"#;

/// The pipes and sockets a process holds, seen from outside it (`pidfd_getfd`).
struct Held {
    /// Each pipe once: its size and whether its descriptors are non-blocking and
    /// close-on-exec.
    pipes: BTreeMap<String, (i32, bool)>,
    /// `TCP_NOTSENT_LOWAT` of each TCP socket.
    unsent_max: Vec<i32>,
}

fn held_by(pid: u32) -> Held {
    // SAFETY: pidfd_open and pidfd_getfd hand back descriptors this test owns; fcntl
    // and getsockopt read them.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) as i32;
        assert!(pidfd >= 0, "{}", std::io::Error::last_os_error());
        let mut held = Held {
            pipes: BTreeMap::new(),
            unsent_max: Vec::new(),
        };
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
        {
            let Ok(entry) = entry else { continue };
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let target = target.to_string_lossy().into_owned();
            let Ok(n) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, n, 0) as i32;
            if fd < 0 {
                continue;
            }
            if target.starts_with("pipe:") {
                let size = libc::fcntl(fd, libc::F_GETPIPE_SZ);
                let flags = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}"))
                    .ok()
                    .and_then(|info| {
                        let f = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
                        i64::from_str_radix(f.trim(), 8).ok()
                    })
                    .unwrap_or(0);
                let nonblocking_cloexec = flags & i64::from(libc::O_NONBLOCK) != 0
                    && flags & i64::from(libc::O_CLOEXEC) != 0;
                let seen = held.pipes.entry(target).or_insert((size, true));
                seen.1 &= nonblocking_cloexec;
            } else if target.starts_with("socket:") {
                let mut value: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                if libc::getsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NOTSENT_LOWAT,
                    (&raw mut value).cast(),
                    &mut len,
                ) == 0
                {
                    held.unsent_max.push(value);
                }
            }
            libc::close(fd);
        }
        libc::close(pidfd);
        held
    }
}

/// Waits for `path` to appear while flower runs (the command's signal).
fn wait_for_file(path: &std::path::Path, flower: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        assert!(flower.try_wait().unwrap().is_none(), "flower ended first");
        assert!(
            std::time::Instant::now() < deadline,
            "no {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The relay's pipes: at most 16 grown to 1 MiB at once (the user's pipe budget is
/// shared with every other program), given back when their connection ends; each
/// non-blocking and close-on-exec; and each relayed socket's unsent data bounded at
/// 256 KiB. Read from outside flower, while a command holds 20 tunnels open.
#[test]
fn the_relay_grows_at_most_16_pipes_and_bounds_unsent_data() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    user_settings(&s, json!({ "allowedDomains": ["*", "localhost"] }));
    // An upstream that holds each connection until its client ends it.
    let p = serve_loopback(|mut conn| {
        let _ = std::io::copy(&mut conn, &mut std::io::sink());
    });
    std::fs::write(s.ws.join("holder.py"), HOLDER).unwrap();
    let server = bash_calls(&[json!({ "command": format!("python3 holder.py {p}") })]);
    let mut flower = once_command(&s, &server, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    const LARGE: i32 = 1024 * 1024;
    let large = |h: &Held| h.pipes.values().filter(|(size, _)| *size == LARGE).count();
    for batch in 1..=2 {
        wait_for_file(&s.ws.join(format!("held{batch}")), &mut flower);
        let held = held_by(flower.id());
        assert_eq!(large(&held), 16, "batch {batch}: {:?}", held.pipes);
        // 20 tunnels: a pipe each way, the 4 beyond the 16 at the default size.
        let relay = held
            .pipes
            .values()
            .filter(|(size, _)| *size >= 65536)
            .count();
        assert!(relay >= 40, "batch {batch}: {:?}", held.pipes);
        let mut grown = held.pipes.values().filter(|(size, _)| *size == LARGE);
        assert!(grown.all(|(_, flags)| *flags), "{:?}", held.pipes);
        let bounded = held.unsent_max.iter().filter(|v| **v == 256 * 1024).count();
        assert!(bounded >= 40, "batch {batch}: {:?}", held.unsent_max);
        std::fs::write(s.ws.join(format!("go{batch}")), "").unwrap();
        if batch == 1 {
            // The tunnels end; their grown pipes go back before the next batch.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while large(&held_by(flower.id())) > 0 {
                assert!(std::time::Instant::now() < deadline, "the pipes stayed");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            std::fs::write(s.ws.join("next"), "").unwrap();
        }
    }
    assert!(flower.wait().unwrap().success());
}
