//! sea-orm entities, one module per table, mirroring `cardpool-migrations`.
//!
//! They never leave the server: services convert them into `cardpool-domain` DTOs.

pub mod api_tokens;
pub mod enrollment_tokens;
pub mod gpus;
pub mod host_events;
pub mod host_prices;
pub mod hosts;
pub mod sessions;
pub mod users;
