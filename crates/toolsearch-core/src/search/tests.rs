use super::*;

#[test]
fn engine_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SearchEngine>();
}

#[test]
fn unquote_strips_one_pair_of_quotes_or_backticks() {
    assert_eq!(unquote("  `read_file` "), "read_file");
    assert_eq!(unquote("\"read_file\""), "read_file");
    assert_eq!(unquote("'read_file'"), "read_file");
    assert_eq!(unquote("read_file"), "read_file");
    assert_eq!(unquote("\"unbalanced"), "\"unbalanced");
}

#[test]
fn the_model_reads_a_query_without_its_keyword_syntax() {
    assert_eq!(
        embeddable_query("((((open issue)) +repo -\"draft\" labe~", 100),
        "open issue repo - draft labe"
    );
    assert_eq!(
        embeddable_query("send an email to bob", 13),
        "send an email"
    );
    assert_eq!(embeddable_query("((((", 100), "");
}

#[test]
fn the_engine_says_what_text_of_a_query_its_model_reads() {
    let config = SearchConfig {
        max_embedded_query_chars: 13,
        ..SearchConfig::default()
    };
    let engine = SearchEngine::new(config).unwrap();
    assert_eq!(
        engine.embedded_query_text("send (\"an\") +email to bob"),
        "send an email"
    );
    assert_eq!(engine.embedded_query_text("~~"), "");
}

#[test]
fn calibration_puts_the_floor_at_the_confident_score() {
    assert_eq!(calibrate(0.0, 0.4), 0.0);
    assert!((calibrate(0.4, 0.4) - CONFIDENT_SCORE).abs() < 1e-6);
    assert!((calibrate(1.0, 0.4) - 1.0).abs() < 1e-6);
    assert!((calibrate(0.2, 0.4) - 0.25).abs() < 1e-6);
    // Monotone, clamped, and a broken value is no evidence.
    let steps: Vec<f32> = (0..=20).map(|i| calibrate(i as f32 / 20.0, 0.45)).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert_eq!(calibrate(-0.3, 0.4), 0.0);
    assert!((calibrate(1.7, 0.4) - 1.0).abs() < 1e-6);
    assert_eq!(calibrate(f32::NAN, 0.4), 0.0);
}

#[test]
fn confidence_is_the_stronger_evidence_and_weak_evidence_stays_below_the_floor() {
    let config = SearchConfig {
        meaning_floor: 0.45,
        words_floor: 0.5,
        ..SearchConfig::default()
    };
    let of =
        |similarity: Option<f32>, words: f32| confidence(Evidence { similarity, words }, &config);
    // Either kind alone at its floor is confident.
    assert!(of(Some(0.45), 0.0) >= CONFIDENT_SCORE);
    assert!(of(None, 0.5) >= CONFIDENT_SCORE);
    // Both weak: a guess.
    assert!(of(Some(0.3), 0.3) < CONFIDENT_SCORE);
    assert!(of(None, 0.0) == 0.0);
    // The stronger side decides, whatever the other says.
    assert_eq!(of(Some(0.8), 0.1), of(Some(0.8), 0.0));
}

#[test]
fn the_dense_first_is_clear_only_with_a_margin() {
    assert_eq!(clear_first(&[(4, 0.6), (9, 0.5)]), Some(4));
    assert_eq!(clear_first(&[(4, 0.6), (9, 0.58)]), None);
    assert_eq!(clear_first(&[(4, 0.2)]), Some(4));
    assert_eq!(clear_first(&[]), None);
}

#[test]
fn standout_reads_how_far_the_best_stands_out() {
    assert_eq!(standout([0.5, 0.4].into_iter()), None);
    assert_eq!(standout([0.5, 0.5, 0.5].into_iter()), None);
    let flat = standout([0.50, 0.49, 0.48, 0.47].into_iter()).unwrap();
    let sharp = standout([0.9, 0.3, 0.29, 0.28].into_iter()).unwrap();
    assert!(sharp > flat, "{sharp} {flat}");
    // The weight leans to the side whose best stands out more, and is the prior otherwise.
    assert!((share(0.65, 1.0, 1.0) - 0.65).abs() < 1e-6);
    assert!(share(0.65, 3.0, 1.0) > 0.65);
    assert!(share(0.65, 1.0, 3.0) < 0.65);
    assert!((share(0.65, 0.0, 0.0) - 0.65).abs() < 1e-6);
}

fn everyday_engine() -> SearchEngine {
    let tool = |server: &str, name: &str, description: &str| {
        let mut tool = Tool::new(name, description);
        tool.set_server(server);
        tool
    };
    SearchEngine::from_tools([
        tool(
            "files",
            "read_file",
            "Read a file from disk, either as text or as bytes.",
        ),
        tool("files", "list_directory", "List the files in a directory."),
        tool("clock", "get_time", "Get the current time in a time zone."),
        tool("notes", "add_note", "Save a note for later."),
    ])
    .unwrap()
}

fn search(engine: &SearchEngine, request: &str) -> crate::contract::SearchResults {
    crate::contract::search(
        engine,
        &crate::contract::SearchArgs::new(request),
        &crate::contract::SearchOptions::default(),
    )
    .unwrap()
}

const UNFIT: [&str; 2] = ["what is the weather in Paris", "order a pizza to my door"];
const FITTING: [&str; 3] = [
    "read a file",
    "list the files in a directory",
    "current time",
];

/// With a model, a request whose every result is weak in meaning and in words is answered
/// "nothing fits", with low scores and the fallback, on the contract every face writes; a
/// request the catalog fits is not.
#[test]
fn a_request_no_tool_fits_is_answered_nothing_fits_when_the_search_read_meaning() {
    let mut engine = everyday_engine();
    engine.set_embedder(Some(Arc::new(crate::embed::HashEmbedder::new(512))));
    engine.embed_pending().unwrap();
    for request in UNFIT {
        let results = search(&engine, request);
        assert_eq!(results.mode, SearchMode::Hybrid);
        assert!(results.nothing_fits, "{request}: {results:?}");
        assert!(results.fallback.is_some(), "{request}");
        assert!(results.message.is_some(), "{request}");
        assert!(
            results
                .page
                .tools
                .iter()
                .all(|t| t.score < f64::from(CONFIDENT_SCORE)),
            "{request}: {results:?}"
        );
        let json = serde_json::to_value(&results).unwrap();
        assert_eq!(json["nothingFits"], true);
    }
    for request in FITTING {
        let results = search(&engine, request);
        assert!(!results.nothing_fits, "{request}: {results:?}");
        assert!(results.page.tools[0].score >= f64::from(CONFIDENT_SCORE));
        let json = serde_json::to_value(&results).unwrap();
        assert!(json.get("nothingFits").is_none());
    }
}

/// A hybrid request that matches no word and whose closest tools stay under `min_similarity`
/// lists the few closest as guesses (found by meaning, scored under the confidence floor) and
/// says nothing fits, rather than answering with nothing at all; beside a confident match, the
/// guesses rank under it.
#[test]
fn a_request_nothing_fits_lists_the_closest_tools_as_low_scored_guesses() {
    /// Every tool a little like the query (cosines 0.1 to 0.2, under `min_similarity`), the
    /// clock the least; the query's words in no tool.
    struct Faint;
    impl crate::embed::Embedder for Faint {
        fn model_id(&self) -> &str {
            "faint-test-double"
        }
        fn dimensions(&self) -> usize {
            3
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
            Ok(texts
                .iter()
                .map(|text| match text {
                    t if t.contains("weather") => vec![1.0, 0.0, 0.0],
                    t if t.contains("clock") => vec![0.1, 1.0, 0.0],
                    t if t.contains("notes") => vec![0.2, 0.0, 1.0],
                    _ => vec![0.15, 1.0, 0.0],
                })
                .collect())
        }
    }
    let mut engine = everyday_engine();
    engine.set_embedder(Some(Arc::new(Faint)));
    engine.embed_pending().unwrap();
    let request = "what is the weather in Paris";
    let results = search(&engine, request);
    assert!(results.nothing_fits, "{results:?}");
    let guesses = &results.page.tools;
    assert!(
        (1..=SearchConfig::default().guesses).contains(&guesses.len()),
        "{results:?}"
    );
    assert_eq!(guesses[0].name, "notes___add_note", "{results:?}");
    for guess in guesses {
        assert!(guess.score < f64::from(CONFIDENT_SCORE), "{results:?}");
        assert_eq!(guess.matched_on[0].field, MatchedOn::MEANING, "{results:?}");
    }
    assert!(results.fallback.is_some());
    // Beside a confident match by words, the guesses rank under it, whatever the fusion says.
    let results = search(&engine, "read a file about the weather");
    assert!(!results.nothing_fits, "{results:?}");
    let tools = &results.page.tools;
    assert_eq!(tools[0].name, "files___read_file", "{results:?}");
    assert!(tools[0].score >= f64::from(CONFIDENT_SCORE), "{results:?}");
    let first_guess = tools
        .iter()
        .position(|t| t.matched_on[0].field == MatchedOn::MEANING);
    let last_confident = tools
        .iter()
        .rposition(|t| t.score >= f64::from(CONFIDENT_SCORE));
    if let (Some(guess), Some(confident)) = (first_guess, last_confident) {
        assert!(guess > confident, "{results:?}");
    }
    // Keyword search has no meaning to guess by: nothing, and the fallback.
    let keyword = crate::contract::search(
        &engine,
        &crate::contract::SearchArgs {
            mode: Some(SearchMode::Keyword),
            ..crate::contract::SearchArgs::new(request)
        },
        &crate::contract::SearchOptions::default(),
    )
    .unwrap();
    assert!(keyword.page.tools.is_empty(), "{keyword:?}");
}

/// Keyword evidence alone does not tell a fitting request from one no tool fits, so keyword
/// search never says nothing fits: a request that matches no word gets "No tool matched" and
/// the fallback, as before.
#[test]
fn keyword_search_never_says_nothing_fits() {
    let engine = everyday_engine();
    for request in UNFIT.iter().chain(&FITTING) {
        let results = search(&engine, request);
        assert_eq!(results.mode, SearchMode::Keyword);
        assert!(!results.nothing_fits, "{request}: {results:?}");
        if results.page.tools.is_empty() {
            assert!(results.fallback.is_some(), "{request}");
        }
    }
    let results = search(&engine, "list the files in a directory");
    assert_eq!(results.page.tools[0].name, "files___list_directory");
    assert!(results.page.tools[0].score >= f64::from(CONFIDENT_SCORE));
}

/// Scores read best first, stay in 0..1, and an exact name scores 1, whatever the floors.
#[test]
fn scores_read_best_first_and_an_exact_name_scores_one() {
    let mut engine = everyday_engine();
    engine.set_embedder(Some(Arc::new(crate::embed::HashEmbedder::new(512))));
    engine.embed_pending().unwrap();
    for request in UNFIT.iter().chain(&FITTING).chain(&["read_file"]) {
        let results = search(&engine, request);
        let scores: Vec<f64> = results.page.tools.iter().map(|t| t.score).collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "{request}: {scores:?}"
        );
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
    }
    let results = search(&engine, "read_file");
    assert_eq!(results.page.tools[0].name, "files___read_file");
    assert_eq!(results.page.tools[0].score, 1.0);
    assert!(!results.nothing_fits);
}

#[test]
fn a_floor_of_one_turns_its_evidence_off_and_a_floor_of_zero_makes_any_confident() {
    assert!(calibrate(0.999, 1.0) < CONFIDENT_SCORE);
    assert!(calibrate(1.0, 1.0) < CONFIDENT_SCORE);
    assert!((calibrate(0.5, 1.0) - 0.25).abs() < 1e-6);
    assert!((calibrate(0.0, 0.0) - CONFIDENT_SCORE).abs() < 1e-6);
    assert!((calibrate(1.0, 0.0) - 1.0).abs() < 1e-6);
    assert!(calibrate(0.3, f32::NAN) < CONFIDENT_SCORE);
}

fn search_several(
    engine: &SearchEngine,
    queries: &[&str],
) -> crate::Result<crate::contract::SearchResults> {
    let args = crate::contract::SearchArgs {
        queries: queries.iter().map(|q| q.to_string()).collect(),
        ..crate::contract::SearchArgs::default()
    };
    crate::contract::search(engine, &args, &crate::contract::SearchOptions::default())
}

/// Several needs in one search: each query is searched alone and keeps its own ranking, counts
/// and fallback by name; the answer lists every tool they found once.
#[test]
fn several_queries_answer_each_need_and_list_each_tool_once() {
    let engine = everyday_engine();
    let queries = ["read a file", "current time", "order a pizza to my door"];
    let several = search_several(&engine, &queries).unwrap();
    assert_eq!(several.per_query.len(), 3);
    for (part, query) in several.per_query.iter().zip(queries) {
        let alone = search(&engine, query);
        assert_eq!(part.query, query);
        let names: Vec<String> = alone.page.tools.iter().map(|t| t.name.clone()).collect();
        assert_eq!(part.tools, names, "{query}");
        assert_eq!(part.total_matches, alone.page.total_matches, "{query}");
        assert_eq!(part.fallback, alone.fallback, "{query}");
        assert_eq!(part.nothing_fits, alone.nothing_fits, "{query}");
        // Each named tool is in the answer's list, as the search alone wrote it.
        for tool in &alone.page.tools {
            assert!(several.page.tools.contains(tool), "{query}: {}", tool.name);
        }
    }
    let listed: Vec<&str> = several.page.tools.iter().map(|t| t.name.as_str()).collect();
    let distinct: std::collections::HashSet<&str> = listed.iter().copied().collect();
    assert_eq!(distinct.len(), listed.len(), "{listed:?}");
    assert_eq!(several.page.returned, listed.len());
    assert_eq!(
        several.query,
        "read a file; current time; order a pizza to my door"
    );

    // A need asked twice costs its tools once.
    let twice = search_several(&engine, &["read a file", "read a file"]).unwrap();
    assert_eq!(twice.page.tools, search(&engine, "read a file").page.tools);
    assert_eq!(twice.per_query[0], twice.per_query[1]);

    // In JSON the parts are `perQuery`; a search of one query has none.
    let json = serde_json::to_value(&several).unwrap();
    assert_eq!(json["perQuery"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["perQuery"][0]["query"], "read a file");
    let one = serde_json::to_value(search(&engine, "read a file")).unwrap();
    assert!(one.get("perQuery").is_none());
}

#[test]
fn several_queries_are_refused_beside_a_query_or_over_five() {
    let engine = everyday_engine();
    let both = crate::contract::SearchArgs {
        queries: vec!["current time".into()],
        ..crate::contract::SearchArgs::new("read a file")
    };
    let err = crate::contract::search(&engine, &both, &crate::contract::SearchOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("not both"), "{err}");
    let six = ["a file", "time", "memory", "fetch", "echo", "sum"];
    let err = search_several(&engine, &six).unwrap_err();
    assert!(err.to_string().contains("at most 5"), "{err}");
    // Blank entries are no need: with none left, it is a search without a query.
    let blank = search_several(&engine, &["", "  "]).unwrap();
    assert!(blank.per_query.is_empty());
    // The arguments as a client writes them.
    let args: crate::contract::SearchArgs =
        serde_json::from_value(serde_json::json!({"queries": ["read a file", "current time"]}))
            .unwrap();
    assert_eq!(args.queries.len(), 2);
    let five = search_several(&engine, &six[..5]).unwrap();
    assert_eq!(five.per_query.len(), 5);
}
