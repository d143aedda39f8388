use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct TokensArgs {}

pub fn run(_args: TokensArgs) -> Result<()> {
    anyhow::bail!("bench tokens is not implemented yet")
}
