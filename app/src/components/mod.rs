//! Reusable pieces of the UI, by area.

pub mod advisor;
pub mod bars;
pub mod bundle;
pub mod fabric;
pub mod form;
pub mod kit;
pub mod layout;
pub mod limits;
pub mod logs;
pub mod mig_layout;
pub mod money;
pub mod numbers;
pub mod session;
pub mod ssh;
pub mod telemetry;
