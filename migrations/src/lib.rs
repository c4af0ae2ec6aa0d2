//! Cardpool's database schema, as an ordered list of migrations.
//!
//! The server runs [`Migrator::up`] at start-up, on SQLite and PostgreSQL alike, so every
//! migration here must be written in sea-query's portable builder (no raw SQL unless it is
//! guarded per backend). Names follow `mYYYYMMDD_HHMMSS_description`; never edit one that
//! has shipped, add a new one.

pub use sea_orm_migration::prelude::*;

mod m20261130_000001_create_accounts;
mod m20261130_000002_create_hosts;
mod m20261130_000003_host_pricing;
mod m20261130_000004_host_self_test;
mod m20261130_000005_ledger_and_payments;
mod m20261130_000006_offer_search;
mod m20261130_000007_rentals;
mod m20261130_000008_rental_lifecycle;
mod m20261130_000009_offer_stock;
mod m20261130_000010_telemetry;
mod m20261201_000011_offer_stock_market;
mod m20261201_000012_ssh_keys;
mod m20261201_000013_hardening;
mod m20261201_000014_hashed_sessions;
mod m20261202_000015_replicas;
mod m20261203_000016_admin_console;
mod m20261203_000017_limits_and_notifications;
mod m20261204_000018_admin_rentals;
mod m20261205_000019_gpu_mig;
mod m20261206_000020_mig_slices;
mod m20261206_000021_fabrics;
mod m20261206_000022_gangs;
mod m20261206_000023_mig_layouts;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_create_accounts::Migration),
            Box::new(m20261130_000002_create_hosts::Migration),
            Box::new(m20261130_000003_host_pricing::Migration),
            Box::new(m20261130_000004_host_self_test::Migration),
            Box::new(m20261130_000005_ledger_and_payments::Migration),
            Box::new(m20261130_000006_offer_search::Migration),
            Box::new(m20261130_000007_rentals::Migration),
            Box::new(m20261130_000008_rental_lifecycle::Migration),
            Box::new(m20261130_000009_offer_stock::Migration),
            Box::new(m20261130_000010_telemetry::Migration),
            Box::new(m20261201_000011_offer_stock_market::Migration),
            Box::new(m20261201_000012_ssh_keys::Migration),
            Box::new(m20261201_000013_hardening::Migration),
            Box::new(m20261201_000014_hashed_sessions::Migration),
            Box::new(m20261202_000015_replicas::Migration),
            Box::new(m20261203_000016_admin_console::Migration),
            Box::new(m20261203_000017_limits_and_notifications::Migration),
            Box::new(m20261204_000018_admin_rentals::Migration),
            Box::new(m20261205_000019_gpu_mig::Migration),
            Box::new(m20261206_000020_mig_slices::Migration),
            Box::new(m20261206_000021_fabrics::Migration),
            Box::new(m20261206_000022_gangs::Migration),
            Box::new(m20261206_000023_mig_layouts::Migration),
        ]
    }
}
