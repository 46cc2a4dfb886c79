//! Whether a JSON text is exactly what `serde_json` writes for the `Value` it parses
//! to: then the text can go into a request as it is, byte for byte what serializing
//! the parsed value would give (see [`super::body`]), without building the value.

/// Whether parsing `json` (valid JSON) into a `Value` and serializing it again gives
/// back exactly `json`: no whitespace, strings escaped as `serde_json` escapes them
/// (only `"`, `\` and control characters), integers of at most 18 digits (no
/// fractions or exponents: a float may come back in other digits), no repeated key
/// in an object (a `Value` keeps one). `false` is always safe: the caller then
/// serializes the parsed value instead.
pub fn is_canonical(json: &str) -> bool {
    let b = json.as_bytes();
    // Per open container: whether it is an object, and where its keys start in `keys`.
    let mut open: Vec<(bool, usize)> = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'{' => {
                open.push((true, keys.len()));
                expect_key = true;
                i += 1;
            }
            b'[' => {
                open.push((false, keys.len()));
                expect_key = false;
                i += 1;
            }
            b'}' | b']' => {
                if let Some((_, start)) = open.pop() {
                    keys.truncate(start);
                }
                expect_key = false;
                i += 1;
            }
            b',' => {
                expect_key = matches!(open.last(), Some((true, _)));
                i += 1;
            }
            b':' => i += 1,
            b'"' => {
                let Some(end) = string_end(b, i + 1) else {
                    return false;
                };
                if expect_key {
                    let key = &b[i + 1..end];
                    let from = open.last().map_or(0, |o| o.1);
                    if keys[from..].contains(&key) {
                        return false;
                    }
                    keys.push(key);
                    expect_key = false;
                }
                i = end + 1;
            }
            b'-' | b'0'..=b'9' => {
                let digits_from = i + usize::from(c == b'-');
                let mut end = digits_from;
                while b.get(end).is_some_and(u8::is_ascii_digit) {
                    end += 1;
                }
                let digits = &b[digits_from..end];
                // `-0` comes back as the float `-0.0`.
                if digits.len() > 18
                    || (c == b'-' && digits == b"0")
                    || matches!(b.get(end), Some(b'.' | b'e' | b'E'))
                {
                    return false;
                }
                i = end;
            }
            b't' | b'n' => i += 4,
            b'f' => i += 5,
            _ => return false,
        }
    }
    true
}

/// The index of the quote closing the string whose text starts at `i`, or `None` if
/// the string has an escape `serde_json` would not write.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        match *b.get(i)? {
            b'"' => return Some(i),
            b'\\' => {
                match *b.get(i + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        // Only control characters without a short form, as `\u00xx`.
                        let hex = b.get(i + 2..i + 6)?;
                        let lower = |d: u8| d.is_ascii_digit() || (b'a'..=b'f').contains(&d);
                        if &hex[..2] != b"00" || !hex[2..].iter().all(|&d| lower(d)) {
                            return None;
                        }
                        let code = std::str::from_utf8(&hex[2..])
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())?;
                        if code >= 0x20 || matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                            return None;
                        }
                        i += 4;
                    }
                    _ => return None,
                }
                i += 2;
            }
            c if c < 0x20 => return None,
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn reserialized(json: &str) -> String {
        serde_json::from_str::<Value>(json).unwrap().to_string()
    }

    #[test]
    fn canonical_only_when_serializing_the_parsed_value_gives_it_back() {
        let canonical = [
            r#"{"type":"text","text":"a\nb\t\"c\"\\ é 😀 \u001f \u0000"}"#,
            r#"{"a":[1,-2,0,123456789012345678,true,false,null,{},[]],"b":{"a":1}}"#,
            r#"[{"k":1},{"k":2}]"#,
            r#""plain""#,
            "\"\u{7f}\"",
            r#"{"a":{"b":1},"b":{"a":1,"b":2}}"#,
        ];
        for case in canonical {
            assert!(is_canonical(case), "{case}");
            assert_eq!(reserialized(case), case);
        }
        // Some of these do serialize back the same (`1.5`): false is only slower.
        let not = [
            r#"{"a":1, "b":2}"#,
            r#"{"a" :1}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":1234567890123456789012}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            " 1",
            "[1]\n",
        ];
        for case in not {
            assert!(!is_canonical(case), "{case}");
        }
    }
}
