//! STUB: `flower store` (branch wt-store replaces this).
#[derive(Debug, clap::Args)]
pub struct StoreArgs {}
pub fn run(_args: StoreArgs) -> anyhow::Result<std::process::ExitCode> {
    Ok(std::process::ExitCode::SUCCESS)
}
