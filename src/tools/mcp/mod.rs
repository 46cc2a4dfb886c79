//! MCP servers: their tools offered to agents as `mcp__<server>__<tool>`, through the
//! official Rust SDK's client (`rmcp`).
//!
//! - A stdio server is a process flower starts in the sandbox, exactly as a writing
//!   agent's Bash commands are started (`sandbox::prepare`, then `apply_in_child`, or
//!   `new_session` unconfined): its own session and process group, registered with
//!   the signal handlers ([`ProcessGroups`]), killed with its group when flower drops
//!   it, dies or is signalled. An HTTP server is a streamable HTTP endpoint.
//! - [`McpHub`] starts each server at most once per process, when it is first needed
//!   (a session listing tools, a call), and keeps it. A server that fails to start,
//!   dies or does not answer a call in time is stopped and forgotten: the call gets
//!   an error result saying so, the person one line, and the next call starts it again.
//! - Tool lists are asked for once per session ([`McpHub::list`]); the engine pins
//!   them in the session's transcript, so a resumed session offers the same tools.

pub mod config;
pub mod content;

pub use config::{McpConfig, McpServer, TOOL_PREFIX, Transport};

use crate::content::ToolInput;
use crate::tools::process::GroupGuard;
use crate::tools::sandbox::{self, SandboxPolicy};
use crate::tools::{ProcessGroups, ToolOutput};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt as _;
use tokio_util::sync::CancellationToken;

/// Bytes of a stdio server's stderr kept (the newest), for the error a failure gives.
const STDERR_TAIL_BYTES: usize = 2048;

/// One MCP tool as a session offers it: what the model sees and where a call goes.
/// Pinned in the session's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpTool {
    /// `mcp__<server>__<tool>`.
    pub name: String,
    /// The server's configured name.
    pub server: String,
    /// The tool's own name on the server.
    pub tool: String,
    pub description: String,
    /// Value: the server's JSON Schema, passed on to the model unread.
    pub input_schema: Value,
}

impl McpTool {
    pub fn definition(&self) -> crate::model::ToolDef {
        crate::model::ToolDef {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: crate::content::Raw::of_tree(&self.input_schema),
        }
    }
}

/// What listing the tools of some servers gave.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub tools: Vec<McpTool>,
    /// Servers whose tools could not be had: (server, why).
    pub failures: Vec<(String, String)>,
    /// Tools left out (a name the API cannot take), one line each.
    pub skipped: Vec<String>,
}

/// What one call gave: the result for the model and, when the server failed, one
/// line for the person.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub output: ToolOutput,
    pub notice: Option<String>,
}

/// Why a server could not be started or could not list its tools. The stderr
/// fields hold the newest lines the server wrote there (empty: nothing).
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("放不进沙箱:{0}")]
    Sandbox(#[source] sandbox::SandboxError),
    #[error("运行不了 {command}({source})")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("它的管道没建起来")]
    Pipes,
    #[error("它没有回应 initialize({source}){}", stderr_said(.stderr))]
    Initialize {
        #[source]
        source: Box<rmcp::service::ClientInitializeError>,
        stderr: String,
    },
    #[error("它 {secs} 秒内没有回应 initialize(MCP_TIMEOUT)")]
    StartTimeout { secs: u64 },
    #[error("头 {name} 发不出去({source})")]
    Header {
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("列工具失败了({source}){}", stderr_said(.stderr))]
    List {
        #[source]
        source: Box<rmcp::ServiceError>,
        stderr: String,
    },
    #[error("它 {secs} 秒内没有列出工具,已停掉")]
    ListTimeout { secs: u64 },
}

impl McpError {
    /// Why, in the model's language (English), for a tool result: the `Display` is the
    /// person's (Chinese).
    pub fn for_model(&self) -> String {
        match self {
            McpError::Sandbox(_) => "it cannot be put into the sandbox".into(),
            McpError::Spawn { command, source } => format!("{command} cannot be run ({source})"),
            McpError::Pipes => "its pipes could not be set up".into(),
            McpError::Initialize { source, stderr } => format!(
                "it did not answer initialize ({source}){}",
                stderr_for_model(stderr)
            ),
            McpError::StartTimeout { secs } => {
                format!("it did not answer initialize within {secs} s (MCP_TIMEOUT)")
            }
            McpError::Header { name, source } => format!("header {name} cannot be sent ({source})"),
            McpError::List { source, stderr } => format!(
                "listing its tools failed ({source}){}",
                stderr_for_model(stderr)
            ),
            McpError::ListTimeout { secs } => {
                format!("it did not list its tools within {secs} s and was stopped")
            }
        }
    }
}

/// The newest lines of a server's stderr, for the model.
fn stderr_for_model(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; the last lines of its stderr: {stderr}")
    }
}

fn stderr_said(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(";它的 stderr 最后是:{stderr}")
    }
}

/// How a stdio server's process is started.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The working directory (the workspace, canonical).
    pub workspace: PathBuf,
    /// The sandbox it runs in (a writing agent's).
    pub sandbox: SandboxPolicy,
    /// Added to every stdio server's environment (the settings files' `env`), before
    /// the server's own `env`.
    pub env: Vec<(String, String)>,
    /// Where its process group is registered, for the signal handlers.
    pub processes: ProcessGroups,
    /// Where results too large for the conversation are written.
    pub spill_dir: PathBuf,
}

/// The servers of one process. Dropping it stops every stdio server it started.
pub struct McpHub {
    config: McpConfig,
    servers: Vec<Server>,
    launch: Launch,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field("servers", &self.config.servers)
            .finish()
    }
}

struct Server {
    config: McpServer,
    /// The live connection, if any. Calls clone the `Arc` and do not hold the lock.
    live: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

/// A started server.
struct Connection {
    service: RunningService<RoleClient, ()>,
    /// For a stdio server: its process.
    process: Option<Process>,
}

struct Process {
    /// Killed (the whole group) when the connection is dropped.
    group: Mutex<GroupGuard>,
    /// The newest bytes of its stderr.
    stderr: Arc<Mutex<Vec<u8>>>,
    pid: Option<u32>,
    _child: tokio::process::Child,
    sweep: sandbox::Sweep,
}

impl Drop for Process {
    fn drop(&mut self) {
        self.group
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .kill();
        let _ = self.sweep.run();
    }
}

impl Connection {
    /// The newest lines of a stdio server's stderr, for an error message.
    fn stderr_tail(&self) -> String {
        let Some(process) = &self.process else {
            return String::new();
        };
        let bytes = process
            .stderr
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        String::from_utf8_lossy(&bytes).trim().to_string()
    }
}

impl McpHub {
    pub fn new(config: McpConfig, launch: Launch) -> McpHub {
        let servers = config
            .servers
            .iter()
            .map(|server| Server {
                config: server.clone(),
                live: tokio::sync::Mutex::new(None),
            })
            .collect();
        McpHub {
            config,
            servers,
            launch,
        }
    }

    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The pids of the stdio servers running now (for `flower state`, tests).
    pub fn pids(&self) -> Vec<u32> {
        self.servers
            .iter()
            .filter_map(|s| {
                let live = s.live.try_lock().ok()?;
                live.as_ref()?.process.as_ref()?.pid
            })
            .collect()
    }

    /// Stops every server (stdio ones killed with their process group).
    pub fn stop_all(&self) {
        for server in &self.servers {
            if let Ok(mut live) = server.live.try_lock() {
                live.take();
            }
        }
    }

    /// Lists the tools of the servers named in `wanted` (all when `None`), starting
    /// those not running, all at once. A server that fails is in `failures`.
    pub async fn list(&self, wanted: &(dyn Fn(&McpServer) -> bool + Sync)) -> Listing {
        let chosen: Vec<&Server> = self.servers.iter().filter(|s| wanted(&s.config)).collect();
        let lists = join_all(chosen.iter().map(|s| self.list_one(s))).await;
        let mut listing = Listing::default();
        for (server, result) in chosen.iter().zip(lists) {
            match result {
                Ok(tools) => {
                    for tool in tools {
                        let name = server.config.tool_name(&tool.name);
                        if name.len() > 64 {
                            listing.skipped.push(format!(
                                "MCP 服务器 {} 的工具 {} 名字太长({name} 超过 64 个字符),没有提供给模型",
                                server.config.name, tool.name
                            ));
                            continue;
                        }
                        if listing.tools.iter().any(|t| t.name == name) {
                            continue;
                        }
                        let mut schema = (*tool.input_schema).clone();
                        schema.entry("type").or_insert_with(|| "object".into());
                        let schema = Value::Object(schema);
                        listing.tools.push(McpTool {
                            name,
                            server: server.config.name.clone(),
                            tool: tool.name.to_string(),
                            description: tool
                                .description
                                .as_deref()
                                .unwrap_or_default()
                                .to_string(),
                            input_schema: schema,
                        });
                    }
                }
                Err(why) => listing
                    .failures
                    .push((server.config.name.clone(), crate::error::chain(&why))),
            }
        }
        listing
    }

    async fn list_one(&self, server: &Server) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let connection = self.connection(server).await?;
        let listed = tokio::time::timeout(
            self.config.startup_timeout,
            connection.service.list_all_tools(),
        )
        .await;
        match listed {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => {
                let stderr = self.failed(server, &connection).await;
                Err(McpError::List {
                    source: Box::new(e),
                    stderr,
                })
            }
            Err(_) => {
                self.drop_connection(server, &connection).await;
                Err(McpError::ListTimeout {
                    secs: self.config.startup_timeout.as_secs(),
                })
            }
        }
    }

    /// Calls `tool` on `server` with `input`. Never fails: a server that cannot be
    /// started, dies or hangs is an error result (and a notice), and is started again
    /// at the next call. `cancel` (Ctrl-C) abandons the call.
    /// Long because the start, the retry after a dead server, the timeout and the
    /// cancel are one race; split, each piece would need the whole state.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        input: &ToolInput,
        call_id: &str,
        cancel: &CancellationToken,
    ) -> CallOutcome {
        let Some(entry) = self.servers.iter().find(|s| s.config.name == server) else {
            return CallOutcome {
                output: ToolOutput::error(format!(
                    "The MCP server {server:?} is no longer configured, so its tool {tool} \
                     cannot be called. Do without it."
                )),
                notice: None,
            };
        };
        let connection = match self.connection(entry).await {
            Ok(connection) => connection,
            Err(error) => {
                let why = crate::error::chain(&error);
                return CallOutcome {
                    output: ToolOutput::error(format!(
                        "The MCP server {server:?} could not be started ({}), so {tool} was \
                         not run. flower will try to start it again at the next call of one \
                         of its tools.",
                        error.for_model()
                    )),
                    notice: Some(format!(
                        "MCP 服务器 {server} 启动失败:{},下次调用时重试",
                        one_line(&why)
                    )),
                };
            }
        };
        // Value: rmcp takes the arguments as a tree; an input that does not parse is
        // sent as none, as `null` is.
        let arguments = match input.parse::<Value>().unwrap_or(Value::Null) {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => {
                return CallOutcome {
                    output: ToolOutput::error("The input of an MCP tool must be a JSON object."),
                    notice: None,
                };
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let timeout = self.config.tool_timeout;
        let called = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                return CallOutcome {
                    output: ToolOutput::error(crate::transcript::INTERRUPTED_TOOL_RESULT),
                    notice: None,
                };
            }
            called = tokio::time::timeout(timeout, connection.service.call_tool(params)) => called,
        };
        match called {
            Ok(Ok(result)) => CallOutcome {
                output: content::to_output(result, &self.launch.spill_dir, call_id),
                notice: None,
            },
            Ok(Err(rmcp::ServiceError::McpError(error))) => CallOutcome {
                // The server answered with a JSON-RPC error: it is alive.
                output: ToolOutput::error(format!(
                    "The MCP server {server:?} refused the call of {tool}: {} (code {})",
                    error.message, error.code.0
                )),
                notice: None,
            },
            Ok(Err(error)) => {
                let stderr = self.failed(entry, &connection).await;
                let why = format!("{error}{}", stderr_said(&stderr));
                CallOutcome {
                    output: ToolOutput::error(format!(
                        "The MCP server {server:?} stopped answering during the call of {tool} \
                         ({error}{}); the call may or may not have taken effect. flower stopped \
                         the server and will start it again at the next call of one of its tools.",
                        stderr_for_model(&stderr)
                    )),
                    notice: Some(format!(
                        "MCP 服务器 {server} 在调用 {tool} 时断开:{},下次调用时重启",
                        one_line(&why)
                    )),
                }
            }
            Err(_) => {
                self.drop_connection(entry, &connection).await;
                let secs = timeout.as_secs();
                CallOutcome {
                    output: ToolOutput::error(format!(
                        "The MCP server {server:?} did not answer the call of {tool} within \
                         {secs} s (MCP_TOOL_TIMEOUT); flower stopped the server, and will start \
                         it again at the next call of one of its tools. The call may or may not \
                         have taken effect."
                    )),
                    notice: Some(format!(
                        "MCP 服务器 {server} 调用 {tool} 超时({secs} 秒),已停掉,下次调用时重启"
                    )),
                }
            }
        }
    }

    /// The server's live connection, started now if there is none.
    async fn connection(&self, server: &Server) -> Result<Arc<Connection>, McpError> {
        let mut live = server.live.lock().await;
        if let Some(connection) = live.as_ref() {
            if !connection.service.is_transport_closed() {
                return Ok(connection.clone());
            }
            live.take();
        }
        let connection = Arc::new(self.start(&server.config).await?);
        *live = Some(connection.clone());
        Ok(connection)
    }

    /// Forgets a connection that failed (stopping its process); the newest lines of
    /// its stderr.
    async fn failed(&self, server: &Server, connection: &Arc<Connection>) -> String {
        // Give a dying process a moment to say why on stderr.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let tail = connection.stderr_tail();
        self.drop_connection(server, connection).await;
        tail
    }

    async fn drop_connection(&self, server: &Server, connection: &Arc<Connection>) {
        let mut live = server.live.lock().await;
        if live.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            live.take();
        }
        connection.service.cancellation_token().cancel();
        if let Some(process) = &connection.process {
            process
                .group
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .kill();
        }
    }

    async fn start(&self, server: &McpServer) -> Result<Connection, McpError> {
        let timeout = self.config.startup_timeout;
        match &server.transport {
            Transport::Stdio { command, args, env } => {
                let process = self.spawn(command, args, env)?;
                let (mut process, stdin, stdout) = process;
                let served = tokio::time::timeout(timeout, ().serve((stdout, stdin))).await;
                let service = match served {
                    Ok(Ok(service)) => service,
                    Ok(Err(e)) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        let tail = String::from_utf8_lossy(
                            &process
                                .stderr
                                .lock()
                                .unwrap_or_else(|poisoned| poisoned.into_inner()),
                        )
                        .trim()
                        .to_string();
                        process
                            .group
                            .get_mut()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .kill();
                        return Err(McpError::Initialize {
                            source: Box::new(e),
                            stderr: tail,
                        });
                    }
                    Err(_) => {
                        return Err(McpError::StartTimeout {
                            secs: timeout.as_secs(),
                        });
                    }
                };
                Ok(Connection {
                    service,
                    process: Some(process),
                })
            }
            Transport::Http { url, headers } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                install_tls_provider();
                let mut custom = std::collections::HashMap::new();
                for (name, value) in headers {
                    let header = |e: Box<dyn std::error::Error + Send + Sync>| McpError::Header {
                        name: name.clone(),
                        source: e,
                    };
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|e| header(Box::new(e)))?;
                    let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| header(Box::new(e)))?;
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport = StreamableHttpClientTransport::from_config(config);
                let service = tokio::time::timeout(timeout, ().serve(transport))
                    .await
                    .map_err(|_| McpError::StartTimeout {
                        secs: timeout.as_secs(),
                    })?
                    .map_err(|e| McpError::Initialize {
                        source: Box::new(e),
                        stderr: String::new(),
                    })?;
                Ok(Connection {
                    service,
                    process: None,
                })
            }
        }
    }

    /// Starts a stdio server's process in the sandbox.
    /// Long because the child's sandbox setup is one ordered sequence (session,
    /// sandbox layers, pipes, environment); its order is the contract.
    fn spawn(
        &self,
        command: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<
        (
            Process,
            tokio::process::ChildStdin,
            tokio::process::ChildStdout,
        ),
        McpError,
    > {
        let launch = &self.launch;
        let mut last = None;
        // A second attempt only when the saved namespaces turned out stale (as Bash does).
        for attempt in 0..2 {
            let prepared =
                sandbox::prepare(&launch.sandbox, &launch.workspace).map_err(McpError::Sandbox)?;
            let sandboxed = prepared.is_some();
            let sweep = prepared.as_ref().map(|p| p.sweep()).unwrap_or_default();
            let mut cmd = tokio::process::Command::new(command);
            // What the server's own `env` names is set after this, and stays.
            crate::tools::process::withhold(&mut cmd, &launch.sandbox.withheld_env);
            cmd.args(args)
                .current_dir(&launch.workspace)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .env("CLAUDE_PROJECT_DIR", &launch.workspace);
            for (name, value) in launch.env.iter().chain(env) {
                cmd.env(name, value);
            }
            sandbox::confine(&mut cmd, prepared);
            match cmd.spawn() {
                Ok(mut child) => {
                    let pid = child.id();
                    // It leads a session of its own, so its group id is its pid.
                    let pgid = pid.and_then(|id| i32::try_from(id).ok());
                    let group = GroupGuard::new(pgid, &launch.processes);
                    let (Some(stdin), Some(stdout), Some(stderr)) =
                        (child.stdin.take(), child.stdout.take(), child.stderr.take())
                    else {
                        return Err(McpError::Pipes);
                    };
                    let tail = Arc::new(Mutex::new(Vec::new()));
                    tokio::spawn(keep_tail(stderr, tail.clone()));
                    let process = Process {
                        group: Mutex::new(group),
                        stderr: tail,
                        pid,
                        _child: child,
                        sweep,
                    };
                    return Ok((process, stdin, stdout));
                }
                Err(e) if sandboxed && attempt == 0 && sandbox::is_stale(&e) => {
                    sandbox::forget_namespaces();
                    last = Some(e);
                }
                Err(e) => {
                    return Err(McpError::Spawn {
                        command: command.to_string(),
                        source: e,
                    });
                }
            }
        }
        Err(McpError::Spawn {
            command: command.to_string(),
            source: last
                .unwrap_or_else(|| std::io::Error::other("the sandbox's namespaces went stale")),
        })
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Keeps the newest [`STDERR_TAIL_BYTES`] of a server's stderr.
async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut kept = tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                kept.extend_from_slice(&buf[..n]);
                let excess = kept.len().saturating_sub(STDERR_TAIL_BYTES);
                kept.drain(..excess);
            }
        }
    }
}

/// rmcp's HTTP client (reqwest 0.13 without a built-in provider) needs a process-wide
/// TLS provider: ring, the one flower's own client uses. Installed once.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one already: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Runs futures concurrently on this task, in order of the input.
async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let short: String = line.chars().take(200).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}
