//! The network proxy's throughput: a 100 MB download by `curl` from a server on the
//! host's loopback, straight (sandbox off) and from a sandboxed command through the
//! proxy (plain-HTTP forwarding, CONNECT, SOCKS5), each as curl measures it
//! (`%{speed_download}`), median of 7. Goal: through the proxy at ≥ 80 % of straight.
//!
//! The loopback server is reached through the proxy because the rules name it
//! (`127.0.0.1:PORT` in `allowedDomains`, as a user's file would).
//!
//! `cargo bench --bench netproxy`
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
    let out = Bash.call(&json!({ "command": command }), ctx).await;
    assert!(!out.is_error, "{command}: {}", out.content);
    let bytes_per_s: f64 = out.content.trim().parse().unwrap_or_else(|_| {
        panic!("{command}: {}", out.content);
    });
    bytes_per_s / 1e6
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
    println!("100 MB download by curl, median of {RUNS} (MB/s as curl reports it):");
    let mut base = 0.0;
    for (name, ctx, command) in cases {
        rt.block_on(speed(ctx, &command));
        let v: Vec<f64> = (0..RUNS)
            .map(|_| rt.block_on(speed(ctx, &command)))
            .collect();
        let m = median(v);
        if base == 0.0 {
            base = m;
            println!("  {name:<24} {m:>9.0} MB/s");
        } else {
            println!(
                "  {name:<24} {m:>9.0} MB/s   {:>5.1} % of straight",
                m / base * 100.0
            );
        }
    }
}
