//! `ToolInput`: a tool call's input carried as the model wrote it and read through
//! typed accessors.

use flower::transcript::ToolInput;

fn input(text: &str) -> ToolInput {
    serde_json::from_str(text).unwrap()
}

#[test]
fn a_tool_input_goes_back_out_as_the_bytes_it_came_as() {
    for text in [
        r#"{"file_path":"a\u00e9.txt","n":1.0,"file_path":"b.txt","x":null}"#,
        r#"{ "command" : "ls",  "timeout":10 }"#,
        r#"[1,"two"]"#,
        r#""just a string""#,
        "{}",
    ] {
        assert_eq!(serde_json::to_string(&input(text)).unwrap(), text);
        assert_eq!(input(text).text(), text);
    }
    assert_eq!(ToolInput::empty().text(), "{}");
    assert_eq!(ToolInput::default(), ToolInput::empty());
}

#[test]
fn its_fields_are_read_as_json_parse_reads_them() {
    let call =
        input(r#"{"file_path":"a\u00e9.txt","n":1.0,"file_path":"b.txt","x":null,"d":{"k":"v"}}"#);
    assert!(call.is_object());
    // A repeated key: the last is the one read.
    assert_eq!(call.str_field("file_path").as_deref(), Some("b.txt"));
    assert_eq!(call.str_field("n"), None, "a number is not a string");
    assert_eq!(call.str_field("absent"), None);
    assert_eq!(
        call.field("n").map(|raw| raw.get().to_string()),
        Some("1.0".into())
    );
    assert_eq!(
        call.field("d").map(|raw| raw.get().to_string()),
        Some(r#"{"k":"v"}"#.into())
    );
    assert!(call.lacks("x") && call.lacks("absent"));
    assert!(!call.lacks("n") && !call.lacks("file_path"));
    // Strings only, every one written (escapes read), in order.
    assert_eq!(call.string_values(), ["aé.txt", "b.txt"]);
    assert_eq!(call.fields().map(|f| f.len()), Some(5));
    let parsed: std::collections::BTreeMap<String, serde_json::Value> = call.parse().unwrap();
    assert_eq!(parsed["file_path"], "b.txt");
}

#[test]
fn an_input_that_is_not_an_object_has_no_fields() {
    for text in [r#"[1,"two"]"#, r#""file_path""#, "null", "3"] {
        let call = input(text);
        assert!(!call.is_object(), "{text}");
        assert_eq!(call.str_field("file_path"), None, "{text}");
        assert!(call.string_values().is_empty(), "{text}");
        assert!(call.lacks("file_path"), "{text}");
        assert!(call.fields().is_none(), "{text}");
    }
}

#[test]
fn an_input_built_in_code_is_written_compactly() {
    let built = ToolInput::of(&serde_json::json!({"command": "ls -la", "timeout": 5})).unwrap();
    assert_eq!(built.text(), r#"{"command":"ls -la","timeout":5}"#);
    assert_eq!(built.str_field("command").as_deref(), Some("ls -la"));
}
