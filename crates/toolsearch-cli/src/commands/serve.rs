use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> Result<()> {
    anyhow::bail!("serve is not implemented yet")
}
