//! `settings::pin` through the library: how a drift shows each kind of value (a secret
//! by its name, by its text, in a URL's credentials; a long value; an empty object),
//! and what a run directory's pin reads as.

use flower::run_dir::RunDir;
use flower::settings::pin::{PIN_VERSION, Pinned, PinnedFile, SettingsPin};
use serde_json::{Value, json};

/// A pin of one workspace file holding `document`.
fn pinned(file: &str, document: Value) -> SettingsPin {
    let bytes = document.to_string();
    let Value::Object(document) = document else {
        panic!("a settings file is an object")
    };
    SettingsPin {
        version: PIN_VERSION,
        files: vec![PinnedFile::new(file, bytes.as_bytes(), document)],
    }
}

/// What a person is shown when `document` appears as `.claude/settings.json`.
fn shown_new(document: Value) -> Vec<String> {
    let nothing = SettingsPin {
        version: PIN_VERSION,
        files: Vec::new(),
    };
    nothing
        .drift(&pinned(".claude/settings.json", document))
        .expect("a new file is a drift")
        .lines()
}

#[test]
fn a_value_is_masked_for_its_name_its_text_or_a_urls_credentials_and_only_then() {
    let document = json!({
        "apiKeyHelper": "print-key.sh",
        "my-secret": "plain words",
        "env": {
            "ANTHROPIC_BASE_URL": "https://proxy.example.com/v1",
            "CONTACT": "ops@example.com",
            "STORE_URL": "postgres://flower:pw@db.example.com/runs",
            "FLOWER_STORE": "sqlite:runs.db",
            "NOTE": "Bearer abc123",
            "RUN": "deploy --token=abc123"
        }
    });
    assert_eq!(
        shown_new(document.clone()),
        [
            "  .claude/settings.json(新出现)",
            "    + apiKeyHelper = (隐去)",
            "    + env.ANTHROPIC_BASE_URL = \"https://proxy.example.com/v1\"",
            "    + env.CONTACT = \"ops@example.com\"",
            "    + env.FLOWER_STORE = (隐去)",
            "    + env.NOTE = (隐去)",
            "    + env.RUN = (隐去)",
            "    + env.STORE_URL = (隐去)",
            "    + my-secret = (隐去)",
        ]
    );
    // The pin keeps a digest of each secret, never the secret.
    let kept = serde_json::to_string(&pinned(".claude/settings.json", document)).unwrap();
    for secret in ["print-key.sh", "pw@", "abc123", "plain words", "runs.db"] {
        assert!(!kept.contains(secret), "{secret} kept: {kept}");
    }
    assert!(kept.contains("https://proxy.example.com/v1"), "{kept}");
}

#[test]
fn a_value_over_120_characters_is_cut_and_one_of_120_is_shown_whole() {
    // As JSON text, with its quotes: 120 and 121 characters.
    let (whole, long) = ("a".repeat(118), "b".repeat(119));
    let lines = shown_new(json!({"model": whole, "outputStyle": long}));
    assert_eq!(lines[1], format!("    + model = \"{whole}\""));
    assert_eq!(lines[2], format!("    + outputStyle = \"{}…", &long[..119]));
}

#[test]
fn an_empty_object_is_a_value_of_its_own() {
    assert_eq!(
        shown_new(json!({"permissions": {}, "env": {"A": "1"}})),
        [
            "  .claude/settings.json(新出现)",
            "    + env.A = \"1\"",
            "    + permissions = {}",
        ]
    );
    // Emptied: the key's value changed, and it is shown.
    let before = pinned(".claude/settings.json", json!({"hooks": {"Stop": []}}));
    let after = pinned(".claude/settings.json", json!({"hooks": {}}));
    let lines = before.drift(&after).expect("a change").lines();
    assert_eq!(
        lines,
        [
            "  .claude/settings.json(改了)",
            "    + hooks = {}",
            "    - hooks.Stop(原来是 [])",
        ]
    );
}

#[test]
fn a_pin_reads_back_and_anything_else_in_its_place_is_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    assert_eq!(SettingsPin::read(&run), Pinned::Missing);
    let pin = pinned(".mcp.json", json!({"mcpServers": {}}));
    pin.write(&run).unwrap();
    assert_eq!(SettingsPin::read(&run), Pinned::Pin(pin.clone()));
    // A newer format is not trusted.
    let newer = SettingsPin {
        version: PIN_VERSION + 1,
        ..pin
    };
    newer.write(&run).unwrap();
    assert_eq!(SettingsPin::read(&run), Pinned::Unreadable);
    std::fs::write(run.settings_pin(), "{not json").unwrap();
    assert_eq!(SettingsPin::read(&run), Pinned::Unreadable);
    // One that cannot be read at all (not missing) is not taken for a missing one.
    std::fs::remove_file(run.settings_pin()).unwrap();
    std::fs::create_dir(run.settings_pin()).unwrap();
    assert_eq!(SettingsPin::read(&run), Pinned::Unreadable);
}
