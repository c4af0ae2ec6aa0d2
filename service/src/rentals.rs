//! Booking: turning an offer into specific GPUs held by a rental, and the rental state machine.
//!
//! Allocation happens in one write transaction: the host's GPU rows are locked (PostgreSQL;
//! SQLite's `BEGIN IMMEDIATE` already serialises writers), the free GPUs are read, the
//! allocator picks specific ones (NVLink-connected when it can), and the holds are inserted.
//! The database refuses any overlapping hold on its own (exclusion constraint / trigger, see
//! the `rentals` migration), so even a bug here cannot give one GPU to two rentals.
//!
//! This is the foundation of booking: on-demand rentals are booked and stopped here; the agent
//! side (attach, ready, detach), billing and the reserved and spot kinds build on it.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::begin_write,
    entities::{gpus, host_prices, hosts, rental_events, rental_gpus, rentals},
    internal, ledger,
    ledger::Book,
};
use cardpool_domain::{
    host::HostStatus,
    money::format_dollars,
    offers::RentalKind,
    rentals::{BookOfferRequest, Rental, RentalState, Workload},
};
use chrono::{DateTime, TimeZone, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
};
use std::collections::HashSet;

/// The end of an open-ended hold.
pub fn open_end() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

const MAX_GPUS: u32 = 64;
const MAX_COMMAND: usize = 4096;

/// A GPU the allocator may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeGpu {
    pub id: i64,
    pub uuid: String,
    pub index: u32,
    /// UUIDs of the GPUs it has NVLink to.
    pub peers: Vec<String>,
}

/// Picks `n` of `free` (sorted by device index): a set whose GPUs are all NVLink-connected to
/// each other when one exists among the greedy candidates, else the lowest indexes.
pub fn choose_gpus(free: &[FreeGpu], n: usize) -> Option<Vec<i64>> {
    if n == 0 || free.len() < n {
        return None;
    }
    let linked = |a: &FreeGpu, b: &FreeGpu| a.peers.contains(&b.uuid) && b.peers.contains(&a.uuid);
    if n > 1 {
        for start in free {
            let mut clique: Vec<&FreeGpu> = vec![start];
            for candidate in free {
                if clique.len() == n {
                    break;
                }
                if candidate.id != start.id && clique.iter().all(|c| linked(c, candidate)) {
                    clique.push(candidate);
                }
            }
            if clique.len() == n {
                let mut ids: Vec<i64> = clique.iter().map(|g| g.id).collect();
                ids.sort_unstable();
                return Some(ids);
            }
        }
    }
    Some(free.iter().take(n).map(|g| g.id).collect())
}

fn validate_workload(workload: &Workload) -> AppResult<()> {
    let mut fields = cardpool_domain::FieldErrors::new();
    let command = workload.command.as_deref().map(str::trim).filter(|c| !c.is_empty());
    let image = workload.image.as_deref().map(str::trim).filter(|c| !c.is_empty());
    match (command, image) {
        (None, None) => {
            fields.insert("workload".into(), "give a command to run or a container image".into());
        }
        (Some(_), Some(_)) => {
            fields.insert("workload".into(), "give a command or an image, not both".into());
        }
        (Some(c), None) if c.len() > MAX_COMMAND => {
            fields.insert("command".into(), format!("at most {MAX_COMMAND} characters"));
        }
        (None, Some(i)) if i.len() > 255 || i.chars().any(char::is_whitespace) => {
            fields.insert("image".into(), "an image reference such as nvcr.io/nvidia/pytorch:24.05-py3".into());
        }
        _ => {}
    }
    for entry in &workload.env {
        let valid = entry.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        });
        if !valid {
            fields.insert("env".into(), format!("{entry:?} is not NAME=value"));
        }
    }
    if let Some(key) = workload.ssh_public_key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        let known = ["ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@openssh.com ", "sk-ecdsa-sha2-"];
        if key.len() > 16_384 || !known.iter().any(|p| key.starts_with(p)) || key.contains('\n') {
            fields.insert("ssh_public_key".into(), "one OpenSSH public key, e.g. ssh-ed25519 AAAA…".into());
        }
    }
    if fields.is_empty() { Ok(()) } else { Err(AppError::invalid_fields(fields)) }
}

/// Books `request.gpu_count` GPUs of one host for the caller, now, until stopped.
pub async fn book_offer(services: &Services, principal: &Principal, request: &BookOfferRequest) -> AppResult<Rental> {
    if request.gpu_count == 0 || request.gpu_count > MAX_GPUS {
        return Err(AppError::invalid_field("gpu_count", format!("between 1 and {MAX_GPUS}")));
    }
    validate_workload(&request.workload)?;
    if request.kind != RentalKind::OnDemand {
        return Err(AppError::conflict("only on-demand rentals can be booked so far"));
    }
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting booking"))?;
    let host = hosts::Entity::find_by_id(request.host_id)
        .one(&txn)
        .await
        .map_err(internal("loading host"))?
        .filter(|h| h.listed && h.revoked_at.is_none())
        .ok_or_else(|| AppError::not_found("offer"))?;
    if host.status != HostStatus::Online.as_str() {
        return Err(AppError::conflict("this host is offline right now"));
    }
    if host.provider_id == principal.user_id {
        return Err(AppError::conflict("you cannot rent your own host"));
    }
    let price = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(host.id))
        .filter(host_prices::Column::GpuModel.eq(&request.gpu_model))
        .one(&txn)
        .await
        .map_err(internal("loading price"))?
        .ok_or_else(|| AppError::not_found("offer"))?
        .on_demand_micros;

    // One hour of the booking must be covered up front.
    let hour = price.saturating_mul(i64::from(request.gpu_count));
    let balance = ledger::balance(&txn, Book::Wallet(principal.user_id)).await?;
    if balance < hour {
        return Err(AppError::PaymentRequired(format!(
            "an hour of {}× {} costs ${}; your balance is ${} (short by ${})",
            request.gpu_count,
            request.gpu_model,
            format_dollars(hour),
            format_dollars(balance),
            format_dollars(hour - balance)
        )));
    }

    let mut candidates = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::Model.eq(&request.gpu_model))
        .filter(gpus::Column::State.eq("available"))
        .order_by_asc(gpus::Column::DeviceIndex);
    if txn.get_database_backend() == DbBackend::Postgres {
        candidates = candidates.lock_exclusive();
    }
    let candidates = candidates.all(&txn).await.map_err(internal("loading gpus"))?;
    let held: HashSet<i64> = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::GpuId.is_in(candidates.iter().map(|g| g.id)))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::EndsAt.gt(now))
        .all(&txn)
        .await
        .map_err(internal("loading holds"))?
        .into_iter()
        .map(|h| h.gpu_id)
        .collect();
    let free: Vec<FreeGpu> = candidates
        .iter()
        .filter(|g| !held.contains(&g.id))
        .map(|g| FreeGpu {
            id: g.id,
            uuid: g.uuid.clone(),
            index: u32::try_from(g.device_index).unwrap_or(0),
            peers: serde_json::from_str(&g.nvlink_peers).unwrap_or_default(),
        })
        .collect();
    let chosen = choose_gpus(&free, request.gpu_count as usize).ok_or_else(|| {
        AppError::conflict(format!("only {} {} free on this host right now", free.len(), request.gpu_model))
    })?;

    let rental = rentals::ActiveModel {
        renter_id: Set(principal.user_id),
        host_id: Set(host.id),
        gpu_model: Set(request.gpu_model.clone()),
        gpu_count: Set(request.gpu_count as i32),
        kind: Set(RentalKind::OnDemand.as_str().into()),
        state: Set(RentalState::Requested.as_str().into()),
        price_micros: Set(price),
        workload: Set(serde_json::to_string(&request.workload).map_err(|_| AppError::Internal)?),
        starts_at: Set(now),
        ends_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .map_err(internal("recording rental"))?;
    for gpu_id in &chosen {
        rental_gpus::Entity::insert(rental_gpus::ActiveModel {
            rental_id: Set(rental.id),
            gpu_id: Set(*gpu_id),
            starts_at: Set(now),
            ends_at: Set(open_end()),
            active: Set(true),
            ..Default::default()
        })
        .exec_without_returning(&txn)
        .await
        .map_err(|err| {
            if err.to_string().contains("rental_gpus_no_overlap") {
                AppError::conflict("those GPUs were just taken; please try again")
            } else {
                internal("holding gpu")(err)
            }
        })?;
    }
    record(&txn, rental.id, RentalState::Requested, "booked by the renter", now).await?;
    txn.commit().await.map_err(|err| {
        if err.to_string().contains("rental_gpus_no_overlap") {
            AppError::conflict("those GPUs were just taken; please try again")
        } else {
            internal("committing booking")(err)
        }
    })?;
    tracing::info!(rental.id = rental.id, host.id = host.id, gpus = ?chosen, "rental booked");
    dto(&services.db, rental).await
}

async fn record(
    conn: &impl ConnectionTrait,
    rental_id: i64,
    state: RentalState,
    reason: &str,
    at: DateTime<Utc>,
) -> AppResult<()> {
    rental_events::Entity::insert(rental_events::ActiveModel {
        rental_id: Set(rental_id),
        state: Set(state.as_str().into()),
        reason: Set(reason.into()),
        at: Set(at),
        ..Default::default()
    })
    .exec_without_returning(conn)
    .await
    .map_err(internal("recording rental event"))?;
    Ok(())
}

/// Moves a rental along the state machine, recording why; a terminal state releases its GPUs.
pub async fn transition(services: &Services, rental_id: i64, next: RentalState, reason: &str) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting rental transition"))?;
    let rental = rentals::Entity::find_by_id(rental_id)
        .one(&txn)
        .await
        .map_err(internal("loading rental"))?
        .ok_or_else(|| AppError::not_found("rental"))?;
    let current = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    if !current.can_become(next) {
        return Err(AppError::conflict(format!("a {} rental cannot become {}", current.as_str(), next.as_str())));
    }
    let mut update = rental.into_active_model();
    update.state = Set(next.as_str().into());
    update.updated_at = Set(now);
    if next.is_terminal() {
        update.ends_at = Set(Some(now));
        rental_gpus::Entity::update_many()
            .col_expr(rental_gpus::Column::Active, sea_orm::sea_query::Expr::value(false))
            .col_expr(rental_gpus::Column::EndsAt, sea_orm::sea_query::Expr::value(now))
            .filter(rental_gpus::Column::RentalId.eq(rental_id))
            .filter(rental_gpus::Column::Active.eq(true))
            .exec(&txn)
            .await
            .map_err(internal("releasing gpus"))?;
    }
    let rental = update.update(&txn).await.map_err(internal("updating rental"))?;
    record(&txn, rental_id, next, reason, now).await?;
    txn.commit().await.map_err(internal("committing rental transition"))?;
    dto(&services.db, rental).await
}

/// The renter asks to stop: the rental goes to `stopping` (the agent then detaches and ends it).
pub async fn stop_rental(services: &Services, principal: &Principal, rental_id: i64) -> AppResult<Rental> {
    let rental = rentals::Entity::find_by_id(rental_id)
        .one(&services.db)
        .await
        .map_err(internal("loading rental"))?
        .filter(|r| r.renter_id == principal.user_id || principal.roles.admin)
        .ok_or_else(|| AppError::not_found("rental"))?;
    transition(services, rental.id, RentalState::Stopping, "stop requested by the renter").await
}

async fn dto(conn: &impl ConnectionTrait, rental: rentals::Model) -> AppResult<Rental> {
    let held = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::RentalId.eq(rental.id))
        .all(conn)
        .await
        .map_err(internal("loading rental gpus"))?;
    let mut indexes: Vec<u32> = gpus::Entity::find()
        .filter(gpus::Column::Id.is_in(held.iter().map(|h| h.gpu_id)))
        .all(conn)
        .await
        .map_err(internal("loading gpus"))?
        .into_iter()
        .map(|g| u32::try_from(g.device_index).unwrap_or(0))
        .collect();
    indexes.sort_unstable();
    Ok(Rental {
        id: rental.id,
        host_id: rental.host_id,
        gpu_model: rental.gpu_model,
        gpu_count: u32::try_from(rental.gpu_count).unwrap_or(0),
        kind: RentalKind::parse(&rental.kind).unwrap_or_default(),
        state: RentalState::parse(&rental.state).unwrap_or(RentalState::Failed),
        price_micros: rental.price_micros,
        gpu_indexes: indexes,
        created_at: rental.created_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `islands` groups of GPUs, each group fully NVLinked inside; `taken` marks busy ones.
    fn topology(islands: &[usize], taken: &[bool]) -> Vec<FreeGpu> {
        let mut all = Vec::new();
        let mut index = 0u32;
        for (island, &size) in islands.iter().enumerate() {
            let uuids: Vec<String> = (0..size).map(|i| format!("GPU-{island}-{i}")).collect();
            for uuid in &uuids {
                all.push(FreeGpu {
                    id: i64::from(index) + 1,
                    uuid: uuid.clone(),
                    index,
                    peers: uuids.iter().filter(|u| *u != uuid).cloned().collect(),
                });
                index += 1;
            }
        }
        all.into_iter().enumerate().filter(|(i, _)| !taken.get(*i).copied().unwrap_or(false)).map(|(_, g)| g).collect()
    }

    proptest! {
        #[test]
        fn allocator_picks_distinct_free_gpus_and_prefers_one_island(
            islands in proptest::collection::vec(1usize..5, 1..4),
            taken in proptest::collection::vec(any::<bool>(), 16),
            n in 1usize..9,
        ) {
            let free = topology(&islands, &taken);
            match choose_gpus(&free, n) {
                None => prop_assert!(free.len() < n),
                Some(ids) => {
                    prop_assert_eq!(ids.len(), n);
                    let distinct: HashSet<_> = ids.iter().collect();
                    prop_assert_eq!(distinct.len(), n);
                    prop_assert!(ids.iter().all(|id| free.iter().any(|g| g.id == *id)));
                    // If some island has n free GPUs, the choice lies within one island.
                    let island_of = |id: i64| free.iter().find(|g| g.id == id).map(|g| g.uuid.split('-').nth(1).unwrap_or("").to_owned());
                    let mut free_per_island = std::collections::HashMap::new();
                    for g in &free {
                        *free_per_island.entry(g.uuid.split('-').nth(1).unwrap_or("").to_owned()).or_insert(0usize) += 1;
                    }
                    if n > 1 && free_per_island.values().any(|&c| c >= n) {
                        let first = island_of(ids[0]);
                        prop_assert!(ids.iter().all(|id| island_of(*id) == first), "{ids:?} spans islands");
                    }
                }
            }
        }
    }

    #[test]
    fn workloads_are_validated() {
        let ok =
            Workload { command: Some("python train.py".into()), env: vec!["EPOCHS=3".into()], ..Workload::default() };
        assert!(validate_workload(&ok).is_ok());
        let none = Workload::default();
        assert!(validate_workload(&none).unwrap_err().field("workload").is_some());
        let bad_env = Workload { env: vec!["1X=y".into(), "noequals".into()], ..ok.clone() };
        assert!(validate_workload(&bad_env).unwrap_err().field("env").is_some());
        let bad_key = Workload { ssh_public_key: Some("-----BEGIN PRIVATE KEY-----".into()), ..ok };
        assert!(validate_workload(&bad_key).unwrap_err().field("ssh_public_key").is_some());
    }
}
