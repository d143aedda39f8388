//! The text embedded for a tool: its server and name split into words, its category and tags, its
//! description, and its parameters' names and descriptions, each part and the whole bounded in
//! characters. The bound keeps indexing cost per tool flat (a sentence model reads at most a few
//! hundred tokens anyway) and keeps one long description from crowding out the parameters.

use crate::analyzer::split_words;
use crate::tool::Tool;
use std::collections::HashSet;

/// Character budgets of [`embedding_text_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedTextLimits {
    /// The whole text.
    pub max_chars: usize,
    /// The tool's description.
    pub max_description_chars: usize,
    /// Each parameter's description.
    pub max_parameter_chars: usize,
    /// Parameters listed (top level first, as the schema walk gives them).
    pub max_parameters: usize,
    /// The category and tags together.
    pub max_label_chars: usize,
}

impl Default for EmbedTextLimits {
    /// About 1,000 characters: roughly the 256 tokens a MiniLM-sized model reads.
    fn default() -> Self {
        Self {
            max_chars: 1000,
            max_description_chars: 600,
            max_parameter_chars: 120,
            max_parameters: 24,
            max_label_chars: 120,
        }
    }
}

/// [`embedding_text_with`] under the default limits.
pub fn embedding_text(tool: &Tool) -> String {
    embedding_text_with(tool, &EmbedTextLimits::default())
}

/// `"weather get weather (Forecasts, daily): Current weather for a city. Parameters: city (the
/// city name); units."`: the server's name and the tool's split into lowercase words
/// (`getWeather`, `get_weather` → `get weather`), the category and tags, the description with
/// whitespace collapsed, then each parameter once. Where a tool is served and how it is filed
/// say what it is about as much as its own name does (the keyword index holds those fields
/// too); a tool without them reads `"get weather: Current weather ..."`. Deterministic: the same
/// tool gives the same text, which is what vector caches are keyed by.
pub fn embedding_text_with(tool: &Tool, limits: &EmbedTextLimits) -> String {
    compose(tool, limits, Parts::ALL)
}

/// The two texts the engine embeds a tool as, each bounded like [`embedding_text`]: what the
/// tool is for, and what it takes. A sentence model pools every token of a text into one vector,
/// so a long parameter list pulls a tool's vector away from its purpose; the engine scores a
/// query against the purpose alone and against the two together (see `search::dense`). The two
/// cost the model about 15% more than one text of the whole tool (the names are read twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTexts {
    /// `"weather get weather (Forecasts, daily): Current weather for a city."`
    pub purpose: String,
    /// `"weather get weather Parameters: city (the city name); units."` (just the names when
    /// the tool takes nothing).
    pub parameters: String,
}

impl ToolTexts {
    /// The texts in [`ToolView`] order.
    pub fn get(&self, view: ToolView) -> &str {
        match view {
            ToolView::Purpose => &self.purpose,
            ToolView::Parameters => &self.parameters,
        }
    }
}

/// Which of a tool's [`ToolTexts`] a vector is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolView {
    Purpose,
    Parameters,
}

impl ToolView {
    pub const ALL: [ToolView; 2] = [ToolView::Purpose, ToolView::Parameters];

    pub fn index(self) -> usize {
        self as usize
    }
}

/// [`ToolTexts`] under the default limits.
pub fn embedding_texts(tool: &Tool) -> ToolTexts {
    let limits = EmbedTextLimits::default();
    ToolTexts {
        purpose: compose(tool, &limits, Parts::PURPOSE),
        parameters: compose(tool, &limits, Parts::PARAMETERS),
    }
}

/// What of a tool a text holds; the names always.
#[derive(Clone, Copy)]
struct Parts {
    labels: bool,
    description: bool,
    parameters: bool,
}

impl Parts {
    const ALL: Parts = Parts {
        labels: true,
        description: true,
        parameters: true,
    };
    const PURPOSE: Parts = Parts {
        parameters: false,
        ..Parts::ALL
    };
    const PARAMETERS: Parts = Parts {
        labels: false,
        description: false,
        parameters: true,
    };
}

fn compose(tool: &Tool, limits: &EmbedTextLimits, parts: Parts) -> String {
    let mut text = split_identifier(tool.server());
    let name = split_identifier(tool.name());
    if !text.is_empty() && !name.is_empty() {
        text.push(' ');
    }
    text.push_str(&name);
    if parts.labels {
        let labels: Vec<String> = tool
            .category()
            .iter()
            .copied()
            .chain(tool.tags().iter().map(String::as_str))
            .map(collapse_whitespace)
            .filter(|label| !label.is_empty())
            .collect();
        let labels = labels.join(", ");
        let labels = clip(&labels, limits.max_label_chars);
        if !labels.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push('(');
            text.push_str(labels);
            text.push(')');
        }
    }
    if parts.description {
        let description = collapse_whitespace(tool.description());
        let description = clip(&description, limits.max_description_chars);
        if !description.is_empty() {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(description.trim_end_matches('.'));
            text.push('.');
        }
    }
    let mut seen = HashSet::new();
    let mut listed = 0;
    let parameters = if parts.parameters {
        tool.parameters()
    } else {
        Vec::new()
    };
    for (name, description) in parameters {
        if listed >= limits.max_parameters {
            break;
        }
        let words = split_identifier(&name);
        if words.is_empty() {
            continue;
        }
        let description = collapse_whitespace(&description);
        let description = clip(&description, limits.max_parameter_chars);
        if !seen.insert((words.clone(), description.to_string())) {
            continue;
        }
        text.push_str(if listed == 0 {
            if text.is_empty() {
                "Parameters: "
            } else {
                " Parameters: "
            }
        } else {
            "; "
        });
        text.push_str(&words);
        let description = description.trim_end_matches('.');
        if !description.is_empty() {
            text.push_str(" (");
            text.push_str(description);
            text.push(')');
        }
        listed += 1;
        if text.chars().count() >= limits.max_chars {
            break;
        }
    }
    if listed > 0 {
        text.push('.');
    }
    clip(&text, limits.max_chars).to_string()
}

/// An identifier as lowercase words: `getWeatherByCity` → `get weather by city`.
fn split_identifier(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (from, to) in split_words(name) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&name[from..to].to_lowercase());
    }
    out
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters of `text`, cut at a word boundary when one is near the end.
fn clip(text: &str, max: usize) -> &str {
    let Some((cut, _)) = text.char_indices().nth(max) else {
        return text;
    };
    let head = &text[..cut];
    match head.rfind(' ') {
        // Back off to the last space only if that keeps most of the budget.
        Some(space) if head[..space].chars().count() * 5 >= max * 4 => head[..space].trim_end(),
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Tool {
        Tool::new("getWeather_byCity", "Current   weather\nfor a city.").with_schema(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name."},
                "units": {"type": "string"},
                "options": {
                    "type": "object",
                    "description": "Extra options",
                    "properties": {"lang": {"type": "string", "description": "Language code"}}
                }
            }
        }))
    }

    #[test]
    fn name_description_and_parameters_in_order() {
        assert_eq!(
            embedding_text(&weather()),
            "get weather by city: Current weather for a city. Parameters: city (The city name); \
             units; options (Extra options); lang (Language code)."
        );
    }

    #[test]
    fn server_category_and_tags_come_with_the_name() {
        let tool = weather()
            .with_server("open_meteo")
            .with_category("Forecasts")
            .with_tags(["daily", " "]);
        assert_eq!(
            embedding_text(&tool),
            "open meteo get weather by city (Forecasts, daily): Current weather for a city. \
             Parameters: city (The city name); units; options (Extra options); lang (Language \
             code)."
        );
        let labels_only = Tool::new("", "").with_category("Files");
        assert_eq!(embedding_text(&labels_only), "(Files)");
        let many = Tool::new("t", "d").with_tags((0..100).map(|i| format!("tag{i}")));
        let text = embedding_text(&many);
        let limits = EmbedTextLimits::default();
        assert!(text.len() <= "t (".len() + limits.max_label_chars + "): d.".len());
    }

    #[test]
    fn a_tool_without_description_or_parameters_is_its_name() {
        assert_eq!(embedding_text(&Tool::new("list_files", "")), "list files");
        assert_eq!(
            embedding_text(&Tool::new("", "Only a description")),
            "Only a description."
        );
    }

    #[test]
    fn every_part_and_the_whole_are_bounded() {
        let long = "word ".repeat(5000);
        let params: serde_json::Map<String, serde_json::Value> = (0..200)
            .map(|i| {
                (
                    format!("param_{i}"),
                    json!({"type": "string", "description": long.clone()}),
                )
            })
            .collect();
        let tool = Tool::new("huge_tool", long.clone())
            .with_schema(json!({"type": "object", "properties": params}));
        let limits = EmbedTextLimits::default();
        let text = embedding_text(&tool);
        assert!(text.chars().count() <= limits.max_chars, "{}", text.len());
        // The description is capped, so parameters still get a place.
        assert!(text.contains("Parameters: param 0 ("));
        let small = EmbedTextLimits {
            max_chars: 40,
            ..limits
        };
        assert!(embedding_text_with(&tool, &small).chars().count() <= 40);
    }

    #[test]
    fn clipping_respects_character_boundaries() {
        let tool = Tool::new("t", "日本語のテキスト".repeat(200));
        let text = embedding_text(&tool);
        assert!(text.chars().count() <= 1000);
        assert!(text.starts_with("t: 日本語"));
    }

    #[test]
    fn parameter_count_is_capped_and_duplicates_are_listed_once() {
        let tool = Tool::new("t", "d").with_schema(json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"id": {"type": "string"}}},
                "b": {"type": "object", "properties": {"id": {"type": "string"}}},
                "c": {"type": "string"}
            }
        }));
        assert_eq!(embedding_text(&tool), "t: d. Parameters: a; id; b; c.");
        let two = EmbedTextLimits {
            max_parameters: 2,
            ..EmbedTextLimits::default()
        };
        assert_eq!(embedding_text_with(&tool, &two), "t: d. Parameters: a; id.");
    }

    #[test]
    fn a_tool_is_embedded_as_its_purpose_and_its_parameters() {
        let tool = weather()
            .with_server("open_meteo")
            .with_category("Forecasts")
            .with_tags(["daily"]);
        let texts = embedding_texts(&tool);
        assert_eq!(
            texts.purpose,
            "open meteo get weather by city (Forecasts, daily): Current weather for a city."
        );
        assert_eq!(
            texts.parameters,
            "open meteo get weather by city Parameters: city (The city name); units; options \
             (Extra options); lang (Language code)."
        );
        assert_eq!(texts.get(ToolView::Purpose), texts.purpose);
        assert_eq!(texts.get(ToolView::Parameters), texts.parameters);
        // The whole text is the two together, names once.
        assert_eq!(
            embedding_text(&tool),
            format!(
                "{} {}",
                texts.purpose,
                texts
                    .parameters
                    .trim_start_matches("open meteo get weather by city ")
            )
        );
        let bare = embedding_texts(&Tool::new("list_files", ""));
        assert_eq!(
            (bare.purpose.as_str(), bare.parameters.as_str()),
            ("list files", "list files")
        );
    }
}
