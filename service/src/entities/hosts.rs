use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "hosts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub provider_id: i64,
    pub hostname: String,
    pub location: Option<String>,
    /// SHA-256 of the host credential, hex.
    #[sea_orm(unique)]
    pub credential_hash: String,
    /// `online` or `offline` (see `cardpool_domain::host::HostStatus`).
    pub status: String,
    pub agent_version: Option<String>,
    /// The last reported `cardpool_protocol::HostFacts`, as JSON.
    pub facts: Option<String>,
    pub last_heartbeat_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    /// Offered on the market (needs a price for every GPU model it has).
    pub listed: bool,
    /// The latest `cardpool_protocol::SelfTestReport`, as JSON.
    pub self_test: Option<String>,
    pub self_test_at: Option<DateTimeUtc>,
    /// The agent connection that owns the host (`<replica>:<n>`, see `hosts::connect_host`).
    pub connection_id: Option<String>,
    /// When an admin verified the host (the badge renters filter on).
    pub verified_at: Option<DateTimeUtc>,
    /// Why an admin took the host off the market; while set its provider cannot list it.
    pub held_reason: Option<String>,
    /// The fabric its provider declares (see `hosts::fabric`): an id shared by the hosts that
    /// reach each other over it, the interconnect and its speed.
    pub fabric_id: Option<String>,
    pub interconnect: Option<String>,
    pub fabric_gbps: Option<i32>,
    /// The host's address on its fabric, where gang members on other hosts reach it.
    pub fabric_addr: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(has_many = "super::gpus::Entity")]
    Gpus,
}

impl Related<super::gpus::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Gpus.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
