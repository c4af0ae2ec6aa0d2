//! sea-orm entities, one module per table, mirroring `cardpool-migrations`.
//!
//! They never leave the server: services convert them into `cardpool-domain` DTOs.

pub mod alerts;
pub mod api_tokens;
pub mod audit_log;
pub mod enrollment_tokens;
pub mod gangs;
pub mod gpu_rollups;
pub mod gpus;
pub mod host_events;
pub mod host_prices;
pub mod hosts;
pub mod ledger_accounts;
pub mod ledger_postings;
pub mod ledger_transactions;
pub mod notifications;
pub mod payout_accounts;
pub mod payouts;
pub mod rental_energy;
pub mod rental_events;
pub mod rental_gpus;
pub mod rentals;
pub mod sessions;
pub mod sign_in_throttle;
pub mod spot_prices;
pub mod ssh_keys;
pub mod stripe_events;
pub mod telemetry_cursors;
pub mod top_ups;
pub mod users;
pub mod webhook_deliveries;
pub mod webhooks;
