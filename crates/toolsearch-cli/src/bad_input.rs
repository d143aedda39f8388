//! Errors that are the user's input, and the exit code they give: 2, against 1 for any other
//! failure. Shared by `toolsearch` and `toolsearch-bench` (which compiles this file too).

/// An error caused by the user's input: exit code 2 instead of 1.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Whether `err` (or an error under it) is the user's input: exit code 2.
pub fn is_bad_input(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<BadInput>().is_some()
            || cause
                .downcast_ref::<toolsearch_core::Error>()
                .is_some_and(toolsearch_core::Error::is_bad_input)
    })
}
