//! `flower::lenient`: a settings file's values read without failing on one wrong
//! value (each typed, null, absent or wrong, and told apart), objects as ordered
//! entries, and the keys a section does not know, for its warning.

use flower::lenient::{Entries, Slot, UnknownKeys};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Default, PartialEq, Deserialize)]
struct Group {
    #[serde(default)]
    name: Slot<String>,
    #[serde(default)]
    items: Slot<Vec<Slot<u32>>>,
    #[serde(flatten)]
    unknown: UnknownKeys,
}

fn group(v: serde_json::Value) -> Group {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_value_is_typed_null_absent_or_wrong_and_says_which() {
    let g = group(json!({"name": "a", "items": [1, "x", null], "extra": {}, "more": 1}));
    assert_eq!(g.name.get().map(String::as_str), Some("a"));
    assert!(!g.name.is_unset() && !g.name.is_absent());
    assert_eq!(
        g.items,
        Slot::Is(vec![Slot::Is(1), Slot::Wrong(json!("x")), Slot::Null])
    );
    assert_eq!(g.unknown, UnknownKeys(vec!["extra".into(), "more".into()]));

    let null = group(json!({"name": null}));
    assert_eq!(null.name, Slot::Null);
    assert!(null.name.is_unset() && !null.name.is_absent() && null.name.get().is_none());
    assert!(null.items.is_unset() && null.items.is_absent());
    assert_eq!(null.unknown, UnknownKeys::default());

    let wrong = group(json!({"name": 3}));
    assert_eq!(wrong.name, Slot::Wrong(json!(3)));
    assert!(!wrong.name.is_unset() && !wrong.name.is_absent() && wrong.name.get().is_none());
}

#[test]
fn a_value_is_written_back_as_it_was_read() {
    let write = |s: &Slot<u32>| serde_json::to_value(s).unwrap();
    assert_eq!(write(&Slot::Is(5)), json!(5));
    assert_eq!(write(&Slot::Wrong(json!(["x"]))), json!(["x"]));
    assert_eq!(write(&Slot::Null), json!(null));
    assert_eq!(write(&Slot::Absent), json!(null));
}

#[test]
fn entries_keep_their_order_and_a_repeated_key_is_read_as_its_last() {
    let e: Entries<u32> = serde_json::from_str(r#"{"b":1,"a":2,"b":3}"#).unwrap();
    assert_eq!(e.iter().collect::<Vec<_>>(), [("b", &3), ("a", &2)]);
    assert_eq!(serde_json::to_string(&e).unwrap(), r#"{"b":3,"a":2}"#);
    let err = serde_json::from_str::<Entries<u32>>("[1]")
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected a JSON object"), "{err}");
    assert_eq!(Entries::<u32>::default().iter().count(), 0);
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
struct Kept {
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    name: Slot<String>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    vars: Slot<Entries<Slot<u32>>>,
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    list: Slot<Vec<Slot<String>>>,
}

#[test]
fn what_was_read_serializes_back_as_written_wrong_values_included() {
    for written in [
        r#"{"name":null,"vars":{"b":1,"a":"x","c":null},"list":["a",2]}"#,
        r#"{"name":["n"],"vars":[1],"list":{"a":1}}"#,
        r#"{"vars":{}}"#,
        "{}",
    ] {
        let kept: Kept = serde_json::from_str(written).unwrap();
        assert_eq!(serde_json::to_string(&kept).unwrap(), written);
    }
}
