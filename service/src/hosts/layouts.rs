//! MIG layouts the provider picks per GPU and the host's agent carves.
//!
//! An agent that can carve a GPU (MIG on, NVML, root; the simulator) reports the profiles it
//! can make. The provider asks for a layout ([`set_mig_layout`]) only while nothing holds the
//! GPU or a slice of it now or later, and only one that fits by the rule the agent keeps
//! ([`cardpool_protocol::mig::check_layout`]). The layout is then pending: the GPU and its
//! slices are `reconfiguring`, off the market, and the agent is told to carve it
//! ([`layout_commands_of`], repeated like every command) until its inventory shows the layout
//! ([`settle`]) or it says why it could not ([`record_layout_failure`], kept for the provider
//! to read). Asking for the layout the GPU already has cancels a pending one.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gpus, hosts},
};
use cardpool_domain::offers::MAX_MIG_PROFILE_LEN;
use cardpool_protocol::{GpuInfo, MigProfile, ServerMessage, mig};
use chrono::Utc;
use sea_orm::{ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QuerySelect, sea_query::Expr};
use std::collections::HashMap;

/// A GPU whose layout change is pending.
pub const RECONFIGURING: &str = "reconfiguring";
/// The longest failure reason kept from an agent.
const MAX_REASON_CHARS: usize = 500;

/// Asks the host's agent to carve GPU `gpu_index` into one MIG instance of each of `profiles`.
/// Refused while anything holds the GPU or a slice of it now or later, when the agent cannot
/// carve it, and for a layout that does not fit. The GPU's units are off the market until the
/// agent reports the new layout or its failure; new slices are sold as the GPU is.
pub async fn set_mig_layout(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    gpu_index: i32,
    profiles: Vec<String>,
) -> AppResult<()> {
    let host = super::owned_host(services, principal, host_id).await?;
    if profiles.iter().any(|p| p.chars().count() > MAX_MIG_PROFILE_LEN) {
        return Err(AppError::invalid_field(
            "profiles",
            format!("a MIG profile is at most {MAX_MIG_PROFILE_LEN} characters"),
        ));
    }
    let txn = services.begin_write().await.context("starting layout change")?;
    let mut rows = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::DeviceIndex.eq(gpu_index))
        .filter(gpus::Column::State.is_in(["available", RECONFIGURING]));
    if txn.get_database_backend() == DbBackend::Postgres {
        // The GPU's row and its slices' rows, as a booking of either locks them.
        rows = rows.lock_exclusive();
    }
    let rows = rows.all(&txn).await.context("loading gpu")?;
    let gpu = rows.iter().find(|g| g.parent_id.is_none()).ok_or_else(|| AppError::not_found("gpu"))?;
    if gpu.mig_enabled != Some(true) {
        return Err(AppError::invalid_field(
            "gpu_index",
            format!("GPU {gpu_index} has MIG off; turn it on with nvidia-smi -i {gpu_index} -mig 1 on the host first"),
        ));
    }
    let known: Vec<MigProfile> = serde_json::from_str(&gpu.mig_profiles).unwrap_or_default();
    if known.is_empty() {
        return Err(AppError::invalid_field(
            "profiles",
            format!(
                "the agent on this host cannot carve GPU {gpu_index} (it needs NVML and root); make the layout with \
                 nvidia-smi mig on the host and the agent lists it"
            ),
        ));
    }
    let chosen = mig::check_layout(&known, &profiles).map_err(|why| AppError::invalid_field("profiles", why))?;
    let names: Vec<String> = chosen.iter().map(|p| p.name.clone()).collect();
    let now = Utc::now();
    let reported: Vec<cardpool_protocol::MigInstance> = serde_json::from_str(&gpu.mig_instances).unwrap_or_default();
    let has_it = mig::same_layout(&reported.iter().map(|m| m.profile.as_str()).collect::<Vec<_>>(), &names);
    if !has_it {
        super::units::ensure_unheld(&txn, gpu, now, "change its MIG layout").await?;
    }
    let (wanted, state) = if has_it { (None, "available") } else { (Some(json(&names)?), RECONFIGURING) };
    gpus::Entity::update_many()
        .col_expr(gpus::Column::MigLayoutWanted, Expr::value(wanted))
        .col_expr(gpus::Column::MigLayoutError, Expr::value(Option::<String>::None))
        .col_expr(gpus::Column::State, Expr::value(state))
        .col_expr(gpus::Column::UpdatedAt, Expr::value(now))
        .filter(gpus::Column::Id.eq(gpu.id))
        .exec(&txn)
        .await
        .context("saving layout")?;
    mark_slices(&txn, gpu.id, state).await?;
    let stock_change = crate::stock::refresh_stock(&txn, host.id).await?;
    txn.commit().await.context("committing layout")?;
    stock_change.published(services);
    services.wake_host(host.id);
    tracing::info!(
        host.id = host.id,
        gpu.index = gpu_index,
        layout = names.join("+"),
        pending = !has_it,
        "MIG layout asked"
    );
    Ok(())
}

/// After an inventory stored `parent` as `reported`: a pending layout the GPU now has is done;
/// one it has not keeps the GPU and its slices `reconfiguring`.
pub(super) async fn settle(conn: &impl ConnectionTrait, parent: &gpus::Model, reported: &GpuInfo) -> AppResult<()> {
    let Some(wanted) = parent.mig_layout_wanted.as_deref() else { return Ok(()) };
    let wanted: Vec<String> = serde_json::from_str(wanted).unwrap_or_default();
    let now: Vec<&str> = reported.mig_instances.iter().map(|m| m.profile.as_str()).collect();
    let done = reported.mig_enabled == Some(true) && mig::same_layout(&now, &wanted);
    let mut update = gpus::Entity::update_many();
    update = if done {
        update.col_expr(gpus::Column::MigLayoutWanted, Expr::value(Option::<String>::None))
    } else {
        update.col_expr(gpus::Column::State, Expr::value(RECONFIGURING))
    };
    update.filter(gpus::Column::Id.eq(parent.id)).exec(conn).await.context("settling layout")?;
    if !done {
        mark_slices(conn, parent.id, RECONFIGURING).await?;
    } else {
        tracing::info!(host.id = parent.host_id, gpu.index = parent.device_index, "MIG layout carved");
    }
    Ok(())
}

/// The agent could not carve GPU `gpu_index`: the layout is no longer pending and the reason is
/// kept. The GPU is back on the market as it is; its slices follow the inventory the agent
/// sends next (those it still has come back, the others go missing).
pub async fn record_layout_failure(
    services: &Services,
    host: &hosts::Model,
    gpu_index: u32,
    reason: &str,
) -> AppResult<()> {
    let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
    let txn = services.begin_write().await.context("starting layout failure")?;
    let updated = gpus::Entity::update_many()
        .col_expr(gpus::Column::MigLayoutWanted, Expr::value(Option::<String>::None))
        .col_expr(gpus::Column::MigLayoutError, Expr::value(Some(reason.clone())))
        .col_expr(gpus::Column::State, Expr::value("available"))
        .col_expr(gpus::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::DeviceIndex.eq(i32::try_from(gpu_index).unwrap_or(i32::MAX)))
        .filter(gpus::Column::ParentId.is_null())
        .filter(gpus::Column::MigLayoutWanted.is_not_null())
        .exec(&txn)
        .await
        .context("saving layout failure")?;
    let stock_change = crate::stock::refresh_stock(&txn, host.id).await?;
    txn.commit().await.context("committing layout failure")?;
    stock_change.published(services);
    if updated.rows_affected > 0 {
        tracing::warn!(host.id = host.id, gpu.index = gpu_index, %reason, "MIG layout failed");
    }
    Ok(())
}

/// The layouts each of `host_ids`' agents must carve now, one command per pending GPU, in one
/// query (heartbeats come in batches).
pub(crate) async fn layout_commands_of(
    conn: &impl ConnectionTrait,
    host_ids: &[i64],
) -> AppResult<HashMap<i64, Vec<ServerMessage>>> {
    let pending = gpus::Entity::find()
        .filter(gpus::Column::HostId.is_in(host_ids.iter().copied()))
        .filter(gpus::Column::ParentId.is_null())
        .filter(gpus::Column::MigLayoutWanted.is_not_null())
        .filter(gpus::Column::State.ne("missing"))
        .all(conn)
        .await
        .context("loading pending layouts")?;
    let mut commands: HashMap<i64, Vec<ServerMessage>> = HashMap::new();
    for gpu in pending {
        let Some(profiles) = gpu.mig_layout_wanted.as_deref().and_then(|w| serde_json::from_str(w).ok()) else {
            continue;
        };
        let Ok(gpu_index) = u32::try_from(gpu.device_index) else { continue };
        commands.entry(gpu.host_id).or_default().push(ServerMessage::ApplyMigLayout { gpu_index, profiles });
    }
    Ok(commands)
}

/// Puts the GPU's slices still in the inventory (not `missing`) into `state`.
async fn mark_slices(conn: &impl ConnectionTrait, parent_id: i64, state: &str) -> AppResult<()> {
    gpus::Entity::update_many()
        .col_expr(gpus::Column::State, Expr::value(state))
        .filter(gpus::Column::ParentId.eq(parent_id))
        .filter(gpus::Column::State.ne("missing"))
        .exec(conn)
        .await
        .context("saving slices")?;
    Ok(())
}

fn json(names: &[String]) -> AppResult<String> {
    serde_json::to_string(names).map_err(|_| AppError::Internal)
}
