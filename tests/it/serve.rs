//! `flower serve` (issue #47): the run list, a run's page whose status line follows the
//! run while it goes (server-sent events; read twice in one page load by Chromium over
//! the DevTools protocol), its transcripts, the JSON API; the same over a PostgreSQL
//! store with two runs from two processes; the token off the loopback; no secret in any
//! page; nothing written.

use crate::support::cdp::{self, Browser};
use crate::support::pipeline::{
    Agent, Project, REQUEST, agent_or_once, simple_reply, text, turn_of,
};
use crate::support::{FakeServer, Flower, Gate, Reply, skip};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A key the run is given as its API key, which the fake model then says in a reply:
/// a secret that reached a transcript.
const PLANTED: &str = "sk-ant-api03-PLANTEDsecretVALUE0123456789xyz";
const WAIT: Duration = Duration::from_secs(90);

/// A `flower serve` on a free loopback port, killed when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// `flower serve ARGS` in `dir`, once it says where it listens.
    fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
        let mut args = args.to_vec();
        if !args.contains(&"--listen") {
            args.extend(["--listen", "127.0.0.1:0"]);
        }
        let mut child = Flower::new(&[&["serve"], args.as_slice()].concat())
            .dir(dir)
            .envs(env.iter().copied())
            .stdin_null()
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flower serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let line = lines.next().expect("flower serve said nothing").unwrap();
        let base = line
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .split('/')
            .next()
            .unwrap()
            .to_string();
        std::thread::spawn(move || for _ in lines {});
        Served {
            child,
            base: format!("http://{base}"),
        }
    }

    fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// `GET path` with `headers`: status, response head, body.
    fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
        let mut stream = TcpStream::connect(self.address()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.address()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let response = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    /// `GET path`, which must answer 200: its body.
    fn page(&self, path: &str) -> String {
        let (status, head, body) = self.get(path, &[]);
        assert_eq!(status, 200, "{path}: {head}\n{body}");
        body
    }

    fn json(&self, path: &str) -> Value {
        serde_json::from_str(&self.page(path)).unwrap()
    }

    /// The listed runs once `ready` says the list is what the test waits for.
    fn runs_until(&self, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let runs = self
                .json("/api/runs")
                .as_array()
                .cloned()
                .unwrap_or_default();
            if ready(&runs) || Instant::now() > deadline {
                return runs;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn encoded(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The pipeline's replies, held at two gates: the worker's second request (the
/// coordinator's Task call is then open) and the judge's first. The coordinator's last
/// reply says the key the request carried.
fn gated_server(work: &Gate, judge: &Gate) -> FakeServer {
    let (work, judge) = (work.clone(), judge.clone());
    FakeServer::with_handler(move |req, _| match (agent_or_once(req), turn_of(req)) {
        (Agent::Worker, 1) => simple_reply(req).gate_before(&work),
        (Agent::Judge, 0) => simple_reply(req).gate_before(&judge),
        (Agent::Coordinator, 1) => Reply::text(format!(
            "做完了。用的 key:{}",
            req.header("x-api-key").unwrap_or("")
        )),
        _ => simple_reply(req),
    })
}

/// Every file under `dir` with its size and modification time.
fn files(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(
                    entry.path().display().to_string(),
                    (meta.len(), meta.modified().unwrap()),
                );
            }
        }
    }
    out
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const STATUS: &str = "document.getElementById('status').textContent";
const TOOL: &str = "document.getElementById('tool').textContent";

/// One run followed live: it appears in the list while it runs, its page's status line
/// and current call change without a reload, its transcript opens, and no page shows
/// the key it ran with. `store`: `--store URL` for the run and the server.
// Long because it is one scenario, step by step, each waiting on the one before.
fn follow_a_run(
    browser: &Path,
    served: &Served,
    project: &Project,
    store: Option<&str>,
    screenshot: Option<&Path>,
) {
    let (work, judge) = (Gate::new(), Gate::new());
    let server = gated_server(&work, &judge);
    let mut cmd = project.command(&server, &[REQUEST]);
    cmd.env("ANTHROPIC_API_KEY", PLANTED);
    if let Some(url) = store {
        cmd.env("FLOWER_STORE", url);
    }
    let mut run = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(work.wait_reached(WAIT), "the worker's second request");
    let workspace = project.dir.display().to_string();
    let runs = served.runs_until(|runs| {
        runs.iter()
            .any(|r| r["workspace"] == workspace.as_str() && r["running"] == true)
    });
    let listed = runs
        .iter()
        .find(|r| r["workspace"] == workspace.as_str())
        .unwrap_or_else(|| panic!("the run is not listed: {runs:?}"));
    assert_eq!(listed["running"], true, "{listed}");
    let key = listed["key"].as_str().unwrap().to_string();
    let list = served.page("/?running=1");
    assert!(list.contains(&format!("data-key=\"{key}\"")), "{list}");

    let mut page = Browser::start(browser);
    if let Some(path) = screenshot {
        page.call(
            "Emulation.setDeviceMetricsOverride",
            serde_json::json!({"width": 1160, "height": 420, "deviceScaleFactor": 1, "mobile": false}),
        );
        page.navigate(&format!("{}/", served.base));
        let shot = page.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png"}),
        );
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::write(path, png).unwrap();
    }
    page.navigate(&format!("{}/runs/{}", served.base, encoded(&key)));
    let status = page.eval_until(STATUS, WAIT, |s| s.as_str().unwrap().contains("[干活]"));
    assert!(status.as_str().unwrap().contains("运行中"), "{status}");
    let tool = page.eval_until(TOOL, WAIT, |t| t.as_str().unwrap().contains("Task"));
    assert!(tool.as_str().unwrap().contains("Task: "), "{tool}");
    page.eval("window.flowerMark = 'the same page'");

    work.open();
    assert!(judge.wait_reached(WAIT), "the judge's request");
    let status = page.eval_until(STATUS, WAIT, |s| s.as_str().unwrap().contains("判定"));
    assert!(status.as_str().unwrap().contains("判定"), "{status}");
    let tool = page.eval(TOOL);
    assert_eq!(tool, "等模型回复…");
    judge.open();
    let ended = wait_exit(&mut run);
    assert!(ended.success(), "{ended}");
    let status = page.eval_until(STATUS, WAIT, |s| s.as_str().unwrap().contains("没在运行"));
    assert!(status.as_str().unwrap().contains("没在运行"), "{status}");
    // All of that in one load of the page: no reload, the events applied.
    assert_eq!(page.eval("window.flowerMark"), "the same page");
    assert_eq!(
        page.eval("performance.getEntriesByType('navigation').length"),
        1
    );
    // The page came with the first status; the judge's and the end's came as events
    // (the stream's first event may already be the judge's).
    let updates = page.eval("Number(document.documentElement.getAttribute('data-updates'))");
    assert!(updates.as_u64().unwrap() >= 2, "{updates}");

    // The transcript opens from the page, rendered as `flower show` renders it.
    let link = page.eval("document.querySelector('a.transcript').href");
    page.navigate(link.as_str().unwrap());
    let transcript = page.eval("document.getElementById('transcript').textContent");
    assert!(
        transcript.as_str().unwrap().contains("写个 hello 脚本"),
        "{transcript}"
    );
    drop(page);

    no_secret_in_any_page(served, &key, project, store);
}

/// The key reached the transcript (`flower show` prints it) and no page shows it.
fn no_secret_in_any_page(served: &Served, key: &str, project: &Project, store: Option<&str>) {
    let mut show = Flower::new(&["show", "干活"]).dir(&project.dir);
    if let Some(url) = store {
        show = show.env("FLOWER_STORE", url);
    }
    let shown = show.output();
    assert!(
        text(&shown.stdout).contains(PLANTED),
        "{}",
        text(&shown.stderr)
    );
    let mut hidden = 0;
    for path in &every_page(served, key) {
        let body = served.page(path);
        assert!(!body.contains(PLANTED), "{path} shows the key");
        assert!(
            !body.contains("PLANTEDsecret"),
            "{path} shows part of the key"
        );
        hidden += body.matches("[已隐去]").count();
    }
    assert!(hidden > 0, "the key was in a transcript: some page hid it");
}

/// The list, the API's documents, the run's page and each of its transcripts' pages.
fn every_page(served: &Served, key: &str) -> Vec<String> {
    let run = served.json(&format!("/api/runs/{}", encoded(key)));
    let mut paths = vec![
        "/".to_string(),
        "/api/runs".to_string(),
        format!("/api/runs/{}", encoded(key)),
        format!("/runs/{}", encoded(key)),
    ];
    for session in run["sessions"].as_array().unwrap() {
        let id = session["session_id"].as_str().unwrap();
        paths.push(format!("/runs/{}/sessions/{id}", encoded(key)));
        for sub in session["subagents"].as_array().unwrap() {
            paths.push(format!(
                "/runs/{}/sessions/{id}?sub={}",
                encoded(key),
                encoded(sub.as_str().unwrap())
            ));
        }
    }
    paths
}

fn browser_or_skip() -> Option<std::path::PathBuf> {
    let found = cdp::chromium();
    if found.is_none() {
        skip::skip(
            skip::CHROMIUM,
            "no chromium at /usr/bin/chromium (.ci/run installs it)",
        );
    }
    found
}

#[test]
fn a_run_in_a_directory_is_followed_live_in_a_browser() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let project = Project::new();
    let served = Served::start(&project.home, &[], &[]);
    assert_eq!(served.json("/api/runs"), serde_json::json!([]));
    // `.ci/serve-screenshot` (the README's picture): two finished runs beside this one.
    let screenshot = std::env::var_os("FLOWER_SERVE_SCREENSHOT").map(std::path::PathBuf::from);
    if screenshot.is_some() {
        let server = FakeServer::with_handler(|req, _| simple_reply(req));
        for name in ["api-server", "docs-site"] {
            let dir = project.home.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let out = Flower::new(&[REQUEST])
                .server(&server)
                .dir(&dir)
                .home(&project.home)
                .attempts(1)
                .stdin_null()
                .output();
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }
    follow_a_run(&browser, &served, &project, None, screenshot.as_deref());
    // Serving wrote nothing: every page again, the run directory as it was.
    let before = files(&project.dir.join("runs"));
    let key = served.json("/api/runs")[0]["key"]
        .as_str()
        .unwrap()
        .to_string();
    for path in every_page(&served, &key) {
        served.page(&path);
    }
    assert_eq!(files(&project.dir.join("runs")), before);
}

#[test]
fn two_runs_from_two_processes_in_postgres_are_followed_live() {
    let Some(url) = crate::support::postgres::fresh_url() else {
        return;
    };
    let Some(browser) = browser_or_skip() else {
        return;
    };
    // The other process: a whole run into the same store first.
    let other = Project::with("other", crate::support::pipeline::ONE_ATTEMPT);
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = other
        .command(&server, &[REQUEST])
        .env("FLOWER_STORE", &url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let project = Project::new();
    let served = Served::start(&project.home, &["--store", &url], &[]);
    let runs = served.runs_until(|runs| runs.len() == 1);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        runs[0]["workspace"],
        other.dir.display().to_string().as_str()
    );
    assert_eq!(runs[0]["running"], false);
    follow_a_run(&browser, &served, &project, Some(&url), None);
    let runs = served.json("/api/runs");
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
}

#[test]
fn postgres_is_opened_read_only() {
    let Some(url) = crate::support::postgres::fresh_url() else {
        return;
    };
    // An empty database: refused, and no table was made in it.
    let out = Flower::new(&["serve", "--store", &url, "--listen", "127.0.0.1:0"])
        .stdin_null()
        .output();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("第 0 版"),
        "{}",
        text(&out.stderr)
    );
    let tables = {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let row = c
                .query_one(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                    &[],
                )
                .unwrap();
            row.get::<_, i64>(0)
        })
        .join()
        .unwrap()
    };
    assert_eq!(tables, 0);
}

#[test]
fn off_the_loopback_a_token_is_required_and_checked_on_every_request() {
    let project = Project::new();
    for (args, env, says) in [
        (vec!["--listen", "0.0.0.0:0"], vec![], "--token"),
        (
            vec!["--listen", "0.0.0.0:0", "--token", "short"],
            vec![],
            "至少 16",
        ),
        (vec!["--listen", "nowhere"], vec![], "--listen"),
        (
            vec![],
            vec![("FLOWER_SERVE_TOKEN", "has space in it 12345")],
            "FLOWER_SERVE_TOKEN",
        ),
    ] {
        let out = Flower::new(&[&["serve"], args.as_slice()].concat())
            .dir(&project.dir)
            .envs(env)
            .stdin_null()
            .output();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let token = "0123456789abcdef0123";
    let mut served = Served::start(
        &project.dir,
        &["--listen", "0.0.0.0:0"],
        &[("FLOWER_SERVE_TOKEN", token)],
    );
    served.base = served.base.replace("0.0.0.0", "127.0.0.1");
    for path in ["/", "/api/runs", "/runs/x", "/runs/x/events"] {
        let (status, _, _) = served.get(path, &[]);
        assert_eq!(status, 401, "{path}");
        let (status, _, _) =
            served.get(path, &[("Authorization", "Bearer wrong-token-0123456789")]);
        assert_eq!(status, 401, "{path}");
    }
    let bearer = format!("Bearer {token}");
    let (status, _, body) = served.get("/api/runs", &[("Authorization", &bearer)]);
    assert_eq!((status, body.trim()), (200, "[]"));
    // `?token=` sets the cookie and leaves the address at once.
    let (status, head, _) = served.get(&format!("/?token={token}"), &[]);
    assert_eq!(status, 303, "{head}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert!(head.contains("HttpOnly"), "{head}");
    let (status, _, body) = served.get("/", &[("Cookie", &cookie)]);
    assert_eq!(status, 200);
    assert!(!body.contains(token));
}

#[test]
fn without_a_token_only_requests_to_this_machine_are_answered() {
    let project = Project::new();
    let served = Served::start(&project.dir, &[], &[]);
    // What a page elsewhere sends after pointing its own name at 127.0.0.1.
    let mut stream = TcpStream::connect(served.address()).unwrap();
    stream
        .write_all(b"GET /api/runs HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    let (status, head, _) = served.get("/", &[]);
    assert_eq!(status, 200);
    assert!(head.contains("content-security-policy"), "{head}");
}

/// A run directory inside another run's workspace (an agent of that run can write
/// one) is listed apart, naming the run it lies in, never among the person's runs.
#[test]
fn a_run_directory_inside_another_runs_workspace_is_listed_apart() {
    let root = tempfile::TempDir::new().unwrap();
    for run_dir in ["proj/runs", "proj/sub/runs", "other/runs"] {
        let dir = root.path().join(run_dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), "[]").unwrap();
    }
    let served = Served::start(root.path(), &[], &[]);
    let runs = served.json("/api/runs");
    let inside = |key: &str| {
        let run = runs
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("{key} not listed: {runs}"));
        run.get("inside").cloned()
    };
    assert_eq!(inside("proj~runs"), None);
    assert_eq!(inside("other~runs"), None);
    assert_eq!(inside("proj~sub~runs"), Some(Value::from("proj~runs")));
    let page = served.page("/");
    let (table, apart) = page
        .split_once("<table id=\"nested\">")
        .expect("no list apart");
    assert!(table.contains("2 个运行"), "{table}");
    assert!(!table.contains("proj~sub~runs"), "{table}");
    assert!(apart.contains("data-key=\"proj~sub~runs\""), "{apart}");
    assert!(table.contains("data-key=\"proj~runs\"") && table.contains("data-key=\"other~runs\""));
}
