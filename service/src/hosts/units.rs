//! Units of sale: whole GPUs and MIG slices.
//!
//! Every MIG instance an agent reports is kept as a `gpus` row of its own (`parent_id` = its
//! GPU, `mig_profile`, `model` = [`slice_unit`], the slot of its place in the layout), so the
//! offer stock, prices, booking and holds treat a slice exactly as a GPU. Which rows are sold is
//! the provider's choice per GPU ([`set_gpu_sale`]): the GPU's own row (`whole`) or its slices'
//! rows (`mig`); it changes only while nothing holds the GPU or any slice of it now or later, so
//! a live rental is never re-cut. The database refuses a slice hold that meets a whole-GPU hold
//! on the same GPU in time whatever the code does (see the `mig_slices` migration).

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gpus, rental_gpus},
};
use cardpool_domain::{
    host::GpuSale,
    offers::{MAX_MIG_PROFILE_LEN, slice_unit},
};
use cardpool_protocol::{GpuInfo, MigInstance};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, IntoActiveModel,
    QueryFilter, QuerySelect, sea_query::Expr,
};
use std::collections::BTreeMap;

/// The most MIG instances one GPU can hold (NVIDIA's: seven compute slices).
pub const MAX_MIG_INSTANCES: usize = 7;
/// The most MIG profiles a GPU may report (NVML knows 17 GPU instance profiles).
const MAX_MIG_PROFILES: usize = 32;

/// Refuses a report whose MIG instances could not be stored.
pub(super) fn check_reported(gpu: &GpuInfo) -> AppResult<()> {
    if gpu.mig_instances.len() > MAX_MIG_INSTANCES {
        return Err(AppError::invalid_field("mig_instances", "a GPU holds at most 7 MIG instances"));
    }
    let bad_profile = |p: &str| {
        p.is_empty()
            || p.len() > MAX_MIG_PROFILE_LEN
            || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+')
    };
    if gpu.mig_instances.iter().any(|m| m.uuid.is_empty() || m.uuid.len() > 64 || bad_profile(&m.profile)) {
        return Err(AppError::invalid_field(
            "mig_instances",
            "a MIG uuid is 1 to 64 bytes, a profile 1 to 32 of letters, digits, '.' and '+'",
        ));
    }
    if gpu.mig_profiles.len() > MAX_MIG_PROFILES || gpu.mig_profiles.iter().any(|p| bad_profile(&p.name)) {
        return Err(AppError::invalid_field(
            "mig_profiles",
            "a GPU offers at most 32 MIG profiles, each named by 1 to 32 letters, digits, '.' and '+'",
        ));
    }
    Ok(())
}

/// Refuses a report that names one UUID twice (two GPUs, two slices, or a GPU and a slice):
/// GPUs and slices are matched by UUID.
pub(super) fn check_distinct(gpus: &[GpuInfo]) -> AppResult<()> {
    let mut uuids: Vec<&str> = gpus
        .iter()
        .flat_map(|g| std::iter::once(g.uuid.as_str()).chain(g.mig_instances.iter().map(|m| m.uuid.as_str())))
        .collect();
    let count = uuids.len();
    uuids.sort_unstable();
    uuids.dedup();
    if uuids.len() == count { Ok(()) } else { Err(AppError::invalid_field("gpus", "a GPU or MIG uuid appears twice")) }
}

/// Stores the slices `reported` says `parent` holds now, matched by UUID, each at the slot of
/// its place in the layout and written only if it changes; the UUIDs it stored are pushed to
/// `seen` (what is not seen is marked missing by the caller).
pub(super) async fn record_slices(
    conn: &impl ConnectionTrait,
    parent: &gpus::Model,
    reported: &GpuInfo,
    existing: &BTreeMap<String, gpus::Model>,
    seen: &mut Vec<String>,
    now: DateTime<Utc>,
) -> AppResult<()> {
    if reported.mig_enabled != Some(true) {
        return Ok(());
    }
    for (slot, instance) in reported.mig_instances.iter().enumerate() {
        let known = existing.get(&instance.uuid);
        save(conn, known, slice_row(parent, known, slot, instance)?, now).await.context("saving MIG slice")?;
        seen.push(instance.uuid.clone());
    }
    Ok(())
}

/// Writes `row` (built over `known`, the stored row, if any) stamped `now`: inserted when new,
/// updated when something in it changed, left alone otherwise. Returns the row as stored.
pub(super) async fn save(
    conn: &impl ConnectionTrait,
    known: Option<&gpus::Model>,
    mut row: gpus::ActiveModel,
    now: DateTime<Utc>,
) -> Result<gpus::Model, sea_orm::DbErr> {
    match known {
        Some(known) if !row.is_changed() => Ok(known.clone()),
        Some(_) => {
            row.updated_at = Set(now);
            row.update(conn).await
        }
        None => {
            row.updated_at = Set(now);
            row.insert(conn).await
        }
    }
}

/// The row MIG instance `instance` of `parent` asks for, at `slot`: `known` with what differs
/// set, or a new row, for [`save`]. A slice is for sale when its GPU is sold as MIG.
pub(super) fn slice_row(
    parent: &gpus::Model,
    known: Option<&gpus::Model>,
    slot: usize,
    instance: &MigInstance,
) -> AppResult<gpus::ActiveModel> {
    let mut row = match known {
        Some(known) if known.parent_id == Some(parent.id) => known.clone().into_active_model(),
        // A UUID is a GPU's or a slice's, never both; one that moved is not trusted.
        Some(_) => return Err(AppError::invalid_field("mig_instances", "a MIG uuid repeats another GPU's")),
        None => gpus::ActiveModel {
            host_id: Set(parent.host_id),
            uuid: Set(instance.uuid.clone()),
            parent_id: Set(Some(parent.id)),
            ..Default::default()
        },
    };
    row.device_index.set_ne(parent.device_index);
    row.model.set_ne(slice_unit(&parent.model, &instance.profile));
    row.mig_profile.set_ne(Some(instance.profile.clone()));
    row.memory_bytes.set_ne(i64::try_from(instance.memory_bytes).unwrap_or(i64::MAX));
    row.pci_bus_id.set_ne(parent.pci_bus_id.clone());
    row.driver_version.set_ne(parent.driver_version.clone());
    row.cuda_version.set_ne(parent.cuda_version.clone());
    row.cuda_version_num.set_ne(parent.cuda_version_num);
    row.nvlink_peers.set_ne("[]".into());
    row.mig_enabled.set_ne(None);
    row.mig_instances.set_ne("[]".into());
    row.slot_from.set_ne(slot as i32);
    row.slot_to.set_ne(slot as i32 + 1);
    row.for_sale.set_ne(!parent.for_sale);
    row.state.set_ne("available".into());
    Ok(row)
}

/// The unit names of the host's available rows: every unit a price can be set for (slices of
/// GPUs sold whole too, so a provider can price them before switching), or only those for sale.
pub(super) async fn unit_models(services: &Services, host_id: i64, for_sale_only: bool) -> AppResult<Vec<String>> {
    let mut query = gpus::Entity::find()
        .select_only()
        .column(gpus::Column::Model)
        .filter(gpus::Column::HostId.eq(host_id))
        .filter(gpus::Column::State.eq("available"));
    if for_sale_only {
        query = query.filter(gpus::Column::ForSale.eq(true));
    }
    let mut models: Vec<String> = query.into_tuple().all(&services.db).await.context("loading gpus")?;
    models.sort();
    models.dedup();
    Ok(models)
}

/// Sells one GPU of the caller's host whole or as its MIG instances. Refused while anything
/// holds the GPU or one of its slices now or later, and (for `mig`) when the agent reports no
/// MIG instances on it. Its units' offers change at once; a unit model without a price stays
/// off the market until it is priced.
pub async fn set_gpu_sale(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    gpu_index: i32,
    sold_as: GpuSale,
) -> AppResult<()> {
    let host = super::owned_host(services, principal, host_id).await?;
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting sale change")?;
    let mut rows = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::DeviceIndex.eq(gpu_index))
        .filter(gpus::Column::State.is_in(["available", super::layouts::RECONFIGURING]));
    if txn.get_database_backend() == DbBackend::Postgres {
        // The GPU's row and its slices' rows, as a booking of either locks them.
        rows = rows.lock_exclusive();
    }
    let rows = rows.all(&txn).await.context("loading gpu")?;
    let gpu = rows.iter().find(|g| g.parent_id.is_none()).ok_or_else(|| AppError::not_found("gpu"))?;
    if sale_of(gpu) == sold_as {
        return Ok(());
    }
    let slices = rows.iter().filter(|g| g.parent_id == Some(gpu.id)).count();
    if sold_as == GpuSale::Mig && (gpu.mig_enabled != Some(true) || slices == 0) {
        return Err(AppError::invalid_field(
            "sold_as",
            "this GPU reports no MIG instances; turn MIG on and create instances on the host first",
        ));
    }
    ensure_unheld(&txn, gpu, now, "change how it is sold").await?;
    let whole = sold_as == GpuSale::Whole;
    gpus::Entity::update_many()
        .col_expr(gpus::Column::ForSale, Expr::value(whole))
        .col_expr(gpus::Column::UpdatedAt, Expr::value(now))
        .filter(gpus::Column::Id.eq(gpu.id))
        .exec(&txn)
        .await
        .context("saving sale")?;
    gpus::Entity::update_many()
        .col_expr(gpus::Column::ForSale, Expr::value(!whole))
        .col_expr(gpus::Column::UpdatedAt, Expr::value(now))
        .filter(gpus::Column::ParentId.eq(gpu.id))
        .exec(&txn)
        .await
        .context("saving sale")?;
    let stock_change = crate::stock::refresh_stock(&txn, host.id).await?;
    txn.commit().await.context("committing sale")?;
    stock_change.published(services);
    tracing::info!(host.id = host.id, gpu.index = gpu_index, sold_as = sold_as.as_str(), "GPU sale changed");
    Ok(())
}

/// Refuses while a rental holds the GPU or a slice of it now or later: `change` says what must
/// wait for its rentals to end.
pub(super) async fn ensure_unheld(
    conn: &impl ConnectionTrait,
    gpu: &gpus::Model,
    now: DateTime<Utc>,
    change: &str,
) -> AppResult<()> {
    let held = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::PhysicalGpuId.eq(gpu.id))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::EndsAt.gt(now))
        .one(conn)
        .await
        .context("loading holds")?;
    match held {
        Some(_) => Err(AppError::conflict(format!(
            "GPU {} is rented or reserved; {change} once its rentals have ended",
            gpu.device_index
        ))),
        None => Ok(()),
    }
}

/// How a physical GPU row is sold.
pub(super) fn sale_of(gpu: &gpus::Model) -> GpuSale {
    if gpu.for_sale { GpuSale::Whole } else { GpuSale::Mig }
}
