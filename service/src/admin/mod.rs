//! The admin console's service: what admins may do to hosts, accounts and rentals, each action
//! with a reason and a line in the append-only audit log ([`audit`]), written in the action's
//! own transaction; what they look up ([`records`]); and the revenue and occupancy reports
//! ([`reports`]). Authorization is here, not in the adapters: every function checks for an
//! admin first.

mod accounts;
pub mod audit;
mod hosts;
pub mod records;
pub mod rentals;
pub mod reports;

pub(crate) use accounts::{RoleChange, change_roles, summary as user_summary};
pub use accounts::{reinstate, set_admin, suspend};
pub(crate) use hosts::snapshot as host_snapshot;
pub use hosts::{set_delisted, set_verified};
