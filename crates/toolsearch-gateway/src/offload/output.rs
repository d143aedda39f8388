//! What the store keeps of one output: its text with its character count, and what a put kept.
//! A leaf: the store, the notice, the readers and the jq worker all read these, and it reads none
//! of them.

use std::sync::Arc;

/// One stored output.
#[derive(Debug)]
pub struct StoredOutput {
    pub handle: String,
    /// Public name of the tool that produced it.
    pub tool: String,
    pub text: String,
    pub chars: usize,
}

impl StoredOutput {
    pub(super) fn new(handle: String, tool: String, text: String) -> Self {
        let chars = text.chars().count();
        Self {
            handle,
            tool,
            text,
            chars,
        }
    }

    /// Byte index of character `index` (the end of the text past the last character).
    pub(super) fn byte_at(&self, index: usize) -> usize {
        if self.chars == self.text.len() {
            // ASCII: characters are bytes.
            return index.min(self.text.len());
        }
        self.text
            .char_indices()
            .nth(index)
            .map_or(self.text.len(), |(b, _)| b)
    }
}

/// What `OffloadStore::put` kept.
#[derive(Debug, Clone)]
pub struct Stored {
    pub output: Arc<StoredOutput>,
    /// Bytes of the original text, when it was cut to fit `maxBytesPerSession`.
    pub cut_from: Option<usize>,
}

/// The largest char boundary of `text` at or below byte `index`.
pub(super) fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}
