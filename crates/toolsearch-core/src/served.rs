//! The served-tool seam: every tool the engine or an edge serves itself (the search meta-tools,
//! the gateway's large-output tools) is declared once, as a typed argument struct whose JSON Schema
//! is derived from it, a description, and (when it returns JSON) the schema of its result.
//!
//! A [`ToolDecl`] is what a client sees in `tools/list`; [`parse_arguments`] turns a call's JSON
//! into the typed struct, checking it against the same derived schema first so that every problem
//! is reported in one message with the schema beside it.

use crate::error::{Error, Result};
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::tool::ToolSchema;

/// One served tool as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDecl {
    pub name: &'static str,
    pub description: String,
    pub input_schema: Value,
    /// The schema of the JSON the tool returns (`structuredContent`), when it returns JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP annotations (`readOnlyHint`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Whether `tools/list` carries it where `call_tool` is listed too.
    #[serde(skip)]
    pub listing: Listing,
}

/// Where a served tool is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Listing {
    /// In every tool list.
    #[default]
    Always,
    /// Only in lists without `call_tool`; where `call_tool` is listed, the tool is run through
    /// it (or by name) and costs the model nothing until something points the model at it.
    OnDemand,
}

impl ToolDecl {
    /// A tool whose arguments are `A`.
    pub fn new<A: JsonSchema>(name: &'static str, description: impl Into<String>) -> Self {
        Self {
            name,
            description: description.into(),
            input_schema: schema_for::<A>(),
            output_schema: None,
            annotations: None,
            listing: Listing::Always,
        }
    }

    /// Lists the tool only where `call_tool` is not listed (see [`Listing::OnDemand`]).
    pub fn on_demand(mut self) -> Self {
        self.listing = Listing::OnDemand;
        self
    }

    /// Adds MCP annotations.
    pub fn annotated(mut self, annotations: Value) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Declares that the tool returns `O` as JSON.
    pub fn returns<O: JsonSchema>(mut self) -> Self {
        self.output_schema = Some(output_schema_for::<O>());
        self
    }
}

/// The JSON Schema of `T`, self-contained (no `$ref`s), without what costs tokens on every request
/// and tells a model nothing: `$schema`, the root's `title` and `description` (the tool's own
/// description says it), and the Rust-only number formats (`uint`, `double`, ...).
///
/// This is the schema of what `T` accepts (its `Deserialize`); [`output_schema_for`] is the schema
/// of what it writes.
pub fn schema_for<T: JsonSchema>() -> Value {
    derive_schema::<T>(SchemaSettings::draft2020_12().for_deserialize())
}

/// The JSON Schema of what `T` writes (its `Serialize`: fields it skips when empty are optional),
/// trimmed as [`schema_for`] trims.
pub fn output_schema_for<T: JsonSchema>() -> Value {
    derive_schema::<T>(SchemaSettings::draft2020_12().for_serialize())
}

fn derive_schema<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let generator = settings
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Some(map) = value.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
    }
    trim(&mut value);
    value
}

/// Removes what only restates Rust: `format` keywords naming a Rust number type, and defaults that
/// say "absent" (`null`, `""`, `[]`). Schemas derived from this crate's types are a few levels
/// deep, so the recursion is bounded by them.
fn trim(value: &mut Value) {
    const RUST_FORMATS: [&str; 10] = [
        "uint", "uint8", "uint16", "uint32", "uint64", "int", "int32", "int64", "float", "double",
    ];
    match value {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| RUST_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            let empty_default = match map.get("default") {
                Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Array(items)) => items.is_empty(),
                _ => false,
            };
            if empty_default {
                map.remove("default");
            }
            map.values_mut().for_each(trim);
        }
        Value::Array(items) => items.iter_mut().for_each(trim),
        _ => {}
    }
}

impl ToolDecl {
    /// Checks a call's arguments against the declared input schema, as [`parse_arguments`] does
    /// for its type: `null` counts as `{}`; anything that does not fit fails with every problem
    /// found and the schema. What the engine runs for every served tool before it dispatches.
    pub fn check_arguments(&self, arguments: &Value) -> Result<()> {
        let empty = Value::Object(Map::new());
        let arguments = if arguments.is_null() {
            &empty
        } else {
            arguments
        };
        let key = format!("declared:{}", self.input_schema);
        let problems = problems(
            compiled(&key, || Some(self.input_schema.clone())),
            arguments,
        );
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::MetaArguments {
            tool: self.name,
            problem: problems.join("; "),
            schema: self.input_schema.clone(),
        })
    }
}

/// Reads a call's arguments as `A`: `null` counts as `{}`; anything that does not fit the derived
/// schema fails with every problem found and the schema.
pub fn parse_arguments<A: DeserializeOwned + JsonSchema>(
    tool: &'static str,
    arguments: Value,
) -> Result<A> {
    let arguments = match arguments {
        Value::Null => Value::Object(Map::new()),
        other => other,
    };
    // The derived schema is made (and compiled) once per type, not once per call.
    let key = format!("derived:{}", A::schema_id());
    let problems = problems(compiled(&key, || Some(schema_for::<A>())), &arguments);
    if !problems.is_empty() {
        return Err(Error::MetaArguments {
            tool,
            problem: problems.join("; "),
            schema: schema_for::<A>(),
        });
    }
    serde_json::from_value(arguments).map_err(|e| Error::MetaArguments {
        tool,
        problem: e.to_string(),
        schema: schema_for::<A>(),
    })
}

/// Schemas compiled into validators at most once: compiling one (which checks it against its
/// meta-schema) costs far more than validating a call's arguments, and the same few schemas come
/// back call after call. Keyed by the schema's JSON text, so a tool whose schema changes gets a
/// validator of its new schema. Past this many schemas the cache starts over.
const VALIDATORS_KEPT: usize = 1024;

/// A compiled schema; `None` when it does not compile.
type Compiled = Option<Arc<jsonschema::Validator>>;

fn validators() -> &'static Mutex<HashMap<String, Compiled>> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    VALIDATORS.get_or_init(Mutex::default)
}

/// The validator of the schema `key` names, compiling `schema()` the first time. A schema that
/// does not compile (or cannot be read) is reported once and never blocks a call: the tool's own
/// server validates too.
fn compiled(key: &str, schema: impl FnOnce() -> Option<Value>) -> Compiled {
    // Each operation leaves the map whole, so a panic elsewhere does not poison it.
    let lock = || validators().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = lock().get(key) {
        return hit.clone();
    }
    // Compiled outside the lock; two callers racing on a new schema both compile it.
    let compiled = schema().and_then(|schema| match jsonschema::validator_for(&schema) {
        Ok(validator) => Some(Arc::new(validator)),
        Err(e) => {
            tracing::warn!(error = %e, "input schema does not compile; arguments not validated");
            None
        }
    });
    let mut cache = lock();
    if cache.len() >= VALIDATORS_KEPT {
        cache.clear();
    }
    cache.insert(key.to_string(), compiled.clone());
    compiled
}

/// Up to ten readable problems of `instance` against a compiled schema.
fn problems(validator: Compiled, instance: &Value) -> Vec<String> {
    let Some(validator) = validator else {
        return Vec::new();
    };
    validator
        .iter_errors(instance)
        .take(10)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at {path}: {e}")
            }
        })
        .collect()
}

/// Up to ten readable problems of `instance` against `schema`. A schema that does not compile is
/// reported once and never blocks the call: the tool's own server validates too.
pub fn schema_problems(schema: &Value, instance: &Value) -> Vec<String> {
    problems(
        compiled(&schema.to_string(), || Some(schema.clone())),
        instance,
    )
}

/// [`schema_problems`] for a tool's schema, as the catalog holds it (JSON text, parsed only the
/// first time it is compiled).
pub fn tool_schema_problems(schema: &ToolSchema, instance: &Value) -> Vec<String> {
    problems(
        compiled(&schema.text(), || Some(schema.to_value())),
        instance,
    )
}

#[cfg(test)]
fn cached_validators() -> usize {
    validators().lock().map_or(0, |cache| cache.len())
}

/// A list argument that also accepts one string (`"github"` for `["github"]`): models write both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(transparent)]
#[schemars(transparent)]
// The schema says "array of strings" only: a lone string is accepted, but advertising both costs
// tokens on every request for no gain.
pub struct OneOrMany(#[schemars(with = "Vec<String>")] pub Vec<String>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            One(String),
            Many(Vec<String>),
        }
        Ok(OneOrMany(match Either::deserialize(deserializer)? {
            Either::One(s) => vec![s],
            Either::Many(v) => v,
        }))
    }
}

impl OneOrMany {
    /// The values without blanks.
    pub fn into_values(self) -> Vec<String> {
        self.0
            .into_iter()
            .filter(|s| !s.trim().is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema that changes (a tool replaced by its server) is validated as it is now, not as it
    /// was compiled first; the same text reuses one validator.
    #[test]
    fn validators_follow_the_schema_text() {
        let args = serde_json::json!({"n": "seven"});
        let number =
            serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let text = serde_json::json!({"type": "object", "properties": {"n": {"type": "string"}}});
        assert_eq!(schema_problems(&number, &args).len(), 1);
        assert!(schema_problems(&text, &args).is_empty());
        assert_eq!(
            schema_problems(&number, &args).len(),
            1,
            "cached: same answer"
        );
        let as_tool = ToolSchema::from_value(number.clone());
        assert_eq!(tool_schema_problems(&as_tool, &args).len(), 1);
    }

    #[test]
    fn the_validator_cache_is_bounded() {
        for i in 0..VALIDATORS_KEPT + 10 {
            let schema = serde_json::json!({"type": "object", "maxProperties": i});
            schema_problems(&schema, &serde_json::json!({}));
        }
        assert!(cached_validators() <= VALIDATORS_KEPT);
    }

    #[test]
    fn a_schema_that_does_not_compile_validates_nothing() {
        let bad = serde_json::json!({"type": 12});
        assert!(schema_problems(&bad, &serde_json::json!({"x": 1})).is_empty());
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Args {
        /// What to look for.
        query: String,
        #[serde(default)]
        #[schemars(range(min = 1, max = 5))]
        limit: Option<u32>,
        #[serde(default)]
        server: OneOrMany,
    }

    #[test]
    fn schema_is_derived_self_contained_and_strict() {
        let schema = schema_for::<Args>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], serde_json::json!(["query"]));
        assert_eq!(
            schema["properties"]["query"]["description"],
            "What to look for."
        );
        assert!(schema.get("$schema").is_none() && schema.get("$defs").is_none());
        assert!(schema.get("description").is_none());
        assert!(schema["properties"]["limit"].get("format").is_none());
        assert_eq!(schema["properties"]["limit"]["maximum"], 5);
    }

    #[test]
    fn arguments_parse_or_fail_with_every_problem() {
        let ok: Args = parse_arguments(
            "t",
            serde_json::json!({"query": "x", "limit": 2, "server": ["a"]}),
        )
        .unwrap();
        assert_eq!(ok.server.0, vec!["a"]);
        // The schema advertises a list; plain serde (the REST bodies) also takes one string.
        assert!(
            parse_arguments::<Args>("t", serde_json::json!({"query": "x", "server": "a"})).is_err()
        );
        let lenient: Args =
            serde_json::from_value(serde_json::json!({"query": "x", "server": "a"})).unwrap();
        assert_eq!(lenient.server.0, vec!["a"]);
        let many: Args =
            parse_arguments("t", serde_json::json!({"query": "x", "server": ["a", "b"]})).unwrap();
        assert_eq!(many.server.0, vec!["a", "b"]);
        let err = parse_arguments::<Args>("t", serde_json::json!({"limit": 9, "extra": 1}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("query"), "{err}");
        assert!(err.contains('9') || err.contains("maximum"), "{err}");
        assert!(err.contains("extra"), "{err}");
        assert!(parse_arguments::<Args>("t", Value::Null).is_err());
    }
}
