//! A complete agent loop over a deferred tool catalog, with a scripted model standing in for the
//! LLM: each turn the "model" receives the session's tool list (as an OpenAI Chat `tools` array)
//! and the last tool result, and answers with a tool call or a final message.
//!
//! Search is hybrid (words and meaning) when the embedding model is installed
//! (`toolsearch model fetch`, or `TOOLSEARCH_MODEL_DIR`), and by words otherwise.
//!
//! Run it with `cargo run --release -p toolsearch-core --example agent_loop`.

use serde_json::{json, Value};
use std::sync::Arc;
use toolsearch_core::formats::openai_chat_tools;
use toolsearch_core::{
    error_result, Disclosure, DisclosureConfig, Dispatch, Preset, SearchEngine, SearchRequest, Tool,
};
use toolsearch_embed::{load_model, FetchOptions, ModelLocation, WhenMissing};

/// What the model does on its turn.
enum Turn {
    Call { name: String, arguments: Value },
    Answer(String),
}

/// The catalog: more tools than the activation threshold (15), so only meta-tools are sent until
/// a search reveals something.
fn catalog() -> Vec<Tool> {
    let simple = [
        ("files", "read_file", "Read a text file", "Files"),
        ("files", "write_file", "Write a text file", "Files"),
        ("files", "list_directory", "List a directory", "Files"),
        (
            "github",
            "create_issue",
            "Open an issue in a repository",
            "Development",
        ),
        (
            "github",
            "list_pull_requests",
            "List open pull requests",
            "Development",
        ),
        (
            "github",
            "merge_pull_request",
            "Merge a pull request",
            "Development",
        ),
        (
            "chat",
            "send_message",
            "Post a message to a channel",
            "Communication",
        ),
        (
            "chat",
            "list_channels",
            "List the channels you can post to",
            "Communication",
        ),
        (
            "calendar",
            "create_event",
            "Create a calendar event",
            "Productivity",
        ),
        (
            "calendar",
            "list_events",
            "List upcoming events",
            "Productivity",
        ),
        ("notes", "create_note", "Create a note", "Productivity"),
        ("notes", "search_notes", "Search your notes", "Productivity"),
        (
            "maps",
            "directions",
            "Driving or walking directions between two places",
            "Travel",
        ),
        ("maps", "geocode", "Coordinates of an address", "Travel"),
        (
            "weather",
            "get_forecast",
            "Forecast for the next five days",
            "Weather",
        ),
    ];
    let mut tools: Vec<Tool> = simple
        .into_iter()
        .map(|(server, name, description, category)| {
            Tool::new(name, description)
                .with_server(server)
                .with_category(category)
        })
        .collect();
    tools.push(
        Tool::new("get_weather", "Current weather for a city")
            .with_server("weather")
            .with_category("Weather")
            .with_schema(json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]}
                },
                "required": ["city"],
                "additionalProperties": false
            })),
    );
    tools
}

/// The stand-in for the LLM: a fixed script that reacts to what it is shown, as a model would.
fn scripted_model(step: usize, tools: &Value, last_result: Option<&Value>) -> Turn {
    let has_tool = |name: &str| {
        tools
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["function"]["name"] == name)
    };
    match step {
        // It cannot see a weather tool, so it searches.
        0 => Turn::Call {
            name: "tool_search".into(),
            arguments: json!({"query": "current weather in a city"}),
        },
        // The search revealed the tool; it calls it, but with a wrong units value.
        1 if has_tool("weather___get_weather") => Turn::Call {
            name: "weather___get_weather".into(),
            arguments: json!({"city": "Lisbon", "units": "kelvin"}),
        },
        // The error carried the schema; it fixes the call and goes through call_tool this time.
        2 => Turn::Call {
            name: "call_tool".into(),
            arguments: json!({
                "name": "weather___get_weather",
                "arguments": {"city": "Lisbon", "units": "metric"}
            }),
        },
        _ => Turn::Answer(match last_result {
            Some(r) => format!(
                "It is {} and {} degrees in {}.",
                r["conditions"].as_str().unwrap_or("unknown"),
                r["temperature"],
                r["city"].as_str().unwrap_or("the city")
            ),
            None => "I could not find a weather tool.".into(),
        }),
    }
}

/// The executor: where a real agent would call the tool's server.
fn execute(tool: &Tool, arguments: Value) -> Value {
    match tool.name() {
        "get_weather" => json!({
            "city": arguments["city"],
            "temperature": 21,
            "units": arguments["units"],
            "conditions": "sunny"
        }),
        _ => json!({"ok": true}),
    }
}

/// Gives the engine the embedding model, if it is installed, and the tools their vectors. A real
/// agent would keep them in a `toolsearch_embed::VectorCache` across restarts.
fn attach_model(engine: &mut SearchEngine) {
    let loaded = ModelLocation::resolve(None).and_then(|location| {
        load_model(
            &location,
            WhenMissing::Fail,
            &FetchOptions::default(),
            &mut |_| {},
        )
    });
    match loaded {
        Ok(model) => {
            engine.set_embedder(Some(Arc::new(model)));
            match engine.embed_pending() {
                Ok(count) => println!("search: hybrid, {count} tools embedded"),
                Err(error) => {
                    println!("search: by words (embedding failed: {error})");
                    engine.set_embedder(None);
                }
            }
        }
        Err(error) => println!("search: by words ({error})"),
    }
}

fn main() -> Result<(), toolsearch_core::Error> {
    let mut engine = SearchEngine::from_tools(catalog())?;
    attach_model(&mut engine);
    // A request that shares no word with the tool it needs: found by meaning in hybrid mode.
    let request = "will it rain in Lisbon tomorrow";
    let found = engine.search(
        &SearchRequest::new(request)
            .mode(engine.default_mode())
            .limit(2),
    )?;
    let names: Vec<&str> = found.tools.iter().map(|hit| hit.tool.name()).collect();
    println!(
        "{} search for {request:?}: {names:?}\n",
        found.mode.as_str()
    );

    let disclosure = Disclosure::new(DisclosureConfig::default().preset(Preset::Progressive))?;
    let session = "session-1";

    println!(
        "system prompt guidance:\n{}\n",
        disclosure.guidance(&engine)
    );

    let mut last_result: Option<Value> = None;
    for step in 0..6 {
        let tools = openai_chat_tools(&disclosure.visible_tools(session, &engine));
        println!(
            "turn {step}: the model sees {} tools ({} bytes of tool JSON)",
            tools.as_array().map_or(0, Vec::len),
            tools.to_string().len()
        );
        let (name, arguments) = match scripted_model(step, &tools, last_result.as_ref()) {
            Turn::Answer(text) => {
                println!("  model answers: {text}");
                break;
            }
            Turn::Call { name, arguments } => (name, arguments),
        };
        println!("  model calls {name} {arguments}");
        let result = match disclosure.dispatch(session, &name, arguments, &engine) {
            Ok(Dispatch::Meta(outcome)) => {
                if outcome.visible_changed {
                    println!("  tool list changed: {}", outcome.result["loaded"]);
                }
                outcome.result
            }
            Ok(Dispatch::Call { tool, arguments }) => {
                let result = execute(&tool, arguments);
                last_result = Some(result.clone());
                result
            }
            // This loop serves no tools of its own beside the meta-tools (`Disclosure::serve`).
            Ok(Dispatch::Served { .. }) => json!({"error": "not served here"}),
            // Errors go back to the model as the tool result, with the schema or did-you-mean.
            Err(error) => error_result(&error),
        };
        println!("  result: {result}");
    }
    Ok(())
}
