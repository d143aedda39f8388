pub mod auth;
pub mod bench;
pub mod eval;
pub mod init;
pub mod model;
pub mod search;
pub mod serve;
