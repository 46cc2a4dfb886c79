//! A command line clap cannot take, said in the interface's language: clap's own error
//! text is English, so the CLI words the common kinds itself from the error's context
//! (the argument, the value, clap's suggestion). Help and version print as clap does.

use super::config::EXIT_USAGE;
use super::out::errln;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::error::Error as _;
use std::process::ExitCode;

/// The parsed command line, or the exit status after saying what is wrong with it.
pub fn parse<P: clap::Parser>() -> Result<P, ExitCode> {
    P::try_parse().map_err(|error| match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(if error.use_stderr() { EXIT_USAGE } else { 0 })
        }
        _ => {
            errln!("flower: {}", said(&error));
            ExitCode::from(EXIT_USAGE)
        }
    })
}

/// One line: what is wrong, what clap suggests, where to look.
fn said(error: &clap::Error) -> String {
    let get = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join("、")),
        Some(ContextValue::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let arg = get(ContextKind::InvalidArg).unwrap_or_default();
    let value = get(ContextKind::InvalidValue).unwrap_or_default();
    let what = match error.kind() {
        ErrorKind::UnknownArgument => format!("没有 {arg} 这个参数"),
        ErrorKind::InvalidSubcommand => format!(
            "没有 {} 这个子命令",
            get(ContextKind::InvalidSubcommand).unwrap_or_default()
        ),
        ErrorKind::InvalidValue => match get(ContextKind::ValidValue) {
            Some(valid) => format!("{arg} 不能是 {value:?};可以是:{valid}"),
            None => format!("{arg} 不能是 {value:?}"),
        },
        ErrorKind::ValueValidation => {
            let why = error.source().map(|e| format!("({e})")).unwrap_or_default();
            format!("{arg} 不能是 {value:?}{why}")
        }
        ErrorKind::MissingRequiredArgument => format!("少了 {arg}"),
        ErrorKind::MissingSubcommand => "少了子命令".to_string(),
        ErrorKind::ArgumentConflict => format!(
            "{arg} 不能和 {} 一起用",
            get(ContextKind::PriorArg).unwrap_or_default()
        ),
        ErrorKind::NoEquals => format!("{arg} 要用 = 接值"),
        ErrorKind::TooManyValues | ErrorKind::WrongNumberOfValues | ErrorKind::TooFewValues => {
            format!("{arg} 的值个数不对")
        }
        _ => {
            let text = error.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            format!("命令行不对({first})")
        }
    };
    let suggested = [
        ContextKind::SuggestedArg,
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(get)
    .map(|s| format!(";是不是想写 {s}?"))
    .unwrap_or_else(|| "。".to_string());
    format!("{what}{suggested}用法:flower --help")
}
