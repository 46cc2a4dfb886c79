//! "The stricter wins" across the settings files' scopes (issue #40, item 1b).
//!
//! The workspace's files (project, local, `.mcp.json`) can be written by an agent; the
//! user's `~/.claude/settings.json` cannot. So for the keys that decide what a run may
//! reach, a workspace file may narrow what the user's file (and the defaults) say,
//! never widen it. A widening value is taken out of the document before anything
//! reads it, and one line on stderr ([`super::FileLayer::ignored`]) names the file, the
//! key, and how to apply it on purpose (the variable in the person's own environment,
//! the user's file, or a flag).
//!
//! | key (project, local)                        | applied when                              |
//! |---------------------------------------------|-------------------------------------------|
//! | `env.FLOWER_SANDBOX`                        | as strict or stricter (off < on < require) |
//! | `env.FLOWER_NETWORK`                        | as strict or stricter (on < off)           |
//! | `env.ANTHROPIC_BASE_URL`, `…_API_KEY`, `…_AUTH_TOKEN`, `…_CUSTOM_HEADERS`, `FLOWER_STORE` | equal to what the user's file says (where the key goes is never the workspace's choice) |
//! | `permissions.additionalDirectories`         | an entry inside the workspace or inside a directory the user's file adds |
//! | `sandbox.enabled: false`, `allowUnsandboxedCommands`, `excludedCommands`, `enableWeakerNestedSandbox`, `autoAllowBashIfSandboxed` (Claude Code's; flower reads none) | never |
//! | `enableAllProjectMcpServers: true`, `enabledMcpjsonServers`, `apiKeyHelper`, `awsAuthRefresh`, `awsCredentialExport`, `otelHeadersHelper` | never |
//! | `mcpServers.<name>` (also `.mcp.json`)      | no server of that name in the user's file  |
//!
//! `sandbox.network.*` is left to its reader, which applies the same rule itself:
//! allowed lists intersect, denied lists add up, a boolean only narrows. Hooks and the
//! workspace's MCP servers are not filtered: they are the project's conventions, and
//! the pin ([`super::pin`]) makes sure none is obeyed that no person has seen.

use super::document::{SandboxSection, SettingsFile};
use super::files::Scope;
use super::sources::FileLayer;
use crate::lenient::Slot;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Variables whose value says where the key goes or what it is: a workspace file may
/// only repeat the user's value.
const IDENTITY_VARS: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    "FLOWER_STORE",
];

/// How a person widens the sandbox on purpose.
const SANDBOX_HOW: &str = "flower 的沙箱由你自己环境里的 FLOWER_SANDBOX、FLOWER_NETWORK(或 ~/.claude/settings.json 的 env)和 --no-sandbox、--no-network 决定";

/// Where the key comes from instead.
const CREDENTIAL_HOW: &str = "flower 只从你自己的环境(或 ~/.claude/settings.json 的 env)拿 key;.mcp.json 的服务器由人确认过的设置放行";

const USER_FILE: &str = "~/.claude/settings.json";

/// What the user's file (and the files before this one) say, for comparing.
pub(super) struct Before<'a> {
    pub layer: &'a FileLayer,
    pub workspace: &'a Path,
    pub home: Option<&'a Path>,
}

/// `settings` of a `scope` file at `path` without what would widen the run; the lines
/// saying what was left out go to `ignored`. The user's file is returned as it is.
pub(super) fn narrow(
    scope: Scope,
    path: &Path,
    mut settings: SettingsFile,
    before: &Before<'_>,
    ignored: &mut Vec<String>,
) -> SettingsFile {
    if scope == Scope::User {
        return settings;
    }
    let mut ignore = |key: String, how: String| {
        ignored.push(format!(
            "没有采用 {} 里的 {key}:项目和本地的设置文件只能收紧用户的设置,不能放宽。{how}",
            path.display()
        ));
    };
    if let Slot::Is(env) = &mut settings.env {
        env.0.retain(
            |(name, value)| match var_verdict(name, &value.written(), before.layer) {
                Ok(()) => true,
                Err(how) => {
                    ignore(format!("env.{name}"), how);
                    false
                }
            },
        );
    }
    if let Slot::Is(permissions) = &mut settings.permissions
        && let Slot::Is(dirs) = &mut permissions.additional_directories
    {
        dirs.retain(|dir| {
            let Slot::Is(dir) = dir else { return true };
            if dir_allowed(dir, before) {
                return true;
            }
            ignore(
                format!("permissions.additionalDirectories {dir:?}"),
                format!(
                    "真要让代理写那里,把它写进 {USER_FILE} 的 permissions.additionalDirectories"
                ),
            );
            false
        });
    }
    if let Slot::Is(sandbox) = &mut settings.sandbox {
        drop_escape_hatches(sandbox, &mut ignore);
    }
    drop_credentials(&mut settings, &mut ignore);
    if let Some(Value::Object(servers)) = &mut settings.mcp_servers {
        let users = user_servers(before.layer);
        servers.retain(|name, _| {
            if !users.contains(name) {
                return true;
            }
            ignore(
                format!("mcpServers.{name}"),
                format!("同名的 MCP 服务器以 {USER_FILE} 里的为准;真要换,改那里"),
            );
            false
        });
    }
    settings
}

/// Takes out the `sandbox.*` keys a workspace file never sets, unless one holds the
/// value that is harmless (`None`: none is). flower reads none of them: its sandbox is
/// `FLOWER_SANDBOX` and the flags; `sandbox.network` has its own reader, which applies
/// the stricter-wins rule itself (allowed lists intersect, denied lists add up,
/// booleans only narrow).
fn drop_escape_hatches(sandbox: &mut SandboxSection, ignore: &mut impl FnMut(String, String)) {
    let hatches = [
        ("enabled", &mut sandbox.enabled, Some(true)),
        (
            "allowUnsandboxedCommands",
            &mut sandbox.allow_unsandboxed_commands,
            Some(false),
        ),
        ("excludedCommands", &mut sandbox.excluded_commands, None),
        (
            "enableWeakerNestedSandbox",
            &mut sandbox.enable_weaker_nested_sandbox,
            Some(false),
        ),
        (
            "autoAllowBashIfSandboxed",
            &mut sandbox.auto_allow_bash_if_sandboxed,
            Some(false),
        ),
    ];
    for (key, value, harmless) in hatches {
        let Some(said) = value else {
            continue;
        };
        if harmless.is_some_and(|harmless| *said == Value::Bool(harmless)) {
            continue;
        }
        *value = None;
        ignore(format!("sandbox.{key}"), SANDBOX_HOW.into());
    }
}

/// Takes out the top-level keys a workspace file never sets: each hands out a
/// credential or approves servers, and flower reads none of them (the key comes from
/// the person's environment or the user's `env`; `.mcp.json`'s servers are approved by
/// the pin). `enableAllProjectMcpServers` is harmless unless `true`.
fn drop_credentials(settings: &mut SettingsFile, ignore: &mut impl FnMut(String, String)) {
    if settings.enable_all_project_mcp_servers == Some(Value::Bool(true)) {
        settings.enable_all_project_mcp_servers = None;
        ignore("enableAllProjectMcpServers".into(), CREDENTIAL_HOW.into());
    }
    let never = [
        ("apiKeyHelper", &mut settings.api_key_helper),
        ("awsAuthRefresh", &mut settings.aws_auth_refresh),
        ("awsCredentialExport", &mut settings.aws_credential_export),
        ("otelHeadersHelper", &mut settings.otel_headers_helper),
        (
            "enabledMcpjsonServers",
            &mut settings.enabled_mcpjson_servers,
        ),
    ];
    for (key, value) in never {
        if value.take().is_some() {
            ignore(key.to_string(), CREDENTIAL_HOW.into());
        }
    }
}

/// Whether a workspace file may set variable `name` to `value`, given what the files
/// before it set; `Err`: how a person applies it on purpose.
fn var_verdict(name: &str, value: &str, layer: &FileLayer) -> Result<(), String> {
    let current = layer.vars.get(name).map(|v| v.trim().to_string());
    let value = value.trim();
    let on_purpose = |flag: &str| {
        format!("真要这样,在你自己的环境里设 {name}={value}{flag},或写进 {USER_FILE} 的 env")
    };
    match name {
        "FLOWER_SANDBOX" => {
            let rank = |v: &str| match v {
                "off" => Some(0),
                "on" => Some(1),
                "require" => Some(2),
                _ => None,
            };
            let now = rank(current.as_deref().unwrap_or("on")).unwrap_or(1);
            match rank(value) {
                // Not a value at all: the resolution refuses it, naming the file.
                None => Ok(()),
                Some(new) if new >= now => Ok(()),
                Some(_) => Err(on_purpose("(或加 --no-sandbox)")),
            }
        }
        "FLOWER_NETWORK" => {
            let strict = |v: &str| v == "off";
            let now = strict(current.as_deref().unwrap_or("on"));
            match value {
                "on" if now => Err(on_purpose("")),
                _ => Ok(()),
            }
        }
        _ if IDENTITY_VARS.contains(&name) => {
            if current.as_deref() == Some(value) {
                return Ok(());
            }
            // The value is not repeated: it may be a credential.
            Err(format!(
                "真要这样,在你自己的环境里设 {name},或写进 {USER_FILE} 的 env"
            ))
        }
        _ => Ok(()),
    }
}

/// An additional directory a workspace file may add: inside the workspace (where the
/// agent writes anyway) or inside a directory the user's file adds.
fn dir_allowed(dir: &str, before: &Before<'_>) -> bool {
    let Some(resolved) = resolve_dir(dir, before.workspace, before.home) else {
        return false;
    };
    let Ok(resolved) = resolved.canonicalize() else {
        // Not there: the file's reader refuses it, naming the file and the key.
        return true;
    };
    let workspace = before
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| before.workspace.to_path_buf());
    resolved.starts_with(&workspace)
        || before
            .layer
            .permissions
            .additional_directories
            .iter()
            .any(|allowed| resolved.starts_with(allowed))
}

/// An `additionalDirectories` entry as a path: `~` and `~/…` from the home, anything
/// else from the workspace; `None`: `~` without a home.
pub(super) fn resolve_dir(dir: &str, workspace: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if dir == "~" {
        return home.map(Path::to_path_buf);
    }
    match dir.strip_prefix("~/") {
        Some(rest) => home.map(|home| home.join(rest)),
        None => Some(workspace.join(dir)),
    }
}

/// The names of the MCP servers the user's file defines.
fn user_servers(layer: &FileLayer) -> Vec<String> {
    layer
        .files
        .iter()
        .filter(|f| f.scope == Scope::User)
        .filter_map(|f| f.settings.mcp_servers.as_ref())
        .filter_map(Value::as_object)
        .flat_map(|servers| servers.keys().cloned())
        .collect()
}
