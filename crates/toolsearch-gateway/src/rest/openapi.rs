//! The OpenAPI 3.1 document of the API, written out by hand so it reads well; the tests check it
//! against the live routes and the bodies they answer with.

use serde_json::{json, Value};

use super::error::ApiError;
use super::handlers::{DEFAULT_LIMIT, MAX_LIMIT};
use super::{LIST_CATEGORIES_PATH, OPENAPI_PATH, SEARCH_TOOLS_PATH, TOOLS_BY_CATEGORY_PATH};

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
        "paths": {
            SEARCH_TOOLS_PATH: {"post": {
                "operationId": "search_tools",
                "summary": "Search tools by query, category and tags",
                "description": "At least one of `query`, `category` or `tags` is required. An empty query with a category or tags lists the matching tools. `categories` counts the matches per category (over all matches, not just the returned page); when nothing matched it lists every category so the caller can refine.",
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
            OPENAPI_PATH: {"get": {
                "operationId": "openapi",
                "summary": "This document",
                "security": [],
                "responses": {
                    "200": {"description": "The OpenAPI 3.1 document", "content": {"application/json": {"schema": {"type": "object"}}}},
                    "405": error_response("Wrong HTTP method")
                }
            }}
        },
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token from `rest.apiTokens` in the config or `TOOLSEARCH_API_TOKENS` (comma-separated). With no token configured the API is open, and served on loopback addresses only unless started with --insecure-no-auth."
                }
            },
            "schemas": {
                "SearchToolsRequest": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "query": {"type": "string", "description": "Keyword query (`a b` OR, `AND`, `\"phrase\"`, `pre*`, `field:term`), a regex, or an exact name, per `mode`"},
                        "category": {"type": "string", "description": "Only tools of this category (id or name, any case)"},
                        "tags": {"type": "array", "items": {"type": "string"}, "description": "Only tools with any of these tags"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                        "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Skip this many matches (paging)"},
                        "mode": {"type": "string", "enum": ["keyword", "regex", "exact"], "default": "keyword"}
                    }
                },
                "ListCategoriesRequest": {"type": "object", "additionalProperties": false, "properties": {}},
                "ToolsByCategoryRequest": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["category"],
                    "properties": {
                        "category": {"type": "string", "description": "Category id or name, any case"},
                        "limit": {"type": "integer", "minimum": 1, "description": "At most this many tools; all when absent"},
                        "offset": {"type": "integer", "minimum": 0, "default": 0}
                    }
                },
                "Tool": {
                    "type": "object",
                    "required": ["name", "description", "inputSchema", "category", "tags", "server"],
                    "properties": {
                        "name": {"type": "string", "description": "Public name, `server___tool`"},
                        "description": {"type": "string"},
                        "inputSchema": {"type": "object", "description": "The tool's JSON Schema"},
                        "category": {"type": ["string", "null"], "description": "Category id"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "server": {"type": "string"}
                    }
                },
                "MatchedOn": {
                    "type": "object",
                    "required": ["field", "terms"],
                    "properties": {
                        "field": {"type": "string"},
                        "terms": {"type": "array", "items": {"type": "string"}}
                    }
                },
                "SearchHit": {
                    "type": "object",
                    "required": ["tool", "score", "matchedOn"],
                    "properties": {
                        "tool": {"$ref": "#/components/schemas/Tool"},
                        "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "Normalised; 1 for an exact-name match, 0 when listing without a query"},
                        "matchedOn": {"type": "array", "items": {"$ref": "#/components/schemas/MatchedOn"}}
                    }
                },
                "CategoryCount": {
                    "type": "object",
                    "required": ["id", "name", "toolCount"],
                    "properties": {
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "toolCount": {"type": "integer", "minimum": 0}
                    }
                },
                "Category": {
                    "type": "object",
                    "required": ["id", "name", "description", "toolCount"],
                    "properties": {
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "toolCount": {"type": "integer", "minimum": 0}
                    }
                },
                "SearchToolsResponse": {
                    "type": "object",
                    "required": ["tools", "totalMatches", "categories"],
                    "properties": {
                        "tools": {"type": "array", "items": {"$ref": "#/components/schemas/SearchHit"}},
                        "totalMatches": {"type": "integer", "minimum": 0},
                        "categories": {"type": "array", "items": {"$ref": "#/components/schemas/CategoryCount"}}
                    }
                },
                "ListCategoriesResponse": {
                    "type": "object",
                    "required": ["categories"],
                    "properties": {
                        "categories": {"type": "array", "items": {"$ref": "#/components/schemas/Category"}}
                    }
                },
                "ToolsByCategoryResponse": {
                    "type": "object",
                    "required": ["category", "tools"],
                    "properties": {
                        "category": {"$ref": "#/components/schemas/Category"},
                        "tools": {"type": "array", "items": {"$ref": "#/components/schemas/Tool"}}
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
            }
        }
    })
}
