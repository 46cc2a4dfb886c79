//! What a run loads from the project's conventions, listed for a person (`flower
//! state -v`, `flower -v` under the banner) and for scripts (`flower state --json -v`):
//! the memory files (as a new session would read them now), the settings files, the
//! permission rules and directories they add, and the hooks. So that a person can see
//! why an agent behaves as it does.

use super::lines::tilde;
use flower::engine::memory::{Memory, MemoryKind};
use flower::settings::Settings;
use serde_json::{Value, json};
use std::path::Path;

/// The listing's lines (Chinese, as the rest of the CLI speaks).
/// Long because it is one flat listing, a section per kind of convention in the
/// order `flower state -v` prints them; cut, the order would be spread over helpers.
pub fn lines(settings: &Settings) -> Vec<String> {
    let home = settings.home();
    let mut out = Vec::new();
    let memory = settings.memory_source().load();
    if !settings.memory() {
        out.push("项目记忆:关(--no-memory 或 FLOWER_MEMORY=off)".to_string());
    } else if memory.files.is_empty() {
        out.push("项目记忆:没有(没找到 CLAUDE.md / AGENTS.md)".to_string());
    } else {
        let bytes: usize = memory.files.iter().map(|f| f.bytes).sum();
        out.push(format!(
            "项目记忆:{} 个文件,{bytes} 字节",
            memory.files.len()
        ));
        for file in &memory.files {
            out.push(format!(
                "  {}{}({},{} 字节)",
                "  ".repeat(file.depth),
                tilde(&file.path, home),
                kind_name(file.kind),
                file.bytes
            ));
        }
    }
    for warning in memory.warnings.iter().filter(|_| settings.memory()) {
        out.push(format!("  ! {warning}"));
    }
    let files = &settings.files();
    if files.files.is_empty() {
        out.push("设置文件:没有".to_string());
    } else {
        out.push("设置文件:".to_string());
        for file in &files.files {
            out.push(format!(
                "  {}({})",
                tilde(&file.path, home),
                scope_name(file.scope)
            ));
        }
    }
    for ignored in &files.ignored {
        out.push(format!("  ! {ignored}"));
    }
    if let Some(drift) = flower::run::pinned_drift(settings) {
        out.push(
            "  ! 和运行记下的不一样:下次 flower 先问(无人值守时要加 --accept-settings)".to_string(),
        );
        out.extend(drift.lines().into_iter().map(|line| format!("  {line}")));
    }
    let permissions = &files.permissions;
    for (name, list) in [
        ("allow", &permissions.allow),
        ("deny", &permissions.deny),
        ("ask", &permissions.ask),
    ] {
        if !list.is_empty() {
            let rules: Vec<&str> = list.iter().map(|r| r.rule.as_str()).collect();
            out.push(format!("权限 {name}:{}", rules.join(", ")));
        }
    }
    if !permissions.additional_directories.is_empty() {
        let dirs: Vec<String> = permissions
            .additional_directories
            .iter()
            .map(|d| tilde(d, home))
            .collect();
        out.push(format!("额外目录:{}", dirs.join(", ")));
    }
    let hooks = files.hooks.listing();
    if hooks.is_empty() {
        out.push("hooks:没有".to_string());
    } else {
        out.push(format!("hooks:{} 个", hooks.len()));
        out.extend(hooks.into_iter().map(|line| format!("  {line}")));
    }
    for ignored in &files.hooks.ignored {
        out.push(format!("  ! {ignored}"));
    }
    out.extend(agent_lines(settings));
    out.extend(skill_lines(settings));
    let mcp = &settings.mcp();
    if mcp.servers.is_empty() {
        out.push("MCP 服务器:没有".to_string());
    } else {
        out.push(format!(
            "MCP 服务器:{} 个(工具名 mcp__<服务器>__<工具>;在流程里只给干活的子代理)",
            mcp.servers.len()
        ));
        for server in &mcp.servers {
            out.push(format!(
                "  {}({})",
                server.describe(),
                tilde(&server.source, home)
            ));
        }
    }
    out
}

/// The custom sub-agents (`.claude/agents/*.md`) and the files left out.
fn agent_lines(settings: &Settings) -> Vec<String> {
    let home = settings.home();
    let files = &settings.files().agents;
    let mut out = Vec::new();
    if files.agents.is_empty() {
        out.push("自定义子代理:没有".to_string());
    } else {
        out.push(format!(
            "自定义子代理:{} 个(Task 的 subagent_type;流程里由协调者派,权限不超过干活的子代理)",
            files.agents.len()
        ));
    }
    for agent in &files.agents {
        let tools = match &agent.tools {
            Some(tools) => tools.join(", "),
            None => "角色的全部".to_string(),
        };
        out.push(format!(
            "  {}:{}({},{};tools:{tools})",
            agent.name,
            agent.description,
            tilde(&agent.path, home),
            scope_name(agent.scope),
        ));
        unused_key_lines(
            &mut out,
            &agent.unused_keys,
            flower::settings::agents::known_unused,
        );
    }
    for ignored in &files.ignored {
        out.push(format!("  ! {ignored}"));
    }
    out
}

/// The skills (`.claude/skills/*/SKILL.md`) and the ones left out.
fn skill_lines(settings: &Settings) -> Vec<String> {
    let home = settings.home();
    let files = &settings.files().skills;
    let mut out = Vec::new();
    if files.skills.is_empty() {
        out.push("技能:没有".to_string());
    } else {
        out.push(format!(
            "技能:{} 个(系统提示里只有名字和说明;模型调用 Skill 时才读正文)",
            files.skills.len()
        ));
    }
    for file in &files.skills {
        let skill = &file.skill;
        out.push(format!(
            "  {}:{}({},{};另有 {} 个文件)",
            skill.name,
            skill.description,
            tilde(&file.path, home),
            if skill.scope == "user" {
                "用户"
            } else {
                "项目"
            },
            skill.files.len()
        ));
        unused_key_lines(
            &mut out,
            &file.unused_keys,
            flower::settings::skills::known_unused,
        );
    }
    for ignored in &files.ignored {
        out.push(format!("  ! {ignored}"));
    }
    out
}

/// A file's front-matter keys flower leaves unused: those Claude Code knows apart from
/// the ones nobody knows (listed, never fatal).
fn unused_key_lines(out: &mut Vec<String>, keys: &[String], known: fn(&str) -> bool) {
    let (known, unknown): (Vec<&String>, Vec<&String>) = keys.iter().partition(|k| known(k));
    if !known.is_empty() {
        out.push(format!("    ! flower 不用的键:{}", join(&known)));
    }
    if !unknown.is_empty() {
        out.push(format!("    ! 不认识的键:{}(忽略)", join(&unknown)));
    }
}

fn join(keys: &[&String]) -> String {
    keys.iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The same as JSON.
// Value: an output document built with `json!`, which `flower state -v` nests in its own.
pub fn json(settings: &Settings) -> Value {
    let memory: Memory = if settings.memory() {
        settings.memory_source().load()
    } else {
        Memory::default()
    };
    let files = &settings.files();
    let rules = |list: &[flower::settings::files::FileRule]| -> Vec<Value> {
        list.iter()
            .map(|r| json!({"rule": r.rule, "file": path(&r.source)}))
            .collect()
    };
    json!({
        "memory": {
            "enabled": settings.memory(),
            "files": memory.files.iter().map(|f| json!({
                "path": path(&f.path),
                "kind": kind_key(f.kind),
                "bytes": f.bytes,
                "depth": f.depth,
            })).collect::<Vec<_>>(),
            "bytes": memory.text.len(),
            "warnings": memory.warnings,
        },
        "settings_files": files.files.iter().map(|f| json!({
            "path": path(&f.path),
            "scope": f.scope.name(),
        })).collect::<Vec<_>>(),
        // Changed since the run pinned them (relative to the workspace).
        "settings_changed": flower::run::pinned_drift(settings)
            .map(|d| d.files.iter().map(|f| f.file.clone()).collect::<Vec<_>>())
            .unwrap_or_default(),
        "settings_ignored": files.ignored,
        "permissions": {
            "allow": rules(&files.permissions.allow),
            "deny": rules(&files.permissions.deny),
            "ask": rules(&files.permissions.ask),
            "additional_directories": files.permissions.additional_directories.iter().map(|d| path(d)).collect::<Vec<_>>(),
        },
        "hooks": files.hooks.listing(),
        "ignored": files.hooks.ignored,
        "agents": files.agents.agents.iter().map(|a| json!({
            "name": a.name,
            "description": a.description,
            "scope": a.scope.name(),
            "file": path(&a.path),
            "tools": a.tools,
            "disallowed_tools": a.disallowed_tools,
            "model": a.model,
            "max_turns": a.max_turns,
            "unused_keys": a.unused_keys,
        })).collect::<Vec<_>>(),
        "agents_ignored": files.agents.ignored,
        "skills": files.skills.skills.iter().map(|s| json!({
            "name": s.skill.name,
            "description": s.skill.description,
            "scope": s.skill.scope,
            "file": path(&s.path),
            "files": s.skill.files,
            "unused_keys": s.unused_keys,
        })).collect::<Vec<_>>(),
        "skills_ignored": files.skills.ignored,
        "mcp_servers": settings.mcp().servers.iter().map(|s| {
            // As the file writes them: an expanded `${TOKEN}` is never printed.
            let (kind, target) = match &s.written {
                flower::tools::mcp::Transport::Stdio { command, args, .. } => {
                    ("stdio", json!({"command": command, "args": args}))
                }
                flower::tools::mcp::Transport::Http { url, .. } => ("http", json!({"url": url})),
            };
            json!({
                "name": s.name,
                "type": kind,
                "rule": s.rule(),
                "target": target,
                "file": path(&s.source),
            })
        }).collect::<Vec<_>>(),
    })
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn kind_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::User => "用户",
        MemoryKind::Project => "项目",
        MemoryKind::Local => "本机",
        MemoryKind::Import => "导入",
    }
}

fn kind_key(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::User => "user",
        MemoryKind::Project => "project",
        MemoryKind::Local => "local",
        MemoryKind::Import => "import",
    }
}

fn scope_name(scope: flower::settings::files::Scope) -> &'static str {
    use flower::settings::files::Scope;
    match scope {
        Scope::User => "用户",
        Scope::Project => "项目",
        Scope::Local => "本机",
    }
}
