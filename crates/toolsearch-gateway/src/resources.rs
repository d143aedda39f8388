//! Resource URIs made unique across upstreams, and mapped back.
//!
//! Two upstreams may both serve `file:///README.md`, so the gateway names every upstream resource
//! `toolsearch://<server>/<the upstream's URI, unchanged>`: for example
//! `toolsearch://docs/file:///README.md`. The result is a valid URI (the upstream's URI becomes
//! its path, query and fragment), a person can still read the original in it, and mapping back is
//! exact: strip the prefix, and the rest is the upstream's URI byte for byte. Templates are named
//! the same way, so a URI a client fills in from a gateway template maps back to a URI the
//! upstream's template matches. Every URI in what passes through (resource lists, reads, resource
//! links and embedded resources in tool results and prompts, update notifications) is rewritten
//! the same way.
//!
//! What a client sends is read through [`canonical_uri`]: the upstream URI inside a gateway URI is
//! made canonical (dot segments, encodings, separators) before the scope is asked, and the upstream
//! receives that canonical form, so a pattern and the server always read the same path.

mod canonical;

pub use canonical::{canonical_uri, in_scope};

use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents,
};

/// The scheme of the gateway's resource URIs.
pub const SCHEME: &str = "toolsearch";

/// The gateway's URI of `server`'s resource `uri`.
pub fn public_uri(server: &str, uri: &str) -> String {
    format!("{SCHEME}://{}/{uri}", encode_server(server))
}

/// The server and upstream URI of a gateway resource URI; `None` when it is not one.
pub fn parse_public_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix(SCHEME)?.strip_prefix("://")?;
    let (server, original) = rest.split_once('/')?;
    if server.is_empty() || original.is_empty() {
        return None;
    }
    Some((decode_server(server)?, original.to_string()))
}

/// Server names go in the URI's authority: anything but letters, digits and `-._~` is
/// percent-encoded.
fn encode_server(server: &str) -> String {
    let mut out = String::with_capacity(server.len());
    for byte in server.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode_server(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn rewrite_contents(contents: &mut ResourceContents, server: &str) {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => *uri = public_uri(server, uri),
        _ => {}
    }
}

fn rewrite_block(block: &mut ContentBlock, server: &str) {
    match block {
        ContentBlock::ResourceLink(link) => link.uri = public_uri(server, &link.uri),
        ContentBlock::Resource(embedded) => rewrite_contents(&mut embedded.resource, server),
        _ => {}
    }
}

/// Renames the resource links and embedded resources of a tool result from `server`.
pub fn rewrite_call_result(result: &mut CallToolResult, server: &str) {
    for block in &mut result.content {
        rewrite_block(block, server);
    }
}

/// Renames the resources embedded in a prompt's messages from `server`.
pub fn rewrite_prompt_result(result: &mut GetPromptResult, server: &str) {
    for message in &mut result.messages {
        rewrite_block(&mut message.content, server);
    }
}

/// Renames the contents of a resource read from `server`.
pub fn rewrite_read_result(result: &mut ReadResourceResult, server: &str) {
    for contents in &mut result.contents {
        rewrite_contents(contents, server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_byte_for_byte() {
        for (server, uri) in [
            (
                "everything",
                "demo://resource/static/document/architecture.md",
            ),
            ("docs", "file:///README.md"),
            ("a b/c", "https://example.com/x?y=1#z"),
            ("srv", "demo://resource/dynamic/text/{resourceId}"),
        ] {
            let public = public_uri(server, uri);
            assert!(public.starts_with("toolsearch://"), "{public}");
            assert_eq!(
                parse_public_uri(&public),
                Some((server.to_string(), uri.to_string())),
                "{public}"
            );
        }
        assert_eq!(
            public_uri("docs", "file:///README.md"),
            "toolsearch://docs/file:///README.md"
        );
    }

    #[test]
    fn other_uris_are_not_gateway_uris() {
        for uri in [
            "file:///README.md",
            "toolsearch://",
            "toolsearch://docs",
            "toolsearch://docs/",
            "toolsearch:///x",
            "toolsearch://%zz/x",
        ] {
            assert_eq!(parse_public_uri(uri), None, "{uri}");
        }
    }
}
