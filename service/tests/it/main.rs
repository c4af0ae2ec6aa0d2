//! The service's integration tests, one binary (one link, one process start) for all of them.
//! Each module runs its tests on SQLite and PostgreSQL (see `cardpool_service::backend_tests`);
//! the accounts, hosts and money they need come from the builders in
//! `cardpool_service::testing`.

mod accounts;
mod admin;
mod admin_rentals;
mod advisor;
mod fabric;
mod fuzz_corpus;
mod gangs;
mod hosts;
mod ledger;
mod limits;
mod mig;
mod mig_layouts;
mod money;
mod offers;
mod rentals;
mod telemetry;
