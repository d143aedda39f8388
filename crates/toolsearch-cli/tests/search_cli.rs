//! `toolsearch search`, run as a user runs it.

use serde_json::Value;
use std::path::Path;
use std::process::Output;

use crate::peers;
use peers::stderr_of as stderr;

const CATALOG: &str = r#"{"servers": {
  "mail": [
    {"name": "send_email", "description": "Send an email to a recipient", "category": "Communication",
     "tags": ["outbox"],
     "inputSchema": {"type": "object", "properties": {"recipient": {"type": "string", "description": "Address"}}, "required": ["recipient"]}},
    {"name": "read_email", "description": "Read email from the inbox", "category": "Communication", "tags": ["inbox"]}
  ],
  "files": [
    {"name": "read_file", "description": "Read a file from disk", "category": "Storage", "tags": ["disk"],
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string", "description": "File path"}}}},
    {"name": "write_file", "description": "Write a file to disk", "category": "Storage", "tags": ["disk"]}
  ]
}}"#;

fn toolsearch(args: &[&str]) -> Output {
    peers::run_toolsearch_in(None, args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn search(catalog: &Path, args: &[&str]) -> Output {
    let mut all = vec!["search", "--catalog", catalog.to_str().unwrap()];
    all.extend_from_slice(args);
    toolsearch(&all)
}

fn search_json(catalog: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.insert(0, "--json");
    let out = search(catalog, &all);
    assert!(
        out.status.success(),
        "{args:?} failed: {}\n{}",
        stderr(&out),
        stdout(&out)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

fn tool_names(json: &Value) -> Vec<String> {
    json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn table_output() {
    let dir = peers::scratch("search-cli-table");
    let catalog = dir.file("catalog.json", CATALOG);
    // Keyword mode: the table's rows are the two word matches, whatever the model would add.
    // (Equal scores, so by name.)
    let out = search(&catalog, &["--mode", "keyword", "email"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    for column in ["#", "SCORE", "NAME", "MATCHED ON", "DESCRIPTION"] {
        assert!(lines[0].contains(column), "{text}");
    }
    assert!(lines[1].contains("mail___read_email"), "{text}");
    assert!(lines[1].contains("Read email from the inbox"), "{text}");
    assert!(lines[1].trim_start().starts_with('1'), "{text}");
    assert!(text.contains("mail___send_email"), "{text}");
    assert!(!text.contains("files___"), "{text}");
    assert_eq!(lines.last().unwrap().trim(), "2 of 2 matches", "{text}");
}

/// Several queries as several arguments: a table per query, each with its own rows and counts;
/// six are refused, naming the limit.
#[test]
fn several_queries_print_a_table_each() {
    let dir = peers::scratch("search-cli-several");
    let catalog = dir.file("catalog.json", CATALOG);
    let out = search(
        &catalog,
        &["--mode", "keyword", "email", "disk", "xqzvbnmk"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let parts: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(parts.len(), 3, "{text}");
    assert!(parts[0].starts_with("email:\n"), "{text}");
    assert!(parts[0].contains("mail___send_email"), "{text}");
    assert!(!parts[0].contains("files___"), "{text}");
    assert!(parts[0].trim_end().ends_with("2 of 2 matches"), "{text}");
    assert!(parts[1].starts_with("disk:\n"), "{text}");
    assert!(parts[1].contains("files___write_file"), "{text}");
    assert!(!parts[1].contains("mail___"), "{text}");
    assert!(parts[2].contains("no tools match \"xqzvbnmk\""), "{text}");

    let out = search(&catalog, &["a", "b", "c", "d", "e", "f"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("at most 5"), "{}", stderr(&out));
}

/// A request that matches nothing lists the catalog: with no tool (keyword search), or under
/// a line saying nothing fits, with the closest guesses by meaning (hybrid search).
#[test]
fn table_output_of_a_miss_lists_the_catalog() {
    let dir = peers::scratch("search-cli-miss");
    let catalog = dir.file("catalog.json", CATALOG);
    let listing = "files___read_file, files___write_file, mail___read_email, mail___send_email";
    let out = search(&catalog, &["--mode", "keyword", "xqzvbnmk"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("no tools match"), "{text}");
    assert!(text.contains(listing), "{text}");

    let out = search(&catalog, &["xqzvbnmk"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("no tool fits \"xqzvbnmk\" well; the closest guesses, with low scores:"),
        "{text}"
    );
    assert!(text.contains("meaning"), "{text}");
    assert!(text.contains(listing), "{text}");
}

#[test]
fn json_output_has_every_key() {
    let dir = peers::scratch("search-cli-json");
    let catalog = dir.file("catalog.json", CATALOG);
    let json = search_json(&catalog, &["--mode", "keyword", "send email"]);
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "mode",
            "offset",
            "query",
            "returned",
            "tools",
            "totalMatches"
        ]
    );
    assert_eq!(json["query"], "send email");
    assert_eq!(json["mode"], "keyword");
    assert_eq!(json["offset"], 0);
    assert!(json.get("fallback").is_none());
    let tools = json["tools"].as_array().unwrap();
    assert_eq!(json["totalMatches"].as_u64().unwrap() as usize, tools.len());
    let first = &tools[0];
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "category",
            "description",
            "inputSchema",
            "matchedOn",
            "name",
            "score",
            "server",
            "tags"
        ]
    );
    assert_eq!(first["name"], "mail___send_email");
    assert_eq!(first["server"], "mail");
    assert_eq!(first["description"], "Send an email to a recipient");
    assert_eq!(
        first["inputSchema"]["properties"]["recipient"]["type"],
        "string"
    );
    assert_eq!(first["inputSchema"]["required"][0], "recipient");
    for tool in tools {
        let score = tool["score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&score), "{score}");
        for m in tool["matchedOn"].as_array().unwrap() {
            assert!(m["field"].is_string(), "{m}");
            assert!(!m["terms"].as_array().unwrap().is_empty(), "{m}");
        }
    }
    let matched = first["matchedOn"].as_array().unwrap();
    assert!(
        matched.iter().any(
            |m| m["field"] == "name" && m["terms"].as_array().unwrap().contains(&"send".into())
        ),
        "{matched:?}"
    );
}

#[test]
fn json_output_of_a_miss_carries_the_fallback() {
    let dir = peers::scratch("search-cli-json-miss");
    let catalog = dir.file("catalog.json", CATALOG);
    let json = search_json(&catalog, &["--mode", "keyword", "xqzvbnmk"]);
    assert_eq!(json["totalMatches"], 0);
    assert_eq!(json["tools"], Value::Array(vec![]));
    assert_eq!(json["fallback"]["kind"], "names");
    assert_eq!(json["fallback"]["names"].as_array().unwrap().len(), 4);
    // Hybrid: the closest guesses, scored under 0.5, nothing fits, and the same fallback.
    let json = search_json(&catalog, &["xqzvbnmk"]);
    assert_eq!(json["nothingFits"], true, "{json}");
    let guesses = json["tools"].as_array().unwrap();
    assert!((1..=5).contains(&guesses.len()), "{json}");
    assert!(
        guesses.iter().all(|t| t["score"].as_f64().unwrap() < 0.5),
        "{json}"
    );
    assert_eq!(json["fallback"]["names"].as_array().unwrap().len(), 4);
}

#[test]
fn options_reach_the_engine() {
    let dir = peers::scratch("search-cli-options");
    let catalog = dir.file("catalog.json", CATALOG);
    // --top-band 0 keeps every match (the default drops those below half the best score).
    let all = search_json(&catalog, &["--top-band", "0", "read write email file"]);
    assert_eq!(all["totalMatches"], 4);
    let everything = tool_names(&all);

    let page = search_json(
        &catalog,
        &[
            "--top-band",
            "0",
            "--limit",
            "2",
            "--offset",
            "1",
            "read write email file",
        ],
    );
    assert_eq!(tool_names(&page), everything[1..3]);
    assert_eq!(page["totalMatches"], 4);
    assert_eq!(page["nextOffset"], 3);

    let server = search_json(
        &catalog,
        &[
            "--top-band",
            "0",
            "--server",
            "files",
            "read write email file",
        ],
    );
    let mut names = tool_names(&server);
    names.sort();
    assert_eq!(names, vec!["files___read_file", "files___write_file"]);

    let category = search_json(
        &catalog,
        &[
            "--top-band",
            "0",
            "--category",
            "communication",
            "read write email file",
        ],
    );
    assert!(tool_names(&category)
        .iter()
        .all(|n| n.starts_with("mail___")));
    assert_eq!(category["totalMatches"], 2);

    let tag = search_json(
        &catalog,
        &[
            "--top-band",
            "0",
            "--tag",
            "inbox",
            "--tag",
            "outbox",
            "read write email file",
        ],
    );
    assert_eq!(tag["totalMatches"], 2);

    let pattern = search_json(
        &catalog,
        &["--pattern", "files:write_*", "read write email file"],
    );
    assert_eq!(tool_names(&pattern), vec!["files___write_file"]);

    let regex = search_json(&catalog, &["--mode", "regex", "^read_"]);
    assert_eq!(regex["mode"], "regex");
    let mut names = tool_names(&regex);
    names.sort();
    assert_eq!(names, vec!["files___read_file", "mail___read_email"]);

    let exact = search_json(&catalog, &["--mode", "exact", "write_file"]);
    assert_eq!(exact["mode"], "exact");
    assert_eq!(tool_names(&exact), vec!["files___write_file"]);
    assert_eq!(exact["tools"][0]["score"], 1.0);

    let threshold = search_json(&catalog, &["--threshold", "1.5", "read write email file"]);
    assert_eq!(threshold["totalMatches"], 0);

    let band = search_json(&catalog, &["--top-band", "1.0", "inbox"]);
    assert_eq!(tool_names(&band), vec!["mail___read_email"]);

    let browse = search_json(&catalog, &[]);
    assert_eq!(browse["totalMatches"], 4);
    assert_eq!(
        tool_names(&browse),
        vec![
            "files___read_file",
            "files___write_file",
            "mail___read_email",
            "mail___send_email"
        ]
    );
}

#[test]
fn format_can_be_forced() {
    let dir = peers::scratch("search-cli-format");
    let catalog = dir.file(
        "tools.json",
        r#"[{"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {}}}]"#,
    );
    let json = search_json(&catalog, &["--format", "openai", "weather"]);
    assert_eq!(tool_names(&json), vec!["get_weather"]);
    let out = search(&catalog, &["--format", "yaml", "weather"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("yaml"), "{}", stderr(&out));
}

#[test]
fn a_bad_regex_exits_2_naming_the_problem() {
    let dir = peers::scratch("search-cli-regex");
    let catalog = dir.file("catalog.json", CATALOG);
    let out = search(&catalog, &["--mode", "regex", "("]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("invalid regex"), "{err}");
    assert!(err.contains("unclosed group"), "{err}");
    assert!(stdout(&out).is_empty());

    let long = "a".repeat(201);
    let out = search(&catalog, &["--mode", "regex", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("200"), "{}", stderr(&out));
}

#[test]
fn bad_input_exits_2() {
    let dir = peers::scratch("search-cli-bad-input");
    let missing = dir.join("no-such-catalog.json");
    let out = search(&missing, &["anything"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("cannot read catalog"), "{err}");
    assert!(err.contains("no-such-catalog.json"), "{err}");

    let broken = dir.file(
        "broken.json",
        "{\n  \"tools\": [\n    {\"name\": \"a\",}\n  ]\n}\n",
    );
    let out = search(&broken, &["anything"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("broken.json"), "{err}");
    assert!(err.contains("line 3"), "{err}");

    let nameless = dir.file(
        "nameless.json",
        "[\n  {\"description\": \"x\", \"inputSchema\": {}}\n]",
    );
    let out = search(&nameless, &["anything"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("nameless.json") && err.contains("line 2"),
        "{err}"
    );
    assert!(err.contains("name"), "{err}");

    let dup = dir.file("dup.json", r#"[{"name": "a"}, {"name": "a"}]"#);
    let out = search(&dup, &["a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("appears twice"), "{}", stderr(&out));

    let catalog = dir.file("catalog.json", CATALOG);
    let out = search(&catalog, &["--mode", "fuzzy", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("fuzzy"), "{}", stderr(&out));
}

#[test]
fn the_example_catalog_answers() {
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog.json");
    let json = search_json(&catalog, &["open an issue in a repository"]);
    assert_eq!(tool_names(&json)[0], "github___create_issue");
}

#[test]
fn livemcpbench_ranks_create_document_in_the_top_3() {
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/eval/datasets/livemcpbench/tools.json");
    if !catalog.is_file() {
        eprintln!(
            "skipped: {} is absent (the evaluation data sits beside the project)",
            catalog.display()
        );
        return;
    }
    let json = search_json(&catalog, &["create a new word document"]);
    let names: Vec<String> = json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n == "create_document" || n.ends_with("___create_document")),
        "top 3: {names:?}"
    );
    let out = search(&catalog, &["create a new word document"]);
    assert!(out.status.success());
    let table = stdout(&out);
    let top3: Vec<&str> = table.lines().skip(1).take(3).collect();
    assert!(
        top3.iter().any(|l| l.contains("create_document")),
        "{table}"
    );
}
