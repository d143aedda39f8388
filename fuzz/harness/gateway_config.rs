//! One input of the `gateway_config` fuzz target, shared with its replay on stable
//! (`crates/toolsearch-gateway/tests/fuzz_corpora.rs`): any text read as a gateway config, as TOML
//! and as JSON. Reading gives a config or an error with a message and a position inside the text;
//! a config that reads is one the gateway can start from: every server entry has a transport,
//! tokens, disclosure, offload and supervisor settings are accepted, the name rules apply to
//! tools, and every public name splits back into its server and tool.

use std::time::Duration;

use toolsearch_core::{Disclosure, Tool, ToolId};
use toolsearch_gateway::config::{ConfigError, Format, GatewayConfig};
use toolsearch_gateway::offload::{self, OffloadStore};
use toolsearch_gateway::rest::ApiTokens;
use toolsearch_gateway::rmcp::model::{CallToolResult, ContentBlock};
use toolsearch_gateway::SupervisorOptions;

/// Checks one input; panics when a property does not hold. Returns how many of the two formats
/// read it as a config.
pub fn check(data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    let mut read = 0;
    for format in [Format::Toml, Format::Json] {
        match GatewayConfig::parse(text, format, "fuzz") {
            Ok(config) => {
                accepted(&config);
                read += 1;
            }
            Err(e) => refused(text, &e),
        }
    }
    read
}

fn refused(text: &str, e: &ConfigError) {
    assert!(
        !e.message.trim().is_empty(),
        "an error without a message: {e:?}"
    );
    let lines = text.split('\n').count();
    if let Some(line) = e.line {
        assert!((1..=lines).contains(&line), "line {line} of {lines}: {e}");
    }
    if let Some(column) = e.column {
        assert!(column >= 1, "column {column}: {e}");
    }
    assert!(e.to_string().contains(&e.message));
}

fn accepted(config: &GatewayConfig) {
    for (name, server) in config.mcp_servers.iter() {
        if let Err(why) = server.transport() {
            panic!("server `{name}` was accepted without a transport: {why}");
        }
    }
    if let Err(e) = ApiTokens::new(&config.rest.api_tokens) {
        panic!("accepted API tokens are refused by the REST API: {e}");
    }
    if let Err(e) = Disclosure::new(config.disclosure_config()) {
        panic!("accepted toolSearch settings are refused by the disclosure: {e}");
    }
    let _ = config.search_config();

    let policy = config.catalog_policy();
    let naming = &policy.naming;
    for (server, _) in config.active_servers() {
        let names = [
            "t".to_string(),
            format!("a{}b", naming.separator()),
            format!("{}x", naming.separator()),
        ];
        for name in &names {
            let id = ToolId::new(server, name.as_str());
            let public = naming.public_name(&id);
            assert_eq!(
                naming.parse(&public),
                id,
                "the public name `{public}` does not split back into server `{server}` and tool `{name}` (separator `{}`)",
                naming.separator()
            );
        }
        let tools: Vec<Tool> = names
            .iter()
            .map(|name| Tool::new(name.as_str(), "a tool").with_category("misc"))
            .collect();
        let kept = policy.apply(server, tools);
        assert!(kept.iter().all(|t| t.server() == server));
        let _ = policy.categories(kept.iter());
    }

    let options =
        SupervisorOptions::from_config(&config.supervisor, config.tool_search.call_timeout());
    for failures in [1, 2, 40, u32::MAX] {
        let delay = options.backoff(failures);
        assert!(delay <= options.max_backoff && delay >= Duration::ZERO);
    }

    let offload = &config.tool_search.offload;
    assert_eq!(offload::tool_definitions(offload).len(), 3);
    if offload.enabled && offload.threshold_bytes < 1 << 16 {
        let store = OffloadStore::new(offload.clone());
        let text = "x".repeat(offload.threshold_bytes + 1);
        let result = store.offload_result(
            "s",
            "server___tool",
            CallToolResult::success(vec![ContentBlock::text(text)]),
        );
        assert_eq!(
            store.handles("s").len(),
            1,
            "a result past the threshold is stored"
        );
        assert!(result.structured_content.is_some());
    }

    for (loopback, host, origin) in [
        (true, Some("localhost:8787"), None),
        (true, Some("evil.example"), Some("http://evil.example")),
        (
            false,
            Some("tools.example.com"),
            Some("https://agent.example.com"),
        ),
        (false, None, Some("null")),
    ] {
        if let Err(refusal) = config.http.check_request(loopback, host, origin) {
            assert!(!refusal.to_string().is_empty());
        }
    }
}
