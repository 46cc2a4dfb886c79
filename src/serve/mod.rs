//! `flower serve`: a live, read-only web view over a store: the run directories under
//! the current directory, or every run of a PostgreSQL store (`--store`). Above the
//! CLI in the layer line: it shows runs with the CLI's own renderers.
//!
//! Read-only: SQLite opened read-only, PostgreSQL in read-only transactions, run locks
//! probed and never taken, nothing written. On the loopback by default; any other
//! address needs a token, checked on every request ([`guard`]). Every body leaves
//! through [`scrub::Scrubber`].

mod live;
mod pages;
mod scrub;
mod source;
mod summary;

use crate::cli::config;
use crate::cli::out::errln;
use crate::cli::serve::ServeArgs;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flower::settings::{Environment, ServeSettings};
use flower::stores::PostgresStore;
use live::{Live, Tail};
use pages::{ListQuery, PAGE_ENTRIES, PageQuery, TranscriptPage};
use scrub::Scrubber;
use source::{Cache, Found, Runs, Source};
use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use summary::RunSummary;

/// How often an event stream looks at its run (server-side; the browser only listens).
const POLL: Duration = Duration::from_millis(500);
/// The cookie `?token=` sets.
const TOKEN_COOKIE: &str = "flower_serve_token";

/// What every request shares.
struct App {
    runs: Runs,
    summaries: Cache<RunSummary>,
    tails: Cache<Tail>,
    scrubber: Scrubber,
    settings: ServeSettings,
    /// What is served, as the list's heading says it.
    source: String,
}

pub fn run(args: &ServeArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let settings = config::settings(&args.flags(), env)?;
    let serve = settings.serve().clone();
    let (source, shown) = match settings.store() {
        Some(url) => (
            Source::Store {
                store: Arc::new(
                    PostgresStore::open_read_only(url)
                        .map_err(|e| anyhow::anyhow!("打不开存储:{e}"))?,
                ),
            },
            format!("数据库 {url}"),
        ),
        None => (
            Source::Tree {
                root: settings.workspace().to_path_buf(),
            },
            format!("目录 {}", settings.workspace().display()),
        ),
    };
    let app = Arc::new(App {
        runs: Runs::new(source),
        summaries: Cache::default(),
        tails: Cache::default(),
        scrubber: Scrubber::new(serve.token.clone())?,
        settings: serve,
        source: shown,
    });
    // Few reading threads, let go of soon: each keeps memory of its own while it lives.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(4)
        .thread_keep_alive(Duration::from_secs(2))
        .build()?
        .block_on(listen(app))
}

async fn listen(app: Arc<App>) -> anyhow::Result<ExitCode> {
    let address = app.settings.listen;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("监听不了 {address}:{e}"))?;
    let local = listener.local_addr()?;
    errln!(
        "flower serve:http://{local}/ ({};{};Ctrl-C 停)",
        app.source,
        if app.settings.token.is_some() {
            "每个请求都要口令"
        } else {
            "只在本机"
        }
    );
    let router = Router::new()
        .route("/", get(list_page))
        .route("/api/runs", get(list_json))
        .route("/api/runs/{key}", get(run_json))
        .route("/runs/{key}", get(run_page))
        .route("/runs/{key}/events", get(events))
        .route("/runs/{key}/sessions/{id}", get(transcript_page))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app);
    let server = axum::serve(listener, router);
    // Event streams never end by themselves: a signal ends the process, not a drain.
    tokio::select! {
        served = server => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether two strings are equal, in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// The token a request carries: a bearer header, else the cookie.
fn carried(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(token) = bearer {
        return Some(token.to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value.to_string())
}

/// Whether the `Host` a browser sent names this machine: without a token the pages
/// answer only such requests, so that a web page elsewhere cannot read them through a
/// name it points at 127.0.0.1 (DNS rebinding).
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Every request: the token when there is one (else a loopback `Host`), then the
/// headers that keep a page from being framed, cached or sniffed.
async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut response = match &app.settings.token {
        Some(token) => {
            let given = query_token(request.uri().query());
            if given.as_deref().is_some_and(|g| same(g, token)) {
                // The token leaves the address bar (and history) at once.
                let path = request.uri().path().to_string();
                let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, path)]).into_response();
                let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
                if let Ok(value) = HeaderValue::from_str(&cookie) {
                    r.headers_mut().insert(header::SET_COOKIE, value);
                }
                r
            } else if carried(request.headers()).is_some_and(|c| same(&c, token)) {
                next.run(request).await
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    "要口令:请求头 Authorization: Bearer <口令>,或在浏览器里打开一次 /?token=<口令>\n",
                )
                    .into_response()
            }
        }
        None if !loopback_host(request.headers()) => (
            StatusCode::FORBIDDEN,
            "这个服务只回答发给本机名字(localhost、127.0.0.1)的请求\n",
        )
            .into_response(),
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; frame-ancestors 'none'",
        ));
    response
}

/// `token=` of a query string.
fn query_token(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| value.to_string())
}

/// An HTML page, scrubbed, allowed its own inline script (by `nonce`) and styles only.
fn html(app: &App, body: &str, nonce: &str) -> Response {
    let script = if nonce.is_empty() {
        "'none'".to_string()
    } else {
        format!("'nonce-{nonce}'")
    };
    let policy = format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src {script}; \
         connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    let mut response = (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        app.scrubber.scrub(body),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

/// A JSON document, scrubbed.
fn json(app: &App, value: &impl serde::Serialize) -> Response {
    match serde_json::to_string_pretty(value) {
        Ok(text) => (
            [(header::CONTENT_TYPE, "application/json")],
            app.scrubber.scrub(&text),
        )
            .into_response(),
        Err(e) => failed(e.to_string()).into_response(),
    }
}

/// A request answered without a page: its status and why.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, format!("{}\n", self.1)).into_response()
    }
}

fn failed(why: String) -> Refusal {
    Refusal(StatusCode::INTERNAL_SERVER_ERROR, why)
}

fn not_found(what: &str) -> Refusal {
    Refusal(StatusCode::NOT_FOUND, format!("没有 {what}"))
}

fn nonce() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Runs `work` off the event loop (reading a store blocks).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(failed(e.to_string())))
}

impl App {
    /// The run's summary, made again only when its fingerprint moved.
    fn summary(&self, found: &Found) -> RunSummary {
        let made = self
            .summaries
            .get(&found.key, self.runs.fingerprint(found), || {
                match self.runs.open(found) {
                    Ok(run) => RunSummary::of(&found.key, &run),
                    Err(_) => {
                        RunSummary::unreadable(&found.key, &found.workspace.display().to_string())
                    }
                }
            });
        let mut summary = RunSummary::clone(&made).held(self.runs.holding(found));
        summary.inside = found.inside.clone();
        summary
    }

    /// Every run's summary.
    fn summaries(&self) -> Result<Vec<RunSummary>, Refusal> {
        let found = self.runs.found().map_err(failed)?;
        Ok(found.iter().map(|f| self.summary(f)).collect())
    }

    /// The live status of a run.
    fn live(&self, found: &Found) -> Live {
        let summary = self.summary(found);
        let tail = match &summary.session {
            Some(session) => {
                self.tails
                    .get(&found.key, self.runs.fingerprint(found), || {
                        match self.runs.open(found) {
                            Ok(run) => live::tail(&run, session),
                            Err(_) => Tail::default(),
                        }
                    })
            }
            None => Arc::new(Tail::default()),
        };
        live::live(&summary, &tail)
    }

    fn found(&self, key: &str) -> Result<Found, Refusal> {
        self.runs
            .find(key)
            .map_err(failed)?
            .ok_or_else(|| not_found(&format!("运行 {key}")))
    }
}

async fn list_page(State(app): State<Arc<App>>, Query(query): Query<ListQuery>) -> Response {
    let shown = app.clone();
    let page = blocking(move || {
        let rows = query.apply(shown.summaries()?);
        Ok(pages::list(&rows, &query, &shown.source))
    })
    .await;
    match page {
        Ok(page) => html(&app, &page, ""),
        Err(r) => r.into_response(),
    }
}

async fn list_json(State(app): State<Arc<App>>) -> Response {
    let shown = app.clone();
    match blocking(move || shown.summaries()).await {
        Ok(rows) => json(&app, &rows),
        Err(r) => r.into_response(),
    }
}

async fn run_json(State(app): State<Arc<App>>, Path(key): Path<String>) -> Response {
    let shown = app.clone();
    let doc = blocking(move || {
        let found = shown.found(&key)?;
        let run = shown.runs.open(&found).map_err(failed)?;
        let sessions = run.sessions();
        Ok(serde_json::json!({
            "run": shown.summary(&found),
            "live": shown.live(&found),
            "attempts": run.attempts,
            "lineage": run.lineage.as_ref().map(|l| &l.steps),
            "sessions": sessions.iter().map(|s| serde_json::json!({
                "session_id": s.session_id,
                "step": s.step,
                "judge": s.judge,
                "entries": s.entries,
                "turns": s.turns.len(),
                "cost_usd": s.all_cost_usd(),
                "peak_context": s.peak_context,
                "subagents": s.subagents,
            })).collect::<Vec<_>>(),
        }))
    })
    .await;
    match doc {
        Ok(doc) => json(&app, &doc),
        Err(r) => r.into_response(),
    }
}

async fn run_page(State(app): State<Arc<App>>, Path(key): Path<String>) -> Response {
    let shown = app.clone();
    let nonce = nonce();
    let script_nonce = nonce.clone();
    let page = blocking(move || {
        let found = shown.found(&key)?;
        let run = shown.runs.open(&found).map_err(failed)?;
        let sessions = run.sessions();
        let live = shown.live(&found);
        Ok(pages::run_page(&key, &run, &sessions, &live, &script_nonce))
    })
    .await;
    match page {
        Ok(page) => html(&app, &page, &nonce),
        Err(r) => r.into_response(),
    }
}

async fn transcript_page(
    State(app): State<Arc<App>>,
    Path((key, session_id)): Path<(String, String)>,
    Query(query): Query<PageQuery>,
) -> Response {
    let shown = app.clone();
    let page = blocking(move || {
        let found = shown.found(&key)?;
        let run = shown.runs.open(&found).map_err(failed)?;
        let main = run.key(&session_id);
        let subagents = run.subagents(&main);
        let session_key = match &query.sub {
            Some(sub) => main
                .sub(sub)
                .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))?,
            None => main,
        };
        let page = query.page.unwrap_or(1).max(1);
        let start = (page - 1) * PAGE_ENTRIES;
        let (total, text) =
            crate::cli::show::transcript_page(&run, &session_key, start..start + PAGE_ENTRIES)
                .map_err(|e| failed(e.to_string()))?;
        if total == 0 {
            return Err(not_found(&format!("运行 {key} 的会话 {session_id}")));
        }
        Ok(pages::transcript(&TranscriptPage {
            key: &key,
            session_id: &session_id,
            sub: query.sub.as_deref(),
            page,
            total,
            text: &text,
            subagents: &subagents,
        }))
    })
    .await;
    match page {
        Ok(page) => html(&app, &page, ""),
        Err(r) => r.into_response(),
    }
}

/// `/runs/<key>/events`: a `live` event whenever the run's status or current call
/// changes (the first at once), looked at every [`POLL`] on the server.
async fn events(State(app): State<Arc<App>>, Path(key): Path<String>) -> Response {
    let found = {
        let app = app.clone();
        let key = key.clone();
        match blocking(move || app.found(&key)).await {
            Ok(found) => found,
            Err(r) => return r.into_response(),
        }
    };
    let stream = futures_util::stream::unfold(
        (app, found, None::<Live>),
        |(app, found, mut last)| async move {
            loop {
                if last.is_some() {
                    tokio::time::sleep(POLL).await;
                }
                let shown = app.clone();
                let at = found.clone();
                // Found again: a database's row says who holds the run now.
                let now = tokio::task::spawn_blocking(move || {
                    let at = shown.runs.find(&at.key).ok().flatten().unwrap_or(at);
                    shown.live(&at)
                })
                .await
                .unwrap_or_default();
                if last.as_ref() == Some(&now) {
                    continue;
                }
                let data = serde_json::to_string(&now).unwrap_or_default();
                let event = Event::default()
                    .event("live")
                    .data(app.scrubber.scrub(&data));
                last = Some(now);
                return Some((Ok::<_, Infallible>(event), (app, found, last)));
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
