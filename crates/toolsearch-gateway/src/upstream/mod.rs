//! The gateway's side of its upstream MCP servers: one [`connection`] per server (a child process,
//! a Streamable HTTP client, or a legacy [`sse`] client), the [`supervisor`] that starts, watches and restarts them and is
//! the handle the rest of the gateway uses, the [`wire`] guards that read an upstream's output
//! before the MCP library parses it, the [`http`] calls posted to HTTP servers, each server's
//! [`state`], what a child process inherits of the gateway's environment ([`child_env`]), and the
//! OAuth [`sign_in`] to HTTP servers with where its tokens are kept.
//!
//! Nothing here knows about downstream sessions beyond the relay it hands an upstream's requests
//! to; nothing outside this folder starts a process or opens a connection to an upstream.

pub mod child_env;
pub(crate) mod connection;
pub(crate) mod http;
pub mod sign_in;
pub(crate) mod sse;
pub(crate) mod state;
pub(crate) mod supervisor;
pub(crate) mod wire;

pub use connection::{ensure_crypto_provider, to_core_tool, UpstreamError};
