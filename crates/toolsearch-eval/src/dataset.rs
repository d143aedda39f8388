//! The evaluation format: `tools.json` (MCP-style tools, optionally with `server`) and
//! `queries.jsonl` (`{"id", "query", "instruction"?, "relevant": [names]}`).

use crate::EvalError;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toolsearch_core::{parse_catalog, CatalogFormat, Tool};

#[derive(Debug, Clone, Deserialize)]
pub struct EvalQuery {
    pub id: String,
    pub query: String,
    #[serde(default)]
    pub instruction: Option<String>,
    pub relevant: Vec<String>,
}

impl EvalQuery {
    /// The text searched: the query, with the instruction in front when asked for.
    pub fn text(&self, with_instruction: bool) -> String {
        match (&self.instruction, with_instruction) {
            (Some(instruction), true) => format!("{instruction} {}", self.query),
            _ => self.query.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub tools: Vec<Tool>,
    pub queries: Vec<EvalQuery>,
    /// Tools left out because they have no name (no query can name them either).
    pub skipped_unnamed: usize,
}

impl Dataset {
    pub fn load(dir: &Path) -> Result<Self, EvalError> {
        let read = |file: &str| -> Result<(PathBuf, String), EvalError> {
            let path = dir.join(file);
            std::fs::read_to_string(&path)
                .map(|text| (path.clone(), text))
                .map_err(|e| EvalError::Read {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })
        };
        let (tools_path, tools_text) = read("tools.json")?;
        let mut tools = parse_catalog(
            &tools_text,
            &tools_path.display().to_string(),
            Some(CatalogFormat::Multi),
        )?;
        let before = tools.len();
        tools.retain(|t| !t.name().trim().is_empty());
        let skipped_unnamed = before - tools.len();
        let (queries_path, queries_text) = read("queries.jsonl")?;
        let mut queries = Vec::new();
        for (i, line) in queries_text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let query: EvalQuery = serde_json::from_str(line).map_err(|e| EvalError::Query {
                path: queries_path.display().to_string(),
                line: i + 1,
                message: e.to_string(),
            })?;
            queries.push(query);
        }
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self {
            name,
            tools,
            queries,
            skipped_unnamed,
        })
    }

    /// Every dataset folder (one holding a `tools.json`) under `root`, sorted by name.
    pub fn discover(root: &Path) -> Result<Vec<PathBuf>, EvalError> {
        let entries = std::fs::read_dir(root).map_err(|e| EvalError::Read {
            path: root.display().to_string(),
            message: e.to_string(),
        })?;
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("tools.json").is_file())
            .collect();
        dirs.sort();
        Ok(dirs)
    }
}
