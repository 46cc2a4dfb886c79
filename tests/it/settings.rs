//! One settings resolution (`flower::settings`), from an explicit environment: flags
//! over variables over files over defaults, every bad value a `ConfigError` naming its
//! source. (These used to be two extra test binaries that changed the process
//! environment, because the library read it; it no longer does.)

use crate::support::Flower;
use crate::support::{FAKE_API_KEY, FakeServer, Reply};
use flower::model::Usage;
use flower::model::anthropic::{Credential, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT, DEFAULT_MODEL};
use flower::settings::{ConfigError, Environment, FileLayer, Flags, Settings};
use std::io::Write as _;
use std::time::Duration;

fn resolve(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    resolve_with(&Flags::default(), vars)
}

fn resolve_with(flags: &Flags, vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::resolve(
        flags,
        &Environment::from_vars(vars.iter().copied()),
        &FileLayer::default(),
    )
}

fn named(error: ConfigError) -> String {
    error.setting().to_string()
}

#[test]
fn the_credential_base_url_model_and_idle_timeout() {
    // No credential: the settings resolve (read-only commands need none), the client
    // does not, with the message that says what to export.
    let settings = resolve(&[]).unwrap();
    assert_eq!(settings.model().credential, None);
    assert_eq!(
        settings.model().client_config().unwrap_err(),
        ConfigError::MissingCredential
    );
    assert!(
        ConfigError::MissingCredential
            .to_string()
            .contains("ANTHROPIC_API_KEY")
    );
    assert!(settings.client().is_err());
    let blank = resolve(&[("ANTHROPIC_API_KEY", "   ")]).unwrap();
    assert_eq!(blank.model().credential, None);

    let settings = resolve(&[("ANTHROPIC_API_KEY", "sk-ant-test")]).unwrap();
    assert_eq!(
        settings.model().credential,
        Some(Credential::ApiKey("sk-ant-test".into()))
    );
    assert_eq!(settings.model().base_url, DEFAULT_BASE_URL);
    assert_eq!(settings.model().id, DEFAULT_MODEL);
    assert!(!settings.model().named);
    assert_eq!(settings.model().idle_timeout, DEFAULT_IDLE_TIMEOUT);
    assert_eq!(DEFAULT_IDLE_TIMEOUT, Duration::from_secs(300));
    let client = settings.client().unwrap();
    assert_eq!(client.default_model(), DEFAULT_MODEL);

    // The auth token wins over the key.
    let both = resolve(&[
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("ANTHROPIC_AUTH_TOKEN", "gw-token"),
    ])
    .unwrap();
    assert_eq!(
        both.model().credential,
        Some(Credential::Bearer("gw-token".into()))
    );

    // Trailing slash tolerated; ANTHROPIC_MODEL used; the flag wins over it; an empty
    // flag is no flag. The model id is the one source the client reads.
    let env = [
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:8080/gateway/"),
        ("ANTHROPIC_MODEL", "claude-haiku-4-5"),
    ];
    let settings = resolve(&env).unwrap();
    assert_eq!(settings.model().base_url, "http://127.0.0.1:8080/gateway");
    assert_eq!(settings.model().id, "claude-haiku-4-5");
    assert!(settings.model().named);
    assert_eq!(
        settings.client().unwrap().default_model(),
        "claude-haiku-4-5"
    );
    let flag = |model: &str| Flags {
        model: Some(model.into()),
        ..Flags::default()
    };
    assert_eq!(
        resolve_with(&flag("claude-opus-4-1"), &env)
            .unwrap()
            .model()
            .id,
        "claude-opus-4-1"
    );
    assert_eq!(
        resolve_with(&flag("opus[1m]"), &env).unwrap().model().id,
        "claude-opus-5-5[1m]",
        "aliases resolved, [1m] kept"
    );
    assert_eq!(
        resolve_with(&flag(""), &env).unwrap().model().id,
        "claude-haiku-4-5"
    );
    assert_eq!(
        named(resolve_with(&flag("sonet"), &env).unwrap_err()),
        "--model"
    );

    let timeout = |value: &str| resolve(&[("FLOWER_STREAM_IDLE_TIMEOUT", value)]);
    assert_eq!(
        timeout("2.5").unwrap().model().idle_timeout,
        Duration::from_millis(2500)
    );
    // The library's old lenient reading (default on a bad value) is gone: refused.
    for bad in ["soon", "0", "-1"] {
        assert_eq!(
            named(timeout(bad).unwrap_err()),
            "FLOWER_STREAM_IDLE_TIMEOUT"
        );
    }

    // A base URL that cannot work is a configuration error, not a network one.
    for bad in ["api.anthropic.com", "ftp://example.com"] {
        let error = resolve(&[("ANTHROPIC_BASE_URL", bad)]).unwrap_err();
        assert_eq!(named(error.clone()), "ANTHROPIC_BASE_URL");
        assert!(error.to_string().contains("ANTHROPIC_BASE_URL"), "{error}");
    }
}

#[test]
fn flower_prices_is_merged_over_the_builtin_table() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        r#"{{"claude-opus-4-5": {{"input": 100.0, "output": 0, "cache_write": 0, "cache_read": 0}},
            "my-gateway-model": {{"input": 2.0, "output": 4.0, "cache_write": 0, "cache_read": 0}}}}"#
    )
    .unwrap();
    let path = file.path().to_str().unwrap();
    let settings = resolve(&[("FLOWER_PRICES", path)]).unwrap();
    let table = settings.model().prices.as_ref().expect("a table");
    let u = Usage {
        input_tokens: 1_000_000,
        output_tokens: 1_000_000,
        ..Usage::default()
    };
    assert_eq!(table.cost_usd("claude-opus-4-5", &u), Some(100.0));
    assert_eq!(table.cost_usd("claude-opus-4-5-20251101", &u), Some(100.0));
    assert_eq!(table.cost_usd("my-gateway-model", &u), Some(6.0));
    // Built-in entries the file does not name are still there.
    assert_eq!(table.cost_usd("claude-haiku-4-5", &u), Some(6.0));
    assert_eq!(table.cost_usd("unknown-model", &u), None);
    // Unset: the built-in table, no copy of it.
    assert!(resolve(&[]).unwrap().model().prices.is_none());
    // A file that cannot be read is refused by name.
    let error = resolve(&[("FLOWER_PRICES", "/nonexistent/prices.json")]).unwrap_err();
    assert_eq!(named(error), "FLOWER_PRICES");
    // The model's price is checked against the table the run will use.
    let unpriced = resolve(&[("ANTHROPIC_MODEL", "my-gateway-model")]).unwrap();
    assert_eq!(unpriced.warnings().len(), 1, "{:?}", unpriced.warnings());
    let priced = resolve(&[
        ("ANTHROPIC_MODEL", "my-gateway-model"),
        ("FLOWER_PRICES", path),
    ]);
    assert!(priced.unwrap().warnings().is_empty());
}

/// The table reaches the process that prices: `flower once --json` reports the cost
/// at the file's price, not the built-in one.
#[test]
fn flower_prices_prices_a_real_run() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        r#"{{"{DEFAULT_MODEL}": {{"input": 1000000.0, "output": 0, "cache_write": 0, "cache_read": 0}}}}"#
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::text("好").usage(3, 1)]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(dir.path())
        .env("FLOWER_PRICES", file.path())
        .args(["once", "--json", "hi"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 3 input tokens at $1,000,000 per million: $3.
    assert_eq!(v["total_cost_usd"], 3.0, "{v}");
}

#[test]
fn flags_win_over_variables_which_win_over_files() {
    let files = FileLayer {
        vars: [
            ("FLOWER_HANDOFF_AT".to_string(), "50%".to_string()),
            ("FLOWER_MAX_ATTEMPTS".to_string(), "3".to_string()),
        ]
        .into_iter()
        .collect(),
        ..FileLayer::default()
    };
    let at = |flags: &Flags, vars: &[(&str, &str)]| {
        Settings::resolve(flags, &Environment::from_vars(vars.iter().copied()), &files).unwrap()
    };
    let none = Flags::default();
    let from_files = at(&none, &[]);
    assert_eq!(
        from_files.run_context().handoff_threshold,
        Some(100_000),
        "50% of 200K"
    );
    assert_eq!(from_files.resilience().max_attempts, 3);
    let from_env = at(&none, &[("FLOWER_HANDOFF_AT", "70%")]);
    assert_eq!(from_env.run_context().handoff_threshold, Some(140_000));
    assert_eq!(from_env.resilience().max_attempts, 3);
    let flagged = Flags {
        handoff_at: Some("120K".into()),
        ..Flags::default()
    };
    let from_flag = at(&flagged, &[("FLOWER_HANDOFF_AT", "70%")]);
    assert_eq!(from_flag.run_context().handoff_threshold, Some(120_000));
    assert_eq!(from_flag.run_context().window, 200_000);
    // A flag replaces its variable: the variable is not even parsed.
    let over_bad = at(&flagged, &[("FLOWER_HANDOFF_AT", "lots")]);
    assert_eq!(over_bad.run_context().handoff_threshold, Some(120_000));
    // The defaults.
    let plain = resolve(&[]).unwrap();
    assert_eq!(
        plain.run_context().handoff_threshold,
        Some(120_000),
        "60% of 200K"
    );
    assert_eq!(plain.run_dir(), std::path::Path::new("runs"));
    assert!(plain.sandbox().enabled && plain.sandbox().network);
    assert!(plain.store().is_none() && plain.run_key().is_none());
}

#[test]
fn every_bad_value_names_its_source() {
    // (variables, flags, the setting the error must name)
    type Case<'a> = (&'a [(&'a str, &'a str)], Flags, &'a str);
    let cases: &[Case] = &[
        (
            &[("FLOWER_MAX_TOKENS", "lots")],
            Flags::default(),
            "FLOWER_MAX_TOKENS",
        ),
        (
            &[("MAX_THINKING_TOKENS", "x")],
            Flags::default(),
            "MAX_THINKING_TOKENS",
        ),
        (
            &[("FLOWER_CACHE_TTL", "2h")],
            Flags::default(),
            "FLOWER_CACHE_TTL",
        ),
        (
            &[("FLOWER_MAX_ATTEMPTS", "six")],
            Flags::default(),
            "FLOWER_MAX_ATTEMPTS",
        ),
        (
            &[("FLOWER_SANDBOX", "maybe")],
            Flags::default(),
            "FLOWER_SANDBOX",
        ),
        (
            &[("FLOWER_NETWORK", "maybe")],
            Flags::default(),
            "FLOWER_NETWORK",
        ),
        (
            &[("FLOWER_STORE", "mysql://x")],
            Flags::default(),
            "FLOWER_STORE",
        ),
        (
            &[("FLOWER_CONTEXT_WINDOW", "big")],
            Flags::default(),
            "FLOWER_CONTEXT_WINDOW",
        ),
        (
            &[("FLOWER_HANDOFF_AT", "300K")],
            Flags::default(),
            "FLOWER_HANDOFF_AT",
        ),
        (
            &[],
            Flags {
                handoff_at: Some("101%".into()),
                ..Flags::default()
            },
            "--handoff-at",
        ),
        (
            &[],
            Flags {
                store: Some("mysql://x".into()),
                ..Flags::default()
            },
            "--store",
        ),
        // A run key needs a PostgreSQL store, whichever way it came.
        (
            &[("FLOWER_RUN_KEY", "k")],
            Flags::default(),
            "FLOWER_RUN_KEY",
        ),
        (
            &[],
            Flags {
                run_key: Some("k".into()),
                ..Flags::default()
            },
            "--run-key",
        ),
        (
            &[],
            Flags {
                thinking: Some(Some(100)),
                ..Flags::default()
            },
            "--thinking",
        ),
        (
            &[("FLOWER_NETWORK", "off"), ("FLOWER_SANDBOX", "off")],
            Flags::default(),
            "--no-network",
        ),
    ];
    for (vars, flags, setting) in cases {
        let error = resolve_with(flags, vars).unwrap_err();
        assert_eq!(error.setting(), *setting, "{vars:?} {flags:?}: {error}");
        let word = setting.trim_start_matches("--");
        assert!(error.to_string().contains(word), "{error}");
    }
}

#[test]
fn the_environment_snapshot_carries_home_terminal_and_directory() {
    let env = Environment::from_vars([
        ("HOME", "/home/me"),
        ("NO_COLOR", "1"),
        ("TERM", "dumb"),
        ("ANTHROPIC_API_KEY", FAKE_API_KEY),
    ])
    .with_current_dir("/work/proj");
    let settings = Settings::resolve(&Flags::default(), &env, &FileLayer::default()).unwrap();
    assert_eq!(settings.home(), Some(std::path::Path::new("/home/me")));
    assert!(settings.terminal().no_color);
    assert_eq!(settings.terminal().term.as_deref(), Some("dumb"));
    assert_eq!(settings.workspace(), std::path::Path::new("/work/proj"));
    // A snapshot's Debug never shows a value (credentials live there).
    assert!(!format!("{env:?}").contains(FAKE_API_KEY));
    assert!(!format!("{settings:?}").contains(FAKE_API_KEY));
}

#[test]
fn the_sandbox_learns_where_git_reads_the_users_config_from_the_settings() {
    // The sandbox never reads the process environment: git's own variables arrive
    // through the one resolution, and a settings file's `env` does not change them.
    let settings = resolve(&[
        ("HOME", "/home/u"),
        ("XDG_CONFIG_HOME", "/home/u/xdg"),
        ("GIT_CONFIG_GLOBAL", "/home/u/team.gitconfig"),
    ])
    .unwrap();
    let git = &settings.sandbox().user_git;
    assert_eq!(git.home.as_deref(), Some(std::path::Path::new("/home/u")));
    assert_eq!(
        git.xdg_config_home.as_deref(),
        Some(std::path::Path::new("/home/u/xdg"))
    );
    assert_eq!(
        git.global.as_deref(),
        Some(std::path::Path::new("/home/u/team.gitconfig"))
    );
    let bare = resolve(&[]).unwrap();
    assert_eq!(bare.sandbox().user_git, Default::default());
}

/// #42 item 2: what a front end used to edit on the runtime's options (the Python
/// package's `trim`, `ephemeral`, `keep_denials`, `Resilience`; the CLI's `--no-trim`)
/// is a flag of the one resolution, and the runtime's options come out of the settings
/// with it. A given `Resilience` wins over the variables, which are then not read.
#[test]
fn what_a_front_end_says_about_resumes_and_retries_is_resolved_by_the_settings() {
    let key = [("ANTHROPIC_API_KEY", FAKE_API_KEY)];
    let defaults = resolve(&key).unwrap().runtime_options().unwrap();
    let store = flower::stores::PruneOptions::new("unused");
    assert_eq!(
        (defaults.trim, defaults.ephemeral, defaults.keep_denials),
        (store.trim, store.ephemeral, store.keep_denials),
        "the library's defaults are the store's"
    );

    let resilience = flower::continuity::resilience::Resilience {
        max_attempts: 7,
        ..Default::default()
    };
    let flags = Flags {
        trim: Some(true),
        ephemeral: Some(false),
        keep_denials: Some(4),
        resilience: Some(resilience.clone()),
        ..Flags::default()
    };
    let vars = [
        ("ANTHROPIC_API_KEY", FAKE_API_KEY),
        ("FLOWER_MAX_ATTEMPTS", "not a number"),
    ];
    let settings = resolve_with(&flags, &vars).unwrap();
    let resume = settings.resume();
    assert_eq!(
        (resume.trim, resume.ephemeral, resume.keep_denials),
        (true, false, 4)
    );
    let options = settings.runtime_options().unwrap();
    assert_eq!(
        (options.trim, options.ephemeral, options.keep_denials),
        (true, false, 4)
    );
    assert_eq!(options.resilience, resilience);
    assert_eq!(*settings.resilience(), resilience);
    // Without a given one, the variable is read and a bad value refused.
    let refused = resolve_with(&Flags::default(), &vars).unwrap_err();
    assert_eq!(named(refused), "FLOWER_MAX_ATTEMPTS");
}

/// The stricter wins, the other way round (mutation testing of `settings/strict.rs`,
/// 2026-12-06, found these untested): a workspace file's value that is as strict or
/// stricter is applied without a word, and a looser one is refused even where the
/// user's file set the strictest (`require`).
#[test]
fn a_workspace_file_may_tighten_what_the_users_file_says_and_never_loosen_it() {
    let home = tempfile::TempDir::new().unwrap();
    let ws = tempfile::TempDir::new().unwrap();
    let put = |path: std::path::PathBuf, value: serde_json::Value| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, value.to_string()).unwrap();
    };
    let user = home.path().join(".claude/settings.json");
    let project = ws.path().join(".claude/settings.json");
    let load = || FileLayer::load(ws.path(), Some(home.path())).unwrap();
    let refused = |layer: &FileLayer, key: &str| layer.ignored.iter().any(|l| l.contains(key));

    put(
        user.clone(),
        serde_json::json!({"env": {"FLOWER_SANDBOX": "require"}}),
    );
    put(
        project.clone(),
        serde_json::json!({"env": {"FLOWER_SANDBOX": "on"}}),
    );
    let layer = load();
    assert!(refused(&layer, "env.FLOWER_SANDBOX"), "{:?}", layer.ignored);
    assert_eq!(layer.vars["FLOWER_SANDBOX"], "require");

    put(
        user.clone(),
        serde_json::json!({"env": {"FLOWER_SANDBOX": "on"}}),
    );
    put(
        project.clone(),
        serde_json::json!({"env": {"FLOWER_SANDBOX": "require", "FLOWER_NETWORK": "on"}}),
    );
    let layer = load();
    assert!(layer.ignored.is_empty(), "{:?}", layer.ignored);
    assert_eq!(layer.vars["FLOWER_SANDBOX"], "require");
    assert_eq!(layer.vars["FLOWER_NETWORK"], "on");

    // Additional directories: inside the workspace, or inside one the user's file adds.
    let shared = tempfile::TempDir::new().unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    std::fs::create_dir_all(shared.path().join("inner")).unwrap();
    let inner = shared.path().join("inner").canonicalize().unwrap();
    put(
        user,
        serde_json::json!({"permissions": {"additionalDirectories": [shared.path()]}}),
    );
    put(
        project,
        serde_json::json!({"permissions": {"additionalDirectories": [ws.path().join("sub"), inner]}}),
    );
    let layer = load();
    assert!(layer.ignored.is_empty(), "{:?}", layer.ignored);
    let dirs = &layer.permissions.additional_directories;
    assert!(
        dirs.iter().any(|d| d.ends_with("sub")) && dirs.iter().any(|d| d.ends_with("inner")),
        "{dirs:?}"
    );
}
