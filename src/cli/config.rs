//! The binary's side of the settings: `main` takes the environment snapshot once, and
//! each command resolves it with its own flags through [`settings`]. The resolution
//! itself (every flag and variable, validated) is the library's: `flower::settings`.

use flower::settings::{ConfigError, Environment, FileLayer, Flags, Settings};

/// Exit status for usage errors: bad flags, bad environment values.
pub const EXIT_USAGE: u8 = 2;

/// The settings of this command line, with the process's price table installed.
pub fn settings(flags: &Flags, env: &Environment) -> Result<Settings, ConfigError> {
    let settings = Settings::resolve(flags, env, &FileLayer::default())?;
    settings.install_prices();
    Ok(settings)
}
