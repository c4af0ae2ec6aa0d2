//! Cardpool's shared vocabulary.
//!
//! Everything here compiles for both the server and the browser (wasm), so it holds only plain
//! serde data: request and response DTOs, validated domain values and [`AppError`], the single
//! error type every layer speaks. No database or server-only type may ever appear here; that is
//! what keeps sea-orm out of the wasm bundle.

pub mod account;
pub mod admin;
pub mod advisor;
pub mod error;
pub mod fabric;
pub mod gangs;
pub mod host;
pub mod limits;
pub mod money;
pub mod notifications;
pub mod offers;
pub mod payments;
pub mod rentals;
pub mod reports;
pub mod telemetry;
pub mod wire;

pub use error::{AppError, FieldErrors};
