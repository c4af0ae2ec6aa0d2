//! Provider hosts: enrollment, the host credential, inventory, heartbeats and liveness.
//!
//! A provider creates a single-use, expiring enrollment token; the agent exchanges it for a
//! host credential (both stored as SHA-256 only). From then on the agent speaks only for its
//! own host: every agent-side function here takes the host resolved from the credential, never
//! a host id from the message. What the agent reports is stored by `inventory`; heartbeats, the
//! connection that owns a host, and going offline are in `liveness`; every transition is
//! recorded in `host_events`.

mod fabric;
mod heartbeats;
mod inventory;
mod layouts;
mod liveness;
mod units;

pub(crate) use fabric::declared as declared_fabric;
pub use fabric::{fabric_view, links, set_host_fabric};
pub use heartbeats::{Beat, HeartbeatAnswer, Heartbeats, heartbeat};
pub use inventory::record_inventory;
pub(crate) use layouts::layout_commands_of;
pub use layouts::{record_layout_failure, set_mig_layout};
pub use liveness::{
    connect_host, disconnect_host, is_connected_anywhere, mark_silent_hosts_offline, owns_connection,
    record_connection_heartbeat, record_heartbeat,
};
pub use units::{MAX_MIG_INSTANCES, set_gpu_sale};

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{enrollment_tokens, gpus, host_events, host_prices, hosts},
    secrets::{digest, new_secret},
};
use cardpool_domain::host::{
    CreatedEnrollmentToken, EnrolledHost, GpuModelPrice, GpuView, HostDetail, HostEvent, HostStatus, HostSummary,
};
use cardpool_protocol::HostFacts;
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, sea_query::Expr,
};
use std::collections::BTreeMap;

/// How long an enrollment token can be used.
pub const ENROLLMENT_TOKEN_TTL: Duration = Duration::hours(1);
const ENROLLMENT_PREFIX: &str = "cpe_";
const HOST_CREDENTIAL_PREFIX: &str = "cph_";
const MAX_LOCATION_LEN: usize = 64;
const MAX_HOSTNAME_LEN: usize = 253;

pub(crate) fn require_provider(principal: &Principal) -> AppResult<()> {
    if principal.roles.provider {
        Ok(())
    } else {
        Err(AppError::forbidden("turn on provider features on your account page first"))
    }
}

fn clean_label(field: &str, raw: Option<&str>, max: usize) -> AppResult<Option<String>> {
    let Some(value) = raw.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    if value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(AppError::invalid_field(field, format!("use at most {max} printable characters")));
    }
    Ok(Some(value.to_owned()))
}

/// Creates a single-use enrollment token for the calling provider; `server_url` is where
/// agents reach this server, used to spell out the command to run.
pub async fn create_enrollment_token(
    services: &Services,
    principal: &Principal,
    location: Option<&str>,
    server_url: &str,
) -> AppResult<CreatedEnrollmentToken> {
    require_provider(principal)?;
    let location = clean_label("location", location, MAX_LOCATION_LEN)?;
    let token = new_secret(ENROLLMENT_PREFIX);
    let now = Utc::now();
    let expires_at = now + ENROLLMENT_TOKEN_TTL;
    enrollment_tokens::ActiveModel {
        provider_id: Set(principal.user_id),
        token_hash: Set(digest(&token)),
        location: Set(location),
        created_at: Set(now),
        expires_at: Set(expires_at),
        used_at: Set(None),
        host_id: Set(None),
        ..Default::default()
    }
    .insert(&services.db)
    .await
    .context("inserting enrollment token")?;
    let command = format!("cardpool-agent enroll --server {server_url} --token {token}");
    Ok(CreatedEnrollmentToken { token, expires_at, command })
}

/// Exchanges an enrollment token for a host and its credential. A token works once, before
/// it expires; every other case is the same `Unauthorized`.
pub async fn enroll_host(services: &Services, token: &str, hostname: &str) -> AppResult<EnrolledHost> {
    let hostname = clean_label("hostname", Some(hostname), MAX_HOSTNAME_LEN)?
        .ok_or_else(|| AppError::invalid_field("hostname", "the agent must report a hostname"))?;
    if !token.starts_with(ENROLLMENT_PREFIX) {
        return Err(AppError::Unauthorized);
    }
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting enrollment")?;
    let Some(row) = enrollment_tokens::Entity::find()
        .filter(enrollment_tokens::Column::TokenHash.eq(digest(token)))
        .one(&txn)
        .await
        .context("loading enrollment token")?
    else {
        return Err(AppError::Unauthorized);
    };
    // Claim the token with a conditional update, so two agents racing with one token cannot
    // both win on either backend.
    let claimed = enrollment_tokens::Entity::update_many()
        .col_expr(enrollment_tokens::Column::UsedAt, Expr::value(now))
        .filter(enrollment_tokens::Column::Id.eq(row.id))
        .filter(enrollment_tokens::Column::UsedAt.is_null())
        .filter(enrollment_tokens::Column::ExpiresAt.gt(now))
        .exec(&txn)
        .await
        .context("claiming enrollment token")?;
    if claimed.rows_affected != 1 {
        return Err(AppError::Unauthorized);
    }
    let credential = new_secret(HOST_CREDENTIAL_PREFIX);
    let host = hosts::ActiveModel {
        provider_id: Set(row.provider_id),
        hostname: Set(hostname),
        location: Set(row.location.clone()),
        credential_hash: Set(digest(&credential)),
        status: Set(HostStatus::Offline.as_str().into()),
        agent_version: Set(None),
        facts: Set(None),
        last_heartbeat_at: Set(None),
        created_at: Set(now),
        revoked_at: Set(None),
        listed: Set(false),
        self_test: Set(None),
        self_test_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .context("inserting host")?;
    enrollment_tokens::Entity::update_many()
        .col_expr(enrollment_tokens::Column::HostId, Expr::value(host.id))
        .filter(enrollment_tokens::Column::Id.eq(row.id))
        .exec(&txn)
        .await
        .context("linking enrollment token")?;
    record_event(&txn, host.id, HostStatus::Offline, "enrolled", now).await?;
    txn.commit().await.context("committing enrollment")?;
    tracing::info!(host.id = host.id, provider.id = row.provider_id, "host enrolled");
    Ok(EnrolledHost { host_id: host.id, credential })
}

/// The host a credential belongs to. Unknown and revoked credentials are `Unauthorized`.
pub async fn authenticate_host(services: &Services, credential: &str) -> AppResult<hosts::Model> {
    if !credential.starts_with(HOST_CREDENTIAL_PREFIX) {
        return Err(AppError::Unauthorized);
    }
    hosts::Entity::find()
        .filter(hosts::Column::CredentialHash.eq(digest(credential)))
        .filter(hosts::Column::RevokedAt.is_null())
        .one(&services.db)
        .await
        .context("loading host")?
        .ok_or(AppError::Unauthorized)
}

pub(super) async fn record_event(
    db: &impl ConnectionTrait,
    host_id: i64,
    status: HostStatus,
    reason: &str,
    at: DateTime<Utc>,
) -> AppResult<()> {
    host_events::ActiveModel {
        host_id: Set(host_id),
        status: Set(status.as_str().into()),
        reason: Set(reason.into()),
        at: Set(at),
        ..Default::default()
    }
    .insert(db)
    .await
    .context("recording host event")?;
    Ok(())
}

/// One host's change of status: `(host, when, online or not)`.
pub(crate) type StatusChange = (i64, DateTime<Utc>, bool);

/// Status changes in time order: those from `since` on (the newest `limit` of them), and each
/// host's last one before `since`, which says how the window began, so a host that flapped for
/// years costs no more than one that did not. Only `hosts` when given, else every host.
pub(crate) async fn status_changes_since(
    conn: &impl ConnectionTrait,
    hosts: Option<&[i64]>,
    since: DateTime<Utc>,
    limit: u64,
) -> AppResult<Vec<StatusChange>> {
    use sea_orm::{
        QuerySelect,
        sea_query::{ExprTrait, Query},
    };
    let mut recent = host_events::Entity::find().filter(host_events::Column::At.gte(since));
    let mut last_before = Query::select()
        .expr(Expr::col(host_events::Column::Id).max())
        .from(host_events::Entity)
        .and_where(Expr::col(host_events::Column::At).lt(since))
        .group_by_col(host_events::Column::HostId)
        .to_owned();
    if let Some(ids) = hosts {
        recent = recent.filter(host_events::Column::HostId.is_in(ids.iter().copied()));
        last_before.and_where(Expr::col(host_events::Column::HostId).is_in(ids.iter().copied()));
    }
    let mut events =
        recent.order_by_desc(host_events::Column::Id).limit(limit).all(conn).await.context("loading host events")?;
    events.extend(
        host_events::Entity::find()
            .filter(host_events::Column::Id.in_subquery(last_before))
            .all(conn)
            .await
            .context("loading host events")?,
    );
    events.sort_by_key(|e| (e.at, e.id));
    Ok(events.into_iter().map(|e| (e.host_id, e.at, e.status == HostStatus::Online.as_str())).collect())
}

/// Stores the self-test report the host's agent sent.
pub async fn record_self_test(
    services: &Services,
    host: &hosts::Model,
    report: &cardpool_protocol::SelfTestReport,
) -> AppResult<()> {
    if report.checks.len() > 200 {
        return Err(AppError::invalid_field("checks", "a self-test has at most 200 checks"));
    }
    let json = serde_json::to_string(report).map_err(|_| AppError::Internal)?;
    hosts::Entity::update_many()
        .col_expr(hosts::Column::SelfTest, Expr::value(json))
        .col_expr(hosts::Column::SelfTestAt, Expr::value(Utc::now()))
        .filter(hosts::Column::Id.eq(host.id))
        .exec(&services.db)
        .await
        .context("saving self-test")?;
    Ok(())
}

fn summary(host: &hosts::Model, host_gpus: &[gpus::Model]) -> HostSummary {
    let available: Vec<&gpus::Model> =
        host_gpus.iter().filter(|g| g.state == "available" && g.parent_id.is_none()).collect();
    let mut models: BTreeMap<&str, u32> = BTreeMap::new();
    for gpu in &available {
        *models.entry(gpu.model.as_str()).or_default() += 1;
    }
    HostSummary {
        id: host.id,
        hostname: host.hostname.clone(),
        location: host.location.clone(),
        status: if host.revoked_at.is_some() {
            HostStatus::Revoked
        } else {
            HostStatus::parse(&host.status).unwrap_or(HostStatus::Offline)
        },
        last_heartbeat_at: host.last_heartbeat_at,
        agent_version: host.agent_version.clone(),
        gpu_count: available.len() as u32,
        gpu_summary: models.iter().map(|(m, n)| format!("{n}× {m}")).collect::<Vec<_>>().join(", "),
        created_at: host.created_at,
        listed: host.listed,
        verified: host.verified_at.is_some(),
        held_reason: host.held_reason.clone(),
    }
}

/// The caller's hosts (every host for an admin), newest first.
pub async fn list_hosts(services: &Services, principal: &Principal) -> AppResult<Vec<HostSummary>> {
    if !principal.roles.admin {
        require_provider(principal)?;
    }
    summaries(services, (!principal.roles.admin).then_some(principal.user_id)).await
}

/// The hosts of `provider` (every host for `None`), newest first.
pub(crate) async fn summaries(services: &Services, provider: Option<i64>) -> AppResult<Vec<HostSummary>> {
    let mut query = hosts::Entity::find().order_by_desc(hosts::Column::Id);
    if let Some(provider) = provider {
        query = query.filter(hosts::Column::ProviderId.eq(provider));
    }
    let rows = query.find_with_related(gpus::Entity).all(&services.db).await.context("listing hosts")?;
    Ok(rows.iter().map(|(host, host_gpus)| summary(host, host_gpus)).collect())
}

pub(crate) async fn visible_host(services: &Services, principal: &Principal, host_id: i64) -> AppResult<hosts::Model> {
    hosts::Entity::find_by_id(host_id)
        .one(&services.db)
        .await
        .context("loading host")?
        .filter(|h| principal.roles.admin || h.provider_id == principal.user_id)
        .ok_or_else(|| AppError::not_found("host"))
}

/// One host with its GPUs and status history (its provider or an admin).
pub async fn get_host(services: &Services, principal: &Principal, host_id: i64) -> AppResult<HostDetail> {
    let host = visible_host(services, principal, host_id).await?;
    let host_gpus = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::ParentId.is_null())
        .order_by_asc(gpus::Column::DeviceIndex)
        .all(&services.db)
        .await
        .context("loading gpus")?;
    let events = host_events::Entity::find()
        .filter(host_events::Column::HostId.eq(host.id))
        .order_by_desc(host_events::Column::Id)
        .all(&services.db)
        .await
        .context("loading host events")?;
    let prices = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(host.id))
        .order_by_asc(host_prices::Column::GpuModel)
        .all(&services.db)
        .await
        .context("loading prices")?;
    Ok(HostDetail {
        self_test: host.self_test.as_deref().and_then(|r| serde_json::from_str(r).ok()),
        self_test_at: host.self_test_at,
        fabric: fabric_view(&host),
        links: links(&host),
        prices: prices.iter().map(price_dto).collect(),
        host: summary(&host, &host_gpus),
        gpus: host_gpus
            .iter()
            .map(|g| GpuView {
                index: g.device_index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_bytes: g.memory_bytes,
                pci_bus_id: g.pci_bus_id.clone(),
                driver_version: g.driver_version.clone(),
                cuda_version: g.cuda_version.clone(),
                nvlink_peers: serde_json::from_str(&g.nvlink_peers).unwrap_or_default(),
                mig_enabled: g.mig_enabled,
                mig_instances: serde_json::from_str(&g.mig_instances).unwrap_or_default(),
                sold_as: units::sale_of(g),
                mig_profiles: serde_json::from_str(&g.mig_profiles).unwrap_or_default(),
                mig_layout_pending: g.mig_layout_wanted.as_deref().and_then(|w| serde_json::from_str(w).ok()),
                mig_layout_error: g.mig_layout_error.clone(),
                state: g.state.clone(),
            })
            .collect(),
        events: events
            .iter()
            .map(|e| HostEvent {
                status: HostStatus::parse(&e.status).unwrap_or(HostStatus::Offline),
                reason: e.reason.clone(),
                at: e.at,
            })
            .collect(),
    })
}

/// The facts the host's agent last reported, if any.
pub fn host_facts(host: &hosts::Model) -> Option<HostFacts> {
    host.facts.as_deref().and_then(|f| serde_json::from_str(f).ok())
}

/// Revokes a host (its provider, or an admin: audited): its credential stops working at once.
pub async fn revoke_host(services: &Services, principal: &Principal, host_id: i64) -> AppResult<()> {
    let host = visible_host(services, principal, host_id).await?;
    if host.revoked_at.is_some() {
        return Ok(());
    }
    let now = Utc::now();
    let by = if host.provider_id == principal.user_id { "its provider" } else { "an admin" };
    let txn = services.begin_write().await.context("starting revocation")?;
    let before = crate::admin::host_snapshot(&host);
    let mut row = host.into_active_model();
    row.revoked_at = Set(Some(now));
    row.status = Set(HostStatus::Revoked.as_str().into());
    let host = row.update(&txn).await.context("revoking host")?;
    record_event(&txn, host_id, HostStatus::Revoked, &format!("revoked by {by}"), now).await?;
    if by == "an admin" {
        let change = crate::admin::audit::Change {
            action: cardpool_domain::admin::AuditAction::HostRevoke,
            subject_id: host_id,
            reason: "revoked from the admin console",
            before,
            after: crate::admin::host_snapshot(&host),
        };
        crate::admin::audit::record(&txn, Some(principal), change).await?;
    }
    let stock_change = crate::stock::refresh_stock(&txn, host_id).await?;
    txn.commit().await.context("committing revocation")?;
    stock_change.published(services);
    tracing::info!(host.id = host_id, by = principal.user_id, "host revoked");
    // Its rentals end now, billed to this moment (the agent is cut off and runs nothing more).
    crate::rentals::interrupt_host(services, host_id, Some(now), &format!("the host was revoked by {by}")).await?;
    Ok(())
}

fn price_dto(row: &host_prices::Model) -> GpuModelPrice {
    GpuModelPrice {
        gpu_model: row.gpu_model.clone(),
        on_demand_micros: row.on_demand_micros,
        reserved_micros: row.reserved_micros,
        spot_min_bid_micros: row.spot_min_bid_micros,
    }
}

/// A host the caller provides (admins included: pricing is the provider's call alone).
async fn owned_host(services: &Services, principal: &Principal, host_id: i64) -> AppResult<hosts::Model> {
    let host = visible_host(services, principal, host_id).await?;
    if host.provider_id != principal.user_id {
        return Err(AppError::forbidden("only the host's provider can change its prices or listing"));
    }
    if host.revoked_at.is_some() {
        return Err(AppError::conflict("this host was revoked"));
    }
    Ok(host)
}

/// Sets the caller's prices for one unit (a GPU model, or a MIG slice's unit name, priced per
/// slice-hour) on one of their hosts.
pub async fn update_host_pricing(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    price: &GpuModelPrice,
) -> AppResult<GpuModelPrice> {
    price.validate()?;
    let host = owned_host(services, principal, host_id).await?;
    if !units::unit_models(services, host.id, false).await?.contains(&price.gpu_model) {
        return Err(AppError::invalid_field("gpu_model", "this host has no GPU or MIG slice of that model"));
    }
    let row = host_prices::ActiveModel {
        host_id: Set(host.id),
        gpu_model: Set(price.gpu_model.clone()),
        on_demand_micros: Set(price.on_demand_micros),
        reserved_micros: Set(price.reserved_micros),
        spot_min_bid_micros: Set(price.spot_min_bid_micros),
        updated_at: Set(Utc::now()),
        ..Default::default()
    };
    let txn = services.begin_write().await.context("starting price change")?;
    host_prices::Entity::insert(row)
        .on_conflict(
            sea_orm::sea_query::OnConflict::columns([host_prices::Column::HostId, host_prices::Column::GpuModel])
                .update_columns([
                    host_prices::Column::OnDemandMicros,
                    host_prices::Column::ReservedMicros,
                    host_prices::Column::SpotMinBidMicros,
                    host_prices::Column::UpdatedAt,
                ])
                .to_owned(),
        )
        .exec(&txn)
        .await
        .context("saving prices")?;
    let stock_change = crate::stock::refresh_stock(&txn, host.id).await?;
    txn.commit().await.context("committing prices")?;
    stock_change.published(services);
    tracing::info!(host.id = host.id, model = %price.gpu_model, "prices updated");
    Ok(price.clone())
}

/// Lists a host on the market, or takes it off. Listing needs at least one GPU and a price
/// for every unit the host sells (GPU models, and MIG slices of GPUs sold as MIG).
pub async fn set_host_listed(services: &Services, principal: &Principal, host_id: i64, listed: bool) -> AppResult<()> {
    let host = owned_host(services, principal, host_id).await?;
    if let Some(reason) = host.held_reason.as_deref().filter(|_| listed) {
        return Err(AppError::conflict(format!("Cardpool's admins delisted this host: {reason}")));
    }
    if listed {
        let models = units::unit_models(services, host.id, true).await?;
        if models.is_empty() {
            return Err(AppError::conflict("the agent has not reported any GPUs for this host yet"));
        }
        let priced: Vec<String> = host_prices::Entity::find()
            .filter(host_prices::Column::HostId.eq(host.id))
            .all(&services.db)
            .await
            .context("loading prices")?
            .into_iter()
            .map(|p| p.gpu_model)
            .collect();
        let unpriced: Vec<&str> = models.iter().filter(|m| !priced.contains(m)).map(String::as_str).collect();
        if !unpriced.is_empty() {
            return Err(AppError::conflict(format!("set prices for {} first", unpriced.join(", "))));
        }
        // A host that cannot keep renters' code away from itself never goes on the market.
        let report: Option<cardpool_protocol::SelfTestReport> =
            host.self_test.as_deref().and_then(|r| serde_json::from_str(r).ok());
        if let Some(isolation) = report.iter().flat_map(|r| &r.checks).find(|c| c.name == "isolation" && !c.passed) {
            return Err(AppError::conflict(format!(
                "this host cannot run renters' workloads isolated: {}; see `cardpool-agent self-test`",
                isolation.detail
            )));
        }
    }
    let txn = services.begin_write().await.context("starting listing change")?;
    let mut row = host.into_active_model();
    row.listed = Set(listed);
    row.update(&txn).await.context("saving listing")?;
    let stock_change = crate::stock::refresh_stock(&txn, host_id).await?;
    txn.commit().await.context("committing listing")?;
    stock_change.published(services);
    Ok(())
}
