//! The OpenAPI 3.1 document of the API. Paths and prose are written here; the request and response
//! schemas are derived from the search contract's types, the same the MCP meta-tools declare, so
//! the document cannot drift from what the handlers read and write.

use serde_json::{json, Value};
use toolsearch_core::contract::{
    CategoryArgs, CategoryList, CategoryTools, SearchArgs, SearchResults,
};
use toolsearch_core::{output_schema_for, schema_for};

use super::error::ApiError;
use super::{
    HEALTHZ_PATH, LIST_CATEGORIES_PATH, OPENAPI_PATH, READYZ_PATH, SEARCH_TOOLS_PATH, STATUS_PATH,
    TOOLS_BY_CATEGORY_PATH,
};

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn json_body(schema: &str, example: Value, required: bool) -> Value {
    json!({
        "required": required,
        "content": {"application/json": {
            "schema": {"$ref": format!("#/components/schemas/{schema}")},
            "example": example
        }}
    })
}

fn ok(schema: &str, description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

fn common_errors(mut responses: Value) -> Value {
    for (status, description) in [
        (
            "400",
            "Malformed JSON, unknown fields (named in the message), or invalid values",
        ),
        ("401", "Missing or invalid bearer token"),
        (
            "403",
            "`Host` or `Origin` not allowed on this listener (see `http.allowedHosts`, `http.allowedOrigins`)",
        ),
        ("405", "Wrong HTTP method"),
        (
            "408",
            "The request body did not arrive within `http.bodyReadTimeoutSecs`",
        ),
        ("413", "Request body larger than the configured limit"),
        ("415", "A non-empty body that is not `application/json`"),
        ("500", "Internal error"),
    ] {
        responses[status] = error_response(description);
    }
    responses
}

/// The document served at `GET /api/openapi.json`.
pub fn document() -> Value {
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "toolsearch REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Search a tool catalog by query, category and tags; list categories; list the tools of a category. Every error is `{\"error\": {\"code\", \"message\"}}`. A request body may be empty where no field is required; a non-empty body must be `application/json`."
        },
        "security": [{"bearerAuth": []}],
        "paths": paths(),
        "components": components(),
    })
}

/// The routes and their operations.
fn paths() -> Value {
    json!({
        SEARCH_TOOLS_PATH: {"post": {
            "operationId": "search_tools",
            "summary": "Search tools by query, category and tags",
            "description": "At least one of `query`, `server`, `category` or `tags` is required. An empty query with filters lists the matching tools. The result is the search contract the MCP `search_tools` meta-tool returns: `totalMatches`, `returned`, `nextOffset` when more exist, and when nothing matched a `fallback` with the nearest names, categories or servers.",
            "requestBody": json_body("SearchToolsRequest", json!({"query": "create an issue", "limit": 5}), true),
            "responses": common_errors(json!({
                "200": ok("SearchToolsResponse", "Matches, best first"),
                "404": error_response("Unknown category; the message lists the known ids")
            }))
        }},
        LIST_CATEGORIES_PATH: {"post": {
            "operationId": "list_categories",
            "summary": "List the categories with their tool counts",
            "requestBody": json_body("ListCategoriesRequest", json!({}), false),
            "responses": common_errors(json!({
                "200": ok("ListCategoriesResponse", "Configured categories in config order, then the tools' own categories by id")
            }))
        }},
        TOOLS_BY_CATEGORY_PATH: {"post": {
            "operationId": "get_tools_by_category",
            "summary": "The tools of one category, by server and name",
            "requestBody": json_body("ToolsByCategoryRequest", json!({"category": "Files"}), true),
            "responses": common_errors(json!({
                "200": ok("ToolsByCategoryResponse", "The category and its tools"),
                "404": error_response("Unknown category; the message lists the known ids")
            }))
        }},
        STATUS_PATH: {"get": {
            "operationId": "status",
            "summary": "Where the gateway and search stand: upstreams, the default mode, the embedding model, tools embedded",
            "description": "Top-level `state` is `starting` until every upstream's first start has settled (ready, failed, or out of its startup time), then `ready`; `upstreams.notReady` lists the servers that are not ready with their states. `search.state` is `off` (semantic search turned off), `loading` (the model is being loaded or installed), `embedding` (hybrid over the tools embedded so far), `waitingForUpstreams` (every tool so far has its vector, but upstreams are still starting), `ready` (every tool has its vector) or `unavailable` (no model: keyword search; `error` says why).",
            "responses": common_errors(json!({
                "200": ok("StatusResponse", "The search status")
            }))
        }},
        HEALTHZ_PATH: {"get": {
            "operationId": "healthz",
            "summary": "Liveness: the process is serving",
            "security": [],
            "responses": {
                "200": ok("Health", "Alive"),
                "405": error_response("Wrong HTTP method")
            }
        }},
        READYZ_PATH: {"get": {
            "operationId": "readyz",
            "summary": "Readiness: every upstream's first start has settled",
            "description": "200 once every upstream's first start has settled (ready, failed, or out of `supervisor.startupTimeoutSecs`); 503 while some are still starting. Both list the servers that are not ready. Holds no catalog data.",
            "security": [],
            "responses": {
                "200": ok("Readiness", "First starts settled"),
                "503": ok("Readiness", "Upstreams still starting"),
                "405": error_response("Wrong HTTP method")
            }
        }},
        OPENAPI_PATH: {"get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {
                "200": {"description": "The OpenAPI 3.1 document", "content": {"application/json": {"schema": {"type": "object"}}}},
                "405": error_response("Wrong HTTP method")
            }
        }}
    })
}

/// The schemas, derived from the contract's types, and the bearer scheme.
fn components() -> Value {
    json!({
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "A token from `rest.apiTokens` in the config or `TOOLSEARCH_API_TOKENS` (comma-separated). With no token configured the API is open, and served on loopback addresses only unless started with --insecure-no-auth."
            }
        },
        "schemas": schemas()
    })
}

/// The bodies and answers, the contract's derived from its types.
fn schemas() -> Value {
    json!({
        "SearchToolsRequest": schema_for::<SearchArgs>(),
        "ListCategoriesRequest": {"type": "object", "additionalProperties": false, "properties": {}},
        "ToolsByCategoryRequest": schema_for::<CategoryArgs>(),
        "SearchToolsResponse": output_schema_for::<SearchResults>(),
        "ListCategoriesResponse": output_schema_for::<CategoryList>(),
        "ToolsByCategoryResponse": output_schema_for::<CategoryTools>(),
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "ok"}}
        },
        "Upstreams": {
            "type": "object",
            "required": ["notReady"],
            "properties": {
                "notReady": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["server", "state"],
                        "properties": {
                            "server": {"type": "string"},
                            "state": {"type": "string"}
                        }
                    }
                }
            }
        },
        "Readiness": {
            "type": "object",
            "required": ["status", "upstreams"],
            "properties": {
                "status": {"enum": ["ready", "starting"]},
                "upstreams": {"$ref": "#/components/schemas/Upstreams"}
            }
        },
        "StatusResponse": {
            "type": "object",
            "required": ["state", "upstreams", "search"],
            "properties": {
                "state": {"enum": ["starting", "ready"]},
                "upstreams": {"$ref": "#/components/schemas/Upstreams"},
                "search": {
                    "type": "object",
                    "required": ["state", "defaultMode", "ready", "total"],
                    "properties": {
                        "state": {"enum": ["off", "loading", "embedding", "waitingForUpstreams", "ready", "unavailable"]},
                        "error": {"type": "string"},
                        "defaultMode": {"enum": ["hybrid", "keyword"]},
                        "model": {"type": ["string", "null"]},
                        "ready": {"type": "integer", "minimum": 0},
                        "total": {"type": "integer", "minimum": 0}
                    }
                }
            }
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string", "enum": ApiError::CODES},
                        "message": {"type": "string"}
                    }
                }
            }
        }
    })
}
