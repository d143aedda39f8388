//! Search over a catalog: keyword (BM25F with a query syntax and fuzzy fallback), regex and exact
//! modes, then one ranking pipeline: exact-name bonus → filters → threshold → top band → cap.

mod config;
mod dense;
mod explain;
mod field;
mod filter;
mod fuse;
mod fuzzy;
mod hits;
mod index;
mod keyword;
mod postings;
mod query;
mod synonyms;
mod terms;

pub use config::{
    DenseNormalization, DenseView, FieldParams, Fusion, FusionWeighting, SearchConfig,
};
pub use dense::{PendingVector, VectorStatus};
pub use explain::MatchedOn;
pub use field::Field;
pub use filter::Filters;

use crate::catalog::Catalog;
use crate::embed::{embedding_texts, Embedder, ToolView};
use crate::error::{Error, Result};
use crate::policy::{CatalogPolicy, CategoryInfo, Naming};
use crate::scope::Scope;
use crate::tool::Tool;
use dense::DenseIndex;
use fuse::{finite_or, share, standout};
use index::ToolIndex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

// The variants' notes are plain comments: documented variants would turn the schema every client
// reads from a short `enum` into a long `oneOf`.
/// How the query is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    // Words and meaning: the keyword and the dense ranking fused (needs an embedding model;
    // without one it runs as `keyword`).
    Hybrid,
    // Words only: BM25F with a query syntax and fuzzy fallback.
    #[default]
    #[serde(alias = "bm25")]
    Keyword,
    // Meaning only: cosine similarity of the query's and the tools' embeddings (for diagnosis).
    Semantic,
    // The query is a case-insensitive regular expression over names and descriptions.
    Regex,
    // Only tools with exactly this name.
    Exact,
}

impl SearchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Hybrid => "hybrid",
            SearchMode::Keyword => "keyword",
            SearchMode::Semantic => "semantic",
            SearchMode::Regex => "regex",
            SearchMode::Exact => "exact",
        }
    }
}

impl std::str::FromStr for SearchMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "hybrid" => Ok(SearchMode::Hybrid),
            "keyword" | "bm25" => Ok(SearchMode::Keyword),
            "semantic" => Ok(SearchMode::Semantic),
            "regex" => Ok(SearchMode::Regex),
            "exact" => Ok(SearchMode::Exact),
            _ => Err(Error::UnknownMode(s.to_string())),
        }
    }
}

/// One search: what to look for, how, and where.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    pub mode: SearchMode,
    /// At most this many results (the cap).
    pub limit: usize,
    /// Skip this many results first (pagination).
    pub offset: usize,
    pub filters: Filters,
    /// Overrides the configured threshold (0..1).
    pub threshold: Option<f32>,
    /// Overrides the configured top band (fraction of the best score).
    pub top_band: Option<f32>,
}

impl SearchRequest {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            mode: SearchMode::Keyword,
            limit: 10,
            offset: 0,
            filters: Filters::default(),
            threshold: None,
            top_band: None,
        }
    }

    pub fn mode(mut self, mode: SearchMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    pub fn filters(mut self, filters: Filters) -> Self {
        self.filters = filters;
        self
    }

    pub fn threshold(mut self, threshold: f32) -> Self {
        self.threshold = Some(threshold);
        self
    }

    pub fn top_band(mut self, fraction: f32) -> Self {
        self.top_band = Some(fraction);
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    #[serde(flatten, serialize_with = "serialize_arc_tool")]
    pub tool: Arc<Tool>,
    /// Normalised to 0..1; 1 for an exact-name match.
    pub score: f32,
    pub matched_on: Vec<MatchedOn>,
    /// What the score rests on, before calibration (for evaluation and diagnosis).
    #[serde(skip)]
    pub evidence: Evidence,
}

/// The evidence behind a result: its cosine similarity to the query (when the search read
/// meaning and the tool has vectors) and its keyword score as a share of the most this query's
/// words could give a tool, times the share of the query's content words the catalog knows
/// (0 when no query word matched it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    pub similarity: Option<f32>,
    pub words: f32,
}

/// A calibrated score below this says the result is a guess: when no result of a search that
/// read meaning reaches it, the search says that no tool fits.
pub const CONFIDENT_SCORE: f32 = 0.5;

/// Maps `value` (clamped to 0..1) onto 0..1 so that `floor` lands on [`CONFIDENT_SCORE`]:
/// linear from 0 to the floor, and from the floor to 1. A fixed, documented function of the
/// evidence alone, so that a score means the same in every query and catalog. A floor of 1
/// turns that evidence off as a sign of fit: it then scores under [`CONFIDENT_SCORE`] whatever
/// its value.
pub fn calibrate(value: f32, floor: f32) -> f32 {
    let value = if value.is_finite() {
        value.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let floor = if floor.is_finite() {
        floor.clamp(0.0, 1.0)
    } else {
        1.0
    };
    if floor >= 1.0 {
        CONFIDENT_SCORE * value.min(0.999)
    } else if value < floor {
        CONFIDENT_SCORE * value / floor
    } else {
        CONFIDENT_SCORE + (1.0 - CONFIDENT_SCORE) * (value - floor) / (1.0 - floor)
    }
}

/// A result's calibrated score: the stronger of its two kinds of evidence, each through
/// [`calibrate`] with its floor (`meaning_floor` for the similarity, `words_floor` for the
/// keyword share). Either kind alone can make a result confident; only a result weak on both
/// stays below [`CONFIDENT_SCORE`].
pub fn confidence(evidence: Evidence, config: &SearchConfig) -> f32 {
    let meaning = evidence
        .similarity
        .map_or(0.0, |s| calibrate(s, config.meaning_floor));
    meaning.max(calibrate(evidence.words, config.words_floor))
}

/// The dense side's first tool is kept past the top band when its similarity beats the
/// second's by at least this much: a clear pick by meaning is not a guess.
pub const DENSE_CLEAR_MARGIN: f32 = 0.05;

fn serialize_arc_tool<S: serde::Serializer>(tool: &Arc<Tool>, s: S) -> Result<S::Ok, S::Error> {
    tool.as_ref().serialize(s)
}

/// What a search that found nothing offers instead, so the caller can refine rather than stop.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Fallback {
    /// Every tool's public name (small catalogs).
    Names { names: Vec<String> },
    /// Categories with their tool counts (large catalogs).
    Categories { categories: Vec<CountedName> },
    /// Servers with their tool counts (large catalogs without categories).
    Servers { servers: Vec<CountedName> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct CountedName {
    pub name: String,
    pub count: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchResponse {
    pub query: String,
    pub mode: SearchMode,
    /// Matches after filters and threshold, before the cap.
    pub total_matches: usize,
    /// No result reaches [`CONFIDENT_SCORE`]: the tools returned are guesses, and `fallback`
    /// says what the catalog offers instead.
    pub nothing_fits: bool,
    pub fallback: Option<Fallback>,
    pub tools: Vec<SearchHit>,
}

/// The catalog and its index, kept in step. Searches take `&self`; changes take `&mut self`.
#[derive(Debug)]
pub struct SearchEngine {
    catalog: Catalog,
    index: ToolIndex,
    config: SearchConfig,
    policy: CatalogPolicy,
    dense: DenseIndex,
}

#[derive(Clone, Copy)]
struct Candidate {
    slot: u32,
    score: f32,
    exact: bool,
    /// Found by meaning only: no query word matched it.
    by_meaning: bool,
    /// Let in by meaning under `min_similarity` (one of the few closest tools): never a
    /// confident match, whatever its evidence.
    guess: bool,
    /// A guess in a search that has a confident match: ranked under every confident one.
    demoted: bool,
    evidence: Evidence,
}

/// The ranking's order by its leading keys: exact names first, guesses demoted under the rest,
/// then by score. Ties are parted by name ([`SearchEngine::rank_order`]).
#[inline]
fn lead_order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.exact
        .cmp(&a.exact)
        .then_with(|| a.demoted.cmp(&b.demoted))
        .then_with(|| b.score.total_cmp(&a.score))
}

impl Candidate {
    fn new(slot: u32, score: f32) -> Self {
        Self {
            slot,
            score,
            exact: false,
            by_meaning: false,
            guess: false,
            demoted: false,
            evidence: Evidence::default(),
        }
    }
}

impl SearchEngine {
    pub fn new(config: SearchConfig) -> Result<Self> {
        Self::with_policy(config, CatalogPolicy::default())
    }

    /// An empty engine whose servers' tools will enter through `policy`.
    pub fn with_policy(config: SearchConfig, policy: CatalogPolicy) -> Result<Self> {
        Ok(Self {
            catalog: Catalog::new(),
            index: ToolIndex::new(),
            config,
            policy,
            dense: DenseIndex::default(),
        })
    }

    /// An engine over a catalog as it is (the default policy: every tool, names as given).
    pub fn from_catalog(catalog: Catalog, config: SearchConfig) -> Result<Self> {
        Self::indexed(catalog, config, CatalogPolicy::default())
    }

    /// The engine over `catalog`, whose tools are already as `policy` wants them.
    fn indexed(catalog: Catalog, config: SearchConfig, policy: CatalogPolicy) -> Result<Self> {
        let mut index = ToolIndex::new();
        index.rebuild(catalog.tools())?;
        Ok(Self {
            catalog,
            index,
            config,
            policy,
            dense: DenseIndex::default(),
        })
    }

    /// An engine over `tools` of any servers, each server's tools entering through `policy`.
    pub fn build(
        tools: impl IntoIterator<Item = Tool>,
        config: SearchConfig,
        policy: CatalogPolicy,
    ) -> Result<Self> {
        let mut grouped: std::collections::BTreeMap<String, Vec<Tool>> = Default::default();
        for tool in tools {
            grouped
                .entry(tool.server().to_owned())
                .or_default()
                .push(tool);
        }
        let catalog = Catalog::from_tools(
            grouped
                .into_iter()
                .flat_map(|(server, tools)| policy.apply(&server, tools)),
        )?;
        Self::indexed(catalog, config, policy)
    }

    pub fn from_tools(tools: impl IntoIterator<Item = Tool>) -> Result<Self> {
        Self::from_catalog(Catalog::from_tools(tools)?, SearchConfig::default())
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// Replaces the ranking parameters; every one is read at search time, so the index and the
    /// vectors stay as they are (for studies that compare settings over one catalog).
    pub fn set_config(&mut self, config: SearchConfig) {
        self.config = config;
    }

    pub fn policy(&self) -> &CatalogPolicy {
        &self.policy
    }

    /// How public names are made (`server___name`).
    pub fn naming(&self) -> &Naming {
        &self.policy.naming
    }

    /// Every category with its tool count: the policy's definitions first (listed even when
    /// empty), then the categories only tools name.
    pub fn categories(&self) -> Vec<CategoryInfo> {
        self.policy
            .categories(self.catalog.tools().map(|t| t.as_ref()))
    }

    /// [`SearchEngine::categories`] as a caller with `scope` sees them: counts over the tools in
    /// scope only, and, for a limited scope, only the categories holding at least one of them
    /// (an empty definition, or one holding only other tools, is not listed).
    pub fn categories_in(&self, scope: &Scope) -> Vec<CategoryInfo> {
        if scope.is_all() {
            return self.categories();
        }
        let naming = self.naming();
        let mut categories = self.policy.categories(
            self.catalog
                .tools()
                .filter(|t| scope.allows_tool(t, naming))
                .map(|t| t.as_ref()),
        );
        categories.retain(|c| c.tool_count > 0);
        categories
    }

    /// Resolves a name as a client would write it: `server___name`, or a bare name that is unique
    /// in the catalog.
    pub fn resolve(&self, name: &str) -> Option<&Arc<Tool>> {
        self.catalog.resolve(name, self.naming())
    }

    /// [`SearchEngine::resolve`] among the tools of `scope` only.
    pub fn resolve_in(&self, name: &str, scope: &Scope) -> Option<&Arc<Tool>> {
        self.catalog.resolve_in(name, self.naming(), scope)
    }

    /// Up to `max` public names closest to `name`, for did-you-mean messages.
    pub fn suggest(&self, name: &str, max: usize) -> Vec<String> {
        self.catalog.suggest(name, self.naming(), max)
    }

    /// [`SearchEngine::suggest`] among the tools of `scope` only.
    pub fn suggest_in(&self, name: &str, max: usize, scope: &Scope) -> Vec<String> {
        self.catalog.suggest_in(name, self.naming(), max, scope)
    }

    /// Replaces one server's tools in the catalog and the index, through the policy (selection,
    /// categories, tags, defer); other servers are not re-indexed. A server the policy does not
    /// select ends up with no tools.
    pub fn replace_server(&mut self, server: &str, tools: Vec<Tool>) -> Result<()> {
        let tools = self.policy.apply(server, tools);
        if tools.is_empty() {
            return self.remove_server(server);
        }
        let tools = self.catalog.replace_server(server, tools)?.to_vec();
        self.index.replace_server(server, &tools)?;
        self.drop_dead_vectors();
        Ok(())
    }

    pub fn remove_server(&mut self, server: &str) -> Result<()> {
        if self.catalog.remove_server(server) {
            self.index.remove_server(server);
            self.drop_dead_vectors();
        }
        Ok(())
    }

    fn drop_dead_vectors(&mut self) {
        let index = &self.index;
        self.dense.retain(|slot| index.tool(slot).is_some());
    }

    /// Gives the engine an embedding model: hybrid and semantic search become available as the
    /// tools' vectors arrive ([`SearchEngine::pending_vectors`], [`SearchEngine::attach_vectors`],
    /// or [`SearchEngine::embed_pending`] in one go). `None` goes back to words only. Vectors of
    /// another model are dropped.
    pub fn set_embedder(&mut self, embedder: Option<Arc<dyn Embedder>>) {
        self.dense.set_model(embedder);
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.dense.model()
    }

    /// The text of `query` the model reads in a search that reads meaning (the keyword syntax
    /// blanked out, cut to `max_embedded_query_chars`); empty when nothing is left to embed.
    pub fn embedded_query_text(&self, query: &str) -> String {
        embeddable_query(query, self.config.max_embedded_query_chars)
    }

    /// The mode a search without one runs in: hybrid with a model, keyword without.
    pub fn default_mode(&self) -> SearchMode {
        if self.dense.model().is_some() {
            SearchMode::Hybrid
        } else {
            SearchMode::Keyword
        }
    }

    /// How many live tools have their vector, and of which model.
    pub fn vector_status(&self) -> VectorStatus {
        VectorStatus {
            model: self.dense.model().map(|m| m.model_id().to_string()),
            ready: self.dense.len(),
            total: self.index.len(),
        }
    }

    /// Bytes held by the tools' vectors.
    pub fn vector_memory_bytes(&self) -> usize {
        self.dense.memory_bytes()
    }

    /// The texts of live tools that have no vector yet, two per tool (none without a model).
    /// Embed them anywhere, then hand the vectors to [`SearchEngine::attach_vectors`] with each
    /// text's [`PendingVector::key`].
    pub fn pending_vectors(&self) -> Vec<PendingVector> {
        if self.dense.model().is_none() {
            return Vec::new();
        }
        self.index
            .live_slots()
            .filter(|(slot, _)| !self.dense.has(*slot))
            .flat_map(|(slot, tool)| {
                let missing = self.dense.missing_views(slot);
                let texts = (!missing.is_empty()).then(|| embedding_texts(tool));
                missing.into_iter().filter_map(move |view| {
                    Some(PendingVector {
                        slot,
                        view,
                        text: texts.as_ref()?.get(view).to_string(),
                    })
                })
            })
            .collect()
    }

    /// Makes room for `count` more vectors at once, allocated exactly. Call it with the number
    /// of [`SearchEngine::pending_vectors`] before attaching them in chunks.
    pub fn reserve_vectors(&mut self, count: usize) {
        self.dense.reserve(count);
    }

    /// Stores vectors made by the model named `model_id` for the texts of
    /// [`SearchEngine::pending_vectors`], each with its text's key. A tool is searchable by
    /// meaning once both its texts have their vectors. Vectors of a slot whose tool has gone since
    /// (slots are never reused) or of another model are ignored; returns how many were taken.
    pub fn attach_vectors(
        &mut self,
        model_id: &str,
        vectors: Vec<((u32, ToolView), Vec<f32>)>,
    ) -> Result<usize> {
        self.dense.reserve(vectors.len());
        let mut stored = 0;
        for (key, vector) in vectors {
            let Some(tool) = self.index.tool(key.0) else {
                continue;
            };
            let text_chars = || {
                let texts = embedding_texts(tool);
                ToolView::ALL.map(|view| texts.get(view).chars().count())
            };
            if self
                .dense
                .insert(model_id, key, vector, text_chars)
                .map_err(Error::QueryEmbedding)?
            {
                stored += 1;
            }
        }
        Ok(stored)
    }

    /// Embeds every pending tool with the engine's model, here and now (in chunks, so a long
    /// catalog is not one giant batch). For tools and tests; a server embeds in the background.
    pub fn embed_pending(&mut self) -> Result<usize> {
        let Some(model_id) = self.dense.model().map(|m| m.model_id().to_string()) else {
            return Ok(0);
        };
        let pending = self.pending_vectors();
        self.reserve_vectors(pending.len());
        let mut stored = 0;
        for chunk in pending.chunks(64) {
            let texts: Vec<&str> = chunk.iter().map(|p| p.text.as_str()).collect();
            let vectors = self.dense.embed(&texts).map_err(Error::QueryEmbedding)?;
            let pairs = chunk.iter().map(PendingVector::key).zip(vectors).collect();
            stored += self.attach_vectors(&model_id, pairs)?;
        }
        Ok(stored)
    }

    pub fn search(&self, request: &SearchRequest) -> Result<SearchResponse> {
        let started = Instant::now();
        let query = request.query.trim();
        let mut terms = Vec::new();
        let mut regex = None;
        let mut mode = request.mode;
        if mode == SearchMode::Semantic && self.dense.model().is_none() {
            return Err(Error::NoEmbeddingModel);
        }
        // Hybrid with no vector yet is keyword search, and says so.
        if mode == SearchMode::Hybrid && self.dense.len() == 0 {
            mode = SearchMode::Keyword;
        }
        // The dense side's first tool, when it leads the second by a clear margin.
        let mut dense_first = None;
        // The dense side's first tool, whatever its margin.
        let mut dense_top = None;
        let mut candidates = match mode {
            SearchMode::Keyword | SearchMode::Hybrid | SearchMode::Semantic if query.is_empty() => {
                return Ok(self.browse(request))
            }
            SearchMode::Keyword | SearchMode::Hybrid => {
                let keyword = self.keyword_candidates(query, &request.filters.scope, &mut terms)?;
                if mode == SearchMode::Hybrid {
                    match self.dense_similarities(query, &request.filters) {
                        Ok(mut all) => {
                            // Only the head of the ranking is read by rank: sorting the whole
                            // catalog by similarity was a fifth of a search.
                            let head = self
                                .config
                                .dense_candidates
                                .max(self.config.guesses)
                                .max(fuse::STANDOUT_DEPTH);
                            sort_head(&mut all, head);
                            // Read over the whole ranking's best, before the list is cut to
                            // candidates: they are the head's first.
                            let dense_standout = standout(all.iter().take(head).map(|&(_, s)| s));
                            dense_first = clear_first(&all);
                            dense_top = all.first().map(|&(slot, _)| slot);
                            let dense = self.dense_list(&keyword, all, head);
                            self.fuse(query, keyword, &dense, dense_standout)
                        }
                        Err(error) => {
                            tracing::warn!(%error, "hybrid search fell back to keyword search");
                            mode = SearchMode::Keyword;
                            keyword
                        }
                    }
                } else {
                    keyword
                }
            }
            SearchMode::Semantic => self
                .dense_ranking(query, &request.filters, usize::MAX)?
                .into_iter()
                .filter(|&(_, similarity)| similarity > 0.0)
                .map(|(slot, similarity)| Candidate {
                    by_meaning: true,
                    evidence: Evidence {
                        similarity: Some(similarity),
                        words: 0.0,
                    },
                    ..Candidate::new(slot, similarity.min(0.999))
                })
                .collect(),
            SearchMode::Regex => {
                let (found, compiled) = self.regex_candidates(query)?;
                regex = Some(compiled);
                found
            }
            SearchMode::Exact => Vec::new(),
        };
        let retrieved = candidates.len();
        self.apply_exact_bonus(query, &mut candidates);
        if !request.filters.is_empty() {
            candidates.retain(|c| {
                self.index
                    .tool(c.slot)
                    .is_some_and(|t| request.filters.matches(t, self.naming()))
            });
        }
        // Scores of the modes that read evidence become its calibrated confidence.
        let calibrated = matches!(
            mode,
            SearchMode::Keyword | SearchMode::Hybrid | SearchMode::Semantic
        );
        let own_score = |c: &Candidate| {
            if c.exact {
                1.0
            } else if c.guess {
                // Under the confidence floor, as far under as it is under min_similarity.
                let similarity = c.evidence.similarity.unwrap_or(0.0);
                let min = self.config.min_similarity.max(f32::EPSILON);
                CONFIDENT_SCORE * (similarity / min).clamp(0.0, 0.999)
            } else if calibrated {
                confidence(c.evidence, &self.config).min(0.999)
            } else {
                c.score
            }
        };
        // A guess ranks where the fusion puts it among the other weak results, but under every
        // confident one: a confident match is never shown below a guess.
        if candidates
            .iter()
            .any(|c| !c.guess && own_score(c) >= CONFIDENT_SCORE)
        {
            for candidate in candidates.iter_mut().filter(|c| c.guess) {
                candidate.demoted = true;
            }
        }
        // The threshold and the top band apply to the scores the caller sees. Those are capped
        // down the ranking, so each cut keeps a prefix of it: everything ranked above the first
        // candidate whose own score is under the cut.
        let threshold = request.threshold.unwrap_or(self.config.threshold);
        let first = self.first_in_order(candidates.iter());
        let best = first.as_ref().map_or(0.0, own_score);
        // Whether anything fits is whether the first result, which caps every score under it,
        // is a confident match: read before the threshold and the top band (which cut what is
        // shown, not what the catalog holds). Only a search that read meaning says it: keyword
        // evidence alone does not tell a fitting request from one no tool fits (docs/EVAL.md,
        // "Scores and 'nothing fits'"), so keyword search never does.
        let nothing_fits =
            matches!(mode, SearchMode::Hybrid | SearchMode::Semantic) && best < CONFIDENT_SCORE;
        let band_cut = request
            .top_band
            .or(self.config.top_band)
            .map_or(0.0, |band| best * band);
        let cut = threshold.max(band_cut);
        // Calibrated scores are never under 0, so a cut of 0 (no threshold, no band) passes
        // every candidate without reading their scores, tens of thousands in a large catalog.
        let first_under = if cut <= 0.0 && calibrated {
            None
        } else {
            self.first_in_order(candidates.iter().filter(|c| !c.exact && own_score(c) < cut))
        };
        // A first result that meaning does not support (it matched words only) never hides the
        // tool meaning puts first: "remember that Alice likes tea" led by a tool whose text says
        // "like" keeps the memory tool beside it.
        let words_only_first = first.is_some_and(|c| {
            !c.exact && c.evidence.similarity.unwrap_or(0.0) < self.config.min_similarity
        });
        let kept_by_meaning = dense_first.or(dense_top.filter(|_| words_only_first));
        if let Some(first_under) = first_under {
            // The dense side's first stays past the band (not past the threshold) when it leads
            // by a clear margin, or when the first result is a match of words alone.
            candidates.retain(|c| {
                c.exact
                    || self.rank_order(c, &first_under).is_lt()
                    || (Some(c.slot) == kept_by_meaning && own_score(c) >= threshold)
            });
        }
        let after_threshold = candidates.len();
        let total_matches = candidates.len();
        let explained = explain::resolve(&self.index, &terms);
        self.sort_page(
            &mut candidates,
            request.offset.saturating_add(request.limit),
        );
        // Each score is the result's confidence, capped by the one above it so that the list
        // reads best first: the ranking is the fusion's, the numbers are the evidence's.
        let mut cap = 1.0f32;
        let shown: Vec<f32> = candidates
            .iter()
            .map(|c| {
                if c.exact || !calibrated {
                    own_score(c)
                } else {
                    cap = cap.min(own_score(c));
                    cap
                }
            })
            .collect();
        let tools: Vec<SearchHit> = candidates
            .iter()
            .zip(shown)
            .skip(request.offset)
            .take(request.limit)
            .filter_map(|(c, shown)| {
                let tool = self.index.tool(c.slot)?.clone();
                let matched_on = if c.exact {
                    vec![MatchedOn {
                        field: "name",
                        terms: vec![unquote(query).to_string()],
                    }]
                } else if c.by_meaning {
                    vec![MatchedOn {
                        field: MatchedOn::MEANING,
                        terms: Vec::new(),
                    }]
                } else {
                    match &regex {
                        Some(regex) => explain::regex_fields(regex, &tool),
                        None => explain::matched_on(&self.index, c.slot, &explained),
                    }
                };
                Some(SearchHit {
                    tool,
                    score: shown,
                    matched_on,
                    evidence: c.evidence,
                })
            })
            .collect();
        let fallback =
            (total_matches == 0 || nothing_fits).then(|| self.fallback(&request.filters));
        tracing::debug!(
            query,
            mode = mode.as_str(),
            index_size = self.index.len(),
            vectors = self.dense.len(),
            matches_before_threshold = retrieved,
            matches_after_threshold = after_threshold,
            returned = tools.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "search"
        );
        Ok(SearchResponse {
            query: request.query.clone(),
            mode,
            total_matches,
            nothing_fits,
            fallback,
            tools,
        })
    }

    /// Keyword candidates, scores scaled by the best one to 0..0.999 (1 is for exact names).
    fn keyword_candidates(
        &self,
        query: &str,
        scope: &Scope,
        terms: &mut Vec<explain::QueryTerm>,
    ) -> Result<Vec<Candidate>> {
        if query.chars().count() > self.config.max_query_chars {
            return Err(Error::QueryTooLong {
                len: query.chars().count(),
                max: self.config.max_query_chars,
                mode: "keyword",
            });
        }
        let keyword::Evaluation {
            hits,
            max: max_score,
            terms: collected,
            coverage,
        } = keyword::evaluate(&self.index, &self.config, query);
        *terms = collected;
        // Under a limited scope, scores are normalised over the tools in it, so that a tool the
        // caller cannot see neither lowers their scores nor shows through them.
        let touched: Vec<u32> = if scope.is_all() {
            hits.touched().to_vec()
        } else {
            hits.touched()
                .iter()
                .copied()
                .filter(|&slot| {
                    self.index
                        .tool(slot)
                        .is_some_and(|t| scope.allows_tool(t, self.naming()))
                })
                .collect()
        };
        let max_score = if scope.is_all() {
            max_score
        } else {
            // The bound scaled by the best score in scope over the best of all: the same scores
            // as without a scope when the best tool is in it.
            let best = |slots: &[u32]| {
                slots
                    .iter()
                    .map(|&slot| hits.scores[slot as usize])
                    .fold(0.0f32, f32::max)
            };
            let all = best(hits.touched());
            if all > 0.0 {
                max_score * best(&touched) / all
            } else {
                max_score
            }
        }
        .max(f32::EPSILON);
        // The score is a share of what the words the catalog knows could give; as evidence it
        // is also scaled by the share of the query those words are, so that a match of one
        // known word in a request of many unknown ones (or of a fuzzy guess) stays weak.
        Ok(touched
            .iter()
            .map(|&slot| {
                let score = (hits.scores[slot as usize] / max_score).min(0.999);
                Candidate {
                    evidence: Evidence {
                        similarity: None,
                        words: score * coverage,
                    },
                    ..Candidate::new(slot, score)
                }
            })
            .collect())
    }

    /// The `depth` tools most similar in meaning to the query among those passing `filters`,
    /// best first, with their cosine similarity.
    fn dense_ranking(
        &self,
        query: &str,
        filters: &Filters,
        depth: usize,
    ) -> Result<Vec<(u32, f32)>> {
        let mut ranked = self.dense_similarities(query, filters)?;
        if depth < ranked.len() {
            let cutoff = keyword::kth_largest(ranked.iter().map(|&(_, s)| s), depth);
            ranked.retain(|&(_, s)| s >= cutoff);
        }
        // Slots are distinct: the order is total, so an unstable sort gives the same list.
        ranked.sort_unstable_by(best_first);
        ranked.truncate(depth);
        Ok(ranked)
    }

    /// Every tool passing `filters` with its cosine similarity to the query, in no order.
    fn dense_similarities(&self, query: &str, filters: &Filters) -> Result<Vec<(u32, f32)>> {
        let text = embeddable_query(query, self.config.max_embedded_query_chars);
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let vector = self
            .dense
            .query_vector(&text)
            .ok_or(Error::NoEmbeddingModel)?
            .map_err(Error::QueryEmbedding)?;
        Ok(self
            .dense
            .similarities(&vector, self.config.dense_view, |slot| {
                filters.is_empty()
                    || self
                        .index
                        .tool(slot)
                        .is_some_and(|t| filters.matches(t, self.naming()))
            }))
    }

    /// The dense side of a fusion: the `dense_candidates` most similar tools, plus
    /// (when the config says so) the similarity of every keyword candidate, so that a tool found
    /// by words is fused with its own similarity rather than with none. `all[..head]` is the
    /// best of `all`, best first ([`sort_head`]), and `head` covers `dense_candidates` and
    /// `guesses`; the rest is in no order. The list returned is best first for a fusion that
    /// reads ranks ([`fuse::reads_order`]); for the others, only what came from the head is.
    fn dense_list(
        &self,
        keyword: &[Candidate],
        all: Vec<(u32, f32)>,
        head: usize,
    ) -> Vec<(u32, f32)> {
        // Below min_similarity a tool is no match by meaning: only the few closest enter, as
        // guesses (scored low, never confident), so a request about nothing in the catalog
        // says so rather than presenting the least unlike tools as matches.
        let min_similarity = self.config.min_similarity;
        if !self.config.dense_for_keyword_hits {
            return all
                .into_iter()
                .take(self.config.dense_candidates)
                .enumerate()
                .filter(|&(rank, (_, similarity))| {
                    similarity >= min_similarity || (rank < self.config.guesses && similarity > 0.0)
                })
                .map(|(_, hit)| hit)
                .collect();
        }
        let mut by_words = vec![false; self.index.slot_count()];
        for candidate in keyword {
            if let Some(cell) = by_words.get_mut(candidate.slot as usize) {
                *cell = true;
            }
        }
        let mut list = Vec::new();
        let mut from_head = 0;
        for (rank, (slot, similarity)) in all.into_iter().enumerate() {
            if (rank < self.config.dense_candidates && similarity >= min_similarity)
                || (rank < self.config.guesses && similarity > 0.0)
                || by_words.get(slot as usize).copied().unwrap_or(false)
            {
                from_head += usize::from(rank < head);
                list.push((slot, similarity));
            }
        }
        // What came from past the head (keyword candidates alone) ranks below all of the head;
        // it is put in order among itself for a fusion that reads ranks.
        if let Some(tail) = list
            .get_mut(from_head..)
            .filter(|_| fuse::reads_order(self.config.fusion))
        {
            tail.sort_unstable_by(best_first);
        }
        list
    }

    /// One list from the keyword candidates and the dense ranking, as the config says, with the
    /// dense share of this query (`query_dense_weight`). `dense` is [`Self::dense_list`]'s.
    fn fuse(
        &self,
        query: &str,
        keyword: Vec<Candidate>,
        dense: &[(u32, f32)],
        dense_standout: Option<f32>,
    ) -> Vec<Candidate> {
        // Each side's evidence by slot: read once per fused tool.
        let slots = self.index.slot_count();
        let mut words: Vec<Option<f32>> = vec![None; slots];
        for candidate in &keyword {
            if let Some(cell) = words.get_mut(candidate.slot as usize) {
                *cell = Some(candidate.evidence.words);
            }
        }
        let mut similarity: Vec<Option<f32>> = vec![None; slots];
        for &(slot, s) in dense {
            if let Some(cell) = similarity.get_mut(slot as usize) {
                *cell = Some(s);
            }
        }
        let mut lexical: Vec<(u32, f32)> = keyword.iter().map(|c| (c.slot, c.score)).collect();
        if fuse::reads_order(self.config.fusion) {
            lexical.sort_unstable_by(best_first);
        }
        let alpha = self.query_dense_weight(query, &lexical, dense_standout);
        let fused = match self.config.fusion {
            Fusion::ZScore => fuse::z_score(&lexical, dense, alpha, slots),
            Fusion::Convex => {
                if self.config.dense_normalization == DenseNormalization::MinMax {
                    fuse::convex(&lexical, dense, alpha, slots)
                } else {
                    let dense = self.normalize_dense(dense);
                    fuse::weighted_sum(&lexical, &dense, alpha, slots)
                }
            }
            Fusion::Rrf => fuse::weighted_rrf(&lexical, dense, alpha, self.config.rrf_k),
            Fusion::CombMnz => fuse::comb_mnz(&lexical, dense, alpha),
        };
        fused
            .into_iter()
            .map(|(slot, score)| {
                let at = slot as usize;
                let words = words.get(at).copied().flatten();
                let similarity = similarity.get(at).copied().flatten();
                Candidate {
                    by_meaning: words.is_none(),
                    guess: words.is_none()
                        && similarity.is_none_or(|s| s < self.config.min_similarity),
                    evidence: Evidence {
                        similarity,
                        words: words.unwrap_or(0.0),
                    },
                    ..Candidate::new(slot, score.clamp(0.0, 0.999))
                }
            })
            .collect()
    }

    /// The dense share of one query's fusion: `dense_weight`, moved by what this query's lists
    /// show when `fusion_weighting` says so. `lexical` is in any order.
    fn query_dense_weight(
        &self,
        query: &str,
        lexical: &[(u32, f32)],
        dense_standout: Option<f32>,
    ) -> f32 {
        let prior = finite_or(self.config.dense_weight, 0.0).clamp(0.0, 1.0);
        let sharpness = finite_or(self.config.fusion_sharpness, 0.0).max(0.0);
        match self.config.fusion_weighting {
            FusionWeighting::Fixed => prior,
            FusionWeighting::Standout => {
                match (standout(lexical.iter().map(|&(_, s)| s)), dense_standout) {
                    (Some(words), Some(meaning)) => {
                        share(prior, meaning.powf(sharpness), words.powf(sharpness))
                    }
                    _ => prior,
                }
            }
            FusionWeighting::Coverage => share(
                prior,
                1.0,
                keyword::query_coverage(&self.index, query).powf(sharpness),
            ),
        }
    }

    /// The dense similarities on the keyword scores' scale, as the config says.
    fn normalize_dense(&self, dense: &[(u32, f32)]) -> Vec<(u32, f32)> {
        let best = dense.iter().map(|&(_, s)| s).fold(f32::MIN, f32::max);
        let worst = dense.iter().map(|&(_, s)| s).fold(f32::MAX, f32::min);
        dense
            .iter()
            .map(|&(slot, s)| {
                let n = match self.config.dense_normalization {
                    DenseNormalization::MinMax if best > worst => (s - worst) / (best - worst),
                    DenseNormalization::MinMax => 1.0,
                    DenseNormalization::Max if best > 0.0 => s.max(0.0) / best,
                    DenseNormalization::Max => 0.0,
                    DenseNormalization::Raw => s.max(0.0),
                };
                (slot, n)
            })
            .collect()
    }

    /// Exact-name matches rank first, in every mode: `name`, `"name"`, `` `name` ``, `server___name`.
    fn apply_exact_bonus(&self, query: &str, candidates: &mut Vec<Candidate>) {
        let wanted = unquote(query);
        if wanted.is_empty() {
            return;
        }
        let mut slots: Vec<u32> = self.index.slots_named(wanted);
        let id = self.naming().parse(wanted);
        if !id.server.is_empty() {
            slots.extend(
                self.index
                    .slots_named(&id.name)
                    .into_iter()
                    .filter(|&slot| {
                        self.index
                            .tool(slot)
                            .is_some_and(|t| t.server().eq_ignore_ascii_case(&id.server))
                    }),
            );
        }
        for slot in slots {
            match candidates.iter_mut().find(|c| c.slot == slot) {
                Some(c) => c.exact = true,
                None => candidates.push(Candidate {
                    exact: true,
                    ..Candidate::new(slot, 1.0)
                }),
            }
        }
    }

    /// The ranking's order: exact names first, then by score, ties by name (then server).
    // Inlined: a search over many matches compares each with the first a few times, and the
    // leading keys decide nearly every comparison without reading names.
    #[inline]
    fn rank_order(&self, a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
        let name = |slot: u32| {
            self.index
                .tool(slot)
                .map(|t| (t.name(), t.server()))
                .unwrap_or_default()
        };
        lead_order(a, b).then_with(|| name(a.slot).cmp(&name(b.slot)))
    }

    /// The first of `candidates` in the ranking's order.
    fn first_in_order<'c>(
        &self,
        candidates: impl Iterator<Item = &'c Candidate>,
    ) -> Option<Candidate> {
        candidates
            .reduce(|best, c| {
                if self.rank_order(c, best).is_lt() {
                    c
                } else {
                    best
                }
            })
            .copied()
    }

    /// Puts the first `keep` candidates in order (exact names first, then score, then name) and
    /// drops the rest: selecting before sorting keeps a search over many matches cheap.
    fn sort_page(&self, candidates: &mut Vec<Candidate>, keep: usize) {
        let order = |a: &Candidate, b: &Candidate| self.rank_order(a, b);
        if keep < candidates.len() {
            // Exact names always make the page; the rest need the keep-th best score (ties kept
            // here, cut after sorting).
            let exact = candidates.iter().filter(|c| c.exact).count();
            let cutoff = if keep <= exact {
                f32::INFINITY
            } else {
                keyword::kth_largest(
                    candidates.iter().filter(|c| !c.exact).map(|c| c.score),
                    keep - exact,
                )
            };
            candidates.retain(|c| c.exact || c.score >= cutoff);
        }
        candidates.sort_by(order);
        candidates.truncate(keep);
    }

    fn regex_candidates(&self, pattern: &str) -> Result<(Vec<Candidate>, regex::Regex)> {
        if pattern.chars().count() > self.config.max_regex_chars {
            return Err(Error::QueryTooLong {
                len: pattern.chars().count(),
                max: self.config.max_regex_chars,
                mode: "regex",
            });
        }
        let regex = regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .size_limit(self.config.regex_size_limit)
            .dfa_size_limit(self.config.regex_size_limit)
            .build()
            .map_err(|e| Error::InvalidRegex {
                pattern: pattern.to_string(),
                message: e.to_string(),
            })?;
        let found = self
            .index
            .live_slots()
            .filter_map(|(slot, tool)| {
                let score = explain::regex_score(&regex, tool);
                (score > 0.0).then_some(Candidate::new(slot, score))
            })
            .collect();
        Ok((found, regex))
    }

    /// An empty query lists the (filtered) catalog by server and name, a page at a time.
    fn browse(&self, request: &SearchRequest) -> SearchResponse {
        let mut all: Vec<&Arc<Tool>> = self
            .catalog
            .tools()
            .filter(|t| request.filters.matches(t, self.naming()))
            .collect();
        all.sort_by(|a, b| (a.server(), a.name()).cmp(&(b.server(), b.name())));
        SearchResponse {
            query: request.query.clone(),
            mode: request.mode,
            total_matches: all.len(),
            nothing_fits: false,
            fallback: None,
            tools: all
                .into_iter()
                .skip(request.offset)
                .take(request.limit)
                .map(|tool| SearchHit {
                    tool: tool.clone(),
                    score: 0.0,
                    matched_on: Vec::new(),
                    evidence: Evidence::default(),
                })
                .collect(),
        }
    }

    fn fallback(&self, filters: &Filters) -> Fallback {
        let tools: Vec<&Arc<Tool>> = self
            .catalog
            .tools()
            .filter(|t| filters.matches(t, self.naming()))
            .collect();
        let max = self.config.fallback_names_max;
        if tools.len() <= max {
            let mut names: Vec<String> = tools.iter().map(|t| self.naming().tool_name(t)).collect();
            names.sort();
            return Fallback::Names { names };
        }
        let count = |key: fn(&Tool) -> Option<&str>| {
            let mut counts = std::collections::BTreeMap::<String, usize>::new();
            for tool in &tools {
                if let Some(k) = key(tool) {
                    *counts.entry(k.to_string()).or_default() += 1;
                }
            }
            counts
                .into_iter()
                .map(|(name, count)| CountedName { name, count })
                .collect::<Vec<_>>()
        };
        let categories = count(|t| t.category());
        if !categories.is_empty() {
            return Fallback::Categories { categories };
        }
        let servers = count(|t| (!t.server().is_empty()).then_some(t.server()));
        if servers.len() > 1 {
            return Fallback::Servers { servers };
        }
        let mut names: Vec<String> = tools.iter().map(|t| self.naming().tool_name(t)).collect();
        names.sort();
        names.truncate(max);
        Fallback::Names { names }
    }
}

/// The words of a query as a sentence model should read them: the keyword syntax (`( ) + " * ~`
/// and the like) blanked out, whitespace collapsed, at most `max` characters.
fn embeddable_query(query: &str, max: usize) -> String {
    let cleaned: String = query
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || ".,?!'-:/@&".contains(c) {
                c
            } else {
                ' '
            }
        })
        .collect();
    let mut out = String::with_capacity(cleaned.len().min(max));
    let mut chars = 0;
    for word in cleaned.split_whitespace() {
        let len = word.chars().count();
        let needed = if out.is_empty() { len } else { len + 1 };
        if chars + needed > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        chars += needed;
    }
    out
}

/// Best first: higher similarity, then lower slot (a total order, slots being distinct).
fn best_first(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
}

/// Puts the best `head` of `list` first, in order ([`best_first`]); the rest follows in no order.
fn sort_head(list: &mut [(u32, f32)], head: usize) {
    if head < list.len() {
        list.select_nth_unstable_by(head, best_first);
        list[..head].sort_unstable_by(best_first);
    } else {
        list.sort_unstable_by(best_first);
    }
}

/// The first of a best-first similarity ranking when it leads the second by
/// [`DENSE_CLEAR_MARGIN`] (or stands alone).
fn clear_first(ranked: &[(u32, f32)]) -> Option<u32> {
    match ranked {
        [(slot, _)] => Some(*slot),
        [(slot, first), (_, second), ..] if first - second >= DENSE_CLEAR_MARGIN => Some(*slot),
        _ => None,
    }
}

/// The query without surrounding whitespace, quotes or backticks.
fn unquote(query: &str) -> &str {
    let q = query.trim();
    for quote in ['"', '\'', '`'] {
        if let Some(inner) = q.strip_prefix(quote).and_then(|s| s.strip_suffix(quote)) {
            return inner.trim();
        }
    }
    q
}

#[cfg(test)]
mod tests;
