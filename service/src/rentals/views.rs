//! Reading rentals: the caller's list, one rental with its timeline, and the DTO with the
//! cost accrued since the last settlement.

use super::pricing::cost;
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, Sql},
    entities::{hosts, rental_events, rentals},
};
use cardpool_domain::{
    offers::RentalKind,
    rentals::{Rental, RentalDetail, RentalEvent, RentalState},
};
use chrono::Utc;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Statement};
use std::collections::{HashMap, HashSet};

/// The caller's rentals, newest first.
pub async fn list_rentals(services: &Services, principal: &Principal) -> AppResult<Vec<Rental>> {
    let rows = rentals::Entity::find()
        .filter(rentals::Column::RenterId.eq(principal.user_id))
        .order_by_desc(rentals::Column::Id)
        .limit(200)
        .all(&services.db)
        .await
        .context("listing rentals")?;
    dtos(&services.db, rows).await
}

/// Who may see a rental besides its renter and admins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Only they: its logs, its GPUs' telemetry.
    Renter,
    /// The host's provider too: its page and timeline.
    RenterAndProvider,
}

/// The rental, if `principal` is in its `audience`; "not found" otherwise, so ids of other
/// people's rentals reveal nothing.
pub async fn visible_rental(
    services: &Services,
    principal: &Principal,
    rental_id: i64,
    audience: Audience,
) -> AppResult<rentals::Model> {
    let rental = rentals::Entity::find_by_id(rental_id)
        .one(&services.db)
        .await
        .context("loading rental")?
        .ok_or_else(|| AppError::not_found("rental"))?;
    if rental.renter_id == principal.user_id || principal.roles.admin {
        return Ok(rental);
    }
    if audience == Audience::RenterAndProvider {
        let provider = hosts::Entity::find_by_id(rental.host_id)
            .one(&services.db)
            .await
            .context("loading host")?
            .map(|h| h.provider_id);
        if provider == Some(principal.user_id) {
            return Ok(rental);
        }
    }
    Err(AppError::not_found("rental"))
}

/// One rental with its timeline: for its renter, the host's provider, or an admin.
pub async fn get_rental(services: &Services, principal: &Principal, rental_id: i64) -> AppResult<RentalDetail> {
    let rental = visible_rental(services, principal, rental_id, Audience::RenterAndProvider).await?;
    let events = rental_events::Entity::find()
        .filter(rental_events::Column::RentalId.eq(rental_id))
        .order_by_asc(rental_events::Column::Id)
        .all(&services.db)
        .await
        .context("loading rental events")?
        .into_iter()
        .map(|e| RentalEvent {
            state: RentalState::parse(&e.state).unwrap_or(RentalState::Failed),
            reason: e.reason,
            at: e.at,
        })
        .collect();
    let ssh = (!RentalState::parse(&rental.state).is_some_and(|s| s.is_terminal()))
        .then(|| crate::ssh_access::access(services, rental.id))
        .flatten();
    Ok(RentalDetail { rental: dto(&services.db, rental).await?, events, ssh })
}

/// A rental as its renter sees it: with its GPUs' device indexes, its host's label and what it
/// has cost so far.
pub(super) async fn dto(conn: &impl ConnectionTrait, rental: rentals::Model) -> AppResult<Rental> {
    dtos(conn, vec![rental]).await?.pop().ok_or(AppError::Internal)
}

/// [`dto`] of many rentals in two statements, whatever their number: their GPUs' device
/// indexes (their holds joined with the GPUs) and their hosts.
pub(super) async fn dtos(conn: &impl ConnectionTrait, rows: Vec<rentals::Model>) -> AppResult<Vec<Rental>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut sql = Sql::new(conn.get_database_backend());
    let ids = rows.iter().map(|r| sql.bind(r.id)).collect::<Vec<_>>().join(", ");
    let text = format!(
        "SELECT rg.rental_id, g.device_index FROM rental_gpus rg JOIN gpus g ON g.id = rg.gpu_id \
         WHERE rg.rental_id IN ({ids})"
    );
    let mut indexes: HashMap<i64, Vec<u32>> = HashMap::new();
    for row in conn
        .query_all_raw(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .await
        .context("loading rental gpus")?
    {
        let rental_id: i64 = row.try_get("", "rental_id").context("reading rental gpus")?;
        let index: i32 = row.try_get("", "device_index").context("reading rental gpus")?;
        indexes.entry(rental_id).or_default().push(u32::try_from(index).unwrap_or(0));
    }
    let labels: HashMap<i64, String> = hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(rows.iter().map(|r| r.host_id).collect::<HashSet<_>>()))
        .all(conn)
        .await
        .context("loading hosts")?
        .into_iter()
        .map(|h| {
            let label = match h.location {
                Some(location) => format!("{} · {location}", h.hostname),
                None => h.hostname,
            };
            (h.id, label)
        })
        .collect();
    Ok(rows
        .into_iter()
        .map(|rental| {
            let mut gpu_indexes = indexes.remove(&rental.id).unwrap_or_default();
            gpu_indexes.sort_unstable();
            let host_label = labels.get(&rental.host_id).cloned().unwrap_or_else(|| format!("host {}", rental.host_id));
            assemble(rental, gpu_indexes, host_label)
        })
        .collect())
}

/// The DTO of a rental whose GPUs and host were read.
fn assemble(rental: rentals::Model, indexes: Vec<u32>, host_label: String) -> Rental {
    let (accrued_seconds, accrued_micros) = match rental.running_since {
        Some(since) if !rental.settled => {
            let until = rental.billing_ends_at.map_or_else(Utc::now, |e| e.min(Utc::now())).max(since);
            let seconds = (until - since).num_seconds();
            let unbilled = cost(rental.price_micros, i64::from(rental.gpu_count), seconds)
                - cost(rental.price_micros, i64::from(rental.gpu_count), rental.billed_seconds);
            (seconds, rental.charged_micros + unbilled.max(0))
        }
        _ => (rental.billed_seconds, rental.charged_micros),
    };
    Rental {
        id: rental.id,
        host_id: rental.host_id,
        host_label,
        gpu_model: rental.gpu_model,
        gpu_count: u32::try_from(rental.gpu_count).unwrap_or(0),
        kind: RentalKind::parse(&rental.kind).unwrap_or_default(),
        state: RentalState::parse(&rental.state).unwrap_or(RentalState::Failed),
        price_micros: rental.price_micros,
        bid_micros: rental.bid_micros,
        gpu_indexes: indexes,
        workload: serde_json::from_str(&rental.workload).unwrap_or_default(),
        starts_at: rental.starts_at,
        ends_at: rental.reserved_until.filter(|_| rental.ends_at.is_none()).or(rental.ends_at),
        running_since: rental.running_since,
        billed_seconds: rental.billed_seconds,
        charged_micros: rental.charged_micros,
        accrued_seconds,
        accrued_micros,
        notice: rental.notice,
        stop_when_idle: rental.stop_when_idle,
        limits: cardpool_domain::limits::RentalLimits {
            max_cost_micros: rental.max_cost_micros,
            max_duration_secs: rental.max_duration_secs,
        },
        created_at: rental.created_at,
        gang_id: rental.gang_id,
        gang_rank: rental.gang_rank.and_then(|r| u32::try_from(r).ok()),
    }
}
