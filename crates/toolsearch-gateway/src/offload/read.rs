//! `read_large_output`: a character range of a stored output.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::output::StoredOutput;
use super::{OffloadError, OffloadTool};

// Arguments of `read_large_output` (a line comment: a doc comment would become the schema's
// description, sent with every tools/list).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    /// The handle from the offloaded result, e.g. `out-3-1a2b3c4d`.
    pub handle: String,
    /// First character to return (0-based, in characters, not bytes); must be less than the output's `chars`.
    #[serde(default)]
    #[schemars(with = "usize", extend("default" = 0))]
    pub offset: Option<usize>,
    /// Number of characters to return, at least 1; capped at the most one call returns, which is also the default.
    // `skip_serializing_if` keeps a `"default": null` out of the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "usize", range(min = 1))]
    pub length: Option<usize>,
}

/// Characters `[offset, offset + length)` of an output, at most `max_chars`.
pub fn read_range(
    output: &StoredOutput,
    offset: usize,
    length: Option<usize>,
    max_chars: usize,
) -> Result<Value, OffloadError> {
    if length == Some(0) {
        // A zero-length read would answer nextOffset == offset, and a pager would loop on it.
        return Err(OffloadError::InvalidArguments {
            tool: OffloadTool::Read.name(),
            message: format!(
                "length 0 reads nothing; give a length of at least 1, or leave it out to read up to {max_chars} characters"
            ),
        });
    }
    if offset >= output.chars {
        return Err(OffloadError::OffsetOutOfRange {
            handle: output.handle.clone(),
            offset,
            chars: output.chars,
        });
    }
    let wanted = length.unwrap_or(max_chars);
    let length = wanted.min(max_chars).min(output.chars - offset);
    let start = output.byte_at(offset);
    let end = output.byte_at(offset + length);
    let end_offset = offset + length;
    let mut out = json!({
        "handle": output.handle,
        "offset": offset,
        "length": length,
        "chars": output.chars,
        "nextOffset": if end_offset < output.chars { json!(end_offset) } else { Value::Null },
        "text": &output.text[start..end],
    });
    if wanted > max_chars {
        out["note"] = json!(format!(
            "length was capped at {max_chars} characters (toolSearch.offload.maxReadChars); continue at nextOffset"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::tests::stored;

    #[test]
    fn read_ranges_in_characters() {
        let output = stored("héllo wörld, and more");
        let r = read_range(&output, 1, Some(4), 100).unwrap();
        assert_eq!(r["text"], "éllo");
        assert_eq!(r["nextOffset"], 5);
        let r = read_range(&output, 17, None, 100).unwrap();
        assert_eq!(r["text"], "more");
        assert_eq!(r["nextOffset"], Value::Null);
        let r = read_range(&output, 0, Some(50), 5).unwrap();
        assert_eq!(r["length"], 5);
        assert!(r["note"].as_str().unwrap().contains("capped"));
        let err = read_range(&output, 21, None, 100).unwrap_err();
        assert!(
            matches!(err, OffloadError::OffsetOutOfRange { chars: 21, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("between 0 and 20"), "{err}");
    }

    /// A pager that follows nextOffset must always move forward: length 0 is refused.
    #[test]
    fn a_zero_length_read_is_refused() {
        let output = stored("héllo wörld");
        let err = read_range(&output, 3, Some(0), 100).unwrap_err();
        assert!(
            matches!(err, OffloadError::InvalidArguments { .. }),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("length 0") && message.contains("at least 1"),
            "{message}"
        );
        // Every accepted read makes progress.
        let mut offset = 0;
        let mut pieces = String::new();
        loop {
            let r = read_range(&output, offset, Some(4), 100).unwrap();
            pieces.push_str(r["text"].as_str().unwrap());
            match r["nextOffset"].as_u64() {
                Some(next) => {
                    assert!(next as usize > offset);
                    offset = next as usize;
                }
                None => break,
            }
        }
        assert_eq!(pieces, "héllo wörld");
    }
}
