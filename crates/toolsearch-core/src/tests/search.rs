//! Search through the public API: analysis, the query language, regex and exact modes, the
//! exact-name bonus, fuzzy matching, filters, every pipeline step, incremental updates and
//! `matched_on`.

use super::search_common;

use search_common::*;
use std::collections::HashSet;
use toolsearch_core::{
    Error, Fallback, Filters, MatchedOn, NamePattern, SearchConfig, SearchEngine, SearchMode,
    SearchRequest, Tool, ToolId,
};

// ---------------------------------------------------------------------------------------------
// Analysis, as search sees it
// ---------------------------------------------------------------------------------------------

#[test]
fn identifiers_split_at_case_underscore_hyphen_dot_slash_and_digits() {
    let e = engine(vec![
        tool("a", "getWeather", "Conditions outside"),
        tool("b", "get_weather", "Conditions outside"),
        tool("c", "get-weather", "Conditions outside"),
        tool("d", "weather.current", "Conditions outside"),
        tool("e", "api/weather", "Conditions outside"),
        tool("f", "convert2pdf", "Change a format"),
        tool("g", "fetchHTTPResponse", "Download a page"),
        tool("h", "send_email", "Send an email"),
    ]);
    let weather: HashSet<String> = found(&e, "weather").into_iter().collect();
    let expected: HashSet<String> = [
        "getWeather",
        "get_weather",
        "get-weather",
        "weather.current",
        "api/weather",
    ]
    .map(String::from)
    .into();
    assert_eq!(weather, expected);
    assert_eq!(found(&e, "pdf"), vec!["convert2pdf"]);
    assert_eq!(found(&e, "http"), vec!["fetchHTTPResponse"]);
    assert_eq!(found(&e, "response")[0], "fetchHTTPResponse");
}

#[test]
fn stemming_joins_word_forms() {
    let e = engine(vec![
        tool("docs", "create_document", "Make a blank page set"),
        tool("docs", "list_folders", "Show folders"),
        tool("calc", "add_numbers", "Sum two values"),
    ]);
    let hits = found(&e, "creating documents");
    assert_eq!(hits.first().map(String::as_str), Some("create_document"));
    assert_eq!(found(&e, "folder"), vec!["list_folders"]);
}

#[test]
fn the_exact_form_ranks_above_a_stem_only_match() {
    let e = engine(vec![
        tool("x", "alpha", "Lists documents quickly"),
        tool("y", "bravo", "Lists document quickly"),
    ]);
    let plural = search(&e, "documents");
    assert_eq!(names(&plural), vec!["alpha", "bravo"]);
    assert!(plural.tools[0].score > plural.tools[1].score);
    let singular = search(&e, "document");
    assert_eq!(names(&singular), vec!["bravo", "alpha"]);
    assert!(singular.tools[0].score > singular.tools[1].score);
}

#[test]
fn stopwords_are_dropped_from_queries_and_descriptions() {
    let e = engine(vec![
        tool("w", "get_weather", "Weather forecast"),
        tool("n", "notes", "The the of the notes"),
    ]);
    assert_eq!(found(&e, "the weather"), vec!["get_weather"]);
    // A query of nothing but stopwords still searches for them, and matches nothing here.
    assert_eq!(search(&e, "the of").tools.len(), 0);
}

// ---------------------------------------------------------------------------------------------
// The query language
// ---------------------------------------------------------------------------------------------

fn set(names: Vec<String>) -> HashSet<String> {
    names.into_iter().collect()
}

fn set_of(names: &[&str]) -> HashSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn words_are_ored() {
    let e = engine(mixed_catalog());
    assert_eq!(
        set(found(&e, "inbox city")),
        set_of(&["read_email", "get_weather"])
    );
    assert_eq!(
        set(found(&e, "inbox OR city")),
        set_of(&["read_email", "get_weather"])
    );
}

#[test]
fn and_keeps_only_tools_with_every_term() {
    let e = engine(mixed_catalog());
    assert_eq!(found(&e, "send AND email"), vec!["send_email"]);
    assert_eq!(found(&e, "read AND path"), vec!["read_file"]);
    assert!(set(found(&e, "send email")).contains("send_sms"));
    let none = search(&e, "inbox AND city");
    assert_eq!(none.total_matches, 0);
    assert!(none.fallback.is_some());
}

#[test]
fn a_phrase_needs_adjacent_words() {
    let e = engine(mixed_catalog());
    // open_log has "read" and "file", but not next to each other.
    assert!(set(found(&e, "read file")).contains("open_log"));
    assert_eq!(found(&e, "\"read file\""), vec!["read_file"]);
    assert_eq!(found(&e, "\"file read\"").len(), 0);
}

#[test]
fn a_prefix_matches_words_that_start_with_it() {
    let e = engine(mixed_catalog());
    assert_eq!(found(&e, "weath*"), vec!["get_weather"]);
    assert_eq!(
        set(found(&e, "name:sen*")),
        set_of(&["send_email", "send_sms"])
    );
}

#[test]
fn field_scopes_restrict_the_match() {
    let e = engine(mixed_catalog());
    // "inbox" is in read_email's description (and tags), never in a name.
    assert_eq!(found(&e, "description:inbox"), vec!["read_email"]);
    let by_name = search(&e, "name:inbox");
    assert_eq!(by_name.total_matches, 0, "got {:?}", names(&by_name));
    assert_eq!(found(&e, "name:weather"), vec!["get_weather"]);
    assert_eq!(found(&e, "server:phone"), vec!["send_sms"]);
    assert_eq!(
        set(found(&e, "category:storage")),
        set_of(&["read_file", "open_log"])
    );
    assert_eq!(found(&e, "tags:urgent"), vec!["send_email"]);
    assert_eq!(found(&e, "params:subject"), vec!["send_email"]);
    assert_eq!(search(&e, "description:subject").total_matches, 0);
    // A scoped word does not match the same word in another field.
    assert_eq!(search(&e, "tags:conditions").total_matches, 0);
    assert_eq!(found(&e, "description:conditions"), vec!["get_weather"]);
}

#[test]
fn parentheses_group() {
    let e = engine(mixed_catalog());
    assert_eq!(
        set(found(&e, "(send OR read) AND email")),
        set_of(&["send_email", "read_email"])
    );
    assert_eq!(
        set(found(&e, "email AND (inbox OR recipient)")),
        set_of(&["send_email", "read_email"])
    );
    assert_eq!(found(&e, "(phone AND number)"), vec!["send_sms"]);
}

#[test]
fn broken_syntax_is_searched_as_plain_words() {
    let e = engine(mixed_catalog());
    for query in [
        "\"unclosed inbox",
        "(inbox",
        "inbox)",
        "inbox AND",
        "OR inbox",
        "inbox**",
    ] {
        let response = e
            .search(&SearchRequest::new(query))
            .unwrap_or_else(|err| panic!("{query:?} is an error: {err}"));
        assert_eq!(
            names(&response).first().map(String::as_str),
            Some("read_email"),
            "{query:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Regex mode
// ---------------------------------------------------------------------------------------------

fn regex(engine: &SearchEngine, pattern: &str) -> Result<Vec<String>, Error> {
    engine
        .search(
            &SearchRequest::new(pattern)
                .mode(SearchMode::Regex)
                .limit(100),
        )
        .map(|r| names(&r))
}

#[test]
fn regex_matches_names_descriptions_and_arguments() {
    let e = engine(mixed_catalog());
    assert_eq!(
        set(regex(&e, "^send_").unwrap()),
        set_of(&["send_email", "send_sms"])
    );
    assert_eq!(regex(&e, "inbox$").unwrap(), vec!["read_email"]);
    // Only an argument name.
    assert_eq!(regex(&e, "^subject$").unwrap(), vec!["send_email"]);
    // Only an argument description.
    assert_eq!(regex(&e, "mailbox").unwrap(), vec!["read_email"]);
    // A name match outranks a description-only match.
    let hits = regex(&e, "weather|conditions").unwrap();
    assert_eq!(hits, vec!["get_weather"]);
    let ranked = regex(&e, "email|recipient").unwrap();
    assert_eq!(set(ranked.clone()), set_of(&["send_email", "read_email"]));
}

#[test]
fn regex_is_case_insensitive() {
    let e = engine(mixed_catalog());
    assert_eq!(regex(&e, "SEND_EMAIL").unwrap(), vec!["send_email"]);
    assert_eq!(regex(&e, "InBoX").unwrap(), vec!["read_email"]);
}

#[test]
fn a_bad_regex_names_the_problem() {
    let e = engine(mixed_catalog());
    match regex(&e, "(") {
        Err(err @ Error::InvalidRegex { .. }) => {
            let text = err.to_string();
            assert!(text.contains("unclosed group"), "{text}");
            assert!(text.contains('('), "{text}");
            assert!(err.is_bad_input());
        }
        other => panic!("expected InvalidRegex, got {other:?}"),
    }
}

#[test]
fn regex_length_and_compiled_size_are_limited() {
    let e = engine(mixed_catalog());
    let long = "a".repeat(201);
    match regex(&e, &long) {
        Err(Error::QueryTooLong { len, max, mode }) => {
            assert_eq!((len, max, mode), (201, 200, "regex"));
        }
        other => panic!("expected QueryTooLong, got {other:?}"),
    }
    assert!(regex(&e, &"a".repeat(200)).is_ok());
    match regex(&e, r"\w{1000}\w{1000}\w{1000}") {
        Err(err @ Error::InvalidRegex { .. }) => {
            assert!(err.to_string().contains("size limit"), "{err}");
        }
        other => panic!("expected InvalidRegex for a huge regex, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Exact mode and the exact-name bonus
// ---------------------------------------------------------------------------------------------

/// `find` on two servers, and a tool that says "find" far more often.
fn find_catalog() -> SearchEngine {
    engine(vec![
        tool(
            "db",
            "find",
            "Locate records stored in the primary relational database cluster by key",
        ),
        tool("web", "find", "Locate pages"),
        tool(
            "fs",
            "a_find_files",
            "Find files: find by name, find by glob",
        )
        .with_tags(["find"])
        .with_schema(schema(&[("find_pattern", "What to find")])),
    ])
}

#[test]
fn exact_mode_matches_the_name_only() {
    let e = find_catalog();
    let exact = |q: &str| {
        run(
            &e,
            &SearchRequest::new(q).mode(SearchMode::Exact).limit(100),
        )
    };
    let r = exact("find");
    assert_eq!(ids(&r), vec!["db/find", "web/find"]);
    assert!(r.tools.iter().all(|h| h.score == 1.0));
    assert_eq!(ids(&exact("web___find")), vec!["web/find"]);
    assert_eq!(ids(&exact("A_FIND_FILES")), vec!["fs/a_find_files"]);
    let none = exact("files");
    assert_eq!(none.total_matches, 0);
    assert!(none.tools.is_empty());
    assert!(matches!(none.fallback, Some(Fallback::Names { .. })));
}

#[test]
fn the_exact_name_ranks_first_in_all_four_spellings() {
    let e = find_catalog();
    // On words alone, the tool that repeats "find" wins.
    let words_only = search(&e, "find!");
    assert_eq!(ids(&words_only)[0], "fs/a_find_files");
    assert!(words_only.tools.iter().all(|h| h.score < 1.0));
    for query in ["find", "\"find\"", "`find`", "db___find"] {
        let r = search(&e, query);
        assert_eq!(ids(&r)[0], "db/find", "{query}");
        assert_eq!(r.tools[0].score, 1.0, "{query}");
        assert!(ids(&r).contains(&"fs/a_find_files".to_string()), "{query}");
    }
    let r = search(&e, "web___find");
    assert_eq!(ids(&r)[0], "web/find");
    let db = r.tools.iter().find(|h| h.tool.server() == "db").unwrap();
    assert!(db.score < 1.0, "only the named server's tool is exact");
    // The bonus also applies in regex mode.
    let r = run(&e, &SearchRequest::new("find").mode(SearchMode::Regex));
    assert_eq!(&ids(&r)[..2], ["db/find", "web/find"]);
}

// ---------------------------------------------------------------------------------------------
// Fuzzy matching
// ---------------------------------------------------------------------------------------------

/// `tools` with fuzzy matching on (it is off by default; docs/EVAL.md, "Ablation").
fn fuzzy_engine(tools: Vec<Tool>) -> SearchEngine {
    let mut config = SearchConfig::default();
    config.set("fuzzy", "true").unwrap();
    SearchEngine::from_catalog(toolsearch_core::Catalog::from_tools(tools).unwrap(), config)
        .unwrap()
}

#[test]
fn typos_and_abbreviations_still_find_the_tool() {
    let e = fuzzy_engine(vec![
        tool("w", "get_weather", "Current conditions for a city"),
        tool("c", "send_message", "Post a chat message to a channel"),
        tool("m", "send_email", "Deliver an email to an address"),
        tool("f", "read_file", "Read a file from disk"),
    ]);
    assert_eq!(
        found(&e, "wether").first().map(String::as_str),
        Some("get_weather")
    );
    let msg = found(&e, "send msg");
    assert_eq!(
        msg.first().map(String::as_str),
        Some("send_message"),
        "{msg:?}"
    );
    let email = position(&msg, "send_email");
    assert!(email.is_none_or(|p| p > 0));
}

#[test]
fn a_nonsense_word_returns_the_fallback() {
    let e = engine(mixed_catalog());
    let r = search(&e, "xqzvbnmk");
    assert_eq!(r.total_matches, 0);
    assert!(r.tools.is_empty());
    match r.fallback {
        Some(Fallback::Names { names }) => {
            assert_eq!(
                names,
                vec![
                    "files___open_log",
                    "files___read_file",
                    "mail___read_email",
                    "mail___send_email",
                    "phone___send_sms",
                    "weather___get_weather",
                ]
            );
        }
        other => panic!("expected the names fallback, got {other:?}"),
    }
}

#[test]
fn fuzzy_matching_can_be_turned_off() {
    let tools = vec![tool("w", "get_weather", "Current conditions for a city")];
    let mut config = SearchConfig::default();
    config.set("fuzzy", "false").unwrap();
    let e =
        SearchEngine::from_catalog(toolsearch_core::Catalog::from_tools(tools).unwrap(), config)
            .unwrap();
    assert_eq!(search(&e, "wether").total_matches, 0);
    assert_eq!(found(&e, "weather"), vec!["get_weather"]);
}

// ---------------------------------------------------------------------------------------------
// Filters
// ---------------------------------------------------------------------------------------------

fn filtered(engine: &SearchEngine, query: &str, filters: Filters) -> HashSet<String> {
    set(names(&run(
        engine,
        &SearchRequest::new(query).limit(100).filters(filters),
    )))
}

/// Every tool of the mixed catalog mentions one of these words.
const EVERYTHING: &str = "email text file log conditions";

#[test]
fn every_tool_matches_the_everything_query() {
    let e = engine(mixed_catalog());
    assert_eq!(search(&e, EVERYTHING).total_matches, 6);
}

#[test]
fn server_filter() {
    let e = engine(mixed_catalog());
    let f = Filters {
        servers: vec!["mail".into()],
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, f.clone()),
        set_of(&["send_email", "read_email"])
    );
    assert_eq!(filtered(&e, "", f), set_of(&["send_email", "read_email"]));
    let two = Filters {
        servers: vec!["mail".into(), "phone".into()],
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, two),
        set_of(&["send_email", "read_email", "send_sms"])
    );
}

#[test]
fn category_filter_ignores_case() {
    let e = engine(mixed_catalog());
    for category in ["Storage", "storage", "STORAGE"] {
        let f = Filters {
            categories: vec![category.into()],
            ..Default::default()
        };
        assert_eq!(
            filtered(&e, EVERYTHING, f),
            set_of(&["read_file", "open_log"]),
            "{category}"
        );
    }
}

#[test]
fn tag_filter_takes_any_of_the_tags() {
    let e = engine(mixed_catalog());
    let f = Filters {
        tags: vec!["audit".into(), "URGENT".into()],
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, f),
        set_of(&["open_log", "send_email"])
    );
}

#[test]
fn visible_set_is_an_allowlist() {
    let e = engine(mixed_catalog());
    let visible: HashSet<ToolId> = [
        ToolId::new("mail", "read_email"),
        ToolId::new("weather", "get_weather"),
        ToolId::new("phone", "read_email"),
    ]
    .into();
    let f = Filters {
        visible: Some(visible),
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, f.clone()),
        set_of(&["read_email", "get_weather"])
    );
    assert_eq!(filtered(&e, "", f), set_of(&["read_email", "get_weather"]));
    let nothing = Filters {
        visible: Some(HashSet::new()),
        ..Default::default()
    };
    assert!(filtered(&e, EVERYTHING, nothing).is_empty());
}

#[test]
fn name_patterns() {
    let e = engine(mixed_catalog());
    let with = |patterns: &[&str]| Filters {
        patterns: patterns.iter().map(|p| NamePattern::parse(p)).collect(),
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, with(&["files:*"])),
        set_of(&["read_file", "open_log"])
    );
    assert_eq!(
        filtered(&e, EVERYTHING, with(&["mail:read_email"])),
        set_of(&["read_email"])
    );
    assert_eq!(
        filtered(&e, EVERYTHING, with(&["read_*"])),
        set_of(&["read_email", "read_file"])
    );
    assert_eq!(
        filtered(&e, EVERYTHING, with(&["phone:*", "weather:get_weather"])),
        set_of(&["send_sms", "get_weather"])
    );
    assert!(filtered(&e, EVERYTHING, with(&["mail:read_file"])).is_empty());
}

#[test]
fn filters_combine_with_and() {
    let e = engine(mixed_catalog());
    let f = Filters {
        categories: vec!["communication".into()],
        tags: vec!["inbox".into(), "mobile".into()],
        ..Default::default()
    };
    assert_eq!(
        filtered(&e, EVERYTHING, f),
        set_of(&["read_email", "send_sms"])
    );
    let f = Filters {
        servers: vec!["mail".into()],
        tags: vec!["mobile".into()],
        ..Default::default()
    };
    assert!(filtered(&e, EVERYTHING, f).is_empty());
    let f = Filters {
        servers: vec!["files".into()],
        patterns: vec![NamePattern::parse("*:open_*")],
        tags: vec!["disk".into()],
        ..Default::default()
    };
    assert_eq!(filtered(&e, EVERYTHING, f), set_of(&["open_log"]));
}

#[test]
fn a_miss_under_filters_offers_only_the_filtered_names() {
    let e = engine(mixed_catalog());
    let r = run(
        &e,
        &SearchRequest::new("inbox").filters(Filters {
            servers: vec!["files".into()],
            ..Default::default()
        }),
    );
    assert_eq!(r.total_matches, 0);
    assert_eq!(
        r.fallback,
        Some(Fallback::Names {
            names: vec!["files___open_log".into(), "files___read_file".into()]
        })
    );
}

// ---------------------------------------------------------------------------------------------
// The pipeline
// ---------------------------------------------------------------------------------------------

fn scored(engine: &SearchEngine, request: &SearchRequest) -> Vec<(String, f32)> {
    run(engine, request)
        .tools
        .iter()
        .map(|h| (h.tool.name().to_owned(), h.score))
        .collect()
}

#[test]
fn scores_are_normalised_to_0_1() {
    let e = fuzzy_engine(mixed_catalog());
    for query in [
        EVERYTHING,
        "send email",
        "read",
        "wether",
        "weath*",
        "\"read file\"",
        "send_email",
        "email AND send",
        "a very long request to send an email message to my colleague about the weather",
    ] {
        let r = search(&e, query);
        assert!(!r.tools.is_empty(), "{query}");
        for hit in &r.tools {
            assert!(
                (0.0..=1.0).contains(&hit.score),
                "{query}: {} scored {}",
                hit.tool.name(),
                hit.score
            );
        }
    }
}

#[test]
fn threshold_drops_low_normalised_scores() {
    let e = engine(mixed_catalog());
    let all = scored(&e, &SearchRequest::new(EVERYTHING).limit(100));
    let best = all[0].1;
    let worst = all[all.len() - 1].1;
    assert!(best > worst, "need distinct scores: {all:?}");
    let threshold = (best + worst) / 2.0;
    let kept = scored(
        &e,
        &SearchRequest::new(EVERYTHING)
            .limit(100)
            .threshold(threshold),
    );
    let expected: Vec<_> = all
        .iter()
        .filter(|(_, s)| *s >= threshold)
        .cloned()
        .collect();
    assert_eq!(kept, expected);
    assert!(!kept.is_empty() && kept.len() < all.len());
    let r = run(
        &e,
        &SearchRequest::new(EVERYTHING)
            .limit(100)
            .threshold(threshold),
    );
    assert_eq!(r.total_matches, kept.len());
    // Default threshold 0 keeps everything.
    assert_eq!(search(&e, EVERYTHING).total_matches, all.len());
}

#[test]
fn threshold_from_the_config() {
    let tools = mixed_catalog();
    let plain = engine(tools.clone());
    let all = scored(&plain, &SearchRequest::new(EVERYTHING).limit(100));
    let mut config = SearchConfig::default();
    config.set("threshold", "0.99").unwrap();
    let strict =
        SearchEngine::from_catalog(toolsearch_core::Catalog::from_tools(tools).unwrap(), config)
            .unwrap();
    let kept = scored(&strict, &SearchRequest::new(EVERYTHING).limit(100));
    let expected: Vec<_> = all.into_iter().filter(|(_, s)| *s >= 0.99).collect();
    assert_eq!(kept, expected);
}

#[test]
fn top_band_keeps_scores_near_the_best() {
    let e = engine(mixed_catalog());
    let all = scored(&e, &SearchRequest::new(EVERYTHING).limit(100));
    let best = all[0].1;
    for band in [0.3_f32, 0.6, 0.9, 1.0] {
        let kept = scored(
            &e,
            &SearchRequest::new(EVERYTHING).limit(100).top_band(band),
        );
        let expected: Vec<_> = all
            .iter()
            .filter(|(_, s)| *s >= best * band)
            .cloned()
            .collect();
        assert_eq!(kept, expected, "band {band}");
        assert_eq!(kept[0].0, all[0].0);
    }
    let narrow = scored(&e, &SearchRequest::new(EVERYTHING).limit(100).top_band(0.9));
    assert!(narrow.len() < all.len(), "{all:?}");
}

#[test]
fn limit_and_offset_paginate_and_total_counts_before_the_cap() {
    let e = engine(mixed_catalog());
    let all = names(&search(&e, EVERYTHING));
    assert_eq!(all.len(), 6);
    let page = |offset: usize| run(&e, &SearchRequest::new(EVERYTHING).limit(4).offset(offset));
    let first = page(0);
    let second = page(4);
    let beyond = page(10);
    assert_eq!(first.total_matches, 6);
    assert_eq!(second.total_matches, 6);
    assert_eq!(beyond.total_matches, 6);
    assert_eq!(names(&first), all[..4]);
    assert_eq!(names(&second), all[4..]);
    assert!(beyond.tools.is_empty());
    assert!(
        beyond.fallback.is_none(),
        "a page past the end is not a miss"
    );
    let none = run(&e, &SearchRequest::new(EVERYTHING).limit(0));
    assert!(none.tools.is_empty());
    assert_eq!(none.total_matches, 6);
}

#[test]
fn results_are_deterministic_and_ties_break_by_name() {
    let e = engine(vec![
        tool("s", "zeta", "Convert currency amounts"),
        tool("s", "alpha", "Convert currency amounts"),
        tool("s", "mike", "Convert currency amounts"),
        tool("s", "other", "Unrelated words entirely"),
    ]);
    let r = search(&e, "currency");
    assert_eq!(names(&r), vec!["alpha", "mike", "zeta"]);
    assert_eq!(r.tools[0].score, r.tools[2].score);
    let e = engine(mixed_catalog());
    for query in [EVERYTHING, "send email", "read"] {
        let a = scored(&e, &SearchRequest::new(query).limit(100));
        let b = scored(&e, &SearchRequest::new(query).limit(100));
        assert_eq!(a, b, "{query}");
    }
    // The same catalog built in another order ranks the same way.
    let mut reversed = mixed_catalog();
    reversed.reverse();
    let r = engine(reversed);
    assert_eq!(
        scored(&e, &SearchRequest::new(EVERYTHING).limit(100)),
        scored(&r, &SearchRequest::new(EVERYTHING).limit(100))
    );
}

#[test]
fn same_names_on_two_servers_tie_by_server() {
    let e = engine(vec![
        tool("b", "lookup", "Translate currency"),
        tool("a", "lookup", "Translate currency"),
    ]);
    assert_eq!(ids(&search(&e, "currency")), vec!["a/lookup", "b/lookup"]);
}

fn generated(
    count: usize,
    category: impl Fn(usize) -> Option<String>,
    servers: usize,
) -> Vec<Tool> {
    (0..count)
        .map(|i| {
            let mut t = tool(
                &format!("srv{}", i % servers),
                &format!("tool_{i:03}"),
                "Generated entry",
            );
            t.set_category(category(i));
            t
        })
        .collect()
}

#[test]
fn a_miss_in_a_small_catalog_lists_every_name() {
    let e = engine(generated(200, |i| Some(format!("cat{}", i % 3)), 2));
    match search(&e, "xqzvbnmk").fallback {
        Some(Fallback::Names { names }) => {
            assert_eq!(names.len(), 200);
            assert_eq!(names[0], "srv0___tool_000");
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted);
        }
        other => panic!("expected names, got {other:?}"),
    }
}

#[test]
fn a_miss_in_a_large_catalog_lists_categories_with_counts() {
    let e = engine(generated(201, |i| Some(format!("cat{}", i % 3)), 2));
    let r = search(&e, "xqzvbnmk");
    assert!(r.tools.is_empty());
    match r.fallback {
        Some(Fallback::Categories { categories }) => {
            let counts: Vec<(String, usize)> =
                categories.into_iter().map(|c| (c.name, c.count)).collect();
            assert_eq!(
                counts,
                vec![
                    ("cat0".to_string(), 67),
                    ("cat1".to_string(), 67),
                    ("cat2".to_string(), 67)
                ]
            );
        }
        other => panic!("expected categories, got {other:?}"),
    }
}

#[test]
fn a_miss_in_a_large_catalog_without_categories_lists_servers() {
    let e = engine(generated(201, |_| None, 3));
    match search(&e, "xqzvbnmk").fallback {
        Some(Fallback::Servers { servers }) => {
            let total: usize = servers.iter().map(|s| s.count).sum();
            assert_eq!(total, 201);
            assert_eq!(servers.len(), 3);
        }
        other => panic!("expected servers, got {other:?}"),
    }
    let single = engine(generated(201, |_| None, 1));
    match search(&single, "xqzvbnmk").fallback {
        Some(Fallback::Names { names }) => assert_eq!(names.len(), 200),
        other => panic!("expected capped names, got {other:?}"),
    }
}

#[test]
fn an_empty_query_browses_by_server_then_name() {
    let e = engine(mixed_catalog());
    let browse = |offset: usize, limit: usize| {
        run(&e, &SearchRequest::new("  ").limit(limit).offset(offset))
    };
    let all = browse(0, 100);
    assert_eq!(
        ids(&all),
        vec![
            "files/open_log",
            "files/read_file",
            "mail/read_email",
            "mail/send_email",
            "phone/send_sms",
            "weather/get_weather",
        ]
    );
    assert_eq!(all.total_matches, 6);
    assert!(all.fallback.is_none());
    assert!(all.tools.iter().all(|h| h.matched_on.is_empty()));
    let first = browse(0, 4);
    let second = browse(4, 4);
    assert_eq!(first.total_matches, 6);
    assert_eq!(ids(&first), ids(&all)[..4]);
    assert_eq!(ids(&second), ids(&all)[4..]);
}

#[test]
fn a_long_keyword_query_is_refused() {
    let e = engine(mixed_catalog());
    let long = "word ".repeat(8000);
    match e.search(&SearchRequest::new(long)) {
        Err(Error::QueryTooLong { mode, max, .. }) => {
            assert_eq!(mode, "keyword");
            assert_eq!(max, SearchConfig::default().max_query_chars);
        }
        other => panic!("expected QueryTooLong, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Incremental updates
// ---------------------------------------------------------------------------------------------

#[test]
fn replace_server_updates_the_index() {
    let mut e = engine(vec![
        tool("alpha", "old_widget", "Polish the brass widget"),
        tool("alpha", "keep_lantern", "Tune the lantern"),
        tool("beta", "beta_widget", "Paint the widget"),
        tool("beta", "beta_lantern", "Build the lantern"),
    ]);
    let before_beta = names(&search(&e, "lantern"))
        .into_iter()
        .filter(|n| n.starts_with("beta"))
        .collect::<Vec<_>>();
    e.replace_server(
        "alpha",
        vec![tool("ignored", "new_sprocket", "Oil the sprocket")],
    )
    .unwrap();
    assert!(search(&e, "brass").tools.is_empty());
    let old = run(
        &e,
        &SearchRequest::new("old_widget").mode(SearchMode::Exact),
    );
    assert!(old.tools.is_empty());
    assert_eq!(found(&e, "sprocket"), vec!["new_sprocket"]);
    assert_eq!(search(&e, "sprocket").tools[0].tool.server(), "alpha");
    assert_eq!(found(&e, "widget"), vec!["beta_widget"]);
    assert_eq!(found(&e, "lantern"), before_beta);
    assert_eq!(e.catalog().len(), 3);
    assert_eq!(search(&e, "").total_matches, 3);
    // Exact names follow the replacement too.
    let exact = run(
        &e,
        &SearchRequest::new("keep_lantern").mode(SearchMode::Exact),
    );
    assert!(exact.tools.is_empty());

    // A new server can be added the same way.
    e.replace_server("gamma", vec![tool("", "gamma_widget", "Wrap the widget")])
        .unwrap();
    assert_eq!(
        set(found(&e, "widget")),
        set_of(&["beta_widget", "gamma_widget"])
    );

    e.remove_server("beta").unwrap();
    assert_eq!(found(&e, "widget"), vec!["gamma_widget"]);
    assert!(search(&e, "lantern").tools.is_empty());
    assert_eq!(found(&e, "sprocket"), vec!["new_sprocket"]);
    assert_eq!(search(&e, "").total_matches, 2);
    // Removing an unknown server is a no-op.
    e.remove_server("nope").unwrap();
    assert_eq!(e.catalog().len(), 2);
}

#[test]
fn many_replacements_keep_the_index_consistent() {
    let mut e = engine(vec![tool("stable", "anchor_tool", "Holds the fort")]);
    for round in 0..20 {
        e.replace_server(
            "churn",
            vec![tool(
                "",
                &format!("item_{round}"),
                &format!("Round marker{round}"),
            )],
        )
        .unwrap();
    }
    assert_eq!(found(&e, "marker19"), vec!["item_19"]);
    assert!(search(&e, "marker3")
        .tools
        .iter()
        .all(|h| h.tool.name() == "item_19"));
    assert_eq!(found(&e, "fort"), vec!["anchor_tool"]);
    assert_eq!(search(&e, "").total_matches, 2);
}

#[test]
fn a_rejected_replacement_leaves_the_server_alone() {
    let mut e = engine(vec![tool("alpha", "old_widget", "Polish the brass widget")]);
    let err = e
        .replace_server(
            "alpha",
            vec![tool("", "dup", "One"), tool("", "dup", "Two")],
        )
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateTool { .. }), "{err:?}");
    assert_eq!(found(&e, "brass"), vec!["old_widget"]);
}

// ---------------------------------------------------------------------------------------------
// matched_on
// ---------------------------------------------------------------------------------------------

fn matched(field: &'static str, terms: &[&str]) -> MatchedOn {
    MatchedOn {
        field,
        terms: terms.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn matched_on_names_fields_and_terms() {
    let e = fuzzy_engine(vec![
        tool("weather", "get_weather", "Current weather for a city")
            .with_category("Data")
            .with_tags(["forecast"])
            .with_schema(schema(&[("city", "Name of the town")])),
        tool("misc", "other", "Nothing alike"),
    ]);
    let r = search(&e, "weather forecast town");
    let hit = &r.tools[0];
    assert_eq!(hit.tool.name(), "get_weather");
    assert!(
        hit.matched_on.contains(&matched("name", &["weather"])),
        "{:?}",
        hit.matched_on
    );
    assert!(hit
        .matched_on
        .contains(&matched("description", &["weather"])));
    assert!(hit.matched_on.contains(&matched("server", &["weather"])));
    assert!(hit.matched_on.contains(&matched("tags", &["forecast"])));
    assert!(hit
        .matched_on
        .contains(&matched("parameter_descriptions", &["town"])));
    assert!(!hit.matched_on.iter().any(|m| m.field == "category"));

    let r = search(&e, "city");
    assert!(r.tools[0]
        .matched_on
        .iter()
        .any(|m| m.field == "parameters" && m.terms == ["city"]));

    let r = search(&e, "weath*");
    assert!(
        r.tools[0]
            .matched_on
            .iter()
            .any(|m| m.field == "name" && m.terms == ["weath*"]),
        "{:?}",
        r.tools[0].matched_on
    );

    let r = search(&e, "wether");
    assert!(
        r.tools[0]
            .matched_on
            .iter()
            .any(|m| m.field == "name" && m.terms == ["wether~weather"]),
        "{:?}",
        r.tools[0].matched_on
    );

    let r = search(&e, "get_weather");
    assert_eq!(
        r.tools[0].matched_on,
        vec![matched("name", &["get_weather"])]
    );

    let r = run(
        &e,
        &SearchRequest::new("^town$|^get_").mode(SearchMode::Regex),
    );
    let fields: Vec<&str> = r.tools[0].matched_on.iter().map(|m| m.field).collect();
    assert_eq!(fields, vec!["name"]);
    let r = run(&e, &SearchRequest::new("town").mode(SearchMode::Regex));
    assert_eq!(
        r.tools[0].matched_on,
        vec![matched("parameters", &["town"])]
    );
}

// ---------------------------------------------------------------------------------------------
// Posting-list walks
// ---------------------------------------------------------------------------------------------

/// The second word's first tool comes after the first word's first tool in the index.
fn staggered() -> SearchEngine {
    engine(vec![
        tool("s", "first", "apple pie"),
        tool("s", "second", "apple banana split"),
        tool("s", "third", "banana apple bread"),
    ])
}

#[test]
fn two_word_queries_over_staggered_postings() {
    let e = staggered();
    let hits = found(&e, "apple banana");
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert_eq!(hits[0], "second", "the adjacent pair ranks first: {hits:?}");
}

#[test]
fn phrases_over_staggered_postings() {
    let e = staggered();
    assert_eq!(found(&e, "\"apple banana\""), vec!["second"]);
    assert_eq!(found(&e, "\"banana apple\""), vec!["third"]);
}

// ---------------------------------------------------------------------------------------------
// Normalisation
// ---------------------------------------------------------------------------------------------

#[test]
fn a_stronger_match_is_not_tied_with_a_weaker_one() {
    let tools = vec![
        tool(
            "db",
            "find",
            "Locate records stored in the primary relational database cluster by key",
        ),
        tool(
            "fs",
            "z_find_files",
            "Find files: find by name, find by glob",
        )
        .with_tags(["find"])
        .with_schema(schema(&[("find_pattern", "What to find")])),
    ];
    // Without the server and name bonuses, the tool that says "find" everywhere wins on words.
    let mut config = SearchConfig::default();
    config.set("server_aggregation", "0").unwrap();
    config.set("name_coverage", "0").unwrap();
    let plain = SearchEngine::from_catalog(
        toolsearch_core::Catalog::from_tools(tools.clone()).unwrap(),
        config,
    )
    .unwrap();
    let r = search(&plain, "find!");
    assert_eq!(names(&r), vec!["z_find_files", "find"]);
    assert!(r.tools[0].score > r.tools[1].score);
    // The bonuses may reorder, but must not turn a score difference into a tie at the cap.
    let r = search(&engine(tools), "find!");
    assert!(
        r.tools[0].score > r.tools[1].score,
        "{:?}",
        r.tools
            .iter()
            .map(|h| (h.tool.name(), h.score))
            .collect::<Vec<_>>()
    );
}
