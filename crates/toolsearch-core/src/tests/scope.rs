//! Scopes: a caller limited to some tools finds, lists, counts, is offered and calls only those,
//! through the search contract, the engine and the disclosure alike; a tool outside its scope
//! answers as an unknown tool.

use super::disclosure_common;

use std::sync::Arc;

use disclosure_common::{engine, names, names_with, tools};
use serde_json::{json, Value};
use toolsearch_core::contract::{self, CategoryArgs, SearchArgs, SearchOptions};
use toolsearch_core::disclosure::Caller;
use toolsearch_core::{
    error_result, Disclosure, DisclosureConfig, Dispatch, Error, Exposure, Fallback, NamePattern,
    OneOrMany, Preset, Scope, SearchEngine, SearchMode, ServerStatus, Tool,
};

fn scope_of(patterns: &[&str]) -> Scope {
    Scope::only(patterns.iter().map(|p| NamePattern::parse(p)))
}

/// Five tools: one of `files`, the four of `github`.
fn files_and_github() -> Scope {
    scope_of(&["files:read_*", "github___*"])
}

fn options(scope: &Scope) -> SearchOptions {
    SearchOptions {
        scope: scope.clone(),
        ..SearchOptions::default()
    }
}

fn names_of(results: &contract::SearchResults) -> Vec<&str> {
    results.page.tools.iter().map(|t| t.name.as_str()).collect()
}

/// Every public name of the catalog outside `scope`.
fn outside(engine: &SearchEngine, scope: &Scope) -> Vec<String> {
    engine
        .catalog()
        .tools()
        .filter(|t| !scope.allows_tool(t, engine.naming()))
        .map(|t| engine.naming().tool_name(t))
        .collect()
}

/// Fails when `text` names any tool outside `scope` (by public or bare name) or one of its
/// servers that has no tool in scope.
fn assert_mentions_none_outside(engine: &SearchEngine, scope: &Scope, text: &str) {
    for tool in engine.catalog().tools() {
        if scope.allows_tool(tool, engine.naming()) {
            continue;
        }
        assert!(
            !text.contains(tool.name()),
            "`{}` is outside the scope but appears in: {text}",
            tool.name()
        );
    }
}

#[test]
fn a_scoped_search_finds_counts_and_falls_back_only_in_scope() {
    let engine = engine();
    let scope = files_and_github();
    let search = |args: SearchArgs| contract::search(&engine, &args, &options(&scope)).unwrap();

    // Unscoped, "file" finds the four file tools; in scope, only read_file.
    let all =
        contract::search(&engine, &SearchArgs::new("file"), &SearchOptions::default()).unwrap();
    assert!(all.page.total_matches >= 4, "{all:?}");
    let found = search(SearchArgs::new("file"));
    assert_eq!(names_of(&found), ["files___read_file"]);
    assert_eq!(found.page.total_matches, 1);

    // An out-of-scope exact name is not found, and the fallback lists only tools in scope.
    for mode in [SearchMode::Exact, SearchMode::Keyword] {
        let none = search(SearchArgs {
            mode: Some(mode),
            ..SearchArgs::new("weather___get_weather")
        });
        assert_eq!(none.page.total_matches, 0, "{none:?}");
        match none.fallback {
            Some(Fallback::Names { names }) => assert_eq!(
                names,
                [
                    "files___read_file",
                    "github___create_issue",
                    "github___create_pull_request",
                    "github___list_issues",
                    "github___merge_pull_request"
                ]
            ),
            other => panic!("expected the names in scope, got {other:?}"),
        }
    }
    // Regex and browsing see the scope too.
    let regex = search(SearchArgs {
        mode: Some(SearchMode::Regex),
        limit: Some(50),
        ..SearchArgs::new(".")
    });
    assert_eq!(regex.page.total_matches, 5, "{regex:?}");
    let browse = search(SearchArgs {
        server: OneOrMany(vec!["weather".to_string()]),
        ..SearchArgs::default()
    });
    assert_eq!(browse.page.total_matches, 0);
    let json = serde_json::to_string(&search(SearchArgs::new("weather forecast"))).unwrap();
    assert_mentions_none_outside(&engine, &scope, &json);
}

#[test]
fn scores_in_a_scope_do_not_depend_on_tools_outside_it() {
    let engine = engine();
    // When the best tool is in scope, the scores are those of the unscoped search.
    let all = contract::search(
        &engine,
        &SearchArgs::new("pull request"),
        &SearchOptions::default(),
    )
    .unwrap();
    let scoped = contract::search(
        &engine,
        &SearchArgs::new("pull request"),
        &options(&scope_of(&["github:*"])),
    )
    .unwrap();
    assert_eq!(all.page.tools[0].name, scoped.page.tools[0].name);
    assert_eq!(all.page.tools[0].score, scoped.page.tools[0].score);
    // When it is not, the best tool in scope scores as the best does: "read" matches read_file
    // best, and Slack's read_messages is not pushed under the threshold by it.
    let slack = contract::search(
        &engine,
        &SearchArgs::new("read file"),
        &options(&scope_of(&["slack:*"])),
    )
    .unwrap();
    assert_eq!(names_of(&slack)[0], "slack___read_messages", "{slack:?}");
    let best = contract::search(
        &engine,
        &SearchArgs::new("read file"),
        &SearchOptions::default(),
    )
    .unwrap();
    assert_eq!(best.page.tools[0].name, "files___read_file");
    assert_eq!(slack.page.tools[0].score, best.page.tools[0].score);
}

#[test]
fn categories_count_only_tools_in_scope() {
    let engine = engine();
    let scope = files_and_github();
    let listed = contract::list_categories(&engine, &scope);
    let counts: Vec<(&str, usize)> = listed
        .categories
        .iter()
        .map(|c| (c.id.as_str(), c.tool_count))
        .collect();
    assert_eq!(counts, [("Development", 4), ("Files", 1)]);
    // Unscoped, every category with every tool.
    let all = contract::list_categories(&engine, &Scope::all());
    assert_eq!(all.categories.len(), 5);

    let by_category = |category: &str| {
        contract::tools_by_category(
            &engine,
            &CategoryArgs {
                category: category.into(),
                ..CategoryArgs::default()
            },
            true,
            &scope,
        )
    };
    let files = by_category("files").unwrap();
    assert_eq!(files.category.tool_count, 1);
    assert_eq!(files.page.tools.len(), 1);
    let development = by_category("Development").unwrap();
    assert!(development.page.tools.iter().all(|t| t.server == "github"));
    // A category with no tool in scope is unknown, and the known ones listed are in scope.
    let err = by_category("Weather").unwrap_err();
    match &err {
        Error::UnknownCategory { known, .. } => assert_eq!(known, "Development, Files"),
        other => panic!("expected an unknown category, got {other:?}"),
    }
    let err = contract::search(
        &engine,
        &SearchArgs {
            category: OneOrMany(vec!["Productivity".to_string()]),
            ..SearchArgs::default()
        },
        &options(&scope),
    )
    .unwrap_err();
    assert!(matches!(err, Error::UnknownCategory { .. }), "{err:?}");
    assert!(!err.to_string().contains("Weather"), "{err}");
}

#[test]
fn resolution_and_suggestions_stay_in_scope() {
    let engine = engine();
    let scope = files_and_github();
    assert!(engine.resolve("weather___get_weather").is_some());
    assert!(engine.resolve_in("weather___get_weather", &scope).is_none());
    assert!(engine.resolve_in("get_weather", &scope).is_none());
    assert_eq!(
        engine.resolve_in("read_file", &scope).unwrap().server(),
        "files"
    );
    assert!(engine.resolve_in("write_file", &scope).is_none());
    assert!(engine
        .suggest("weather___get_wether", 5)
        .contains(&"weather___get_weather".to_string()));
    let suggested = engine.suggest_in("weather___get_wether", 5, &scope);
    assert!(
        suggested
            .iter()
            .all(|n| n.starts_with("files___read") || n.starts_with("github___")),
        "{suggested:?}"
    );

    // A bare name two servers share is ambiguous in the catalog, unique in a scope holding one.
    let shared = SearchEngine::from_tools([
        Tool::new("search", "Search A").with_server("a"),
        Tool::new("search", "Search B").with_server("b"),
    ])
    .unwrap();
    assert!(shared.resolve("search").is_none());
    let b = shared.resolve_in("search", &scope_of(&["b:*"])).unwrap();
    assert_eq!(b.server(), "b");
    assert!(shared.resolve_in("search", &Scope::none()).is_none());
}

struct Down(&'static str);

impl ServerStatus for Down {
    fn unavailable(&self, server: &str) -> Option<String> {
        (server == self.0).then(|| "restarting after failure 1".to_string())
    }
}

fn disclosure(preset: Preset, threshold: usize) -> Disclosure {
    Disclosure::new(
        DisclosureConfig::default()
            .preset(preset)
            .threshold(threshold),
    )
    .unwrap()
}

fn meta(d: &Disclosure, caller: Caller<'_>, tool: &str, arguments: Value) -> Value {
    let engine = engine();
    match d.dispatch(caller, tool, arguments, &engine) {
        Ok(Dispatch::Meta(outcome)) => outcome.result,
        other => panic!("{tool}: expected a meta-tool result, got {other:?}"),
    }
}

#[test]
fn a_session_sees_searches_and_lists_only_its_scope() {
    let engine = engine();
    let scope = files_and_github();
    let caller = Caller::new("s", &scope);
    let d = disclosure(Preset::Progressive, 3);
    let visible = d.visible_tools(caller, &engine);
    assert_eq!(
        names_with(&visible, Exposure::Stub),
        [
            "files___read_file",
            "github___create_issue",
            "github___list_issues",
            "github___create_pull_request",
            "github___merge_pull_request"
        ]
    );
    assert!(names(&visible).contains(&"call_tool".to_string()));
    // A session over few tools sees them in full, as a small catalog would be.
    let few = scope_of(&["weather:*"]);
    let small = disclosure(Preset::Search, 15).visible_tools(Caller::new("t", &few), &engine);
    assert_eq!(
        names_with(&small, Exposure::Full),
        ["weather___get_weather", "weather___get_forecast"]
    );
    assert!(names_with(&small, Exposure::Meta).is_empty());

    // tool_search reveals only tools in scope.
    let revealed = meta(&d, caller, "tool_search", json!({"query": "read"}));
    assert!(
        revealed["loaded"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n == "files___read_file"),
        "{revealed}"
    );
    let listed = meta(&d, caller, "list_categories", json!({}));
    assert_eq!(
        listed["categories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["id"].as_str().unwrap(), c["toolCount"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        [("Development", 4), ("Files", 1)]
    );
    let development = meta(
        &d,
        caller,
        "get_tools_by_category",
        json!({"category": "Development"}),
    );
    assert_eq!(development["totalMatches"], 4, "{development}");
    let searched = meta(
        &d,
        Caller::new("s", &scope),
        "tool_search",
        json!({"query": "weather"}),
    );
    assert_eq!(searched["totalMatches"], 0, "{searched}");
    assert_mentions_none_outside(&engine, &scope, &searched.to_string());

    // `add`: show_all_tools and add_tool stay in scope.
    let add = disclosure(Preset::Add, 3);
    let all_names = meta(&add, caller, "show_all_tools", json!({}));
    assert_eq!(all_names["total"], 5, "{all_names}");
    assert_mentions_none_outside(&engine, &scope, &all_names.to_string());
    let err = add
        .dispatch(
            caller,
            "add_tool",
            json!({"names": ["weather___get_weather"]}),
            &engine,
        )
        .unwrap_err();
    assert!(matches!(err, Error::UnknownTool { .. }), "{err:?}");

    // The guidance counts and names only the session's tools.
    let guidance = d.guidance_in(&engine, &scope);
    assert!(guidance.contains("access to 5 tools"), "{guidance}");
    assert!(!guidance.contains("Weather"), "{guidance}");
    assert!(d.guidance(&engine).contains("access to 18 tools"));
}

#[test]
fn a_call_outside_the_scope_answers_as_an_unknown_tool() {
    let engine = engine();
    let scope = files_and_github();
    let caller = Caller::new("s", &scope);
    let mut d = disclosure(Preset::Search, 3);
    d.set_server_status(Arc::new(Down("weather")));
    let refused = |tool: &str, arguments: Value| {
        let err = d.dispatch(caller, tool, arguments, &engine).unwrap_err();
        assert!(matches!(err, Error::UnknownTool { .. }), "{tool}: {err:?}");
        err
    };
    // Through call_tool and directly; the server being down is not told either.
    for err in [
        refused(
            "call_tool",
            json!({"name": "weather___get_weather", "arguments": {}}),
        ),
        refused("weather___get_weather", json!({})),
        refused("files___write_file", json!({"path": "x", "content": "y"})),
        refused("write_file", json!({"path": "x", "content": "y"})),
    ] {
        let shown = error_result(&err).to_string();
        assert_mentions_none_outside(
            &engine,
            &scope,
            &shown
                .replace("weather___get_weather", "")
                .replace("write_file", ""),
        );
        if let Error::UnknownTool { suggestions, .. } = &err {
            for name in suggestions {
                assert!(!outside(&engine, &scope).contains(name), "{name} suggested");
            }
        }
    }
    // An unscoped session is told the truth, and a scoped one is about its own servers.
    let err = d
        .dispatch("u", "weather___get_weather_now", json!({}), &engine)
        .unwrap_err();
    assert!(matches!(err, Error::ServerDown { .. }), "{err:?}");
    let mut d = disclosure(Preset::Search, 3);
    d.set_server_status(Arc::new(Down("github")));
    let err = d
        .dispatch(caller, "github___not_listed_yet", json!({}), &engine)
        .unwrap_err();
    assert!(matches!(err, Error::ServerDown { .. }), "{err:?}");

    // In scope, the call goes through.
    match d
        .dispatch(
            caller,
            "call_tool",
            json!({"name": "files___read_file", "arguments": {"path": "/tmp/x"}}),
            &engine,
        )
        .unwrap()
    {
        Dispatch::Call { tool, .. } => assert_eq!(tool.name(), "read_file"),
        other => panic!("expected a call, got {other:?}"),
    }
    // The library face checks the scope too.
    let err = d
        .call_tool(
            caller,
            json!({"name": "weather___get_forecast"}),
            &engine,
            |_, _| json!("ran"),
        )
        .unwrap_err();
    assert!(matches!(err, Error::UnknownTool { .. }), "{err:?}");
}

#[test]
fn reveals_made_under_a_wider_scope_are_not_shown_under_a_narrower_one() {
    let engine = engine();
    let d = disclosure(Preset::Progressive, 3);
    let revealed = meta(
        &d,
        Caller::from("s"),
        "tool_search",
        json!({"query": "weather"}),
    );
    assert!(
        revealed["loaded"]
            .to_string()
            .contains("weather___get_weather"),
        "{revealed}"
    );
    let narrow = files_and_github();
    let visible = names(&d.visible_tools(Caller::new("s", &narrow), &engine));
    assert!(
        visible.iter().all(|n| !n.starts_with("weather")),
        "{visible:?}"
    );
    assert_eq!(tools().len(), 18);
}

/// Servers that are not ready: `files` was ready once (its tools are indexed), `mail` has never
/// started, `secret` is outside every scope below.
struct Starting;

impl ServerStatus for Starting {
    fn unavailable(&self, server: &str) -> Option<String> {
        matches!(server, "files" | "mail" | "secret").then(|| "starting, attempt 1".to_string())
    }

    fn not_ready(&self) -> Vec<(String, String)> {
        ["files", "mail", "secret"]
            .map(|s| (s.to_string(), "starting, attempt 1".to_string()))
            .to_vec()
    }
}

#[test]
fn a_search_names_the_servers_not_ready_in_its_scope_and_does_not_blame_the_query() {
    let engine = engine();
    let scope = scope_of(&["files:*", "mail:*"]);
    let args = SearchArgs::new("zzz nothing like this");
    let mut results = contract::search(&engine, &args, &options(&scope)).unwrap();
    assert!(results.page.tools.is_empty());
    contract::note_server_status(&mut results, &Starting, &engine, &scope);
    let servers: Vec<(&str, bool)> = results
        .servers_not_ready
        .iter()
        .map(|s| (s.server.as_str(), s.searchable))
        .collect();
    // `secret` is outside the scope, so this caller does not hear of it.
    assert_eq!(servers, [("files", true), ("mail", false)]);
    let message = results.message.clone().unwrap();
    assert!(
        message.contains("Not searchable yet: mail (starting, attempt 1)"),
        "{message}"
    );
    assert!(!message.contains("Refine"), "{message}");

    // With every server ready the answer is the ordinary one.
    let mut ready = contract::search(&engine, &args, &options(&scope)).unwrap();
    contract::note_server_status(&mut ready, &Down("none"), &engine, &scope);
    assert!(ready.servers_not_ready.is_empty());
    assert!(ready.message.unwrap().contains("Refine the query"));
}
