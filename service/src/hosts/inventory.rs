//! An agent's inventory: the host's facts, its GPUs and their MIG slices (see `units`), matched
//! by UUID. A GPU or slice that disappears from the report is kept, marked `missing`, so history
//! stays intact.
//!
//! Every agent sends its inventory each time it connects, and nearly always it is what is
//! stored already. Recording it anyway was a write transaction of ~25 statements per agent (an
//! `UPDATE` per GPU and per slice, the offer stock refreshed), and in a reconnect storm (a
//! replica stopping under thousands of agents) that was most of the database's work before any
//! agent's telemetry was read. So the rows a report asks for are worked out first
//! ([`gpu_row`], `units::slice_row`) and compared with the stored ones, read without a lock: a
//! report that changes none of them is done after those two reads. One that does is written
//! in a write transaction against the rows read again there, each row only if it changes.

use super::{layouts, units};
use crate::{
    AppError, AppResult, Services,
    db::DbResultExt,
    entities::{gpus, hosts},
};
use cardpool_protocol::{GpuInfo, Inventory};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
};
use std::collections::BTreeMap;

/// The most GPUs one host may report.
const MAX_GPUS: usize = 64;

/// Stores what the agent reports; a report that is stored already changes nothing.
pub async fn record_inventory(services: &Services, host: &hosts::Model, inventory: &Inventory) -> AppResult<()> {
    cardpool_protocol::PROTOCOL_VERSION
        .check_peer(inventory.protocol)
        .map_err(|m| AppError::invalid_field("protocol", m))?;
    if inventory.gpus.len() > MAX_GPUS {
        return Err(AppError::invalid_field("gpus", "a host reports at most 64 GPUs"));
    }
    for gpu in &inventory.gpus {
        units::check_reported(gpu)?;
    }
    units::check_distinct(&inventory.gpus)?;
    let facts = serde_json::to_string(&inventory.host).map_err(|_| AppError::Internal)?;
    if is_stored(&services.db, host.id, &facts, inventory).await? {
        return Ok(());
    }

    let now = Utc::now();
    let txn = services.begin_write().await.context("starting inventory update")?;
    let mut row = hosts::Entity::find_by_id(host.id)
        .one(&txn)
        .await
        .context("loading host")?
        .ok_or_else(|| AppError::not_found("host"))?
        .into_active_model();
    row.facts.set_ne(Some(facts));
    row.agent_version.set_ne(Some(inventory.host.agent_version.clone()));
    if row.is_changed() {
        row.update(&txn).await.context("saving host facts")?;
    }
    let existing = stored_gpus(&txn, host.id).await?;
    let mut seen: Vec<String> = Vec::new();
    for gpu in &inventory.gpus {
        let known = existing.get(&gpu.uuid);
        let parent = units::save(&txn, known, gpu_row(host.id, known, gpu)?, now).await.context("saving gpu")?;
        seen.push(gpu.uuid.clone());
        units::record_slices(&txn, &parent, gpu, &existing, &mut seen, now).await?;
        layouts::settle(&txn, &parent, gpu).await?;
    }
    for gone in existing.values().filter(|g| !seen.contains(&g.uuid) && g.state != "missing") {
        let mut row = gone.clone().into_active_model();
        row.state = Set("missing".into());
        row.updated_at = Set(now);
        row.update(&txn).await.context("marking gpu missing")?;
    }
    let stock_change = crate::stock::refresh_stock(&txn, host.id).await?;
    txn.commit().await.context("committing inventory")?;
    stock_change.published(services);
    Ok(())
}

/// Whether recording `inventory` would change no row: the host's facts, every GPU and slice
/// as stored, no layout pending, and nothing stored that the report leaves out.
async fn is_stored(db: &impl ConnectionTrait, host_id: i64, facts: &str, inventory: &Inventory) -> AppResult<bool> {
    let Some(host) = hosts::Entity::find_by_id(host_id).one(db).await.context("loading host")? else {
        return Ok(false);
    };
    if host.facts.as_deref() != Some(facts) || host.agent_version.as_deref() != Some(&inventory.host.agent_version) {
        return Ok(false);
    }
    let existing = stored_gpus(db, host_id).await?;
    let mut seen = 0;
    for gpu in &inventory.gpus {
        let Some(known) = existing.get(&gpu.uuid) else { return Ok(false) };
        // A pending layout is settled (or kept pending) by the write below.
        if known.mig_layout_wanted.is_some() || gpu_row(host_id, Some(known), gpu)?.is_changed() {
            return Ok(false);
        }
        seen += 1;
        if gpu.mig_enabled != Some(true) {
            continue;
        }
        for (slot, instance) in gpu.mig_instances.iter().enumerate() {
            let Some(slice) = existing.get(&instance.uuid) else { return Ok(false) };
            if units::slice_row(known, Some(slice), slot, instance)?.is_changed() {
                return Ok(false);
            }
            seen += 1;
        }
    }
    // Every row seen is stored and not missing (it would change otherwise), and UUIDs are
    // distinct: equal counts mean nothing else would be marked missing.
    Ok(existing.values().filter(|g| g.state != "missing").count() == seen)
}

/// The host's GPU and slice rows by UUID.
async fn stored_gpus(db: &impl ConnectionTrait, host_id: i64) -> AppResult<BTreeMap<String, gpus::Model>> {
    Ok(gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host_id))
        .all(db)
        .await
        .context("loading gpus")?
        .into_iter()
        .map(|g| (g.uuid.clone(), g))
        .collect())
}

/// The row `gpu` asks for: `known` with what differs set (nothing set: it is stored as
/// reported), or a new row, for [`units::save`].
fn gpu_row(host_id: i64, known: Option<&gpus::Model>, gpu: &GpuInfo) -> AppResult<gpus::ActiveModel> {
    let mut row = match known {
        Some(known) if known.parent_id.is_none() => known.clone().into_active_model(),
        Some(_) => return Err(AppError::invalid_field("gpus", "a GPU uuid repeats a MIG slice's")),
        None => gpus::ActiveModel { host_id: Set(host_id), uuid: Set(gpu.uuid.clone()), ..Default::default() },
    };
    row.device_index.set_ne(gpu.index as i32);
    row.model.set_ne(gpu.name.clone());
    row.memory_bytes.set_ne(i64::try_from(gpu.memory_total_bytes).unwrap_or(i64::MAX));
    row.pci_bus_id.set_ne(gpu.pci_bus_id.clone());
    row.driver_version.set_ne(gpu.driver_version.clone());
    row.cuda_version.set_ne(gpu.cuda_version.clone());
    row.cuda_version_num.set_ne(cardpool_domain::offers::cuda_version_number(&gpu.cuda_version).unwrap_or(0));
    row.nvlink_peers.set_ne(json(&gpu.nvlink_peers)?);
    row.mig_enabled.set_ne(gpu.mig_enabled);
    row.mig_instances.set_ne(json(&gpu.mig_instances)?);
    row.mig_profiles.set_ne(json(&gpu.mig_profiles)?);
    row.state.set_ne("available".into());
    Ok(row)
}

fn json(value: &impl serde::Serialize) -> AppResult<String> {
    serde_json::to_string(value).map_err(|_| AppError::Internal)
}
