//! The rankers compared by `toolsearch eval`: the engine itself and the approaches users have
//! today, each rebuilt here from its description so all run on the same data in one process.

use crate::EvalError;
use regex::RegexBuilder;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{Schema, Value, STORED, TEXT};
use tantivy::{Index, IndexReader, TantivyDocument};
use toolsearch_core::{
    Catalog, Embedder, SearchConfig, SearchEngine, SearchMode, SearchRequest, Tool,
};

/// Ranks the tools a ranker was built from for a query, best first.
pub trait Ranker {
    fn name(&self) -> &'static str;
    fn rank(&self, query: &str, depth: usize) -> Result<Vec<Ranked>, EvalError>;

    /// The ranking, and whether the ranker said that no tool fits (only the engine says so).
    fn rank_with_verdict(
        &self,
        query: &str,
        depth: usize,
    ) -> Result<(Vec<Ranked>, bool), EvalError> {
        Ok((self.rank(query, depth)?, false))
    }
}

/// One result: the tool's position in the list the ranker was built from (so tools of equal
/// names stay apart), and its score on the ranker's own scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    pub tool: usize,
    pub score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankerKind {
    /// The engine's keyword mode.
    Toolsearch,
    /// The engine's hybrid mode: words and meaning fused (needs an embedding model).
    Hybrid,
    /// The engine's semantic mode: meaning only (needs an embedding model).
    Semantic,
    /// Keyword overlap as several agent frameworks ship it.
    Overlap,
    /// tantivy's default BM25 over name and description as one field.
    Bm25Plain,
    /// The query as a case-insensitive regex over name and description.
    Regex,
}

impl RankerKind {
    pub const ALL: [RankerKind; 6] = [
        RankerKind::Toolsearch,
        RankerKind::Hybrid,
        RankerKind::Semantic,
        RankerKind::Overlap,
        RankerKind::Bm25Plain,
        RankerKind::Regex,
    ];

    /// Whether the ranker needs an embedding model.
    pub fn needs_model(self) -> bool {
        matches!(self, RankerKind::Hybrid | RankerKind::Semantic)
    }

    /// `config` applies to the engine's rankers; the references have fixed settings. `embedder`
    /// is the model of the hybrid and semantic rankers.
    pub fn build(
        self,
        tools: &[Tool],
        config: &SearchConfig,
        embedder: Option<&Arc<dyn Embedder>>,
    ) -> Result<Box<dyn Ranker>, EvalError> {
        let with_model = |mode| -> Result<Box<dyn Ranker>, EvalError> {
            let embedder = embedder.ok_or(EvalError::NoModel(self.name()))?;
            Ok(Box::new(EngineRanker::with_model(
                tools,
                config.clone(),
                mode,
                embedder.clone(),
            )?))
        };
        Ok(match self {
            RankerKind::Toolsearch => Box::new(EngineRanker::new(tools, config.clone())?),
            RankerKind::Hybrid => with_model(SearchMode::Hybrid)?,
            RankerKind::Semantic => with_model(SearchMode::Semantic)?,
            RankerKind::Overlap => Box::new(OverlapRanker::new(tools)),
            RankerKind::Bm25Plain => Box::new(Bm25PlainRanker::new(tools)?),
            RankerKind::Regex => Box::new(RegexRanker::new(tools)),
        })
    }
}

impl FromStr for RankerKind {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, EvalError> {
        Ok(match s {
            "toolsearch" => RankerKind::Toolsearch,
            "hybrid" => RankerKind::Hybrid,
            "semantic" => RankerKind::Semantic,
            "overlap" => RankerKind::Overlap,
            "bm25-plain" => RankerKind::Bm25Plain,
            "regex" => RankerKind::Regex,
            _ => return Err(EvalError::UnknownRanker(s.to_string())),
        })
    }
}

impl RankerKind {
    pub fn name(self) -> &'static str {
        match self {
            RankerKind::Toolsearch => "toolsearch",
            RankerKind::Hybrid => "hybrid",
            RankerKind::Semantic => "semantic",
            RankerKind::Overlap => "overlap",
            RankerKind::Bm25Plain => "bm25-plain",
            RankerKind::Regex => "regex",
        }
    }
}

pub struct EngineRanker {
    engine: SearchEngine,
    mode: SearchMode,
    /// Server, then name, to the tool's position: the engine answers with its own copies.
    positions: HashMap<String, HashMap<String, usize>>,
}

fn positions(tools: &[Tool]) -> HashMap<String, HashMap<String, usize>> {
    let mut positions: HashMap<String, HashMap<String, usize>> = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        positions
            .entry(tool.server().to_owned())
            .or_default()
            .entry(tool.name().to_owned())
            .or_insert(i);
    }
    positions
}

impl EngineRanker {
    pub fn new(tools: &[Tool], config: SearchConfig) -> Result<Self, EvalError> {
        let catalog = Catalog::from_tools(tools.iter().cloned())?;
        Ok(Self {
            engine: SearchEngine::from_catalog(catalog, config)?,
            mode: SearchMode::Keyword,
            positions: positions(tools),
        })
    }

    /// The engine in `mode` with `embedder`, every tool embedded before the first query.
    pub fn with_model(
        tools: &[Tool],
        config: SearchConfig,
        mode: SearchMode,
        embedder: Arc<dyn Embedder>,
    ) -> Result<Self, EvalError> {
        let catalog = Catalog::from_tools(tools.iter().cloned())?;
        let mut engine = SearchEngine::from_catalog(catalog, config)?;
        engine.set_embedder(Some(embedder));
        engine.embed_pending()?;
        Ok(Self {
            engine,
            mode,
            positions: positions(tools),
        })
    }
}

impl Ranker for EngineRanker {
    fn name(&self) -> &'static str {
        match self.mode {
            SearchMode::Hybrid => "hybrid",
            SearchMode::Semantic => "semantic",
            _ => "toolsearch",
        }
    }

    fn rank(&self, query: &str, depth: usize) -> Result<Vec<Ranked>, EvalError> {
        Ok(self.rank_with_verdict(query, depth)?.0)
    }

    fn rank_with_verdict(
        &self,
        query: &str,
        depth: usize,
    ) -> Result<(Vec<Ranked>, bool), EvalError> {
        let response = self
            .engine
            .search(&SearchRequest::new(query).mode(self.mode).limit(depth))?;
        let ranked = response
            .tools
            .iter()
            .filter_map(|hit| {
                let tool = *self
                    .positions
                    .get(hit.tool.server())?
                    .get(hit.tool.name())?;
                Some(Ranked {
                    tool,
                    score: f64::from(hit.score),
                })
            })
            .collect();
        Ok((ranked, response.nothing_fits))
    }
}

/// A query word found in the name scores 3, in the description 1; the exact name adds 100; results
/// under half the best score are dropped; at most 8 are kept.
pub struct OverlapRanker {
    /// Name, lowercased name, lowercased description.
    tools: Vec<(String, String, String)>,
}

impl OverlapRanker {
    pub fn new(tools: &[Tool]) -> Self {
        Self {
            tools: tools
                .iter()
                .map(|t| {
                    (
                        t.name().to_owned(),
                        t.name().to_lowercase(),
                        t.description().to_lowercase(),
                    )
                })
                .collect(),
        }
    }
}

impl Ranker for OverlapRanker {
    fn name(&self) -> &'static str {
        "overlap"
    }

    fn rank(&self, query: &str, depth: usize) -> Result<Vec<Ranked>, EvalError> {
        let lowered = query.to_lowercase();
        let words: Vec<&str> = lowered.split_whitespace().collect();
        let mut scored: Vec<(u32, &str, usize)> = self
            .tools
            .iter()
            .enumerate()
            .filter_map(|(i, (name, lname, ldesc))| {
                let mut score: u32 = words
                    .iter()
                    .map(|w| 3 * u32::from(lname.contains(w)) + u32::from(ldesc.contains(w)))
                    .sum();
                if lowered.trim() == lname {
                    score += 100;
                }
                (score > 0).then_some((score, name.as_str(), i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let best = scored.first().map_or(0, |s| s.0);
        Ok(scored
            .into_iter()
            .filter(|(score, _, _)| 2 * score >= best)
            .take(8.min(depth))
            .map(|(score, _, tool)| Ranked {
                tool,
                score: f64::from(score),
            })
            .collect())
    }
}

pub struct Bm25PlainRanker {
    reader: IndexReader,
    parser: QueryParser,
    position_field: tantivy::schema::Field,
}

impl Bm25PlainRanker {
    pub fn new(tools: &[Tool]) -> Result<Self, EvalError> {
        let fail = |e: tantivy::TantivyError| EvalError::Reference(e.to_string());
        let mut builder = Schema::builder();
        let text = builder.add_text_field("text", TEXT);
        let position_field = builder.add_u64_field("position", STORED);
        let index = Index::create_in_ram(builder.build());
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 50_000_000).map_err(fail)?;
        for (position, tool) in tools.iter().enumerate() {
            let mut doc = TantivyDocument::new();
            doc.add_text(text, format!("{} {}", tool.name(), tool.description()));
            doc.add_u64(position_field, position as u64);
            writer.add_document(doc).map_err(fail)?;
        }
        writer.commit().map_err(fail)?;
        let reader = index.reader().map_err(fail)?;
        let parser = QueryParser::for_index(&index, vec![text]);
        Ok(Self {
            reader,
            parser,
            position_field,
        })
    }
}

impl Ranker for Bm25PlainRanker {
    fn name(&self) -> &'static str {
        "bm25-plain"
    }

    fn rank(&self, query: &str, depth: usize) -> Result<Vec<Ranked>, EvalError> {
        let fail = |e: tantivy::TantivyError| EvalError::Reference(e.to_string());
        let (parsed, _) = self.parser.parse_query_lenient(query);
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&parsed, &TopDocs::with_limit(depth.max(1)).order_by_score())
            .map_err(fail)?;
        let mut ranked = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address).map_err(fail)?;
            if let Some(position) = doc.get_first(self.position_field).and_then(|v| v.as_u64()) {
                ranked.push(Ranked {
                    tool: position as usize,
                    score: f64::from(score),
                });
            }
        }
        Ok(ranked)
    }
}

/// The query as a case-insensitive regex (escaped when it is not a valid one); tools whose name
/// matches come before those whose description does.
pub struct RegexRanker {
    tools: Vec<(String, String)>,
}

impl RegexRanker {
    pub fn new(tools: &[Tool]) -> Self {
        Self {
            tools: tools
                .iter()
                .map(|t| (t.name().to_owned(), t.description().to_owned()))
                .collect(),
        }
    }
}

impl Ranker for RegexRanker {
    fn name(&self) -> &'static str {
        "regex"
    }

    fn rank(&self, query: &str, depth: usize) -> Result<Vec<Ranked>, EvalError> {
        let regex = RegexBuilder::new(query)
            .case_insensitive(true)
            .build()
            .or_else(|_| {
                RegexBuilder::new(&regex::escape(query))
                    .case_insensitive(true)
                    .build()
            })
            .map_err(|e| EvalError::Reference(e.to_string()))?;
        let mut scored: Vec<(u8, &str, usize)> = self
            .tools
            .iter()
            .enumerate()
            .filter_map(|(i, (name, description))| {
                let score =
                    2 * u8::from(regex.is_match(name)) + u8::from(regex.is_match(description));
                (score > 0).then_some((score, name.as_str(), i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        Ok(scored
            .into_iter()
            .take(depth)
            .map(|(score, _, tool)| Ranked {
                tool,
                score: f64::from(score),
            })
            .collect())
    }
}
