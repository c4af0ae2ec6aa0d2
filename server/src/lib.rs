//! The `cardpool` server: configuration, the HTTP stack and the operator CLI's work.
//!
//! A request flows: security headers → client IP → cross-site check → session → one of
//! `/healthz`, the JSON API (`api`), server functions (`/rpc/*`) or a server-rendered page (the
//! market's kept for visitors, `page_cache`);
//! each handler calls `cardpool-service`. The SSH gateway (`ssh`) is a second adapter over the same
//! services. The binary in `main.rs` only parses the command line.

pub mod api;
pub mod assets;
pub mod config;
pub mod demo;
pub mod edges;
pub mod gateway;
pub mod http;
pub mod limits;
pub mod local_stripe;
pub mod metrics;
pub mod page_cache;
pub mod serve;
pub mod ssh;
pub mod workers;

pub use config::Config;
