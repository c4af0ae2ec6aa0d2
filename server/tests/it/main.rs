//! The server's integration tests, one binary for all of them: a real server on a real socket
//! per test (`common`), over a per-test database, on SQLite and PostgreSQL, with real agents,
//! the local test-mode Stripe, the `cardpool` binary itself and the renter's `cardpool-cli`.

mod agents;
mod cli;
mod cluster;
mod common;
mod crash;
mod gangs;
mod http;
mod limits;
mod logs;
mod mig;
mod pages;
mod payments;
mod payouts;
mod rentals;
mod renter_cli;
mod security;
mod ssh;
mod survival;
mod telemetry;
