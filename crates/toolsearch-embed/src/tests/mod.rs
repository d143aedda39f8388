//! The crate's tests against the real model and the real package index, through its public API
//! only (as `toolsearch_embed::...`). They live in the unit-test binary rather than in an
//! integration-test binary of their own, which would link candle and tokenizers a second time.

#[path = "../../../../tests/support/peers.rs"]
pub(crate) mod peers;

mod fetch;
mod model;
mod side_by_side;
