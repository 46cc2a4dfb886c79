//! A command line clap cannot take, said in the interface's language: clap's own error
//! text is English, so the CLI words the common kinds itself from the error's context
//! (the argument, the value, clap's suggestion). Help and version print as clap does.

use super::config::EXIT_USAGE;
use super::out::errln;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::error::Error as _;
use std::process::ExitCode;

/// The help's headings, in the interface's language.
const TEMPLATE: &str = "{about-with-newline}\n用法:{usage}\n\n{all-args}{after-help}";

/// `command` and its subcommands with the help in Chinese: clap's headings, and its own
/// `-h`/`-V` flags and `help` subcommand (whose texts are clap's English) replaced.
fn localised(command: clap::Command) -> clap::Command {
    use clap::{Arg, ArgAction};
    let has_version = command.get_version().is_some();
    let mut command = command
        .help_template(TEMPLATE)
        .subcommand_help_heading("命令")
        .subcommand_value_name("命令")
        .disable_help_subcommand(true)
        .disable_help_flag(true)
        .mut_args(|arg| {
            let heading = if arg.is_positional() {
                "参数"
            } else {
                "选项"
            };
            // clap words "[default: …]" itself: the help texts say their defaults.
            let arg = arg.help_heading(heading);
            match arg.get_action().takes_values() {
                true => arg.hide_default_value(true).hide_possible_values(true),
                false => arg,
            }
        })
        .arg(
            Arg::new("help")
                .short('h')
                .long("help")
                .action(ArgAction::Help)
                .help("显示帮助")
                .help_heading("选项"),
        );
    if has_version {
        command = command.disable_version_flag(true).arg(
            Arg::new("version")
                .short('V')
                .long("version")
                .action(ArgAction::Version)
                .help("显示版本")
                .help_heading("选项"),
        );
    }
    command.mut_subcommands(localised)
}

/// The parsed command line, or the exit status after saying what is wrong with it.
pub fn parse<P: clap::Parser>() -> Result<P, ExitCode> {
    let parsed = localised(P::command())
        .try_get_matches()
        .and_then(|mut matches| P::from_arg_matches_mut(&mut matches));
    parsed.map_err(|error| match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // clap's usage line says `[OPTIONS]` whatever the headings say.
            let mut text = error.render().to_string().replace("[OPTIONS]", "[选项]");
            if !text.ends_with('\n') {
                text.push('\n');
            }
            if error.use_stderr() {
                super::out::err!("{text}");
                ExitCode::from(EXIT_USAGE)
            } else {
                super::out::to_stdout(format_args!("{text}"));
                ExitCode::SUCCESS
            }
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
            let why = error.source().map(value_reason).unwrap_or_default();
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

/// Why a value did not parse, in the interface's language: a number's parse error
/// worded from its kind; any other reason after `:` when it is Chinese, else quoted in
/// parentheses.
fn value_reason(error: &(dyn std::error::Error + 'static)) -> String {
    use std::num::IntErrorKind;
    if let Some(e) = error.downcast_ref::<std::num::ParseIntError>() {
        let why = match e.kind() {
            IntErrorKind::Empty => "是空的,要一个整数",
            IntErrorKind::PosOverflow => "太大了",
            IntErrorKind::NegOverflow => "太小了",
            IntErrorKind::Zero => "不能是 0",
            _ => "要一个不带小数点的非负整数",
        };
        return format!(":{why}");
    }
    if error.downcast_ref::<std::num::ParseFloatError>().is_some() {
        return ":要一个数".to_string();
    }
    let text = error.to_string();
    // clap's ranged integer parser: `N is not in A..=B`.
    if let Some((_, range)) = text.split_once(" is not in ") {
        return format!(":要在 {range} 之间");
    }
    super::said::reason(&text)
}
