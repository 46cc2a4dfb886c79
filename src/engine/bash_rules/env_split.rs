//! `env -S STRING` (`--split-string`): GNU env splits the string into arguments by
//! rules of its own and reads them as its own command line again, in place of the
//! option: options (`-i`, `-v`, `-u NAME`, `-C DIR`), `NAME=value`, another `-S`, and
//! then the program. The deny view ([`super::deny`]) gets the command line env would
//! read, so that `env -S'-v rm x'` is seen to run `rm`.
//!
//! The splitting follows coreutils' `env.c` (`build_argv`): blanks separate arguments
//! outside quotes; `'…'` keeps everything but `\\` and `\'`; `"…"` takes backslash
//! escapes and `${NAME}`; outside quotes `\_` separates, `\c` ends the string, `#` at
//! the start of an argument begins a comment; any other backslash sequence, `$`
//! without `{NAME}` and an open quote are errors, as they are for env.

use super::DenyWord;

/// Why a split string cannot be read (env itself refuses it, but a reading that
/// differs from env's must never let a command through).
pub(super) type SplitError = String;

/// The long options of env that take a value, in full; a unique abbreviation of
/// three or more characters is accepted, as `getopt_long` does.
const LONG_WITH_VALUE: [&str; 4] = ["--split-string", "--unset", "--chdir", "--argv0"];
/// Every long option of env, for telling an abbreviation apart.
const LONG: [&str; 13] = [
    "--split-string",
    "--unset",
    "--chdir",
    "--argv0",
    "--ignore-environment",
    "--null",
    "--debug",
    "--default-signal",
    "--ignore-signal",
    "--block-signal",
    "--list-signal-handling",
    "--help",
    "--version",
];
/// Short options that take a value; `S` is the split string.
const SHORT_WITH_VALUE: &str = "uCSa";

/// The first `-S`/`--split-string` among env's arguments `args` (env reads options up
/// to the first operand or `--`): its value, and the index of the first argument after
/// it. `Ok(None)`: none.
pub(super) fn first_split(args: &[DenyWord]) -> Result<Option<(DenyWord, usize)>, SplitError> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        // A word only known at run time may be an option: the caller refuses it as a
        // program anyway.
        let Some(a) = arg else { return Ok(None) };
        if a == "--" || !a.starts_with('-') || a == "-" {
            return Ok(None);
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let full = long_option(name)?;
            if LONG_WITH_VALUE.contains(&full) {
                let (value, next) = match inline {
                    Some(v) => (Some(Some(v.to_string())), i + 1),
                    None => (args.get(i + 1).cloned(), i + 2),
                };
                if full == "--split-string" {
                    return Ok(value.map(|v| (v, next)));
                }
                i = next;
                continue;
            }
            i += 1;
            continue;
        }
        let mut next = i + 1;
        for (k, c) in a.char_indices().skip(1) {
            if SHORT_WITH_VALUE.contains(c) {
                let rest = &a[k + c.len_utf8()..];
                let value = if rest.is_empty() {
                    next = i + 2;
                    args.get(i + 1).cloned()
                } else {
                    Some(Some(rest.to_string()))
                };
                if c == 'S' {
                    return Ok(value.map(|v| (v, next)));
                }
                break;
            }
        }
        i = next;
    }
    Ok(None)
}

/// The long option `--name` abbreviates.
fn long_option(name: &str) -> Result<&'static str, SplitError> {
    let dashed = format!("--{name}");
    if let Some(exact) = LONG.iter().find(|l| **l == dashed) {
        return Ok(exact);
    }
    let mut matches = LONG.iter().filter(|l| l.starts_with(&dashed));
    match (matches.next(), matches.next()) {
        (Some(only), None) if !name.is_empty() => Ok(only),
        _ => Err(format!("env's option --{name} is unknown or ambiguous")),
    }
}

/// Splits `s` as env's `-S` does; a word holding `${NAME}` is only known when env runs
/// (`None`).
/// Long because it is one pass over the string with env's quoting states, as
/// coreutils' `build_argv` is; split by state it would hide which state a case is in.
pub(super) fn split(s: &str) -> Result<Vec<DenyWord>, SplitError> {
    let mut out: Vec<DenyWord> = Vec::new();
    // The argument being built (`None` between arguments), and whether it holds a
    // variable.
    let mut word: Option<String> = None;
    let mut dynamic = false;
    let (mut sq, mut dq) = (false, false);
    let mut chars = s.chars().peekable();
    let finish = |word: &mut Option<String>, dynamic: &mut bool, out: &mut Vec<DenyWord>| {
        if let Some(w) = word.take() {
            out.push((!*dynamic).then_some(w));
        }
        *dynamic = false;
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' if !dq => {
                sq = !sq;
                word.get_or_insert_default();
            }
            '"' if !sq => {
                dq = !dq;
                word.get_or_insert_default();
            }
            ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r' if !sq && !dq => {
                finish(&mut word, &mut dynamic, &mut out);
            }
            '#' if !sq && !dq && word.is_none() => break,
            '\\' if sq => match chars.peek() {
                Some(&e @ ('\\' | '\'')) => {
                    chars.next();
                    word.get_or_insert_default().push(e);
                }
                _ => word.get_or_insert_default().push('\\'),
            },
            '\\' => {
                let escaped = match chars.next() {
                    Some(e @ ('"' | '#' | '$' | '\'' | '\\')) => e,
                    Some('_') if !dq => {
                        finish(&mut word, &mut dynamic, &mut out);
                        continue;
                    }
                    Some('_') => ' ',
                    Some('c') if !dq => {
                        finish(&mut word, &mut dynamic, &mut out);
                        return Ok(out);
                    }
                    Some('f') => '\x0c',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    Some('v') => '\x0b',
                    Some(e) => return Err(format!("env -S: invalid sequence \\{e}")),
                    None => return Err("env -S: a backslash at the end".into()),
                };
                word.get_or_insert_default().push(escaped);
            }
            '$' if !sq => {
                if chars.next() != Some('{') {
                    return Err("env -S: only ${NAME} is expanded".into());
                }
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(n) if n.is_ascii_alphanumeric() || n == '_' => name.push(n),
                        _ => return Err("env -S: an unfinished ${NAME}".into()),
                    }
                }
                if name.is_empty() || name.starts_with(|n: char| n.is_ascii_digit()) {
                    return Err(format!("env -S: ${{{name}}} is not a variable name"));
                }
                word.get_or_insert_default();
                dynamic = true;
            }
            c => word.get_or_insert_default().push(c),
        }
    }
    if sq || dq {
        return Err("env -S: an unterminated quote".into());
    }
    finish(&mut word, &mut dynamic, &mut out);
    Ok(out)
}
