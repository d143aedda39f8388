//! Hybrid and semantic search with a deterministic stand-in model that knows a few concepts: a
//! tool is found by a request that shares no word with it, exact names still win, scores stay in
//! 0..1, vectors follow the catalog, and without a model everything runs by words.

use std::sync::Arc;

use toolsearch_core::contract::{self, SearchArgs, SearchOptions};
use toolsearch_core::embed::{EmbedError, Embedder, HashEmbedder, ToolView};
use toolsearch_core::{
    Error, Fallback, MatchedOn, PendingVector, SearchConfig, SearchEngine, SearchMode,
    SearchRequest, Tool,
};

/// Words of one concept share a dimension, so texts about the same thing are close without a
/// word in common; every other word falls into hashed dimensions of its own.
struct ConceptEmbedder {
    id: String,
    rest: HashEmbedder,
}

const CONCEPTS: [&[&str]; 3] = [
    &["rain", "forecast", "weather", "umbrella", "sunny"],
    &["email", "mail", "message", "inbox", "colleague"],
    &["document", "file", "disk", "folder"],
];

impl ConceptEmbedder {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            rest: HashEmbedder::new(29),
        }
    }
}

impl Embedder for ConceptEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimensions(&self) -> usize {
        32
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0f32; 3];
                for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                    for (dim, words) in CONCEPTS.iter().enumerate() {
                        if words.contains(&word) {
                            vector[dim] += 3.0;
                        }
                    }
                }
                vector.extend(self.rest.vector(text).into_iter().map(|x| x * 0.5));
                vector
            })
            .collect())
    }
}

fn model_vector(text: &str) -> Vec<f32> {
    ConceptEmbedder::new("concepts-v1")
        .embed(&[text])
        .unwrap()
        .remove(0)
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("get_forecast", "Returns the forecast for a city.").with_server("weather"),
        Tool::new("send_mail", "Sends a mail to a recipient.").with_server("mail"),
        Tool::new("read_document", "Reads a document from disk.").with_server("files"),
        Tool::new("list_folder", "Lists the entries of a folder.").with_server("files"),
    ]
}

fn engine_with_model(id: &str) -> SearchEngine {
    let mut engine =
        SearchEngine::build(tools(), SearchConfig::default(), Default::default()).unwrap();
    engine.set_embedder(Some(Arc::new(ConceptEmbedder::new(id))));
    engine.embed_pending().unwrap();
    engine
}

fn search(engine: &SearchEngine, query: &str, mode: SearchMode) -> Vec<(String, f32, bool)> {
    engine
        .search(&SearchRequest::new(query).mode(mode))
        .unwrap()
        .tools
        .iter()
        .map(|hit| {
            let by_meaning = hit.matched_on.iter().any(|m| m.field == MatchedOn::MEANING);
            (hit.tool.name().to_owned(), hit.score, by_meaning)
        })
        .collect()
}

const NO_SHARED_WORD: &str = "will I need an umbrella tomorrow";

#[test]
fn hybrid_finds_a_tool_by_a_request_that_shares_no_word_with_it() {
    let engine = engine_with_model("concepts-v1");
    assert!(search(&engine, NO_SHARED_WORD, SearchMode::Keyword).is_empty());
    let response = engine
        .search(&SearchRequest::new(NO_SHARED_WORD).mode(SearchMode::Hybrid))
        .unwrap();
    assert_eq!(response.mode, SearchMode::Hybrid);
    let found = search(&engine, NO_SHARED_WORD, SearchMode::Hybrid);
    assert_eq!(found.first().map(|f| f.0.as_str()), Some("get_forecast"));
    assert!(found[0].2, "matchedOn says meaning: {found:?}");
}

#[test]
fn hybrid_keeps_word_matches_and_says_which_came_from_words() {
    let engine = engine_with_model("concepts-v1");
    let found = search(&engine, "read a document", SearchMode::Hybrid);
    assert_eq!(found[0].0, "read_document");
    assert!(!found[0].2, "found by words: {found:?}");
}

#[test]
fn an_exact_name_scores_1_and_ranks_first_in_every_mode_and_scores_stay_in_0_1() {
    let engine = engine_with_model("concepts-v1");
    for mode in [SearchMode::Hybrid, SearchMode::Semantic] {
        let found = search(&engine, "list_folder", mode);
        assert_eq!(found[0].0, "list_folder", "{mode:?}");
        assert_eq!(found[0].1, 1.0);
        for query in [
            NO_SHARED_WORD,
            "mail my colleague",
            "forecast document folder",
        ] {
            for (name, score, _) in search(&engine, query, mode) {
                assert!((0.0..1.0).contains(&score), "{name} {score} for {query:?}");
            }
        }
    }
}

#[test]
fn a_request_about_nothing_in_the_catalog_finds_nothing_and_offers_a_fallback() {
    let engine = engine_with_model("concepts-v1");
    let response = engine
        .search(&SearchRequest::new("zq xv").mode(SearchMode::Hybrid))
        .unwrap();
    assert!(response.tools.is_empty(), "{:?}", response.tools);
    assert!(matches!(response.fallback, Some(Fallback::Names { .. })));
}

#[test]
fn semantic_mode_ranks_by_meaning_only() {
    let engine = engine_with_model("concepts-v1");
    let found = search(&engine, "check my inbox", SearchMode::Semantic);
    assert_eq!(found[0].0, "send_mail");
    assert!(found.iter().all(|f| f.2));
}

#[test]
fn without_a_model_hybrid_runs_as_keyword_and_semantic_says_what_to_do() {
    let engine = SearchEngine::from_tools(tools()).unwrap();
    assert_eq!(engine.default_mode(), SearchMode::Keyword);
    let response = engine
        .search(&SearchRequest::new("read a document").mode(SearchMode::Hybrid))
        .unwrap();
    assert_eq!(response.mode, SearchMode::Keyword);
    let error = engine
        .search(&SearchRequest::new("read").mode(SearchMode::Semantic))
        .unwrap_err();
    assert!(matches!(error, Error::NoEmbeddingModel));
    assert!(error.to_string().contains("toolsearch model fetch"));
}

#[test]
fn with_a_model_but_no_vectors_yet_hybrid_runs_as_keyword() {
    let mut engine = SearchEngine::from_tools(tools()).unwrap();
    engine.set_embedder(Some(Arc::new(ConceptEmbedder::new("concepts-v1"))));
    assert_eq!(engine.default_mode(), SearchMode::Hybrid);
    let response = engine
        .search(&SearchRequest::new(NO_SHARED_WORD).mode(SearchMode::Hybrid))
        .unwrap();
    assert_eq!(response.mode, SearchMode::Keyword);
    assert!(response.tools.is_empty());
}

#[test]
fn the_contract_searches_hybrid_by_default_when_a_model_is_loaded() {
    let engine = engine_with_model("concepts-v1");
    let args = SearchArgs {
        query: NO_SHARED_WORD.into(),
        ..SearchArgs::default()
    };
    let results = contract::search(&engine, &args, &SearchOptions::default()).unwrap();
    assert_eq!(results.mode, SearchMode::Hybrid);
    assert_eq!(results.page.tools[0].name, "weather___get_forecast");
}

#[test]
fn vectors_follow_the_catalog() {
    let mut engine = engine_with_model("concepts-v1");
    let status = engine.vector_status();
    assert_eq!((status.ready, status.total), (4, 4));
    assert!(status.is_complete());
    assert!(engine.pending_vectors().is_empty());

    // A server re-listed: its old vectors go, its new tools wait for theirs.
    engine
        .replace_server(
            "files",
            vec![Tool::new("delete_file", "Deletes a file.").with_server("files")],
        )
        .unwrap();
    let status = engine.vector_status();
    assert_eq!((status.ready, status.total), (2, 3));
    // Two texts per tool: what it is for, and what it takes.
    let pending = engine.pending_vectors();
    assert_eq!(pending.len(), 2);
    assert_eq!(
        pending.iter().map(|p| p.view).collect::<Vec<_>>(),
        ToolView::ALL
    );
    assert_eq!(pending[0].text, "files delete file: Deletes a file.");
    assert_eq!(pending[1].text, "files delete file");

    // One view is not enough to search by meaning; the other is still pending.
    let purpose = model_vector(&pending[0].text);
    engine
        .attach_vectors("concepts-v1", vec![(pending[0].key(), purpose)])
        .unwrap();
    assert_eq!(engine.vector_status().ready, 2);
    let left = engine.pending_vectors();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].view, ToolView::Parameters);

    // A vector for a slot that has gone since is ignored, so is one of another model.
    let stale = pending[0].slot;
    engine.replace_server("files", vec![]).unwrap();
    assert_eq!(
        engine
            .attach_vectors(
                "concepts-v1",
                vec![((stale, ToolView::Parameters), vec![1.0; 32])]
            )
            .unwrap(),
        0
    );
    engine
        .replace_server(
            "files",
            vec![Tool::new("delete_file", "Deletes a file.").with_server("files")],
        )
        .unwrap();
    let slot = engine.pending_vectors()[0].slot;
    assert_eq!(
        engine
            .attach_vectors(
                "another-model",
                vec![((slot, ToolView::Purpose), vec![1.0; 32])]
            )
            .unwrap(),
        0
    );
    assert_eq!(engine.embed_pending().unwrap(), 2);
    assert!(engine.vector_status().is_complete());
}

#[test]
fn another_model_drops_the_vectors_of_the_first() {
    let mut engine = engine_with_model("concepts-v1");
    engine.set_embedder(Some(Arc::new(ConceptEmbedder::new("concepts-v2"))));
    assert_eq!(engine.vector_status().ready, 0);
    assert_eq!(engine.pending_vectors().len(), 8);
    // The same model again keeps what it has.
    engine.embed_pending().unwrap();
    engine.set_embedder(Some(Arc::new(ConceptEmbedder::new("concepts-v2"))));
    assert_eq!(engine.vector_status().ready, 4);
    engine.set_embedder(None);
    assert_eq!(engine.default_mode(), SearchMode::Keyword);
}

#[test]
fn vectors_take_their_size_and_no_more_when_reserved_or_attached_at_once() {
    let many: Vec<Tool> = (0..300)
        .map(|i| Tool::new(format!("tool_{i}"), format!("Does thing number {i}.")))
        .collect();
    let model = Arc::new(ConceptEmbedder::new("concepts"));
    // Two rows per tool, a byte per dimension and a float scale each.
    let vector_bytes = 2 * (model.dimensions() + std::mem::size_of::<f32>());

    // In chunks, as a server attaches them, after one reservation for all.
    let mut engine =
        SearchEngine::build(many.clone(), SearchConfig::default(), Default::default()).unwrap();
    engine.set_embedder(Some(model.clone()));
    let pending = engine.pending_vectors();
    engine.reserve_vectors(pending.len());
    for chunk in pending.chunks(32) {
        let texts: Vec<&str> = chunk.iter().map(|p| p.text.as_str()).collect();
        let vectors = model.embed(&texts).unwrap();
        let pairs = chunk.iter().map(PendingVector::key).zip(vectors).collect();
        engine.attach_vectors("concepts", pairs).unwrap();
    }
    assert_eq!(engine.vector_status().ready, 300);
    assert_eq!(engine.vector_memory_bytes(), 300 * vector_bytes);

    // All at once.
    let mut engine =
        SearchEngine::build(many, SearchConfig::default(), Default::default()).unwrap();
    engine.set_embedder(Some(model));
    engine.embed_pending().unwrap();
    assert_eq!(engine.vector_memory_bytes(), 300 * vector_bytes);
}

/// Remembers every text it is asked to embed.
struct Recording {
    inner: ConceptEmbedder,
    seen: std::sync::Mutex<Vec<String>>,
}

impl Embedder for Recording {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.extend(texts.iter().map(|t| t.to_string()));
        }
        self.inner.embed(texts)
    }
}

#[test]
fn the_model_reads_a_long_query_up_to_the_cut_and_the_words_read_it_all() {
    let model = Arc::new(Recording {
        inner: ConceptEmbedder::new("concepts-v1"),
        seen: Default::default(),
    });
    let mut engine =
        SearchEngine::build(tools(), SearchConfig::default(), Default::default()).unwrap();
    engine.set_embedder(Some(model.clone()));
    engine.embed_pending().unwrap();
    model.seen.lock().unwrap().clear();

    // 450 characters of words no tool has, then the one word a tool has.
    let query = format!("{} folder", "please kindly ".repeat(32));
    assert!(query.len() > 440);
    let found = search(&engine, &query, SearchMode::Hybrid);
    assert_eq!(
        found.first().map(|f| f.0.as_str()),
        Some("list_folder"),
        "the keyword side reads the word past the cut: {found:?}"
    );
    let seen = model.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one query embedded: {seen:?}");
    let limit = SearchConfig::default().max_embedded_query_chars;
    assert!(limit < query.len());
    assert!(
        seen[0].len() <= limit,
        "cut to {limit}: {} chars",
        seen[0].len()
    );
    assert!(
        !seen[0].contains("folder"),
        "the model reads only the start"
    );
    assert!(seen[0].starts_with("please kindly please"));
}

/// A first result that only words support ("like" in a file tool's text) does not hide, under
/// the top band, the tool meaning puts first, even when meaning alone is too weak to be sure of
/// it (here every similarity is under `min_similarity`, so the meaning side gives guesses).
#[test]
fn a_words_only_first_result_keeps_the_meanings_first_beside_it() {
    let mut tools = tools();
    tools.push(
        Tool::new(
            "search_files",
            "Finds files by name. Use a pattern like *.txt to match them.",
        )
        .with_server("files"),
    );
    // Close to `get_forecast` by meaning: the meaning side's first leads by no clear margin.
    tools.push(Tool::new("get_outlook", "Returns the forecast for a town.").with_server("weather"));
    let config = SearchConfig {
        min_similarity: 0.99,
        ..SearchConfig::default()
    };
    let mut engine = SearchEngine::build(tools, config, Default::default()).unwrap();
    engine.set_embedder(Some(Arc::new(ConceptEmbedder::new("concepts-v1"))));
    engine.embed_pending().unwrap();
    let query = "umbrella pattern";
    let all = engine
        .search(
            &SearchRequest::new(query)
                .mode(SearchMode::Hybrid)
                .top_band(0.0),
        )
        .unwrap();
    assert_eq!(all.tools[0].tool.name(), "search_files", "{:?}", all.tools);
    // A band that the guess falls under: without the rule only `search_files` is left.
    let banded = engine
        .search(
            &SearchRequest::new(query)
                .mode(SearchMode::Hybrid)
                .top_band(0.9),
        )
        .unwrap();
    let names: Vec<&str> = banded.tools.iter().map(|h| h.tool.name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0], "search_files");
    assert!(names[1].starts_with("get_"), "{names:?}");
}
