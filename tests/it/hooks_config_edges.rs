//! `engine::hooks::config` through the library, beside `config_sections`: a matcher
//! read as Claude Code reads it (exact names, or a regular expression searched in the
//! name), and the commands an event runs, each once.

use flower::engine::hooks::{HookEvent, HookSet, HooksSection, Matcher};
use serde_json::{Value, json};
use std::path::Path;

fn set(value: Value) -> HookSet {
    let section: HooksSection = serde_json::from_value(value).unwrap();
    let mut set = HookSet::default();
    set.add_from(&section, Path::new("s.json")).unwrap();
    set
}

#[test]
fn a_plain_matcher_names_tools_exactly_and_anything_else_is_searched() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("", &["Bash", "anything"], &[]),
        ("  *  ", &["Bash", "anything"], &[]),
        ("Edit", &["Edit"], &["NotebookEdit", "Edit2", "edit"]),
        (
            "Write|Edit",
            &["Write", "Edit"],
            &["MultiEdit", "Write|Edit"],
        ),
        (
            "mcp__files__read",
            &["mcp__files__read"],
            &["mcp__files__read_all"],
        ),
        ("Edit|", &["Edit"], &["", "NotebookEdit"]),
        ("Notebook.*", &["NotebookEdit", "MyNotebookRead"], &["Edit"]),
        (
            "mcp__memory__.*",
            &["mcp__memory__save"],
            &["mcp__files__read"],
        ),
        ("^Bash$", &["Bash"], &["Bash2"]),
    ];
    for (text, hits, misses) in cases {
        let matcher = Matcher::parse(text).unwrap();
        for name in *hits {
            assert!(matcher.matches(name), "{text:?} should match {name}");
        }
        for name in *misses {
            assert!(!matcher.matches(name), "{text:?} should not match {name}");
        }
    }
    assert_eq!(Matcher::parse("").unwrap(), Matcher::All);
    assert_eq!(Matcher::parse("*").unwrap(), Matcher::All);
    assert_eq!(
        Matcher::parse("Write|Edit").unwrap(),
        Matcher::Names(vec!["Write".into(), "Edit".into()])
    );
    assert_eq!(
        Matcher::parse("mcp__a_b").unwrap(),
        Matcher::Names(vec!["mcp__a_b".into()])
    );
}

#[test]
fn matchers_are_equal_when_written_alike() {
    let m = |text: &str| Matcher::parse(text).unwrap();
    assert_eq!(m("*"), m(""));
    assert_eq!(m("Write|Edit"), m("Write|Edit"));
    assert_ne!(m("Write|Edit"), m("Edit|Write"));
    assert_eq!(m("Note.*"), m("Note.*"));
    assert_ne!(m("Note.*"), m("Note.+"));
    assert_ne!(m("Write"), Matcher::All);
    assert_ne!(m("Write"), m("Write.*"));
    assert_ne!(m("Write.*"), Matcher::All);
}

#[test]
fn an_event_runs_each_command_once_whatever_groups_name_it() {
    let hooks = set(json!({
        "PreToolUse": [
            {"matcher": "Write", "hooks": [
                {"type": "command", "command": "a.sh"},
                {"type": "command", "command": "b.sh"}
            ]},
            {"matcher": "Write|Edit", "hooks": [
                {"type": "command", "command": "a.sh"},
                {"type": "command", "command": "c.sh"}
            ]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "d.sh"}]}
        ],
        "Stop": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "e.sh"}]}]
    }));
    let names = |event, subject| -> Vec<String> {
        hooks
            .matching(event, subject)
            .iter()
            .map(|c| c.command.clone())
            .collect()
    };
    assert_eq!(
        names(HookEvent::PreToolUse, "Write"),
        ["a.sh", "b.sh", "c.sh"]
    );
    assert_eq!(names(HookEvent::PreToolUse, "Edit"), ["a.sh", "c.sh"]);
    assert_eq!(names(HookEvent::PreToolUse, "Read"), Vec::<String>::new());
    // Stop has no matcher: its groups run whatever they say.
    assert_eq!(names(HookEvent::Stop, "anything"), ["e.sh"]);
    assert!(hooks.has(HookEvent::PreToolUse) && hooks.has(HookEvent::Stop));
    assert!(!hooks.has(HookEvent::PostToolUse));
    assert!(!hooks.is_empty());
    assert_eq!(hooks.commands().count(), 6);
    assert!(HookSet::default().is_empty());
    // An event whose every hook was left out has no hooks.
    let ignored = set(json!({"Stop": [{"hooks": [{"type": "prompt", "prompt": "p"}]}]}));
    assert!(ignored.is_empty() && !ignored.has(HookEvent::Stop));
}
