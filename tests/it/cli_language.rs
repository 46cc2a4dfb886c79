//! One language per audience (issue 29, item 7): what the `flower` binary prints for the
//! person is Chinese, in the spec's voice. Names stay names (paths, flags, variables,
//! settings keys, values); what another program said (the OS, SQLite, PostgreSQL, the
//! API) is quoted in parentheses. This runs the binary through its error paths and refuses
//! any printed line with English prose of flower's own.

use crate::support::pipeline::{Project, REQUEST, simple_reply, text};
use crate::support::{FakeServer, Reply};
use std::process::Output;

/// What `line` says in flower's own words: `` `…` `` and `"…"` removed, and a
/// parenthesised part without Chinese (another program's words, or names) too; a
/// parenthesised part with Chinese is flower's and stays.
fn unquoted(line: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (None, '`' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    // Innermost parentheses first.
    while let Some(close) = out.find(')') {
        let Some(open) = out[..close].rfind('(') else {
            out.replace_range(close..close + 1, " ");
            continue;
        };
        let inner = out[open + 1..close].to_string();
        let kept = if inner.chars().any(is_cjk) {
            format!(" {inner} ")
        } else {
            " ".to_string()
        };
        out.replace_range(open..close + 1, &kept);
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}')
}

/// English prose: three English words in a row (a word: ASCII letters only, with at
/// most a trailing punctuation mark) in flower's own words ([`unquoted`]). A name (`--store`,
/// `ANTHROPIC_API_KEY`, `runs/sessions.db`, `postgres://…`) is not a word and breaks
/// the run, so "flower --wait" or "export ANTHROPIC_API_KEY=…" are not prose.
fn english_prose(line: &str) -> Option<String> {
    // The program's name before what it says: `flower:`, `flower store load:`.
    let said = match line.split_once(": ") {
        Some((who, rest)) if who == "flower" || who.starts_with("flower store ") => rest,
        _ => line,
    };
    let said = unquoted(said);
    let mut run: Vec<&str> = Vec::new();
    for token in said.split_whitespace() {
        let word = token.trim_end_matches([',', '.', ';', ':', '!', '?']);
        if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphabetic()) {
            run.push(word);
            if run.len() >= 3 {
                return Some(run.join(" "));
            }
        } else {
            run.clear();
        }
    }
    None
}

/// Every line of `out`'s stdout and stderr: no English prose, and every stderr line
/// that says something (not a bare name or value) has Chinese in it.
fn assert_chinese(what: &str, out: &Output) {
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert!(
        !stderr.trim().is_empty(),
        "{what}: nothing said on stderr (status {:?})",
        out.status.code()
    );
    for line in stderr.lines().chain(stdout.lines()) {
        if let Some(prose) = english_prose(line) {
            panic!("{what}: English in a printed line ({prose:?}):\n{line}\n---\n{stderr}");
        }
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.chars().any(is_cjk),
            "{what}: a stderr line without Chinese:\n{line}\n---\n{stderr}"
        );
    }
}

#[test]
fn the_check_tells_prose_from_names() {
    for prose in [
        "flower: settings file /x/.claude/settings.json: permissions.allow: expected an array of strings",
        "flower: 打不开存储:runs/sessions.db: not a SQLite database (or encrypted)",
        "error: unexpected argument '--bogus' found",
        "For more information, try '--help'.",
    ] {
        assert!(english_prose(prose).is_some(), "{prose}");
    }
    for fine in [
        "flower: 没有设置 ANTHROPIC_API_KEY:先 export 你的 Anthropic API key,例如 `export ANTHROPIC_API_KEY=sk-ant-…`",
        "flower: 打不开 runs/sessions.db(No such file or directory (os error 2))",
        "另一个 flower 正在这里运行(pid 12,10:00 起)。等它跑完再接着做:flower --wait",
        "[]",
        "postgres://user@host:5432/db",
    ] {
        assert!(english_prose(fine).is_none(), "{fine}");
    }
}

#[test]
fn bad_flags_settings_and_a_missing_key_are_said_in_chinese() {
    let project = Project::new();
    let server = FakeServer::with_handler(|_, _| Reply::text("好的。"));
    for args in [
        vec!["--rounds", "abc", REQUEST],
        vec!["--rounds", "0", REQUEST],
        vec!["--bogus", REQUEST],
        vec!["once"],
        vec!["store", "bogus"],
        vec!["--handoff-at", "xx", REQUEST],
        vec!["--effort", "huge", REQUEST],
        vec!["--model", "gpt", REQUEST],
        vec!["--store", "mysql://x", REQUEST],
        vec!["--run-key", "k", REQUEST],
        vec!["--no-sandbox", "--no-network", REQUEST],
        vec!["-f", "nowhere.txt"],
        vec!["-r", "../elsewhere", REQUEST],
    ] {
        let out = project.run(&server, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_chinese(&format!("{args:?}"), &out);
    }
    for (name, value) in [
        ("FLOWER_MAX_ATTEMPTS", "abc"),
        ("FLOWER_SANDBOX", "maybe"),
        ("FLOWER_NETWORK", "maybe"),
        ("FLOWER_MEMORY", "maybe"),
        ("FLOWER_HANDOFF_AT", "xx"),
        ("FLOWER_CONTEXT_WINDOW", "xx"),
        ("FLOWER_STORE", "mysql://x"),
        ("ANTHROPIC_BASE_URL", "ftp://x"),
        ("MCP_TIMEOUT", "soon"),
    ] {
        let out = project
            .command(&server, &[REQUEST])
            .env(name, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out.stderr));
        assert_chinese(name, &out);
    }
    // Settings files: a key of the wrong shape, a file that is not JSON.
    let settings = project.dir.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    for body in [
        r#"{"permissions": {"allow": "Bash"}}"#,
        r#"{"permissions": {"allow": [1]}}"#,
        r#"{"hooks": 5}"#,
        r#"{"env": {"FLOWER_MEMORY": "maybe"}}"#,
        r#"{"model": "gpt"}"#,
        r#"{"mcpServers": {"x": {"type": "ws"}}}"#,
        r#"{"permissions": "#,
    ] {
        std::fs::write(&settings, body).unwrap();
        let out = project.run(&server, &[REQUEST]);
        assert_eq!(out.status.code(), Some(2), "{body}: {}", text(&out.stderr));
        assert_chinese(body, &out);
    }
    std::fs::remove_file(&settings).unwrap();
    // The missing key, in the pipeline and in `once`.
    for args in [vec![REQUEST], vec!["once", "hi"]] {
        let out = project
            .command(&server, &args)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert_chinese("no key", &out);
    }
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_corrupt_store_an_unknown_step_and_store_errors_are_said_in_chinese() {
    // Nothing run here yet.
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    for args in [vec!["log"], vec!["show"], vec!["report"]] {
        let out = project.run(&server, &args);
        assert!(!out.status.success(), "{args:?}");
        assert_chinese(&format!("{args:?} before a run"), &out);
    }

    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = project.run(&server, &["show", "打扫"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_chinese("show 打扫", &out);

    // `flower store`: a bad key, bad input, a file that is not there, a bad URL.
    for (args, stdin) in [
        (vec!["store", "load", "a"], ""),
        (vec!["store", "append", "p/s"], "not json"),
        (vec!["store", "append", "p/s"], "[1]"),
        (vec!["store", "import", "nowhere.jsonl"], ""),
        (vec!["store", "sessions", "--store", "mysql://x"], ""),
        (vec!["store", "load", "p/s", "--db", "runs"], ""),
    ] {
        let mut child = project
            .flower(&server, &args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "{args:?}: {}", text(&out.stdout));
        assert_chinese(&format!("{args:?}"), &out);
    }

    // A sessions.db that is not a database: every command that reads it.
    let runs = project.dir.join("runs");
    for side in ["sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(runs.join(side));
    }
    std::fs::write(runs.join("sessions.db"), b"garbage garbage garbage garbage").unwrap();
    for args in [
        vec!["再加一行"],
        vec!["--new", "另一件事"],
        vec!["log"],
        vec!["show", "干活"],
        vec!["report"],
        vec!["store", "sessions"],
        vec!["once", "hi"],
    ] {
        let out = project.run(&server, &args);
        assert!(!out.status.success(), "{args:?}");
        assert_chinese(&format!("{args:?} on a corrupt sessions.db"), &out);
    }
}

#[test]
fn a_model_error_is_quoted_after_chinese_words() {
    let project = Project::new();
    let bad_key = || Reply::error(401, "authentication_error", "invalid x-api-key");
    let server = FakeServer::with_handler(move |_, _| bad_key());
    for args in [vec!["once", "hi"], vec![REQUEST]] {
        let out = project.run(&server, &args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("invalid x-api-key"), "{stderr}");
        assert_chinese(&format!("{args:?} with a 401"), &out);
    }
}
