use sea_orm::entity::prelude::*;

/// A booking of GPUs on one host (see `cardpool_domain::rentals`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rentals")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub renter_id: i64,
    pub host_id: i64,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub kind: String,
    pub state: String,
    pub price_micros: i64,
    /// `cardpool_domain::rentals::Workload` as JSON.
    #[sea_orm(column_type = "Text")]
    pub workload: String,
    pub starts_at: DateTimeUtc,
    pub ends_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub bid_micros: Option<i64>,
    /// When the agent reported the workload ready: billing starts here.
    pub running_since: Option<DateTimeUtc>,
    /// Billing stops here (stop requested, end of workload, last heartbeat of a lost host).
    pub billing_ends_at: Option<DateTimeUtc>,
    pub billed_seconds: i64,
    pub charged_micros: i64,
    /// Billing is complete (the rental ended and every second was charged).
    pub settled: bool,
    #[sea_orm(column_type = "Text", nullable)]
    pub notice: Option<String>,
    /// When the current notice (low balance, preemption) was first given.
    pub notice_given_at: Option<DateTimeUtc>,
    /// Reserved: the end of the booked window.
    pub reserved_until: Option<DateTimeUtc>,
    /// Reserved: what was moved into held funds at booking.
    pub prepaid_micros: i64,
    /// Stop the rental when its GPUs sit idle (the renter opted in at booking).
    pub stop_when_idle: bool,
    /// Reserved: when the workload exited inside the window (the GPUs stay held until its end).
    pub workload_exited_at: Option<DateTimeUtc>,
    /// The renter's cap on what this rental may cost, micro-dollars.
    pub max_cost_micros: Option<i64>,
    /// The renter's cap on how long this rental may bill, seconds.
    pub max_duration_secs: Option<i64>,
    /// What admins refunded on this rental through the ledger, micro-dollars.
    pub refunded_micros: i64,
    /// The gang this rental is a member of, and its rank there (0 hosts the rendezvous).
    pub gang_id: Option<i64>,
    pub gang_rank: Option<i32>,
    /// A gang member: when its workload was up (it waits there until every member is).
    pub gang_ready_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
