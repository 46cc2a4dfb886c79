//! The two protocols the proxy speaks on one port: SOCKS5 (RFC 1928, no
//! authentication, CONNECT only) and HTTP (`CONNECT`, and plain-HTTP requests with an
//! absolute URI).

use super::{Failure, Gate, HANDSHAKE, splice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest request head the HTTP side reads.
const HEAD_MAX: usize = 64 * 1024;

/// Serves one client connection to its end.
pub(super) async fn serve(client: TcpStream, gate: &Gate) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE, client.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    if first[0] == 5 {
        socks5(client, gate).await;
    } else {
        http(client, gate).await;
    }
}

async fn socks5(mut client: TcpStream, gate: &Gate) {
    let target = tokio::time::timeout(HANDSHAKE, socks5_request(&mut client)).await;
    let Ok(Ok((host, port))) = target else {
        return;
    };
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    match gate.open(&host, port).await {
        Ok(upstream) => {
            if client.write_all(&reply(0)).await.is_ok() {
                splice(client, upstream).await;
            }
        }
        // 2: connection not allowed by ruleset; 4: host unreachable.
        Err(Failure::Refused(_)) => {
            let _ = client.write_all(&reply(2)).await;
        }
        Err(Failure::Unreachable(_)) => {
            let _ = client.write_all(&reply(4)).await;
        }
    }
}

/// The greeting and the request; `Err` after answering a request it does not serve.
async fn socks5_request(client: &mut TcpStream) -> std::io::Result<(String, u16)> {
    let bad = || std::io::Error::other("socks5");
    let mut head = [0u8; 2];
    client.read_exact(&mut head).await?;
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        client.write_all(&[5, 0xff]).await?;
        return Err(bad());
    }
    client.write_all(&[5, 0]).await?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await?;
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            String::from_utf8(name).map_err(|_| bad())?
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => {
            client.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
            return Err(bad());
        }
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    if req[0] != 5 || req[1] != 1 {
        // Only CONNECT: BIND and UDP ASSOCIATE would open the namespace inwards.
        client.write_all(&[5, 7, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
        return Err(bad());
    }
    Ok((host, u16::from_be_bytes(port)))
}

/// Reads the request head (through the blank line); the bytes after it are kept.
async fn read_head(client: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            let rest = buf.split_off(end);
            return Some((buf, rest));
        }
        if buf.len() > HEAD_MAX {
            return None;
        }
    }
}

async fn answer(client: &mut TcpStream, status: &str, body: &str) {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    let _ = client.write_all(text.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// `host:port` or `[v6]:port`, with `default` when there is no port.
fn authority(text: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        return Some((ip.to_string(), port));
    }
    match text.rsplit_once(':') {
        Some((host, p)) => Some((host.to_string(), p.parse().ok()?)),
        None => Some((text.to_string(), default)),
    }
    .filter(|(host, _)| !host.is_empty())
}

/// Where an HTTP request goes, and for a forwarded one the head to send upstream.
struct Request {
    host: String,
    port: u16,
    /// `None`: a `CONNECT` tunnel.
    forward: Option<String>,
}

/// Parses the request head; `Err` says what is wrong with it.
fn parse_request(text: &str) -> Result<Request, &'static str> {
    let mut lines = text.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("看不懂请求行");
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, 443).ok_or("CONNECT 要 host:port")?;
        return Ok(Request {
            host,
            port,
            forward: None,
        });
    }
    let after = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or("只转发 http:// 的绝对 URI;https 请走 CONNECT")?;
    let (auth, path) = match after.find(['/', '?']) {
        Some(i) => (&after[..i], after[i..].to_string()),
        None => (after, "/".to_string()),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path
    };
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let (host, port) = authority(auth, 80).ok_or("URI 里没有主机")?;
    // One request per connection: a second one on a kept-alive connection would reach
    // this upstream whatever host it names.
    let mut head = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        forward: Some(head),
    })
}

async fn http(mut client: TcpStream, gate: &Gate) {
    let Ok(Some((head, rest))) = tokio::time::timeout(HANDSHAKE, read_head(&mut client)).await
    else {
        return;
    };
    let parsed = std::str::from_utf8(&head)
        .map_err(|_| "请求头不是 UTF-8")
        .and_then(parse_request);
    let request = match parsed {
        Ok(r) => r,
        Err(why) => {
            let body = format!("flower 的网络代理:{why}");
            return answer(&mut client, "400 Bad Request", &body).await;
        }
    };
    let port = request.port;
    let mut upstream = match gate.open(&request.host, port).await {
        Ok(u) => u,
        Err(Failure::Refused(r)) => {
            return answer(&mut client, "403 Forbidden", &r.explain(port)).await;
        }
        Err(Failure::Unreachable(why)) => {
            let body = format!("flower 的网络代理:{why}");
            return answer(&mut client, "502 Bad Gateway", &body).await;
        }
    };
    let sent = match &request.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(head.as_bytes()).await,
    };
    if sent.is_err() || (!rest.is_empty() && upstream.write_all(&rest).await.is_err()) {
        return;
    }
    splice(client, upstream).await;
}
