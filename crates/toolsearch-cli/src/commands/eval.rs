use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct EvalArgs {}

pub fn run(_args: EvalArgs) -> Result<()> {
    anyhow::bail!("eval is not implemented yet")
}
