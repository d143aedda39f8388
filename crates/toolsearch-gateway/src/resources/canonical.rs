//! Upstream resource URIs in one canonical form, so that a scope and an upstream read the same
//! path.
//!
//! A scope pattern such as `files:*/public/*` is matched against a URI's text, while a server that
//! serves files resolves `..`, `%2e%2e` or `\` in the path it is asked for. Unless both read the
//! same text, `file:///public/../secret/key.txt` passes the pattern and names the secret. So every
//! resource URI a client sends is made canonical before the scope check, and the canonical form is
//! what the upstream receives:
//!
//! - the scheme is lower-cased;
//! - before the query, percent-encoded unreserved characters (RFC 3986 §2.3) and encoded `/` and
//!   `\` are decoded; other encodings are kept, with upper-case hex digits;
//! - `\` is a separator like `/` (as WHATWG URLs treat it for `http` and `file`, and as Windows
//!   paths that servers build from URIs do);
//! - `.` and `..` segments are removed (RFC 3986 §5.2.4) and runs of `/` collapse into one;
//! - `file://localhost/` becomes `file:///`.
//!
//! A URI is refused when it cannot be made canonical safely: a `..` above the root of its path, a
//! control character (raw or encoded), a `%` not followed by two hex digits, a dot or separator
//! encoded twice (`%252e`), a `file:` URI with a host other than `localhost` (a file server reads
//! the path and ignores the host, so the host would be text a pattern matches but nothing serves),
//! or a query or fragment on a `file:` URI, or a fragment on an `http(s):` URI (neither names a
//! different resource to the server, yet both are text a pattern matches).
//!
//! A URI with none of these (custom schemes such as `memo://insights`, templates with
//! `{variables}`) comes back unchanged. The `url` crate does not fit: it follows the WHATWG URL
//! standard, which percent-encodes `{`, `}` and spaces in paths (changing templates and custom
//! URIs), clamps a `..` at the root instead of refusing it, and keeps `%2F` and duplicate slashes.

use toolsearch_core::{Naming, Scope, ToolId};

/// Why a resource URI cannot be made canonical. The gateway answers such a URI as it answers an
/// unknown one, so that nothing about the upstream leaks; these reasons are for its logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCanonical {
    #[error("it contains a control character")]
    ControlCharacter,
    #[error("a `%` is not followed by two hexadecimal digits")]
    BadPercentEncoding,
    #[error("it encodes a dot or a separator twice (`%25` followed by `2E`, `2F` or `5C`)")]
    DoubleEncoded,
    #[error("a `..` segment climbs above the root of its path")]
    AboveRoot,
    #[error("its authority contains a `/` or `\\`")]
    SeparatorInAuthority,
    #[error("a `file:` URI names a host other than `localhost`")]
    FileHost,
    #[error("a `{scheme}:` URI carries a {part}, which its server would not read")]
    UnreadPart {
        scheme: &'static str,
        part: &'static str,
    },
}

/// The canonical form of an upstream resource URI (see the module's documentation), or why it has
/// none.
pub fn canonical_uri(uri: &str) -> Result<String, NotCanonical> {
    if uri.chars().any(char::is_control) {
        return Err(NotCanonical::ControlCharacter);
    }
    let (scheme, rest) = split_scheme(uri);
    let (hier, query, fragment) = split_query_and_fragment(rest);
    match scheme.as_deref() {
        Some("file") if query.is_some() => {
            return Err(NotCanonical::UnreadPart {
                scheme: "file",
                part: "query",
            })
        }
        Some("file") if fragment.is_some() => {
            return Err(NotCanonical::UnreadPart {
                scheme: "file",
                part: "fragment",
            })
        }
        Some(scheme @ ("http" | "https")) if fragment.is_some() => {
            return Err(NotCanonical::UnreadPart {
                scheme: if scheme == "http" { "http" } else { "https" },
                part: "fragment",
            })
        }
        _ => {}
    }
    for part in [query, fragment].into_iter().flatten() {
        check_encodings(part)?;
    }

    // The authority ends at the first `/` as written: decoding comes after, so an encoded `/`
    // never moves text between the authority and the path.
    let (authority, path) = match hier.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            (Some(decode_authority(&after[..end])?), &after[end..])
        }
        None => (None, hier),
    };
    let authority = match (scheme.as_deref(), authority) {
        (Some("file"), Some(host)) if host.is_empty() || host.eq_ignore_ascii_case("localhost") => {
            Some(String::new())
        }
        (Some("file"), Some(_)) => return Err(NotCanonical::FileHost),
        (_, authority) => authority,
    };
    let path = decode(path)?;
    let path = remove_dot_segments(&path)?;

    let mut out = String::with_capacity(uri.len());
    if let Some(scheme) = &scheme {
        out.push_str(scheme);
        out.push(':');
    }
    if let Some(authority) = &authority {
        out.push_str("//");
        out.push_str(authority);
    }
    out.push_str(&path);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    Ok(out)
}

/// The lower-cased scheme (RFC 3986 §3.1) and what follows its `:`; no scheme when the text
/// before the first `:` is not one.
fn split_scheme(uri: &str) -> (Option<String>, &str) {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return (None, uri);
    };
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if valid {
        (Some(scheme.to_ascii_lowercase()), rest)
    } else {
        (None, uri)
    }
}

/// The part before the query, the query, and the fragment.
fn split_query_and_fragment(rest: &str) -> (&str, Option<&str>, Option<&str>) {
    let (before, fragment) = match rest.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (rest, None),
    };
    match before.split_once('?') {
        Some((hier, query)) => (hier, Some(query), fragment),
        None => (before, None, fragment),
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|v| v as u8)
}

/// The byte a `%XY` at `at` encodes.
fn encoded_byte(bytes: &[u8], at: usize) -> Result<u8, NotCanonical> {
    match (
        bytes.get(at + 1).copied().and_then(hex_value),
        bytes.get(at + 2).copied().and_then(hex_value),
    ) {
        (Some(high), Some(low)) => Ok(high << 4 | low),
        _ => Err(NotCanonical::BadPercentEncoding),
    }
}

/// Encoded bytes a canonical URI never carries: controls (a NUL cuts a path short in many
/// servers) and `%` followed by an encoded dot or separator (`%252e` is `..` to a server that
/// decodes twice).
fn check_encoded(bytes: &[u8], at: usize, byte: u8) -> Result<(), NotCanonical> {
    if byte < 0x20 || byte == 0x7f {
        return Err(NotCanonical::ControlCharacter);
    }
    if byte == b'%' {
        if let Ok(next) = encoded_byte(bytes, at + 2) {
            if matches!(next, b'.' | b'/' | b'\\') {
                return Err(NotCanonical::DoubleEncoded);
            }
        }
    }
    Ok(())
}

/// Checks every percent-encoding of a query or fragment, which are kept as they are.
fn check_encodings(part: &str) -> Result<(), NotCanonical> {
    let bytes = part.as_bytes();
    for (at, _) in part.match_indices('%') {
        check_encoded(bytes, at, encoded_byte(bytes, at)?)?;
    }
    Ok(())
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)
}

/// A path with unreserved characters and separators decoded, `\\` as `/`, and every other
/// encoding in upper case.
fn decode(path: &str) -> Result<String, NotCanonical> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let byte = encoded_byte(bytes, at)?;
                check_encoded(bytes, at, byte)?;
                if is_unreserved(byte) || byte == b'/' {
                    out.push(byte);
                } else if byte == b'\\' {
                    out.push(b'/');
                } else {
                    out.extend_from_slice(format!("%{byte:02X}").as_bytes());
                }
                at += 3;
            }
            b'\\' => {
                out.push(b'/');
                at += 1;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    // Only ASCII was changed, and only into ASCII: what was UTF-8 still is.
    String::from_utf8(out).map_err(|_| NotCanonical::BadPercentEncoding)
}

/// An authority decoded as a path is; a separator in it, written or encoded, has no canonical
/// place (servers disagree on whether it ends the authority).
fn decode_authority(authority: &str) -> Result<String, NotCanonical> {
    let decoded = if authority.contains('\\') {
        return Err(NotCanonical::SeparatorInAuthority);
    } else {
        decode(authority)?
    };
    if decoded.contains('/') {
        return Err(NotCanonical::SeparatorInAuthority);
    }
    Ok(decoded)
}

/// Whether `scope` allows the resource at the canonical URI `canonical` of `server`. Both the URI
/// and its part before any query or fragment must match: a pattern's `*` would otherwise let a
/// query (`file:///secret?/public/`) satisfy a pattern meant for paths.
pub fn in_scope(scope: &Scope, naming: &Naming, server: &str, canonical: &str) -> bool {
    let allows = |uri: &str| scope.allows(&ToolId::new(server, uri), naming);
    let before_query = canonical.split(['?', '#']).next().unwrap_or(canonical);
    allows(canonical) && (before_query == canonical || allows(before_query))
}

/// The path without `.` and `..` segments or empty ones (RFC 3986 §5.2.4, with duplicate slashes
/// collapsed); a `..` with nothing left to remove is refused rather than dropped, since servers
/// disagree on what it means.
fn remove_dot_segments(path: &str) -> Result<String, NotCanonical> {
    let absolute = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    let mut ends_in_slash = false;
    for segment in path.split('/') {
        ends_in_slash = true;
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop().ok_or(NotCanonical::AboveRoot)?;
            }
            segment => {
                kept.push(segment);
                ends_in_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    if absolute {
        out.push('/');
    }
    out.push_str(&kept.join("/"));
    if ends_in_slash && !kept.is_empty() {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use toolsearch_core::NamePattern;

    #[test]
    fn uris_without_traversal_are_unchanged() {
        for uri in [
            "memo://insights",
            "test://static/resource/1",
            "demo://resource/dynamic/text/{resourceId}",
            "file:///public/{path}",
            "file:///public/a.txt",
            "file:///C:/Users/a%20b/notes.md",
            "https://example.com/x?y=1&z=%2F..",
            "https://example.com/",
            "urn:isbn:0451450523",
            "mailto:someone@example.com",
            "note://My Notes/caf\u{e9}",
            "custom://x/a#section",
            "postgres://db/schema/table",
            "file:///",
        ] {
            assert_eq!(canonical_uri(uri).as_deref(), Ok(uri), "{uri}");
        }
    }

    #[test]
    fn traversal_forms_resolve_to_the_path_they_name() {
        for (uri, canonical) in [
            ("file:///public/../secret/key.txt", "file:///secret/key.txt"),
            (
                "file:///public/%2e%2e/secret/key.txt",
                "file:///secret/key.txt",
            ),
            (
                "file:///public/%2E%2e/secret/key.txt",
                "file:///secret/key.txt",
            ),
            (
                "file:///public/..%2fsecret/key.txt",
                "file:///secret/key.txt",
            ),
            (
                "file:///public/..%2Fsecret%2fkey.txt",
                "file:///secret/key.txt",
            ),
            (
                "file:///public//..//secret/key.txt",
                "file:///secret/key.txt",
            ),
            ("file:///public/a/../../secret", "file:///secret"),
            (
                "file:///public\\..\\secret\\key.txt",
                "file:///secret/key.txt",
            ),
            ("file:///public/%5c..%5csecret", "file:///secret"),
            ("file:///public/./a.txt", "file:///public/a.txt"),
            ("file:///public/.", "file:///public/"),
            ("file:///public/a/..", "file:///public/"),
            ("file:////public//a.txt", "file:///public/a.txt"),
            ("file://localhost/public/a.txt", "file:///public/a.txt"),
            ("FILE:///public/a.txt", "file:///public/a.txt"),
            ("file:///public/%61.txt", "file:///public/a.txt"),
            ("file:///public/%c3%a9", "file:///public/%C3%A9"),
            ("memo://notes/a/../b", "memo://notes/b"),
            ("memo:a/./b", "memo:a/b"),
            ("https://h/a/%2E%2E/b?q=1", "https://h/b?q=1"),
        ] {
            assert_eq!(canonical_uri(uri).as_deref(), Ok(canonical), "{uri}");
        }
    }

    #[test]
    fn uris_that_cannot_be_made_canonical_are_refused() {
        for (uri, reason) in [
            ("file:///public/../../secret", NotCanonical::AboveRoot),
            ("file:///..", NotCanonical::AboveRoot),
            ("file:///public//../../..//etc", NotCanonical::AboveRoot),
            ("memo:..", NotCanonical::AboveRoot),
            ("file:///public/a%00.txt", NotCanonical::ControlCharacter),
            ("file:///public/a\0.txt", NotCanonical::ControlCharacter),
            ("file:///public/a\n.txt", NotCanonical::ControlCharacter),
            ("file:///public/%0a", NotCanonical::ControlCharacter),
            ("file:///public/%zz", NotCanonical::BadPercentEncoding),
            ("file:///public/%2", NotCanonical::BadPercentEncoding),
            ("https://h/a?x=%", NotCanonical::BadPercentEncoding),
            ("file:///public/%252e%252e/x", NotCanonical::DoubleEncoded),
            ("file:///public/..%252fx", NotCanonical::DoubleEncoded),
            ("file://public/secret/key.txt", NotCanonical::FileHost),
            (
                "file://evil%2Fpublic/secret",
                NotCanonical::SeparatorInAuthority,
            ),
            ("memo://a%5c..%5cb/x", NotCanonical::SeparatorInAuthority),
            ("memo://a\\..\\b", NotCanonical::SeparatorInAuthority),
            (
                "file:///secret/key.txt?/public/",
                NotCanonical::UnreadPart {
                    scheme: "file",
                    part: "query",
                },
            ),
            (
                "file:///secret/key.txt#/public/",
                NotCanonical::UnreadPart {
                    scheme: "file",
                    part: "fragment",
                },
            ),
            (
                "https://h/secret#/public/",
                NotCanonical::UnreadPart {
                    scheme: "https",
                    part: "fragment",
                },
            ),
        ] {
            assert_eq!(canonical_uri(uri), Err(reason), "{uri}");
        }
    }

    /// What a file server that decodes and normalises the path it is asked for would serve (as
    /// Python's `unquote` then `posixpath.normpath` do): every `%XY` decoded (once), `\` and `/` as
    /// separators, dot segments resolved and clamped at the root. `None` for what it would not
    /// serve as a path at all.
    fn served_path(uri: &str) -> Option<String> {
        let uri = uri.split(['?', '#']).next()?;
        let lower = uri.to_ascii_lowercase();
        let path = if lower.starts_with("file://") {
            let after = &uri["file://".len()..];
            &after[after.find('/')?..]
        } else if lower.starts_with("srv://") {
            // A custom scheme's authority is part of the name (`test://static/resource/1`).
            &uri["srv:/".len()..]
        } else {
            uri.strip_prefix("srv:")?
        };
        let bytes = path.as_bytes();
        let mut decoded = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            match (bytes[at], encoded_byte(bytes, at)) {
                (b'%', Ok(byte)) => {
                    decoded.push(byte);
                    at += 3;
                }
                (byte, _) => {
                    decoded.push(byte);
                    at += 1;
                }
            }
        }
        let decoded = String::from_utf8(decoded).ok()?.replace('\\', "/");
        let mut kept: Vec<&str> = Vec::new();
        let mut ends_in_slash = false;
        for segment in decoded.split('/') {
            ends_in_slash = true;
            match segment {
                "" | "." => {}
                ".." => {
                    kept.pop();
                }
                segment => {
                    kept.push(segment);
                    ends_in_slash = false;
                }
            }
        }
        let slash = if ends_in_slash && !kept.is_empty() {
            "/"
        } else {
            ""
        };
        Some(format!("/{}{slash}", kept.join("/")))
    }

    fn traversal_uri() -> impl Strategy<Value = String> {
        let prefix = prop::sample::select(vec![
            "file:///",
            "file://localhost/",
            "FILE:///",
            "file://public/",
            "file://",
            "srv://host/",
            "srv:/",
        ]);
        let segment = prop::sample::select(vec![
            "public",
            "secret",
            "key.txt",
            "a.txt",
            "..",
            ".",
            "%2e%2e",
            "%2E%2e",
            "%2e.",
            ".%2E",
            "..%2f",
            "..%2F",
            "%2f",
            "%2F..",
            "%5c..",
            "..%5C",
            "\\..",
            "..\\",
            "",
            "%252e%252e",
            "%00",
            "%zz",
            "p%75blic",
            "%2e",
            "a?/public/",
            "b#/public/",
        ]);
        let separator = prop::sample::select(vec!["/", "//", "/./", "\\", "%2f", "%2F", "%5c"]);
        (
            prefix,
            prop::collection::vec((segment, separator), 0..8),
            prop::sample::select(vec!["", "/"]),
        )
            .prop_map(|(prefix, parts, end)| {
                let mut uri = prefix.to_string();
                for (segment, separator) in parts {
                    uri.push_str(segment);
                    uri.push_str(separator);
                }
                uri.push_str(end);
                uri
            })
    }

    fn path_of(canonical: &str) -> &str {
        let after_scheme = canonical
            .split_once(':')
            .map_or(canonical, |(_, rest)| rest);
        // The authority ends where the query does too: `srv://a?/x` has the path "".
        let hier = after_scheme
            .split(['?', '#'])
            .next()
            .unwrap_or(after_scheme);
        match hier.strip_prefix("//") {
            Some(after) => &after[after.find('/').unwrap_or(after.len())..],
            None => hier,
        }
    }

    proptest! {
        // Failures are reported with their input, not saved into the source tree.
        #![proptest_config(ProptestConfig {
            cases: 16384,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn canonical_uris_hide_no_traversal(uri in traversal_uri()) {
            let Ok(canonical) = canonical_uri(&uri) else {
                return Ok(());
            };
            let path = path_of(&canonical);
            prop_assert!(
                path.split('/').all(|segment| segment != "." && segment != ".."),
                "{uri} -> {canonical}"
            );
            prop_assert!(!path.contains("//") && !path.contains('\\'), "{uri} -> {canonical}");
            let upper = path.to_ascii_uppercase();
            for encoded in ["%2E", "%2F", "%5C", "%00"] {
                prop_assert!(!upper.contains(encoded), "{uri} -> {canonical}");
            }
            prop_assert_eq!(canonical_uri(&canonical), Ok(canonical.clone()), "{}", uri);
            // What the scope reads is what the upstream serves.
            prop_assert_eq!(served_path(&canonical), served_path(&uri), "{} -> {}", uri, canonical);

            let scope = Scope::only([NamePattern::parse("srv:*/public/*")]);
            let allowed = in_scope(&scope, &Naming::default(), "srv", &canonical);
            let served = served_path(&uri).unwrap_or_default();
            prop_assert!(
                !allowed || served.to_ascii_lowercase().contains("/public/"),
                "{uri} -> {canonical} is allowed but serves {served}"
            );
        }
    }
}
