//! Reading a catalog from disk, as `toolsearch` reads one
//! (crates/toolsearch-cli/src/catalog_file.rs).

use crate::BadInput;
use anyhow::Result;
use std::path::Path;
use toolsearch_core::{parse_catalog, CatalogFormat, SearchConfig, SearchEngine, Tool};

pub fn read_tools(path: &Path, format: Option<&str>) -> Result<Vec<Tool>> {
    let format = format.map(str::parse::<CatalogFormat>).transpose()?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        BadInput(format!(
            "cannot read catalog {}: {e}; check the path",
            path.display()
        ))
    })?;
    Ok(parse_catalog(&text, &path.display().to_string(), format)?)
}

pub fn load_engine(path: &Path, format: Option<&str>) -> Result<SearchEngine> {
    let tools = read_tools(path, format)?;
    let catalog = toolsearch_core::Catalog::from_tools(tools)?;
    Ok(SearchEngine::from_catalog(
        catalog,
        SearchConfig::default(),
    )?)
}
