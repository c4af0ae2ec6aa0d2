//! What admins look up: an account's money, hosts and activity, and a host's history (status
//! changes, alerts, admin actions). Read-only; admins only.

use super::{accounts::summary, audit};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, Sql},
    entities::{hosts, rentals, users},
    ledger::{self, Book},
};
use cardpool_domain::{
    admin::{AccountDetail, AuditQuery, HostHistory},
    payments::PayoutStatus,
    rentals::RentalState,
};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, PaginatorTrait, QueryFilter, Statement};

/// The most status changes and alerts a host's history shows.
const HISTORY_LIMIT: usize = 200;

/// An account with its balances, what it spent and was paid out, its rentals and its hosts.
pub async fn account(services: &Services, principal: &Principal, user_id: i64) -> AppResult<AccountDetail> {
    principal.require_admin()?;
    let user = users::Entity::find_by_id(user_id)
        .one(&services.db)
        .await
        .context("loading account")?
        .ok_or_else(|| AppError::not_found("account"))?;
    let db = &services.db;
    let terminal: Vec<&str> = RentalState::ALL.into_iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
    let of_renter = rentals::Entity::find().filter(rentals::Column::RenterId.eq(user.id));
    Ok(AccountDetail {
        wallet_micros: ledger::balance(db, Book::Wallet(user.id)).await?,
        held_micros: ledger::balance(db, Book::Held(user.id)).await?,
        earnings_micros: ledger::balance(db, Book::Earnings(user.id)).await?,
        paid_out_micros: {
            let mut sql = Sql::new(db.get_database_backend());
            let text = format!(
                "SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS total FROM payouts \
                 WHERE user_id = {} AND status = {}",
                sql.bind(user.id),
                sql.bind(PayoutStatus::Paid.as_str())
            );
            total(db, sql, text).await?
        },
        spent_micros: {
            let mut sql = Sql::new(db.get_database_backend());
            let text = format!(
                "SELECT CAST(COALESCE(SUM(charged_micros - refunded_micros), 0) AS BIGINT) AS total FROM rentals \
                 WHERE renter_id = {}",
                sql.bind(user.id)
            );
            total(db, sql, text).await?
        },
        rentals: of_renter.clone().count(db).await.context("counting rentals")?,
        live_rentals: of_renter
            .filter(rentals::Column::State.is_not_in(terminal))
            .count(db)
            .await
            .context("counting live rentals")?,
        hosts: crate::hosts::summaries(services, Some(user.id)).await?,
        user: summary(&user),
    })
}

/// A host's status changes, alerts and admin actions, newest first.
pub async fn host(services: &Services, principal: &Principal, host_id: i64) -> AppResult<HostHistory> {
    principal.require_admin()?;
    let detail = crate::hosts::get_host(services, principal, host_id).await?;
    let provider_id = hosts::Entity::find_by_id(host_id)
        .one(&services.db)
        .await
        .context("loading host")?
        .ok_or_else(|| AppError::not_found("host"))?
        .provider_id;
    let provider_email = users::Entity::find_by_id(provider_id)
        .one(&services.db)
        .await
        .context("loading provider")?
        .map(|u| u.email)
        .unwrap_or_default();
    let query = AuditQuery {
        subject_kind: Some("host".into()),
        subject_id: Some(host_id),
        per_page: Some(100),
        ..AuditQuery::default()
    };
    let mut events = detail.events;
    events.truncate(HISTORY_LIMIT);
    Ok(HostHistory {
        alerts: crate::alerts::host_alerts(services, host_id, &detail.host.hostname, HISTORY_LIMIT as u64).await?,
        audit: audit::list(services, principal, &query).await?.entries,
        events,
        provider_id,
        provider_email,
        host: detail.host,
    })
}

#[derive(Debug, FromQueryResult)]
struct Total {
    total: i64,
}

async fn total(conn: &impl ConnectionTrait, sql: Sql, text: String) -> AppResult<i64> {
    let statement = Statement::from_sql_and_values(sql.backend, text, sql.values);
    Ok(Total::find_by_statement(statement).one(conn).await.context("adding up")?.map_or(0, |t| t.total))
}
