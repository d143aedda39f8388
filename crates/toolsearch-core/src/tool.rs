//! The one model of a tool that every part of the engine shares.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{ser, Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;
use std::sync::OnceLock;

/// The separator between server and tool name in a public (namespaced) name.
pub const DEFAULT_SEPARATOR: &str = "___";

/// Identity of a tool: the server it belongs to (possibly empty) and its name on that server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ToolId {
    pub server: String,
    pub name: String,
}

impl ToolId {
    pub fn new(server: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.server.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}{DEFAULT_SEPARATOR}{}", self.server, self.name)
        }
    }
}

/// When a tool's full definition is withheld from the model until a search asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeferPolicy {
    /// Always sent in full.
    Never,
    /// Deferred when disclosure is active (the catalog is above the threshold).
    #[default]
    Automatic,
    /// Deferred even below the threshold.
    Always,
}

/// A callable tool with its JSON Schema.
///
/// A large catalog is mostly tools, so a tool is held in as few allocations as it can be: its
/// server, name and description share one string, the schema is its compact text, and what most
/// tools lack (category, tags, annotations) sits behind one optional box. Fields are read through
/// accessors and changed through `with_*` builders or `set_*` methods.
#[derive(Clone, PartialEq)]
pub struct Tool {
    /// Server, name and description, one after the other.
    text: Box<str>,
    name_start: u32,
    description_start: u32,
    input_schema: ToolSchema,
    /// `None` when the tool has no category, tags or annotations.
    extras: Option<Box<Extras>>,
    defer: DeferPolicy,
}

/// What most tools do not have.
#[derive(Clone, PartialEq, Default)]
struct Extras {
    category: Option<String>,
    tags: Vec<String>,
    /// MCP annotations (readOnlyHint, title, ...), kept verbatim.
    annotations: Option<Value>,
}

impl Extras {
    fn is_empty(&self) -> bool {
        self.category.is_none() && self.tags.is_empty() && self.annotations.is_none()
    }
}

/// The schema of a tool that takes no arguments.
pub fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl Tool {
    pub fn new(name: impl AsRef<str>, description: impl AsRef<str>) -> Self {
        Self::from_parts("", name.as_ref(), description.as_ref())
    }

    fn from_parts(server: &str, name: &str, description: &str) -> Self {
        let mut tool = Self {
            text: Box::default(),
            name_start: 0,
            description_start: 0,
            input_schema: ToolSchema::default(),
            extras: None,
            defer: DeferPolicy::Automatic,
        };
        tool.pack(server, name, description);
        tool
    }

    /// A tool as MCP's `tools/list` describes it. The one rule every reader of MCP tools follows
    /// (a catalog file, a live server), so that the same tool read either way is the same tool:
    /// a tool without a description is described by its title, the title is kept in the
    /// annotations (`title`) either way, and empty annotations are none.
    pub fn from_mcp(
        name: String,
        description: Option<String>,
        title: Option<String>,
        annotations: Option<Value>,
    ) -> Self {
        let mut annotations = annotations.filter(|a| !a.as_object().is_some_and(|o| o.is_empty()));
        if let Some(title) = &title {
            let map = annotations.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Some(object) = map.as_object_mut() {
                object
                    .entry("title")
                    .or_insert_with(|| Value::String(title.clone()));
            }
        }
        let description = description
            .filter(|d| !d.trim().is_empty())
            .or(title)
            .unwrap_or_default();
        let mut tool = Self::new(name, description);
        tool.set_annotations(annotations);
        tool
    }

    /// Writes server, name and description into one string. Lengths are kept in 32 bits: a
    /// server and name over 4 GiB together (no real tool) are cut, and a description past that
    /// point too.
    fn pack(&mut self, server: &str, name: &str, description: &str) {
        let server = cut(server, u32::MAX as usize);
        let name = cut(name, u32::MAX as usize - server.len());
        let description = cut(description, u32::MAX as usize - server.len() - name.len());
        let mut text = String::with_capacity(server.len() + name.len() + description.len());
        text.push_str(server);
        text.push_str(name);
        text.push_str(description);
        // Both fit: the three lengths together were cut to at most u32::MAX.
        self.name_start = server.len() as u32;
        self.description_start = (server.len() + name.len()) as u32;
        self.text = text.into_boxed_str();
    }

    fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Drops the extras' box once it holds nothing, so that equal tools compare equal.
    fn tidy_extras(&mut self) {
        if self.extras.as_ref().is_some_and(|e| e.is_empty()) {
            self.extras = None;
        }
    }

    /// The server that owns the tool; empty when the catalog has no servers.
    pub fn server(&self) -> &str {
        &self.text[..self.name_start as usize]
    }

    pub fn name(&self) -> &str {
        &self.text[self.name_start as usize..self.description_start as usize]
    }

    pub fn description(&self) -> &str {
        &self.text[self.description_start as usize..]
    }

    pub fn input_schema(&self) -> &ToolSchema {
        &self.input_schema
    }

    pub fn category(&self) -> Option<&str> {
        self.extras.as_ref()?.category.as_deref()
    }

    pub fn tags(&self) -> &[String] {
        self.extras.as_ref().map_or(&[], |e| e.tags.as_slice())
    }

    pub fn defer(&self) -> DeferPolicy {
        self.defer
    }

    /// MCP annotations (readOnlyHint, title, ...), kept verbatim.
    pub fn annotations(&self) -> Option<&Value> {
        self.extras.as_ref()?.annotations.as_ref()
    }

    pub fn set_server(&mut self, server: impl AsRef<str>) {
        let server = server.as_ref();
        if server == self.server() {
            return;
        }
        let (name, description) = (self.name().to_owned(), self.description().to_owned());
        self.pack(server, &name, &description);
    }

    pub fn set_name(&mut self, name: impl AsRef<str>) {
        let name = name.as_ref();
        if name == self.name() {
            return;
        }
        let (server, description) = (self.server().to_owned(), self.description().to_owned());
        self.pack(&server, name, &description);
    }

    pub fn set_description(&mut self, description: impl AsRef<str>) {
        let description = description.as_ref();
        if description == self.description() {
            return;
        }
        let (server, name) = (self.server().to_owned(), self.name().to_owned());
        self.pack(&server, &name, description);
    }

    pub fn set_input_schema(&mut self, schema: ToolSchema) {
        self.input_schema = schema;
    }

    pub fn set_category(&mut self, category: Option<String>) {
        self.extras_mut().category = category;
        self.tidy_extras();
    }

    pub fn set_tags(&mut self, tags: Vec<String>) {
        self.extras_mut().tags = tags;
        self.tidy_extras();
    }

    pub fn set_defer(&mut self, defer: DeferPolicy) {
        self.defer = defer;
    }

    pub fn set_annotations(&mut self, annotations: Option<Value>) {
        self.extras_mut().annotations = annotations;
        self.tidy_extras();
    }

    pub fn with_server(mut self, server: impl AsRef<str>) -> Self {
        self.set_server(server.as_ref());
        self
    }

    pub fn with_schema(mut self, schema: Value) -> Self {
        self.input_schema = ToolSchema::from_value(schema);
        self
    }

    pub fn with_input_schema(mut self, schema: ToolSchema) -> Self {
        self.input_schema = schema;
        self
    }

    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.set_category(Some(category.into()));
        self
    }

    pub fn with_tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.set_tags(tags.into_iter().map(Into::into).collect());
        self
    }

    pub fn with_defer(mut self, defer: DeferPolicy) -> Self {
        self.defer = defer;
        self
    }

    pub fn with_annotations(mut self, annotations: Value) -> Self {
        self.set_annotations(Some(annotations));
        self
    }

    pub fn id(&self) -> ToolId {
        ToolId::new(self.server(), self.name())
    }

    /// The schema's parameters as (name, description) pairs, top level and nested objects alike.
    pub fn parameters(&self) -> Vec<(String, String)> {
        self.input_schema.parameters()
    }
}

/// The longest start of `text` no longer than `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("server", &self.server())
            .field("name", &self.name())
            .field("description", &self.description())
            .field("input_schema", &self.input_schema)
            .field("category", &self.category())
            .field("tags", &self.tags())
            .field("defer", &self.defer)
            .field("annotations", &self.annotations())
            .finish()
    }
}

/// A tool as JSON: `server` (left out when empty), `name`, `description`, `inputSchema`,
/// `category` and `tags` when set, `defer`, and `annotations` when there are some.
impl Serialize for Tool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            #[serde(skip_serializing_if = "str::is_empty")]
            server: &'a str,
            name: &'a str,
            description: &'a str,
            #[serde(rename = "inputSchema")]
            input_schema: &'a ToolSchema,
            #[serde(skip_serializing_if = "Option::is_none")]
            category: Option<&'a str>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            tags: &'a [String],
            defer: DeferPolicy,
            #[serde(skip_serializing_if = "Option::is_none")]
            annotations: Option<&'a Value>,
        }
        Wire {
            server: self.server(),
            name: self.name(),
            description: self.description(),
            input_schema: &self.input_schema,
            category: self.category(),
            tags: self.tags(),
            defer: self.defer,
            annotations: self.annotations(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Tool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename = "Tool")]
        struct Wire {
            #[serde(default)]
            server: String,
            name: String,
            #[serde(default)]
            description: String,
            #[serde(rename = "inputSchema", default)]
            input_schema: ToolSchema,
            #[serde(default)]
            category: Option<String>,
            #[serde(default)]
            tags: Vec<String>,
            #[serde(default)]
            defer: DeferPolicy,
            #[serde(default)]
            annotations: Option<Value>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let mut tool = Tool::from_parts(&wire.server, &wire.name, &wire.description)
            .with_input_schema(wire.input_schema)
            .with_defer(wire.defer);
        tool.set_category(wire.category);
        tool.set_tags(wire.tags);
        tool.set_annotations(wire.annotations);
        Ok(tool)
    }
}

/// A tool's input schema, held as its compact JSON text, compressed.
///
/// A parsed `Value` tree (an `IndexMap` per object) takes several times the memory of its text,
/// and a large catalog is mostly schemas that are only ever written back out. So the text is kept
/// and parsed on demand ([`ToolSchema::to_value`]). Every constructor goes through a parsed value
/// and serde_json's compact writer, so the text is always valid, compact JSON, with key order kept.
///
/// The text is held as an LZ4 block compressed against [`SCHEMA_DICTIONARY`], the words of JSON
/// Schema, so a schema's boilerplate (`{"type":"object","properties":{`,
/// `"type":"string","description":`) costs a few bytes: schemas are the larger part of a big
/// catalog's tools, and one is read back (a fraction of a microsecond) only when a tool is
/// written out, validated or indexed.
#[derive(Clone)]
pub struct ToolSchema(Box<[u8]>);

/// What schemas are compressed against: words of JSON Schema as serde_json's compact writer puts
/// them. Any bytes would decode; these make most of a typical schema's structure a reference into
/// them. Nothing compressed leaves the process, so changing it changes no stored data.
const SCHEMA_DICTIONARY: &[u8] = concat!(
    r##""$schema":"http://json-schema.org/draft-07/schema#","##,
    r##""$schema":"https://json-schema.org/draft/2020-12/schema","##,
    r#""additionalProperties":false"#,
    r#""additionalProperties":{"#,
    r#""anyOf":[{"#,
    r#""oneOf":[{"#,
    r#""allOf":[{"#,
    r##""$ref":"#/$defs/"##,
    r#""$defs":{"#,
    r#""const":"#,
    r#""pattern":""#,
    r#""examples":["#,
    r#""minLength":1,"maxLength":"#,
    r#""minItems":1,"maxItems":"#,
    r#""exclusiveMinimum":"#,
    r#""minimum":0,"maximum":"#,
    r#""format":"date-time""#,
    r#""format":"uri""#,
    r#""title":""#,
    r#""default":false"#,
    r#""default":null"#,
    r#""default":""#,
    r#""nullable":true"#,
    r#"{"type":"null"}"#,
    r#""enum":[""#,
    r#""type":"boolean","description":"Whether to "#,
    r#""type":"array","items":{"type":"string"},"description":""#,
    r#""type":"array","items":{"type":"object","properties":{"#,
    r#""type":"object","description":""#,
    r#""type":"number","description":""#,
    r#""type":"integer","description":"The number of "#,
    r#""},"required":[""#,
    r#""}},"required":[""#,
    r#""]}"#,
    r#""type":"string","description":"The "#,
    r#"{"type":"object","properties":{""#,
)
.as_bytes();

impl ToolSchema {
    /// The schema of `value`, as compact JSON text.
    pub fn from_value(value: Value) -> Self {
        Self::from_serialize(&value)
    }

    /// The schema of a JSON object (as MCP clients hand it over), without cloning it into a `Value`.
    pub fn from_object(object: &Map<String, Value>) -> Self {
        Self::from_serialize(object)
    }

    fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Self {
        // Writing a `Value` or `Map` cannot fail: keys are strings and numbers are finite.
        let text = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
        Self::from_compact_text(&text)
    }

    /// `text` is compact JSON as serde_json writes it.
    fn from_compact_text(text: &str) -> Self {
        Self(
            lz4_flex::block::compress_prepend_size_with_dict(text.as_bytes(), SCHEMA_DICTIONARY)
                .into_boxed_slice(),
        )
    }

    /// The schema parsed into a `Value` (a fresh tree on every call).
    pub fn to_value(&self) -> Value {
        // The text always comes from a serialized value, so it parses; only a schema nested
        // deeper than serde_json's recursion limit (128) would not, and that becomes `null`.
        serde_json::from_str(&self.text()).unwrap_or(Value::Null)
    }

    /// The compact JSON text, decompressed on every call.
    pub fn text(&self) -> String {
        lz4_flex::block::decompress_size_prepended_with_dict(&self.0, SCHEMA_DICTIONARY)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            // Only what `from_compact_text` made from a `String` is ever held, so it decodes.
            .unwrap_or_else(|| "null".to_owned())
    }

    /// The schema's parameters as (name, description) pairs, top level and nested objects alike.
    /// Walks the text and keeps only property names and descriptions, so no `Value` tree is built.
    pub fn parameters(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let text = self.text();
        let mut de = serde_json::Deserializer::from_str(&text);
        match (SchemaSeed {
            out: &mut out,
            depth: 0,
        })
        .deserialize(&mut de)
        {
            Ok(_) => out,
            // Cannot happen for text that came from a value; an empty list is the safe answer.
            Err(_) => Vec::new(),
        }
    }
}

/// The schema of a tool that takes no arguments, `{"type":"object","properties":{}}`.
impl Default for ToolSchema {
    fn default() -> Self {
        // Built once; every tool without a schema gets a copy of the text.
        static EMPTY: OnceLock<ToolSchema> = OnceLock::new();
        EMPTY
            .get_or_init(|| Self::from_value(empty_object_schema()))
            .clone()
    }
}

impl From<Value> for ToolSchema {
    fn from(value: Value) -> Self {
        Self::from_value(value)
    }
}

/// Semantic equality: the same text is the same schema; otherwise the parsed values decide (key
/// order, as for `Value`, does not matter).
impl PartialEq for ToolSchema {
    fn eq(&self, other: &Self) -> bool {
        // One text always compresses to the same bytes.
        self.0 == other.0 || self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for ToolSchema {
    fn eq(&self, other: &Value) -> bool {
        self.to_value() == *other
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolSchema").field(&self.text()).finish()
    }
}

impl fmt::Display for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// Written verbatim as the JSON value it holds (serde_json's raw-value support; `to_value` and
/// the `json!` macro parse it back into a tree). Serializers other than serde_json's do not know
/// raw values: convert with [`ToolSchema::to_value`] before using one.
impl Serialize for ToolSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RawValue::from_string(self.text())
            .map_err(ser::Error::custom)?
            .serialize(serializer)
    }
}

/// Read from any JSON value, from any deserializer, through a `Value`, so duplicate keys and
/// number formats come out exactly as `Value` writes them.
impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        serde_json::to_string(&value)
            .map(|text| Self::from_compact_text(&text))
            .map_err(de::Error::custom)
    }
}

// `parameters()` over the text: a schema object contributes its `properties` (each name with its
// `description`, then the property's own parameters), or, without an object `properties`, the
// parameters of its `items`. Everything else is skipped unparsed with `IgnoredAny`.

/// Deeply nested schemas add noise, not signal; two levels below the top cover real tools.
const MAX_PARAMETER_DEPTH: usize = 2;

/// Scalars and arrays hold no parameters and are no description: the visitors accept them and
/// return the default, so an odd schema is skipped rather than failing the walk.
macro_rules! ignore_scalars_and_arrays {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// One schema at `depth`: appends its parameters to `out` and returns its own `description`.
struct SchemaSeed<'a> {
    out: &'a mut Vec<(String, String)>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for SchemaSeed<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SchemaSeed<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON Schema")
    }

    ignore_scalars_and_arrays!();

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Beyond the depth limit only the description (read by the parent) matters.
        let collect = self.depth <= MAX_PARAMETER_DEPTH;
        let mut description = None;
        let mut has_properties = false;
        // `items` counts only without object `properties`, which may come later in the text, so
        // its parameters wait here (no allocation unless it has any).
        let mut items = Vec::new();
        while let Some(key) = map.next_key::<SchemaKey>()? {
            match key {
                SchemaKey::Description => description = map.next_value_seed(StringSeed)?,
                SchemaKey::Properties if collect => {
                    has_properties = map.next_value_seed(PropertiesSeed {
                        out: &mut *self.out,
                        depth: self.depth,
                    })?;
                }
                SchemaKey::Items if collect => {
                    items.clear();
                    map.next_value_seed(SchemaSeed {
                        out: &mut items,
                        depth: self.depth + 1,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !has_properties {
            self.out.append(&mut items);
        }
        Ok(description)
    }
}

/// A `properties` value: when it is an object, each name with its description, followed by that
/// property's own parameters. Returns whether it was an object.
struct PropertiesSeed<'a> {
    out: &'a mut Vec<(String, String)>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for PropertiesSeed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PropertiesSeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the properties of a JSON Schema")
    }

    ignore_scalars_and_arrays!();

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            // The name goes first; its description is only known once the property is read.
            let slot = self.out.len();
            self.out.push((name, String::new()));
            let description = map.next_value_seed(SchemaSeed {
                out: &mut *self.out,
                depth: self.depth + 1,
            })?;
            if let Some(description) = description {
                self.out[slot].1 = description;
            }
        }
        Ok(true)
    }
}

/// A string value, or `None` for anything else (a non-string `description` counts as none).
struct StringSeed;

impl<'de> DeserializeSeed<'de> for StringSeed {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StringSeed {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    ignore_scalars_and_arrays!();

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Some(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
        Ok(Some(s))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// The keys of a schema object that `parameters()` reads; the rest are `Other`.
enum SchemaKey {
    Properties,
    Items,
    Description,
    Other,
}

impl<'de> Deserialize<'de> for SchemaKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(SchemaKeyVisitor)
    }
}

struct SchemaKeyVisitor;

impl Visitor<'_> for SchemaKeyVisitor {
    type Value = SchemaKey;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a schema keyword")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<SchemaKey, E> {
        Ok(match key {
            "properties" => SchemaKey::Properties,
            "items" => SchemaKey::Items,
            "description" => SchemaKey::Description,
            _ => SchemaKey::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_display_as_default_public_names() {
        assert_eq!(
            ToolId::new("github", "create_issue").to_string(),
            "github___create_issue"
        );
        assert_eq!(ToolId::new("", "plain").to_string(), "plain");
    }

    #[test]
    fn parameters_include_nested_properties() {
        let tool = Tool::new("t", "d").with_schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path"},
                "options": {"type": "object", "properties": {"recursive": {"type": "boolean"}}}
            }
        }));
        let names: Vec<_> = tool.parameters().into_iter().map(|p| p.0).collect();
        assert_eq!(names, vec!["path", "options", "recursive"]);
    }

    /// The reference: what `parameters()` returned when schemas were `Value` trees.
    fn parameters_of_value(schema: &Value) -> Vec<(String, String)> {
        fn walk(schema: &Value, out: &mut Vec<(String, String)>, depth: usize) {
            if depth > 2 {
                return;
            }
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                if let Some(items) = schema.get("items") {
                    walk(items, out, depth + 1);
                }
                return;
            };
            for (name, prop) in props {
                let description = prop.get("description").and_then(Value::as_str);
                out.push((name.clone(), description.unwrap_or_default().to_string()));
                walk(prop, out, depth + 1);
            }
        }
        let mut out = Vec::new();
        walk(schema, &mut out, 0);
        out
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect()
    }

    #[test]
    fn schemas_of_every_shape_and_size_read_back_as_written() {
        let long_description = "é\u{1F600}\\\"x".repeat(30_000);
        let schemas = [
            json!({}),
            json!(null),
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {"q": {"type": "string", "description": "The query"}}, "required": ["q"]}),
            // Nothing of the dictionary in it, and longer than an LZ4 window (64 KiB).
            json!({"zzz": long_description, "n": [1, -2.5, 1e300, u64::MAX]}),
        ];
        for value in schemas {
            let schema = ToolSchema::from_value(value.clone());
            let text = serde_json::to_string(&value).unwrap();
            assert_eq!(schema.text(), text);
            assert_eq!(schema.to_value(), value);
            assert_eq!(serde_json::to_string(&schema).unwrap(), text);
        }
    }

    #[test]
    fn a_typical_schema_is_held_in_fewer_bytes_than_its_text() {
        let schema = ToolSchema::from_value(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to read"},
                "limit": {"type": "integer", "description": "The number of lines"},
                "follow": {"type": "boolean", "description": "Whether to follow links"}
            },
            "required": ["path"],
            "additionalProperties": false
        }));
        let text = schema.text();
        assert!(
            schema.0.len() * 2 < text.len(),
            "{} bytes held for {} of text",
            schema.0.len(),
            text.len()
        );
    }

    #[test]
    fn schema_round_trips_byte_for_byte() {
        // Keys deliberately out of alphabetical order, escapes, numbers of every kind.
        let text = r#"{"type":"object","required":["z"],"properties":{"z":{"type":"string","description":"Zed \"quoted\" \u00e9\n"},"a":{"type":"number","minimum":-1.5,"maximum":10000000000,"default":0}},"additionalProperties":false}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        let expected = serde_json::to_string(&value).unwrap();

        let schema: ToolSchema = serde_json::from_str(text).unwrap();
        assert_eq!(schema.text(), expected);
        assert_eq!(serde_json::to_string(&schema).unwrap(), expected);
        assert_eq!(schema.to_value(), value);

        // Pretty input is stored compacted, key order kept.
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let schema: ToolSchema = serde_json::from_str(&pretty).unwrap();
        assert_eq!(schema.text(), expected);

        assert_eq!(ToolSchema::from_value(value.clone()).text(), expected);
        let Value::Object(object) = &value else {
            panic!("an object")
        };
        assert_eq!(ToolSchema::from_object(object).text(), expected);
    }

    #[test]
    fn tool_serializes_schema_as_a_value() {
        let schema = json!({"type": "object", "properties": {"b": {"type": "string"}, "a": {}}});
        let tool = Tool::new("t", "d").with_schema(schema.clone());
        let text = serde_json::to_string(&tool).unwrap();
        let as_value = serde_json::to_string(&serde_json::to_value(&tool).unwrap()).unwrap();
        assert_eq!(text, as_value);
        assert!(text.contains(
            r#""inputSchema":{"type":"object","properties":{"b":{"type":"string"},"a":{}}}"#
        ));
        let back: Tool = serde_json::from_str(&text).unwrap();
        assert_eq!(back, tool);
        assert_eq!(back.input_schema, schema);
        // `json!` embeds the schema as a value, not as a string.
        assert_eq!(json!({"s": tool.input_schema})["s"], schema);
    }

    #[test]
    fn each_part_reads_back_as_set_and_the_json_is_unchanged() {
        let mut tool = Tool::new("créer_fichier", "Crée un fichier — vide")
            .with_server("fs")
            .with_category("Files")
            .with_tags(["disk", "local"])
            .with_defer(DeferPolicy::Always)
            .with_annotations(json!({"readOnlyHint": false}));
        assert_eq!(
            (tool.server(), tool.name(), tool.description()),
            ("fs", "créer_fichier", "Crée un fichier — vide")
        );
        assert_eq!(tool.category(), Some("Files"));
        assert_eq!(tool.tags(), ["disk", "local"]);
        assert_eq!(tool.defer(), DeferPolicy::Always);
        assert_eq!(tool.annotations(), Some(&json!({"readOnlyHint": false})));
        // The same keys, in the same order, as the struct with public fields wrote.
        assert_eq!(
            serde_json::to_string(&tool).unwrap(),
            r#"{"server":"fs","name":"créer_fichier","description":"Crée un fichier — vide","inputSchema":{"type":"object","properties":{}},"category":"Files","tags":["disk","local"],"defer":"always","annotations":{"readOnlyHint":false}}"#
        );
        let back: Tool = serde_json::from_str(&serde_json::to_string(&tool).unwrap()).unwrap();
        assert_eq!(back, tool);

        // Changing one part of the shared text keeps the others.
        tool.set_name("lire");
        tool.set_server("");
        tool.set_description("Lit");
        assert_eq!(
            (tool.server(), tool.name(), tool.description()),
            ("", "lire", "Lit")
        );
        assert_eq!(tool.id(), ToolId::new("", "lire"));
        assert_eq!(
            serde_json::to_value(&tool).unwrap().get("server"),
            None,
            "an empty server is left out"
        );

        // A tool whose extras are all taken away equals one that never had them.
        tool.set_category(None);
        tool.set_tags(Vec::new());
        tool.set_annotations(None);
        assert_eq!(
            tool,
            Tool::new("lire", "Lit").with_defer(DeferPolicy::Always)
        );
    }

    #[test]
    fn overlong_parts_are_cut_on_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("héllo", 99), "héllo");
    }

    #[test]
    fn missing_schema_is_the_empty_object_schema() {
        let tool: Tool = serde_json::from_str(r#"{"name": "t"}"#).unwrap();
        assert_eq!(tool.input_schema, ToolSchema::default());
        assert_eq!(
            ToolSchema::default().text(),
            r#"{"type":"object","properties":{}}"#
        );
        assert_eq!(ToolSchema::default().to_value(), empty_object_schema());
        assert_eq!(Tool::new("t", "d").input_schema, ToolSchema::default());
        assert!(ToolSchema::default().parameters().is_empty());
    }

    #[test]
    fn schemas_compare_by_value() {
        let a = ToolSchema::from_value(json!({"type": "object", "required": ["x"]}));
        let b = ToolSchema::from_value(json!({"required": ["x"], "type": "object"}));
        let c = ToolSchema::from_value(json!({"type": "object", "required": ["y"]}));
        assert_ne!(a.text(), b.text());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, json!({"type": "object", "required": ["x"]}));
        assert_eq!(a.clone(), a);
        assert_eq!(
            format!("{a:?}"),
            r#"ToolSchema("{\"type\":\"object\",\"required\":[\"x\"]}")"#
        );
    }

    #[test]
    fn parameters_of_arrays_of_objects_and_descriptions() {
        let schema = json!({
            "type": "object",
            "properties": {
                "rows": {
                    "description": "Rows to insert",
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "integer", "description": "Row id"},
                            "cells": {"type": "array", "items": {"type": "string"}}
                        }
                    }
                },
                "note": {"type": "string", "description": 5},
                "flag": true,
                "escaped": {"description": "Say \"hi\"\n"}
            }
        });
        let tool = Tool::new("t", "d").with_schema(schema.clone());
        let expected = pairs(&[
            ("rows", "Rows to insert"),
            ("id", "Row id"),
            ("cells", ""),
            ("note", ""),
            ("flag", ""),
            ("escaped", "Say \"hi\"\n"),
        ]);
        assert_eq!(tool.parameters(), expected);
        assert_eq!(parameters_of_value(&schema), expected);
    }

    #[test]
    fn parameters_stop_at_the_depth_limit() {
        let schema = json!({"properties": {
            "l0": {"description": "zero", "properties": {
                "l1": {"description": "one", "properties": {
                    "l2": {"description": "two", "properties": {
                        "l3": {"description": "three"}
                    }}
                }}
            }}
        }});
        let expected = pairs(&[("l0", "zero"), ("l1", "one"), ("l2", "two")]);
        assert_eq!(
            ToolSchema::from_value(schema.clone()).parameters(),
            expected
        );
        assert_eq!(parameters_of_value(&schema), expected);

        // `items` counts as a level too.
        let schema = json!({"items": {"items": {"items": {"properties": {"deep": {}}}}}});
        assert!(ToolSchema::from_value(schema.clone())
            .parameters()
            .is_empty());
        let schema = json!({"items": {"items": {"properties": {"shallow": {}}}}});
        assert_eq!(
            ToolSchema::from_value(schema).parameters(),
            pairs(&[("shallow", "")])
        );
    }

    #[test]
    fn parameters_match_the_value_walk_on_odd_shapes() {
        let shapes = [
            // Object `properties` wins over `items`, before or after it in the text.
            json!({"items": {"properties": {"i": {}}}, "properties": {"p": {}}}),
            json!({"properties": {"p": {}}, "items": {"properties": {"i": {}}}}),
            // Non-object `properties` falls back to `items`.
            json!({"properties": ["p"], "items": {"properties": {"i": {"description": "d"}}}}),
            json!({"properties": null}),
            // Tuple `items` and non-object schemas carry nothing.
            json!({"items": [{"properties": {"i": {}}}]}),
            json!(true),
            json!("object"),
            json!([1, 2]),
            // Keywords named like parameters inside other keywords are not parameters.
            json!({"properties": {"a": {"default": {"properties": {"x": {}}}, "enum": [{"description": "no"}]}}}),
            json!({"properties": {"properties": {"description": "a parameter named properties", "properties": {"items": {}}}}}),
            json!({"anyOf": [{"properties": {"x": {}}}], "$defs": {"d": {"properties": {"y": {}}}}}),
        ];
        for shape in shapes {
            let schema = ToolSchema::from_value(shape.clone());
            assert_eq!(schema.parameters(), parameters_of_value(&shape), "{shape}");
        }
    }
}
