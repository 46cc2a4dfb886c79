//! The network proxy's throughput: a 100 MB download by `curl` from a server on the
//! host's loopback, straight (sandbox off) and from a sandboxed command through the
//! proxy (plain-HTTP forwarding, CONNECT, SOCKS5), each as curl measures it
//! (`%{speed_download}`), median of 7. Goal: through the proxy at ≥ 80 % of straight.
//!
//! The loopback server is reached through the proxy because the rules name it
//! (`127.0.0.1:PORT` in `allowedDomains`, as a user's file would).
//!
//! Also printed: the CPU time each download costs, flower's process (the server's threads
//! and, through the proxy, the proxy's thread) and the command's (curl, bash), which
//! does not depend on how loaded the machine is; the proxy's own cost is flower's
//! through the proxy minus flower's straight.
//!
//! `cargo bench --bench netproxy [-- NAME…]` (names: a part of a case's name)
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::tools::sandbox::{self, NetworkRules, SandboxPolicy, Support};
use flower::tools::{ProcessGroups, Tool, ToolContext, bash::Bash};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use tokio_util::sync::CancellationToken;

const SIZE: usize = 100 * 1024 * 1024;
const RUNS: usize = 7;

/// Serves `SIZE` bytes to every request.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
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
    port
}

/// curl's download speed in MB/s for `command` (which prints `%{speed_download}`).
async fn speed(ctx: &ToolContext, command: &str) -> f64 {
    let out = Bash
        .call(
            &flower::content::Raw::of_tree(&json!({ "command": command })),
            ctx,
        )
        .await;
    assert!(!out.is_error, "{command}: {}", out.content);
    let bytes_per_s: f64 = out.content.trim().parse().unwrap_or_else(|_| {
        panic!("{command}: {}", out.content);
    });
    bytes_per_s / 1e6
}

/// CPU seconds used so far by this process (`RUSAGE_SELF`) and its waited-for children.
fn cpu() -> (f64, f64) {
    let get = |who| {
        // SAFETY: getrusage fills the struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut u) };
        let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
        t(u.ru_utime) + t(u.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
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

fn main() {
    if let Support::Missing(why) = sandbox::support() {
        println!("proxy throughput: skipped, this kernel has no Landlock ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let port = server();
    let rules = NetworkRules {
        allowed: vec![vec![
            "*".parse().unwrap(),
            format!("127.0.0.1:{port}").parse().unwrap(),
        ]],
        ..NetworkRules::default()
    };
    let sandboxed = context(
        &ws,
        SandboxPolicy {
            net: rules,
            ..SandboxPolicy::standard()
        },
    );
    let straight = context(&ws, SandboxPolicy::default());
    let url = format!("http://127.0.0.1:{port}/");
    let curl = |how: &str| {
        format!("curl -s --noproxy '' {how} -o /dev/null -w '%{{speed_download}}' {url}")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases = [
        ("straight (sandbox off)", &straight, curl("")),
        ("proxy, plain HTTP", &sandboxed, curl("-x \"$HTTP_PROXY\"")),
        ("proxy, CONNECT", &sandboxed, curl("-p -x \"$HTTP_PROXY\"")),
        ("proxy, SOCKS5", &sandboxed, curl("-x \"$ALL_PROXY\"")),
    ];
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    println!("100 MB download by curl, median of {RUNS} (MB/s as curl reports it;");
    println!("CPU ms per download: flower's process, the command's):");
    let mut base = 0.0;
    for (name, ctx, command) in cases {
        if base != 0.0 && !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        rt.block_on(speed(ctx, &command));
        let before = cpu();
        let v: Vec<f64> = (0..RUNS)
            .map(|_| rt.block_on(speed(ctx, &command)))
            .collect();
        let after = cpu();
        let per = |a: f64, b: f64| (a - b) * 1e3 / RUNS as f64;
        let (own, child) = (per(after.0, before.0), per(after.1, before.1));
        let m = median(v);
        let ratio = if base == 0.0 {
            base = m;
            String::new()
        } else {
            format!("{:>5.1} % of straight", m / base * 100.0)
        };
        println!("  {name:<24} {m:>6.0} MB/s  cpu {own:>5.1} + {child:>5.1} ms  {ratio}");
    }
}
