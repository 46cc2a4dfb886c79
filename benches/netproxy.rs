//! The network proxy's throughput: a 100 MB download by `curl`, straight (sandbox off)
//! and from a sandboxed command through the proxy (plain-HTTP forwarding, CONNECT,
//! SOCKS5), each as curl measures it (`%{speed_download}`), median of 7. Goal: through
//! the proxy at ≥ 80 % of straight.
//!
//! From two servers: one on the host's loopback (reached through the proxy because the
//! rules name it, `127.0.0.1:PORT` in `allowedDomains`, as a user's file would), and one
//! on "another host": a network namespace joined by a veth pair (root only; skipped
//! with the reason otherwise), over the bare link and over the link shaped to
//! 10 Gbit/s and 1 Gbit/s (`tc … tbf`), what a download from another machine crosses.
//!
//! Also printed, per download: the CPU time of flower's process (the server's threads
//! and, through the proxy, the proxy's thread), of the proxy's thread alone, and of the
//! command (curl, bash). Unlike the wall-clock ratio these do not depend on how loaded
//! the machine is. The relay's ceiling is 100 MB over its thread's CPU time: what the
//! proxy could move if it had a core to itself.
//!
//! `cargo bench --bench netproxy [-- WORD…]` (only the cases whose "link: case" name
//! contains a word; the link's straight case always runs, as the base)
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "shared/other_host.rs"]
mod other_host;

use flower::tools::sandbox::{self, NetworkRules, SandboxPolicy, Support};
use flower::tools::{ProcessGroups, Tool, ToolContext, bash::Bash};
use other_host::OtherHost;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use tokio_util::sync::CancellationToken;

const SIZE: usize = 100 * 1024 * 1024;
const RUNS: usize = 7;
const GOAL: f64 = 80.0;

/// Serves `SIZE` bytes to every request on `listener`.
fn serve(listener: TcpListener) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut b).is_ok_and(|n| n == 1) {
                    head.push(b[0]);
                }
                let chunk = vec![b'x'; 1024 * 1024];
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                );
                for _ in 0..SIZE / chunk.len() {
                    if conn.write_all(&chunk).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// curl's download speed in MB/s for `command` (which prints `%{speed_download}`).
async fn speed(ctx: &ToolContext, command: &str) -> f64 {
    let out = Bash
        .call(
            &flower::content::ToolInput::of_tree(&json!({ "command": command })),
            ctx,
        )
        .await;
    assert!(!out.is_error, "{command}: {}", out.content);
    let bytes_per_s: f64 = out.content.trim().parse().unwrap_or_else(|_| {
        panic!("{command}: {}", out.content);
    });
    bytes_per_s / 1e6
}

/// CPU seconds used so far: this process (`RUSAGE_SELF`), the proxy's thread, and the
/// waited-for children.
fn cpu() -> [f64; 3] {
    let get = |who| {
        // SAFETY: getrusage fills the struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut u) };
        let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
        t(u.ru_utime) + t(u.ru_stime)
    };
    [
        get(libc::RUSAGE_SELF),
        proxy_thread_cpu(),
        get(libc::RUSAGE_CHILDREN),
    ]
}

/// The proxy thread's time on a CPU (`schedstat`, nanoseconds), 0 before it exists.
fn proxy_thread_cpu() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == "flower-netproxy" {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            let ns: f64 = stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0.0);
            return ns / 1e9;
        }
    }
    0.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn context(ws: &Path, sandbox: SandboxPolicy) -> ToolContext {
    ToolContext {
        workspace: ws.to_path_buf(),
        run_dir: ws.to_path_buf(),
        cancel: CancellationToken::new(),
        processes: ProcessGroups::new(),
        sandbox,
        env: Default::default(),
    }
}

/// One link's four cases, printed; nothing when the filter leaves none of its proxied cases.
fn link(rt: &tokio::runtime::Runtime, ws: &Path, link: &str, server: SocketAddr, only: &[String]) {
    let rules = NetworkRules {
        allowed: vec![vec![
            "*".parse().unwrap(),
            server.to_string().parse().unwrap(),
        ]],
        ..NetworkRules::default()
    };
    let sandboxed = context(
        ws,
        SandboxPolicy {
            net: rules,
            ..SandboxPolicy::standard()
        },
    );
    let straight = context(ws, SandboxPolicy::default());
    let url = format!("http://{server}/");
    let curl = |how: &str| {
        format!("curl -s --noproxy '' {how} -o /dev/null -w '%{{speed_download}}' {url}")
    };
    let cases = [
        ("straight (sandbox off)", &straight, curl("")),
        ("proxy, plain HTTP", &sandboxed, curl("-x \"$HTTP_PROXY\"")),
        ("proxy, CONNECT", &sandboxed, curl("-p -x \"$HTTP_PROXY\"")),
        ("proxy, SOCKS5", &sandboxed, curl("-x \"$ALL_PROXY\"")),
    ];
    let wanted = |name: &str| {
        let full = format!("{link}: {name}");
        only.is_empty() || only.iter().any(|o| full.contains(o.as_str()))
    };
    if !cases[1..].iter().any(|(name, ..)| wanted(name)) {
        return;
    }
    println!("{link}:");
    let mut base = 0.0;
    for (name, ctx, command) in cases {
        if base != 0.0 && !wanted(name) {
            continue;
        }
        rt.block_on(speed(ctx, &command));
        let before = cpu();
        let v: Vec<f64> = (0..RUNS)
            .map(|_| rt.block_on(speed(ctx, &command)))
            .collect();
        let after = cpu();
        let [own, relay, child] = [0, 1, 2].map(|i| (after[i] - before[i]) * 1e3 / RUNS as f64);
        let m = median(v);
        let (ratio, ceiling) = if base == 0.0 {
            base = m;
            (String::new(), String::new())
        } else {
            let r = m / base * 100.0;
            let verdict = if r >= GOAL { "met" } else { "missed" };
            (
                format!("{r:>5.1} % of straight (goal ≥ {GOAL:.0} %: {verdict})"),
                format!(
                    ", the relay {relay:.1} ms: at most {:.1} GB/s",
                    SIZE as f64 / (relay / 1e3) / 1e9
                ),
            )
        };
        println!(
            "  {name:<24} {m:>6.0} MB/s {ratio:<38} cpu {own:>5.1} ms flower + {child:>5.1} ms the command{ceiling}"
        );
    }
}

fn main() {
    if let Support::Missing(why) = sandbox::support() {
        println!("proxy throughput: skipped, this kernel has no Landlock ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("100 MB download by curl, median of {RUNS} (MB/s as curl reports it);");
    println!("CPU per download (flower's process, the command's; the proxy's thread):");
    let local = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = local.local_addr().unwrap();
    serve(local);
    link(&rt, &ws, "the host's loopback", at, &only);
    let (host, listener) = match OtherHost::new() {
        Ok(made) => made,
        Err(why) => {
            println!("another host (veth): skipped, {why}");
            return;
        }
    };
    let at = SocketAddr::new(host.ip.into(), listener.local_addr().unwrap().port());
    serve(listener);
    for (name, rate) in [
        ("another host, bare veth", None),
        (
            "another host, link shaped to 10 Gbit/s",
            Some(("10gbit", 10_000_000_000)),
        ),
        (
            "another host, link shaped to 1 Gbit/s",
            Some(("1gbit", 1_000_000_000)),
        ),
    ] {
        if let Err(why) = host.shape(rate) {
            println!("{name}: skipped, {why}");
            continue;
        }
        link(&rt, &ws, name, at, &only);
    }
}
