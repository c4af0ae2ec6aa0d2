//! Server functions, grouped by domain. Each one finds out who is asking, calls one service
//! function and returns its result; no rule lives here.
//!
//! They are served under `/rpc/<name>`, apart from the public JSON API under `/api/v1`. Their answers are decoded as text
//! (`output = JsonOut`, see `cardpool_domain::wire`), by the same code that decodes the data a
//! page is hydrated with.

pub mod accounts;
pub mod admin;
pub mod advisor;
pub mod api_tokens;
pub mod gangs;
pub mod hosts;
pub mod notifications;
pub mod offers;
pub mod payments;
pub mod rentals;
pub mod ssh_keys;
pub mod telemetry;
