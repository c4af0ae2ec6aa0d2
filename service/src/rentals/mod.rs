//! Rentals: specific GPUs held for a renter, and how a rental moves from booking to settled.
//!
//! A booking ([`booking`]) holds specific GPUs in one write transaction; the database refuses
//! any overlapping hold on its own (exclusion constraint / trigger, see the `rentals`
//! migration), so even a bug cannot give one GPU to two rentals. Kinds: on-demand holds its
//! GPUs from now on, open-ended; reserved holds them for a future window, prepaid at booking
//! (into held funds); spot holds them open-ended at a bid and can be preempted: higher-priority
//! demand shortens a spot rental's holds to "now + notice", the rental gets its notice (state
//! `preempting`), and the new rental's holds begin where the spot holds end ([`spot`]). So
//! preemption, too, is just non-overlapping holds.
//!
//! A gang ([`gangs`]) books rentals on several hosts of one fabric in one transaction; its
//! members start billing together, when the last is ready.
//!
//! From there the rental moves `requested → provisioning → running → stopping → ended` (or
//! `preempting → preempted`, `interrupted`, `failed`): the agent reports its workload
//! ([`record_workload_status`]) and is told what to do ([`commands_for_host`]); the renter stops
//! it; the clock ends reserved windows and overdue preemptions ([`schedules`]). Every step
//! ([`state`]) is recorded with its reason, and billing ([`billing`]) charges whole seconds from
//! the ready report to the billing end through the ledger, in the same transaction as the
//! rental's `billed_seconds`, so nothing is billed twice or skipped across a crash.

mod allocation;
mod billing;
mod booking;
mod caps;
mod commands;
mod gangs;
mod lifecycle;
mod pricing;
mod schedules;
mod spot;
mod state;
mod views;

pub use allocation::{FreeGpu, choose_gpus};
pub use billing::{settle, settle_all};
pub use booking::book_offer;
pub use caps::set_rental_limits;
pub(crate) use commands::answer_heartbeats;
pub use commands::commands_for_host;
pub use gangs::{book_gang, get_gang, list_gangs, replace_member, stop_gang, tend_gangs};
pub use lifecycle::{
    reconcile_running, record_workload_status, set_notice, stop_rental, stop_renters_rentals, transition,
};
pub use pricing::{clearing_price, cost};
pub use schedules::{interrupt_host, run_schedules};
pub use spot::change_bid;
pub(crate) use state::load_for_update;
pub use state::open_end;
pub use views::{Audience, get_rental, list_rentals, visible_rental};
