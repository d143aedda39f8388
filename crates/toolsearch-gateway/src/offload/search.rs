//! `search_large_output`: the lines of a stored output that match words or a regex, with line
//! numbers, character offsets and context lines.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::output::{floor_char_boundary, StoredOutput};
use super::{OffloadError, OffloadTool, MAX_PATTERN_CHARS};

/// Compiled-regex size cap: a short pattern can still compile into a huge automaton.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const DEFAULT_CONTEXT_LINES: usize = 2;
const MAX_CONTEXT_LINES: usize = 10;
const DEFAULT_MAX_MATCHES: usize = 20;
const MAX_MATCHES: usize = 200;
/// Characters of a matching line shown around the match, and of a context line.
pub(super) const MATCH_LINE_CHARS: usize = 300;
const CONTEXT_LINE_CHARS: usize = 160;

// How `pattern` is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum SearchMode {
    // Lines holding every word, case-insensitive.
    #[default]
    Words,
    // A Rust regex.
    Regex,
}

// Arguments of `search_large_output` (not a doc comment: see `ReadArgs`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    /// The handle from the offloaded result.
    pub handle: String,
    /// Words to find (all must occur in a line), or a regex when mode is "regex".
    #[schemars(length(min = 1, max = MAX_PATTERN_CHARS))]
    pub pattern: String,
    /// How to read `pattern`: "words" (every word, case-insensitive) or "regex" (a Rust regex).
    #[serde(default)]
    pub mode: SearchMode,
    /// Lines shown before and after each match.
    #[serde(default)]
    #[schemars(with = "usize", range(max = MAX_CONTEXT_LINES), extend("default" = DEFAULT_CONTEXT_LINES))]
    pub context: Option<usize>,
    /// Most matches returned; `totalMatches` counts them all.
    #[serde(default)]
    #[schemars(with = "usize", range(min = 1, max = MAX_MATCHES), extend("default" = DEFAULT_MAX_MATCHES))]
    pub max_matches: Option<usize>,
}

/// Matches of a line: the char column of the first match, or `None`.
enum Matcher {
    Regex(regex::Regex),
    /// Every word must occur (case-insensitive); the column is the first word's.
    Words(Vec<regex::Regex>),
}

impl Matcher {
    fn new(args: &SearchArgs) -> Result<Self, OffloadError> {
        let tool = OffloadTool::Search.name();
        let pattern = args.pattern.as_str();
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(OffloadError::InvalidArguments {
                tool,
                message: format!("the pattern is longer than {MAX_PATTERN_CHARS} characters"),
            });
        }
        let build = |p: &str, case_insensitive: bool| {
            regex::RegexBuilder::new(p)
                .case_insensitive(case_insensitive)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
        };
        match args.mode {
            SearchMode::Regex => {
                build(pattern, false)
                    .map(Matcher::Regex)
                    .map_err(|e| OffloadError::BadRegex {
                        pattern: pattern.to_string(),
                        // The regex crate's message spans lines with a caret under the problem.
                        message: e.to_string(),
                    })
            }
            SearchMode::Words => {
                let words: Vec<_> = pattern
                    .split_whitespace()
                    .map(|w| build(&regex::escape(w), true))
                    .collect::<Result<_, _>>()
                    .map_err(|e| OffloadError::InvalidArguments {
                        tool,
                        message: e.to_string(),
                    })?;
                if words.is_empty() {
                    return Err(OffloadError::InvalidArguments {
                        tool,
                        message: "the pattern has no words; give at least one".into(),
                    });
                }
                Ok(Matcher::Words(words))
            }
        }
    }

    /// Byte position of the first match in `line`.
    fn find(&self, line: &str) -> Option<usize> {
        match self {
            Matcher::Regex(re) => re.find(line).map(|m| m.start()),
            Matcher::Words(words) => {
                let mut first = None;
                for word in words {
                    let at = word.find(line)?.start();
                    first.get_or_insert(at);
                }
                first
            }
        }
    }
}

/// Up to `max` characters of `line` starting near byte `around`, with `…` where it is cut.
fn clip(line: &str, around: usize, max: usize) -> String {
    let chars_before = line[..floor_char_boundary(line, around)].chars().count();
    let skip = chars_before.saturating_sub(max / 4);
    let mut out = String::new();
    if skip > 0 {
        out.push('…');
    }
    let mut taken = line.chars().skip(skip);
    out.extend(taken.by_ref().take(max));
    if taken.next().is_some() {
        out.push('…');
    }
    out
}

/// The matching lines of `output`, about `max_chars` characters of them at most.
pub(super) fn search(
    output: &StoredOutput,
    args: &SearchArgs,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    let matcher = Matcher::new(args)?;
    let context = args
        .context
        .unwrap_or(DEFAULT_CONTEXT_LINES)
        .min(MAX_CONTEXT_LINES);
    let max_matches = args
        .max_matches
        .unwrap_or(DEFAULT_MAX_MATCHES)
        .clamp(1, MAX_MATCHES);
    let lines: Vec<&str> = output
        .text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let line_entry =
        |i: usize| json!({ "line": i + 1, "text": clip(lines[i], 0, CONTEXT_LINE_CHARS) });
    let mut matches = Vec::new();
    let mut total = 0usize;
    let mut used = 0usize;
    let mut truncated = false;
    // Character offset of the current line's start, for read_large_output.
    let mut line_offset = 0usize;
    for (i, line) in lines.iter().enumerate() {
        if let Some(at) = matcher.find(line) {
            total += 1;
            if !truncated {
                let column = line[..at].chars().count();
                let entry = json!({
                    "line": i + 1,
                    "column": column + 1,
                    "offset": line_offset + column,
                    "text": clip(line, at, MATCH_LINE_CHARS),
                    "before": (i.saturating_sub(context)..i).map(line_entry).collect::<Vec<_>>(),
                    "after": (i + 1..(i + 1 + context).min(lines.len())).map(line_entry).collect::<Vec<_>>(),
                });
                let size = entry.to_string().chars().count();
                if matches.len() >= max_matches || (used + size > max_chars && !matches.is_empty())
                {
                    truncated = true;
                } else {
                    used += size;
                    matches.push(entry);
                }
            }
        }
        // Lines were split on '\n': count it back, and a stripped '\r'.
        line_offset += text_line_chars(output, line);
    }
    Ok(json!({
        "handle": output.handle,
        "pattern": args.pattern,
        "mode": match args.mode { SearchMode::Words => "words", SearchMode::Regex => "regex" },
        "totalMatches": total,
        "returned": matches.len(),
        "truncated": truncated,
        "matches": matches,
    }))
}

/// Characters a line of `output` took in the text, with its line break.
fn text_line_chars(output: &StoredOutput, line: &str) -> usize {
    let line_chars = if output.chars == output.text.len() {
        line.len()
    } else {
        line.chars().count()
    };
    // The '\n' and, when the line ended "\r\n", the '\r' that was stripped. The `line` slice
    // points into `text`, so what follows it is there to look at.
    let end = line.as_ptr() as usize - output.text.as_ptr() as usize + line.len();
    let rest = &output.text.as_bytes()[end.min(output.text.len())..];
    line_chars
        + match rest {
            [b'\r', b'\n', ..] => 2,
            [b'\n', ..] => 1,
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::read::read_range;
    use crate::offload::tests::stored;

    fn search_args(pattern: &str, mode: SearchMode, context: usize) -> SearchArgs {
        SearchArgs {
            handle: "out-1-x".into(),
            pattern: pattern.into(),
            mode,
            context: Some(context),
            max_matches: None,
        }
    }

    #[test]
    fn search_lines_with_context_and_offsets() {
        let output = stored("alphä\r\nbeta gamma\ngamma delta\nepsilon\nGamma beta");
        let r = search(
            &output,
            &search_args("GAMMA beta", SearchMode::Words, 1),
            10_000,
        )
        .unwrap();
        assert_eq!(r["totalMatches"], 2, "{r}");
        let first = &r["matches"][0];
        assert_eq!(first["line"], 2);
        assert_eq!(first["before"], json!([{"line": 1, "text": "alphä"}]));
        assert_eq!(first["after"], json!([{"line": 3, "text": "gamma delta"}]));
        // "gamma" starts at character 5 of line 2, which starts at character 7.
        assert_eq!(first["offset"], 12);
        assert_eq!(
            read_range(&output, 12, Some(5), 100).unwrap()["text"],
            "gamma"
        );
        assert_eq!(r["matches"][1]["line"], 5);
        assert_eq!(r["matches"][1]["after"], json!([]));

        let r = search(
            &output,
            &search_args(r"^\w+ a$|delta$", SearchMode::Regex, 0),
            10_000,
        )
        .unwrap();
        assert_eq!(r["totalMatches"], 1);
        assert_eq!(r["matches"][0]["column"], 7);

        let err = search(
            &output,
            &search_args("(unclosed", SearchMode::Regex, 0),
            10_000,
        )
        .unwrap_err();
        assert!(matches!(err, OffloadError::BadRegex { .. }));
        assert!(err.to_string().contains("unclosed group"), "{err}");
    }

    #[test]
    fn search_is_bounded() {
        let text: String = (0..500).map(|i| format!("line {i} needle\n")).collect();
        let output = stored(&text);
        let mut args = search_args("needle", SearchMode::Words, 0);
        args.max_matches = Some(7);
        let r = search(&output, &args, 100_000).unwrap();
        assert_eq!(r["totalMatches"], 500);
        assert_eq!(r["returned"], 7);
        assert_eq!(r["truncated"], true);
        let r = search(&output, &search_args("needle", SearchMode::Words, 0), 300).unwrap();
        assert!(r.to_string().len() < 600, "{r}");
        assert_eq!(r["truncated"], true);
        // A single long line is clipped around the match.
        let long = format!("{}needle{}", "x".repeat(5000), "y".repeat(5000));
        let r = search(
            &stored(&long),
            &search_args("needle", SearchMode::Words, 0),
            10_000,
        )
        .unwrap();
        let shown = r["matches"][0]["text"].as_str().unwrap();
        assert!(shown.contains("needle") && shown.chars().count() <= MATCH_LINE_CHARS + 2);
    }
}
