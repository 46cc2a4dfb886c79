//! An error as the person reads it: flower's own words, then what another program said.

/// An error and its causes on one line, each said once (a library error may quote its
/// cause). flower's own errors are worded in Chinese; a cause in another program's words
/// (the OS, SQLite, PostgreSQL, the API: no Chinese in it) is quoted in parentheses, so
/// that a line is never half flower's English.
pub fn said(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    // What follows the first line of the outermost error (a hint like `什么都没发给模型。`):
    // the causes belong to the first line, the hint stays last.
    let mut after = String::new();
    let mut said: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let part = e.to_string();
        // SQLite's own error under rusqlite's says the same again with a code number.
        let restated = e.downcast_ref::<rusqlite::ffi::Error>().is_some();
        if !restated && !said.iter().any(|p| p.contains(&part)) {
            if text.is_empty() {
                match part.split_once('\n') {
                    Some((first, rest)) => {
                        text = first.to_string();
                        after = format!("\n{rest}");
                    }
                    None => text = part.clone(),
                }
            } else if part.chars().any(is_chinese) {
                text = format!("{text}:{part}");
            } else {
                text = format!("{text}({part})");
            }
            said.push(part);
        }
        current = e.source();
    }
    text + &after
}

fn is_chinese(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}')
}

/// A reason kept as text (a step's error, a manifest row's): after `:` when it is
/// flower's own Chinese, in parentheses when it is another program's words (the
/// API's `API Error: …`).
pub fn reason(text: &str) -> String {
    if text.chars().any(is_chinese) {
        format!(":{text}")
    } else {
        format!("({text})")
    }
}
