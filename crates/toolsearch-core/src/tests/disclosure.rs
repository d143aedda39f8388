//! Disclosure: presets, policies, sessions and meta-tool errors, asserted through the public API.

use super::disclosure_common;

use disclosure_common::{disclosure, engine, engine_with, names, names_with, tools};
use serde_json::{json, Value};
use toolsearch_core::disclosure::stub_schema;
use toolsearch_core::{
    error_result, CatalogPolicy, DeferPolicy, Disclosure, DisclosureConfig, Dispatch, Error,
    Exposure, NamePattern, Preset, SearchEngine, SelectionOrder, Tool,
};

fn patterns(list: &[&str]) -> Vec<NamePattern> {
    list.iter().map(|p| NamePattern::parse(p)).collect()
}

fn config(preset: Preset) -> DisclosureConfig {
    DisclosureConfig::default().preset(preset)
}

fn small_engine(n: usize) -> SearchEngine {
    SearchEngine::from_tools(tools().into_iter().take(n)).unwrap()
}

const SEARCH_META: [&str; 2] = ["search_tools", "call_tool"];

#[test]
fn disclosure_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Disclosure>();
}

#[test]
fn at_or_below_threshold_everything_passes_through() {
    let d = disclosure(Preset::Search);
    let engine = small_engine(15);
    let visible = d.visible_tools("s", &engine);
    assert_eq!(visible.len(), 15);
    assert!(visible.iter().all(|t| t.exposure == Exposure::Full));
    assert!(d.meta_tools(&engine).is_empty());
    assert!(d
        .guidance(&engine)
        .starts_with("All 15 tools are available"));
    // One more tool activates disclosure.
    let engine = small_engine(16);
    assert_eq!(names(&d.visible_tools("s", &engine)), SEARCH_META);
}

#[test]
fn threshold_is_configurable() {
    let d = Disclosure::new(config(Preset::Search).threshold(100)).unwrap();
    assert_eq!(d.visible_tools("s", &engine()).len(), 18);
    let d = Disclosure::new(config(Preset::Search).threshold(0)).unwrap();
    assert!(d.is_active(&small_engine(1)));
}

#[test]
fn always_deferred_tools_stay_hidden_below_the_threshold() {
    let mut list: Vec<Tool> = tools().into_iter().take(5).collect();
    list[4] = list[4].clone().with_defer(DeferPolicy::Always);
    let hidden = list[4].id().to_string();
    let engine = SearchEngine::from_tools(list).unwrap();
    let d = disclosure(Preset::Search);
    let visible = d.visible_tools("s", &engine);
    let visible_names = names(&visible);
    assert!(!visible_names.contains(&hidden));
    // The other four pass through, and search is offered so the hidden one can be found.
    assert_eq!(names_with(&visible, Exposure::Full).len(), 4);
    assert_eq!(names_with(&visible, Exposure::Meta), SEARCH_META);
}

#[test]
fn never_defer_policy_keeps_a_tool_in_full() {
    let mut list = tools();
    list[8] = list[8].clone().with_defer(DeferPolicy::Never);
    let engine = SearchEngine::from_tools(list).unwrap();
    let visible = disclosure(Preset::Search).visible_tools("s", &engine);
    assert_eq!(
        names_with(&visible, Exposure::Full),
        ["slack___send_message"]
    );
}

#[test]
fn never_defer_patterns_from_the_catalog_policy() {
    let d = disclosure(Preset::Search);
    let engine = engine_with(CatalogPolicy {
        never_defer: patterns(&["get_weather", "db___run_query"]),
        ..CatalogPolicy::default()
    });
    assert_eq!(
        names_with(&d.visible_tools("s", &engine), Exposure::Full),
        ["db___run_query", "weather___get_weather"]
    );
    // The one pattern rule: `server:tool` globs, any case.
    let engine = engine_with(CatalogPolicy {
        never_defer: patterns(&["DB:*", "files:read_*"]),
        ..CatalogPolicy::default()
    });
    assert_eq!(
        names_with(&d.visible_tools("s", &engine), Exposure::Full),
        ["db___run_query", "db___list_tables", "files___read_file"]
    );
}

#[test]
fn pinned_and_always_visible_categories() {
    let d = Disclosure::new(config(Preset::Progressive)).unwrap();
    let engine = engine_with(CatalogPolicy {
        pinned: patterns(&["slack___list_channels"]),
        always_visible_categories: vec!["weather".into()],
        ..CatalogPolicy::default()
    });
    let full = names_with(&d.visible_tools("s", &engine), Exposure::Full);
    assert_eq!(
        full,
        [
            "slack___list_channels",
            "weather___get_weather",
            "weather___get_forecast"
        ]
    );
    let engine = engine_with(CatalogPolicy {
        pinned: patterns(&["create_event"]),
        ..CatalogPolicy::default()
    });
    let full = names_with(&d.visible_tools("other", &engine), Exposure::Full);
    assert_eq!(full, ["calendar___create_event"]);
}

#[test]
fn search_preset_returns_schemas_and_never_changes_the_list() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let before = d.visible_tools("s", &engine);
    assert_eq!(names(&before), SEARCH_META);
    let out = d
        .handle(
            "s",
            "search_tools",
            json!({"query": "weather forecast"}),
            &engine,
        )
        .unwrap();
    assert!(!out.visible_changed);
    let tools = out.result["tools"].as_array().unwrap();
    assert_eq!(tools[0]["name"], "weather___get_forecast");
    assert!(tools.iter().all(|t| t["inputSchema"].is_object()));
    assert_eq!(d.visible_tools("s", &engine), before);
}

#[test]
fn search_tools_filters_and_regex() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let out = d
        .handle(
            "s",
            "search_tools",
            json!({"query": "list", "server": ["slack"], "limit": 5}),
            &engine,
        )
        .unwrap();
    let found: Vec<&str> = out.result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!found.is_empty());
    assert!(found.iter().all(|n| n.starts_with("slack___")), "{found:?}");
    let out = d
        .handle(
            "s",
            "search_tools",
            json!({"query": "^delete_", "mode": "regex"}),
            &engine,
        )
        .unwrap();
    let mut found: Vec<&str> = out.result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, ["calendar___delete_event", "files___delete_file"]);
}

#[test]
fn progressive_stubs_then_reveal_appends_at_the_end() {
    let d = disclosure(Preset::Progressive);
    let engine = engine();
    let before = d.visible_tools("s", &engine);
    assert_eq!(names_with(&before, Exposure::Meta)[0], "tool_search");
    let stubs = names_with(&before, Exposure::Stub);
    assert_eq!(stubs.len(), 18);
    let weather = before
        .iter()
        .find(|t| t.name == "weather___get_weather")
        .unwrap();
    assert_eq!(weather.input_schema, stub_schema());
    assert_eq!(weather.description, "Current weather for a city");

    let out = d
        .handle(
            "s",
            "tool_search",
            json!({"query": "weather___get_weather"}),
            &engine,
        )
        .unwrap();
    assert!(out.visible_changed);
    let loaded: Vec<String> = serde_json::from_value(out.result["loaded"].clone()).unwrap();
    assert_eq!(loaded[0], "weather___get_weather");
    assert!(loaded.len() <= 8);
    assert_eq!(
        out.result["tools"][0]["inputSchema"]["required"],
        json!(["city"])
    );

    let after = d.visible_tools("s", &engine);
    assert_eq!(after.len(), before.len());
    // The revealed tools sit at the end, in reveal order, in full.
    let tail = &after[after.len() - loaded.len()..];
    assert_eq!(names(tail), loaded);
    assert!(tail.iter().all(|t| t.exposure == Exposure::Full));
    assert_eq!(tail[0].input_schema["required"], json!(["city"]));
    // Everything else keeps its relative order.
    let rest: Vec<String> = names(&before)
        .into_iter()
        .filter(|n| !loaded.contains(n))
        .collect();
    assert_eq!(names(&after[..after.len() - loaded.len()]), rest);

    // A second search reveals more, appended after the first.
    let out = d
        .handle(
            "s",
            "tool_search",
            json!({"query": "slack___send_message"}),
            &engine,
        )
        .unwrap();
    assert!(out.visible_changed);
    let again = d.visible_tools("s", &engine);
    let first_revealed = names(&again)
        .iter()
        .position(|n| n == "weather___get_weather")
        .unwrap();
    let second_revealed = names(&again)
        .iter()
        .position(|n| n == "slack___send_message")
        .unwrap();
    // Everything from the first reveal on is revealed, in full.
    assert!(again[first_revealed..]
        .iter()
        .all(|t| t.exposure == Exposure::Full));
    assert!(first_revealed < second_revealed);
}

#[test]
fn repeating_a_search_changes_nothing() {
    let d = disclosure(Preset::Progressive);
    let engine = engine();
    let args = json!({"query": "weather___get_weather"});
    assert!(
        d.handle("s", "tool_search", args.clone(), &engine)
            .unwrap()
            .visible_changed
    );
    let out = d.handle("s", "tool_search", args, &engine).unwrap();
    assert!(!out.visible_changed);
    assert_eq!(out.result["loaded"], json!([]));
}

#[test]
fn add_preset_lists_without_schemas_and_add_tool_reveals() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    let meta = names_with(&d.visible_tools("s", &engine), Exposure::Meta);
    assert_eq!(
        meta,
        ["search_tools", "add_tool", "show_all_tools", "call_tool"]
    );
    let out = d
        .handle(
            "s",
            "search_tools",
            json!({"query": "pull request"}),
            &engine,
        )
        .unwrap();
    let tools = out.result["tools"].as_array().unwrap();
    assert!(!tools.is_empty());
    assert!(tools.iter().all(|t| t.get("inputSchema").is_none()));
    assert!(!out.visible_changed);

    let out = d
        .handle(
            "s",
            "add_tool",
            json!({"names": ["github___merge_pull_request", "read_file"]}),
            &engine,
        )
        .unwrap();
    assert!(out.visible_changed);
    assert_eq!(
        out.result["added"],
        json!(["github___merge_pull_request", "files___read_file"])
    );
    let visible = d.visible_tools("s", &engine);
    assert_eq!(
        names_with(&visible, Exposure::Full),
        ["github___merge_pull_request", "files___read_file"]
    );
    let out = d
        .handle("s", "add_tool", json!({"names": ["read_file"]}), &engine)
        .unwrap();
    assert!(!out.visible_changed);
    assert_eq!(out.result["alreadyAvailable"], json!(["files___read_file"]));
}

#[test]
fn add_tool_with_an_unknown_name_reveals_nothing_and_suggests() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    let err = d
        .handle(
            "s",
            "add_tool",
            json!({"names": ["read_file", "github___create_isue"]}),
            &engine,
        )
        .unwrap_err();
    match &err {
        Error::UnknownTool { name, suggestions } => {
            assert_eq!(name, "github___create_isue");
            assert_eq!(suggestions[0], "github___create_issue");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err
        .to_string()
        .contains("did you mean github___create_issue"));
    assert!(names_with(&d.visible_tools("s", &engine), Exposure::Full).is_empty());
}

#[test]
fn show_all_tools_pages_names() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    let out = d
        .handle("s", "show_all_tools", json!({"limit": 5}), &engine)
        .unwrap();
    assert_eq!(out.result["total"], 18);
    assert_eq!(out.result["names"].as_array().unwrap().len(), 5);
    assert_eq!(out.result["names"][0], "calendar___create_event");
    assert_eq!(out.result["nextOffset"], 5);
    let out = d
        .handle(
            "s",
            "show_all_tools",
            json!({"offset": 15, "limit": 5}),
            &engine,
        )
        .unwrap();
    assert_eq!(out.result["names"].as_array().unwrap().len(), 3);
    assert!(out.result.get("nextOffset").is_none());
}

#[test]
fn limit_preset_first_n_by_server_priority_then_search_replaces() {
    let mut cfg = config(Preset::Limit);
    cfg.max_tools_limit = 3;
    cfg.server_priority = vec!["weather".into(), "slack".into()];
    let d = Disclosure::new(cfg).unwrap();
    let engine = engine();
    let visible = d.visible_tools("s", &engine);
    assert_eq!(
        names_with(&visible, Exposure::Meta),
        ["search_available_tools", "call_tool"]
    );
    assert_eq!(
        names_with(&visible, Exposure::Full),
        [
            "weather___get_weather",
            "weather___get_forecast",
            "slack___send_message"
        ]
    );
    let out = d
        .handle(
            "s",
            "search_available_tools",
            json!({"query": "calendar event"}),
            &engine,
        )
        .unwrap();
    assert!(out.visible_changed);
    let full = names_with(&d.visible_tools("s", &engine), Exposure::Full);
    assert!(!full.is_empty() && full.len() <= 3);
    assert!(
        full.iter().all(|n| n.starts_with("calendar___")),
        "{full:?}"
    );
    // Another session still has the default set.
    assert_eq!(
        names_with(&d.visible_tools("t", &engine), Exposure::Full)[0],
        "weather___get_weather"
    );
    // A search that finds nothing keeps the current set.
    let out = d
        .handle(
            "s",
            "search_available_tools",
            json!({"query": "zzqxv"}),
            &engine,
        )
        .unwrap();
    assert!(!out.visible_changed);
    assert_eq!(
        names_with(&d.visible_tools("s", &engine), Exposure::Full),
        full
    );
}

#[test]
fn limit_preset_alphabetical() {
    let mut cfg = config(Preset::Limit);
    cfg.max_tools_limit = 2;
    cfg.tool_selection_order = SelectionOrder::Alphabetical;
    let d = Disclosure::new(cfg).unwrap();
    assert_eq!(
        names_with(&d.visible_tools("s", &engine()), Exposure::Full),
        ["calendar___create_event", "calendar___delete_event"]
    );
}

#[test]
fn passthrough_sends_everything_without_meta_tools() {
    let d = disclosure(Preset::Passthrough);
    let engine = engine();
    let visible = d.visible_tools("s", &engine);
    assert_eq!(visible.len(), 18);
    assert!(visible.iter().all(|t| t.exposure == Exposure::Full));
    assert!(!d.is_meta_tool("call_tool"));
    assert!(matches!(
        d.handle("s", "search_tools", json!({"query": "x"}), &engine),
        Err(Error::NotAMetaTool { .. })
    ));
    // Calls still go through, validated.
    match d
        .dispatch("s", "read_file", json!({"path": "/a"}), &engine)
        .unwrap()
    {
        Dispatch::Call { tool, .. } => assert_eq!(tool.name(), "read_file"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn sessions_are_isolated() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    d.handle("a", "add_tool", json!({"names": ["read_file"]}), &engine)
        .unwrap();
    assert_eq!(
        names_with(&d.visible_tools("a", &engine), Exposure::Full),
        ["files___read_file"]
    );
    assert!(names_with(&d.visible_tools("b", &engine), Exposure::Full).is_empty());
    // Reading a session that does not exist does not create it.
    assert_eq!(d.session_count(), 1);
    assert!(d.end_session("a"));
    assert!(names_with(&d.visible_tools("a", &engine), Exposure::Full).is_empty());
}

#[test]
fn least_recently_used_session_is_evicted_and_starts_fresh() {
    let mut cfg = config(Preset::Add);
    cfg.max_sessions = 2;
    let d = Disclosure::new(cfg).unwrap();
    let engine = engine();
    let add = |s: &str, name: &str| {
        d.handle(s, "add_tool", json!({"names": [name]}), &engine)
            .unwrap();
    };
    add("a", "read_file");
    add("b", "write_file");
    // Using `a` makes `b` the least recently used.
    d.visible_tools("a", &engine);
    add("c", "delete_file");
    assert_eq!(d.session_count(), 2);
    assert!(names_with(&d.visible_tools("b", &engine), Exposure::Full).is_empty());
    assert_eq!(
        names_with(&d.visible_tools("a", &engine), Exposure::Full),
        ["files___read_file"]
    );
    assert_eq!(
        names_with(&d.visible_tools("c", &engine), Exposure::Full),
        ["files___delete_file"]
    );
}

#[test]
fn reveals_per_session_are_bounded() {
    let mut cfg = config(Preset::Add);
    cfg.max_reveals_per_session = 2;
    let d = Disclosure::new(cfg).unwrap();
    let engine = engine();
    for name in ["read_file", "write_file", "delete_file"] {
        d.handle("s", "add_tool", json!({"names": [name]}), &engine)
            .unwrap();
    }
    assert_eq!(
        names_with(&d.visible_tools("s", &engine), Exposure::Full),
        ["files___write_file", "files___delete_file"]
    );
}

#[test]
fn prepare_call_resolves_and_validates() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let (tool, args) = d
        .prepare_call("weather___get_weather", json!({"city": "Oslo"}), &engine)
        .unwrap();
    assert_eq!(tool.name(), "get_weather");
    assert_eq!(args, json!({"city": "Oslo"}));
    // A unique bare name resolves too; null arguments count as {} for a tool without required fields.
    let (tool, args) = d.prepare_call("list_tables", Value::Null, &engine).unwrap();
    assert_eq!(tool.server(), "db");
    assert_eq!(args, json!({}));
}

#[test]
fn unknown_tool_has_did_you_mean() {
    let d = disclosure(Preset::Search);
    let err = d
        .prepare_call("get_wether", json!({}), &engine())
        .unwrap_err();
    match err {
        Error::UnknownTool { suggestions, .. } => {
            assert_eq!(suggestions[0], "weather___get_weather")
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = d.prepare_call("zzz", json!({}), &engine()).unwrap_err();
    assert!(err.to_string().contains("search for it first"), "{err}");
}

#[test]
fn an_overlong_tool_name_is_refused_without_suggestions_on_every_path() {
    let engine = engine();
    let long = format!("get_wether{}", "x".repeat(300_000));
    let refused = |err: Error| {
        assert!(
            matches!(
                err,
                Error::NameTooLong {
                    kind: "tool",
                    max: toolsearch_core::MAX_NAME_CHARS,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().len() < 300, "the name is not echoed: {err}");
    };
    let d = disclosure(Preset::Search);
    refused(d.prepare_call(&long, json!({}), &engine).unwrap_err());
    refused(d.dispatch("s", &long, json!({}), &engine).unwrap_err());
    refused(
        d.dispatch("s", "call_tool", json!({"name": long}), &engine)
            .unwrap_err(),
    );
    let d_add = disclosure(Preset::Add);
    refused(
        d_add
            .dispatch(
                "s",
                "add_tool",
                json!({"names": ["weather___get_weather", long]}),
                &engine,
            )
            .unwrap_err(),
    );
}

/// Reports one server down, as an edge that supervises servers would.
struct OneDown;

impl toolsearch_core::ServerStatus for OneDown {
    fn unavailable(&self, server: &str) -> Option<String> {
        (server == "mail").then(|| "restarting after failure 2; last error: exited".to_string())
    }
}

#[test]
fn a_tool_of_a_server_that_is_down_is_said_so_not_unknown() {
    let mut d = disclosure(Preset::Search);
    d.set_server_status(std::sync::Arc::new(OneDown));
    let engine = engine();
    // `mail` has no tools in the catalog (it never came up); its state is what the caller needs.
    let err = d
        .prepare_call("mail___send_mail", json!({}), &engine)
        .unwrap_err();
    assert!(matches!(err, Error::ServerDown { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("server `mail` is down (restarting after failure 2; last error: exited)"),
        "{text}"
    );
    // Through call_tool too.
    let err = d
        .dispatch(
            "s",
            "call_tool",
            json!({"name": "mail___send_mail"}),
            &engine,
        )
        .unwrap_err();
    assert!(matches!(err, Error::ServerDown { .. }), "{err:?}");
    // And when it is asked for by name to reveal it.
    let mut d_add = disclosure(Preset::Add);
    d_add.set_server_status(std::sync::Arc::new(OneDown));
    let err = d_add
        .dispatch(
            "s",
            "add_tool",
            json!({"names": ["mail___send_mail"]}),
            &engine,
        )
        .unwrap_err();
    assert!(matches!(err, Error::ServerDown { .. }), "{err:?}");
    // A server that is up, or no server part at all, still gets did-you-mean.
    let err = d
        .prepare_call("weather___get_wether", json!({}), &engine)
        .unwrap_err();
    assert!(matches!(err, Error::UnknownTool { .. }), "{err:?}");
    let err = d.prepare_call("send_mail", json!({}), &engine).unwrap_err();
    assert!(matches!(err, Error::UnknownTool { .. }), "{err:?}");
}

#[test]
fn bad_arguments_come_back_with_problems_and_schema() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let err = d
        .prepare_call("weather___get_weather", json!({"units": "kelvin"}), &engine)
        .unwrap_err();
    match &err {
        Error::InvalidArguments {
            tool,
            problems,
            schema,
        } => {
            assert_eq!(tool, "weather___get_weather");
            assert!(problems.contains("city"), "{problems}");
            assert!(problems.contains("kelvin"), "{problems}");
            assert_eq!(schema["required"], json!(["city"]));
        }
        other => panic!("unexpected {other:?}"),
    }
    let result = error_result(&err);
    assert_eq!(result["schema"]["required"], json!(["city"]));
    let err = d
        .prepare_call("files___write_file", json!(["a"]), &engine)
        .unwrap_err();
    assert!(err.to_string().contains("must be a JSON object"), "{err}");
    let err = d
        .prepare_call(
            "files___write_file",
            json!({"path": "a", "content": "b", "mode": 1}),
            &engine,
        )
        .unwrap_err();
    assert!(err.to_string().contains("mode"), "{err}");
}

#[test]
fn call_tool_runs_the_executor_with_validated_arguments() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let result = d
        .call_tool(
            "s",
            json!({"name": "weather___get_weather", "arguments": {"city": "Oslo"}}),
            &engine,
            |tool, args| json!({"ran": tool.name(), "city": args["city"]}),
        )
        .unwrap();
    assert_eq!(result, json!({"ran": "get_weather", "city": "Oslo"}));
    let mut ran = false;
    let err = d
        .call_tool(
            "s",
            json!({"name": "weather___get_weather", "arguments": {}}),
            &engine,
            |_, _| {
                ran = true;
                Value::Null
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArguments { .. }));
    assert!(!ran);
}

#[test]
fn dispatch_routes_meta_tools_call_tool_and_direct_calls() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    assert!(matches!(
        d.dispatch("s", "search_tools", json!({"query": "slack"}), &engine)
            .unwrap(),
        Dispatch::Meta(_)
    ));
    match d
        .dispatch(
            "s",
            "call_tool",
            json!({"name": "slack___send_message", "arguments": {"channel": "c", "text": "t"}}),
            &engine,
        )
        .unwrap()
    {
        Dispatch::Call { tool, arguments } => {
            assert_eq!(tool.name(), "send_message");
            assert_eq!(arguments["channel"], "c");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        d.dispatch("s", "slack___send_message", json!({}), &engine),
        Err(Error::InvalidArguments { .. })
    ));
    assert!(matches!(
        d.handle("s", "call_tool", json!({"name": "x"}), &engine),
        Err(Error::ExecutorRequired)
    ));
}

#[test]
fn meta_tools_reject_bad_arguments_with_their_schema() {
    let d = disclosure(Preset::Add);
    let engine = engine();
    let cases = [
        ("search_tools", json!({"query": 3})),
        ("search_tools", json!({"query": "x", "colour": "red"})),
        ("search_tools", json!({"query": "x", "limit": 0})),
        ("search_tools", json!({"query": "x", "mode": "fuzzy"})),
        ("add_tool", json!({"names": []})),
        ("add_tool", json!("read_file")),
        ("show_all_tools", json!({"offset": -1})),
        ("call_tool", json!({"arguments": {}})),
    ];
    for (tool, args) in cases {
        match d.handle("s", tool, args.clone(), &engine) {
            Err(Error::MetaArguments {
                tool: t, schema, ..
            }) => {
                assert_eq!(t, tool);
                assert_eq!(schema["type"], "object");
            }
            other => panic!("{tool} {args}: unexpected {other:?}"),
        }
    }
    let err = d
        .handle("s", "search_tools", json!({"query": "x"}), &engine)
        .map(|_| ());
    assert!(err.is_ok());
}

#[test]
fn meta_tool_errors_are_specific() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    assert!(matches!(
        d.handle(
            "s",
            "search_tools",
            json!({"query": "(", "mode": "regex"}),
            &engine
        ),
        Err(Error::InvalidRegex { .. })
    ));
    let err = d
        .handle("s", "add_tool", json!({"names": ["x"]}), &engine)
        .unwrap_err();
    assert!(err.to_string().contains("search_tools, call_tool"), "{err}");
    let err = d
        .handle(
            "s",
            "get_tools_by_category",
            json!({"category": "Cooking"}),
            &engine,
        )
        .unwrap_err();
    assert!(matches!(err, Error::UnknownCategory { .. }));
    assert!(err.to_string().contains("Communication"), "{err}");
}

/// The category tools answer by name but are listed only when `category_tools` asks for them;
/// `search_tools` with a category and no query lists the category's tools, as
/// `get_tools_by_category` does.
#[test]
fn category_tools() {
    let d = disclosure(Preset::Search);
    let engine = engine();
    let listed = names(&d.visible_tools("s", &engine));
    assert!(
        !listed.contains(&"list_categories".to_string()),
        "{listed:?}"
    );
    let asked = Disclosure::new(DisclosureConfig {
        category_tools: true,
        ..DisclosureConfig::default()
    })
    .unwrap();
    assert_eq!(
        names_with(&asked.visible_tools("s", &engine), Exposure::Meta),
        [
            "search_tools",
            "call_tool",
            "list_categories",
            "get_tools_by_category"
        ]
    );
    let searched = d
        .handle(
            "s",
            "search_tools",
            json!({"category": ["weather"], "limit": 1}),
            &engine,
        )
        .unwrap();
    assert_eq!(searched.result["totalMatches"], 2, "{}", searched.result);
    assert!(searched.result["tools"][0]["inputSchema"].is_object());
    let out = d
        .handle("s", "list_categories", Value::Null, &engine)
        .unwrap();
    assert_eq!(
        out.result["categories"][0],
        json!({"id": "Communication", "name": "Communication", "toolCount": 3})
    );
    let out = d
        .handle(
            "s",
            "get_tools_by_category",
            json!({"category": "weather"}),
            &engine,
        )
        .unwrap();
    assert_eq!(out.result["totalMatches"], 2);
    assert_eq!(out.result["tools"][0]["name"], "weather___get_forecast");
    assert!(out.result["tools"][0]["inputSchema"].is_object());
}

#[test]
fn empty_search_gives_a_fallback_to_refine_with() {
    let d = disclosure(Preset::Search);
    let out = d
        .handle("s", "search_tools", json!({"query": "zzqxv"}), &engine())
        .unwrap();
    assert_eq!(out.result["totalMatches"], 0);
    assert!(out.result["fallback"].is_object(), "{}", out.result);
}

#[test]
fn guidance_explains_the_preset_and_lists_categories() {
    let engine = engine();
    for (preset, needle) in [
        (Preset::Search, "search_tools"),
        (Preset::Progressive, "tool_search"),
        (Preset::Add, "add_tool"),
        (Preset::Limit, "search_available_tools"),
    ] {
        let text = disclosure(preset).guidance(&engine);
        assert!(text.contains(needle), "{preset}: {text}");
        assert!(text.contains("18 tools"), "{preset}: {text}");
        assert!(
            text.contains("Development (6), Files (4), Communication (3), Productivity (3)"),
            "{preset}: {text}"
        );
    }
    let text = disclosure(Preset::Passthrough).guidance(&engine);
    assert!(text.starts_with("All 18 tools"), "{text}");
}

#[test]
fn config_is_validated_and_reads_camel_case() {
    let cfg = DisclosureConfig {
        max_sessions: 0,
        ..Default::default()
    };
    assert!(matches!(
        Disclosure::new(cfg),
        Err(Error::InvalidSetting(_))
    ));
    let cfg: DisclosureConfig = serde_json::from_value(json!({
        "preset": "limit",
        "maxToolsLimit": 5,
        "toolSelectionOrder": "alphabetical",
        "neverDefer": ["a"]
    }))
    .unwrap();
    assert_eq!(cfg.preset, Preset::Limit);
    assert_eq!(cfg.max_tools_limit, 5);
    assert_eq!(cfg.tool_selection_order, SelectionOrder::Alphabetical);
    assert_eq!(cfg.threshold, 15);
    assert!("nope".parse::<Preset>().is_err());
    assert_eq!(
        "Progressive".parse::<Preset>().unwrap(),
        Preset::Progressive
    );
}

#[test]
fn anthropic_native_defers_and_searches_only_deferred_tools() {
    let d = disclosure(Preset::Search);
    let engine = engine_with(CatalogPolicy {
        pinned: patterns(&["get_weather"]),
        ..CatalogPolicy::default()
    });
    let tools = d.anthropic_native_tools(&engine);
    assert_eq!(tools.len(), 19);
    assert_eq!(tools[0].name, "tool_search");
    assert_eq!(
        names_with(&tools, Exposure::Full),
        ["weather___get_weather"]
    );
    assert_eq!(names_with(&tools, Exposure::Deferred).len(), 17);
    let found = d
        .anthropic_native_search(json!({"query": "weather"}), &engine)
        .unwrap();
    assert!(found.contains(&"weather___get_forecast".to_string()));
    assert!(!found.contains(&"weather___get_weather".to_string()));
}

#[test]
fn stale_reveals_are_skipped_after_a_server_changes() {
    let d = disclosure(Preset::Add);
    let mut engine = engine();
    d.handle("s", "add_tool", json!({"names": ["read_file"]}), &engine)
        .unwrap();
    engine
        .replace_server(
            "files",
            vec![
                Tool::new("stat", "File metadata"),
                Tool::new("touch", "Create an empty file"),
            ],
        )
        .unwrap();
    assert!(d.is_active(&engine));
    assert!(names_with(&d.visible_tools("s", &engine), Exposure::Full).is_empty());
}

#[test]
fn a_session_snapshot_restored_elsewhere_shows_the_same_tools() {
    let engine = engine();
    let first = disclosure(Preset::Progressive);
    assert_eq!(first.session_snapshot("s"), None);
    first
        .handle(
            "s",
            "tool_search",
            json!({"query": "weather___get_weather"}),
            &engine,
        )
        .unwrap();
    let snapshot = first.session_snapshot("s").unwrap();
    assert!(!snapshot.revealed.is_empty());

    // Another process with the same catalog, given the snapshot, shows what the first shows.
    let full = |d: &Disclosure| names_with(&d.visible_tools("s", &engine), Exposure::Full);
    let second = disclosure(Preset::Progressive);
    assert!(full(&second).is_empty());
    let wire = serde_json::to_string(&snapshot).unwrap();
    second.restore_session("s", serde_json::from_str(&wire).unwrap());
    assert!(full(&first).contains(&"weather___get_weather".to_string()));
    assert_eq!(full(&second), full(&first));
    assert_eq!(second.session_snapshot("s"), Some(snapshot));
}

#[test]
fn a_restored_snapshot_keeps_the_reveal_bound() {
    let mut config = config(Preset::Progressive);
    config.max_reveals_per_session = 2;
    let d = Disclosure::new(config).unwrap();
    let revealed: Vec<_> = tools().iter().take(5).map(|t| t.id()).collect();
    d.restore_session(
        "s",
        toolsearch_core::SessionSnapshot {
            revealed: revealed.clone(),
            limit_set: None,
        },
    );
    assert_eq!(d.session_snapshot("s").unwrap().revealed, revealed[3..]);
}

/// The arguments of a tool an edge serves itself, for the test below.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReadArgs {
    handle: String,
    offset: Option<u32>,
}

#[test]
fn served_tools_are_dispatched_only_with_arguments_that_fit_their_declaration() {
    let mut d = disclosure(Preset::Search);
    let id = d.serve(toolsearch_core::ToolDecl::new::<ReadArgs>(
        "read_output",
        "Reads an output.",
    ));
    let engine = engine();
    let dispatch = |name: &str, arguments: Value| d.dispatch("s1", name, arguments, &engine);
    // Direct and through call_tool, arguments that fit come through unchanged.
    for outcome in [
        dispatch("read_output", json!({"handle": "h1", "offset": 3})),
        dispatch(
            "call_tool",
            json!({"name": "read_output", "arguments": {"handle": "h1", "offset": 3}}),
        ),
    ] {
        match outcome.unwrap() {
            Dispatch::Served { id: got, arguments } => {
                assert_eq!(got, id);
                assert_eq!(arguments, json!({"handle": "h1", "offset": 3}));
            }
            other => panic!("expected the served tool, got {other:?}"),
        }
    }
    // Arguments that do not fit are refused by the engine, naming every problem and the schema,
    // whichever way the tool is called; the edge never sees them.
    for outcome in [
        dispatch("read_output", json!({"offset": "three", "extra": 1})),
        dispatch(
            "call_tool",
            json!({"name": "read_output", "arguments": {"offset": "three"}}),
        ),
        dispatch("read_output", Value::Null),
    ] {
        let err = outcome.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                Error::MetaArguments {
                    tool: "read_output",
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("handle"), "names the missing field: {text}");
        assert!(error_result(&err)["schema"].is_object(), "{text}");
    }
}

/// A tool served on demand is left out of a list that has `call_tool` (it answers through it
/// and by name), and listed where there is no `call_tool` to reach it by; a tool served always
/// is in both.
#[test]
fn tools_served_on_demand_are_listed_only_without_call_tool() {
    let engine = engine();
    for preset in [Preset::Search, Preset::Passthrough] {
        let mut d = disclosure(preset);
        let on_demand = d.serve(
            toolsearch_core::ToolDecl::new::<ReadArgs>("read_output", "Reads an output.")
                .on_demand(),
        );
        d.serve(toolsearch_core::ToolDecl::new::<ReadArgs>(
            "always_here",
            "Always listed.",
        ));
        let listed = names(&d.visible_tools("s1", &engine));
        let meta = names(&d.meta_tools(&engine));
        let with_call_tool = preset == Preset::Search;
        assert_eq!(listed.contains(&"call_tool".to_string()), with_call_tool);
        for names in [&listed, &meta] {
            assert_eq!(
                names.contains(&"read_output".to_string()),
                !with_call_tool,
                "{preset:?}: {names:?}"
            );
            assert!(names.contains(&"always_here".to_string()), "{names:?}");
        }
        let call = json!({"handle": "h1"});
        match d.dispatch("s1", "read_output", call, &engine).unwrap() {
            Dispatch::Served { id, .. } => assert_eq!(id, on_demand),
            other => panic!("expected the served tool, got {other:?}"),
        }
    }
}
