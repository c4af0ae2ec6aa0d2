use sea_orm::entity::prelude::*;

/// One booking of GPUs on several hosts of one fabric; its members are rentals with its
/// `gang_id` (see `cardpool_domain::gangs`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gangs")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub renter_id: i64,
    pub fabric_id: String,
    pub gpu_model: String,
    pub nodes: i32,
    pub gpus_per_node: i32,
    pub kind: String,
    /// `stop` or `hold` (see `cardpool_domain::gangs::OnMemberLoss`).
    pub on_member_loss: String,
    /// Where rank 0 listens for the others (`MASTER_PORT`).
    pub master_port: i32,
    /// When the last member was ready: every member's billing starts here.
    pub started_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
