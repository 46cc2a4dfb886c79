//! Headless Chromium driven over the DevTools protocol, for the tests that must see a
//! page change while it stays loaded (`flower serve`'s live status). No websocket crate
//! is in the tree, so this speaks the little of RFC 6455 a DevTools client needs:
//! the upgrade, masked text frames out, text frames (possibly fragmented) in.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Headless Chromium, if installed.
pub fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Chromium's headless command line, its profile in `profile`.
pub fn headless(browser: &Path, profile: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null());
    cmd
}

/// A browser with one page, driven over its DevTools websocket. Killed when dropped.
pub struct Browser {
    child: Child,
    ws: TcpStream,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium on `about:blank` and connects to its page.
    pub fn start(browser: &Path) -> Browser {
        let profile = tempfile::TempDir::new().unwrap();
        let mut child = headless(browser, profile.path())
            .args(["--remote-debugging-port=0", "about:blank"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromium ended before it listened")
                .unwrap();
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap().to_string();
            }
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let address = format!("127.0.0.1:{port}");
        let list = http_get(&address, "/json/list");
        let targets: Value = serde_json::from_str(&list).unwrap();
        let page = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target");
        let ws_url = page["webSocketDebuggerUrl"].as_str().unwrap();
        let path = &ws_url[ws_url.find("/devtools").unwrap()..];
        let ws = upgrade(&address, path);
        let mut browser = Browser {
            child,
            ws,
            next_id: 0,
            _profile: profile,
        };
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Sends a command and returns its `result` (panics on an error answer).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        send(&mut self.ws, message.as_bytes());
        loop {
            let answer: Value = serde_json::from_slice(&receive(&mut self.ws)).unwrap();
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Loads `url` and waits for its `load` event.
    pub fn navigate(&mut self, url: &str) {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": "Page.navigate", "params": {"url": url}});
        send(&mut self.ws, message.to_string().as_bytes());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let event: Value = serde_json::from_slice(&receive(&mut self.ws)).unwrap();
            assert!(event.get("error").is_none(), "navigate: {event}");
            if event["method"] == "Page.loadEventFired" {
                return;
            }
        }
        panic!("{url} did not load");
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        assert!(result.get("exceptionDetails").is_none(), "{result}");
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until `done` says its value is the one waited for (the page
    /// changes on the server's events); the last value when it never is.
    pub fn eval_until(
        &mut self,
        expression: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.eval(expression);
            if done(&value) || Instant::now() > deadline {
                return value;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A plain `GET`, its body (read to its `Content-Length`: the DevTools server keeps
/// the connection open).
fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn upgrade(address: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    stream
}

/// One masked text frame.
fn send(stream: &mut TcpStream, payload: &[u8]) {
    let mut frame = vec![0x81u8];
    let len = payload.len();
    if len < 126 {
        frame.push(0x80 | len as u8);
    } else if len <= 0xffff {
        frame.push(0x80 | 126);
        frame.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        frame.push(0x80 | 127);
        frame.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    stream.write_all(&frame).unwrap();
}

/// The next whole message (fragments joined; control frames skipped).
fn receive(stream: &mut TcpStream) -> Vec<u8> {
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).unwrap();
        let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
        let mut len = u64::from(head[1] & 0x7f);
        if len == 126 {
            let mut ext = [0u8; 2];
            stream.read_exact(&mut ext).unwrap();
            len = u64::from(u16::from_be_bytes(ext));
        } else if len == 127 {
            let mut ext = [0u8; 8];
            stream.read_exact(&mut ext).unwrap();
            len = u64::from_be_bytes(ext);
        }
        let mut mask = [0u8; 4];
        if head[1] & 0x80 != 0 {
            stream.read_exact(&mut mask).unwrap();
        }
        let mut payload = vec![0u8; len as usize];
        stream.read_exact(&mut payload).unwrap();
        if head[1] & 0x80 != 0 {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
        }
        assert_ne!(opcode, 8, "the browser closed the connection");
        if opcode >= 8 {
            continue;
        }
        message.extend_from_slice(&payload);
        if fin {
            return message;
        }
    }
}
