//! The admin console's service: what admins may do to hosts and accounts, each action with a
//! reason and a line in the append-only audit log ([`audit`]), written in the action's own
//! transaction. Authorization is here, not in the adapters: every function checks for an
//! admin first.

mod accounts;
pub mod audit;
mod hosts;

pub(crate) use accounts::{RoleChange, change_roles, summary as user_summary};
pub use accounts::{reinstate, set_admin, suspend};
pub(crate) use hosts::snapshot as host_snapshot;
pub use hosts::{set_delisted, set_verified};
