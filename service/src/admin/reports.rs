//! Revenue and occupancy over time for admins: per day, week or month.
//!
//! Money comes from the ledger in one grouped query (each posting lands in the bucket of its
//! transaction's time): gross is what renters paid for GPU time (the credited legs of usage and
//! capture entries), refunds what went back to them, fees the platform account's net movement.
//! GPU-time comes from the rentals' billed intervals (from ready to the billing end, or to
//! what was billed once settled) and from the hosts' online intervals (their status history),
//! times their GPUs.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, Sql},
    entities::{gpus, hosts, ledger_accounts, rentals},
    ledger::Book,
};
use cardpool_domain::reports::{MAX_BUCKETS, Period, Report, ReportBucket, ReportQuery, overlap_seconds};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter, QuerySelect, Statement,
    sea_query::ExprTrait,
};
use std::collections::HashMap;

/// The most status changes one report reads (the newest; a fleet's transitions are few).
const MAX_STATUS_CHANGES: u64 = 200_000;

/// The report `query` asks for, its last bucket the one holding now (admins only).
pub async fn report(services: &Services, principal: &Principal, query: &ReportQuery) -> AppResult<Report> {
    principal.require_admin()?;
    let period = match query.period.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        None => Period::Day,
        Some(raw) => Period::parse(raw).ok_or_else(|| AppError::invalid_field("period", "day, week or month"))?,
    };
    let count = query.buckets.unwrap_or_else(|| period.default_buckets());
    if !(1..=MAX_BUCKETS).contains(&count) {
        return Err(AppError::invalid_field("buckets", format!("1 to {MAX_BUCKETS}")));
    }
    report_at(services, period, count, Utc::now()).await
}

/// The report as of `now`.
pub async fn report_at(services: &Services, period: Period, count: u32, now: DateTime<Utc>) -> AppResult<Report> {
    let bounds = period.boundaries(now, count);
    let mut buckets: Vec<ReportBucket> =
        bounds.windows(2).map(|w| ReportBucket { start: w[0], end: w[1], ..ReportBucket::default() }).collect();
    money(&services.db, &bounds, &mut buckets).await?;
    rented(&services.db, &mut buckets, now).await?;
    online(&services.db, &mut buckets, now).await?;
    Ok(Report { period, buckets })
}

#[derive(Debug, FromQueryResult)]
struct MoneyRow {
    bucket: i32,
    gross: i64,
    refunds: i64,
    fees: i64,
}

/// Adds the ledger's movements to `buckets`, one query grouped by bucket.
async fn money(conn: &impl ConnectionTrait, bounds: &[DateTime<Utc>], buckets: &mut [ReportBucket]) -> AppResult<()> {
    let fees_account: Option<i64> = ledger_accounts::Entity::find()
        .select_only()
        .column(ledger_accounts::Column::Id)
        .filter(ledger_accounts::Column::Code.eq(Book::PlatformFees.code()))
        .into_tuple()
        .one(conn)
        .await
        .context("finding the fees account")?;
    let mut sql = Sql::new(conn.get_database_backend());
    let mut case = String::from("CASE");
    for (i, bound) in bounds.iter().enumerate().skip(1) {
        case.push_str(&format!(" WHEN t.created_at < {} THEN {}", sql.bind(*bound), i - 1));
    }
    case.push_str(" END");
    let fees = sql.bind(fees_account.unwrap_or(-1));
    let (start, end) = (sql.bind(bounds[0]), sql.bind(bounds[bounds.len() - 1]));
    let text = format!(
        "SELECT CAST({case} AS INTEGER) AS bucket, \
         CAST(COALESCE(SUM(CASE WHEN t.kind IN ('usage', 'capture') AND p.amount_micros > 0 \
             THEN p.amount_micros ELSE 0 END), 0) AS BIGINT) AS gross, \
         CAST(COALESCE(SUM(CASE WHEN t.kind IN ('usage_refund', 'rental_refund', 'refund') AND p.amount_micros > 0 \
             THEN p.amount_micros ELSE 0 END), 0) AS BIGINT) AS refunds, \
         CAST(COALESCE(SUM(CASE WHEN p.ledger_account_id = {fees} THEN p.amount_micros ELSE 0 END), 0) AS BIGINT) AS fees \
         FROM ledger_postings p JOIN ledger_transactions t ON t.id = p.transaction_id \
         WHERE t.created_at >= {start} AND t.created_at < {end} \
         GROUP BY 1"
    );
    let rows = MoneyRow::find_by_statement(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .all(conn)
        .await
        .context("adding up revenue")?;
    for row in rows {
        if let Some(bucket) = usize::try_from(row.bucket).ok().and_then(|i| buckets.get_mut(i)) {
            bucket.gross_micros += row.gross;
            bucket.refunds_micros += row.refunds;
            bucket.fees_micros += row.fees;
        }
    }
    Ok(())
}

/// Adds the GPU-seconds billed to renters in each bucket.
async fn rented(conn: &impl ConnectionTrait, buckets: &mut [ReportBucket], now: DateTime<Utc>) -> AppResult<()> {
    let (Some(start), Some(end)) = (buckets.first().map(|b| b.start), buckets.last().map(|b| b.end)) else {
        return Ok(());
    };
    type Row = (i32, Option<DateTime<Utc>>, Option<DateTime<Utc>>, i64, bool);
    let rows: Vec<Row> = rentals::Entity::find()
        .select_only()
        .columns([
            rentals::Column::GpuCount,
            rentals::Column::RunningSince,
            rentals::Column::BillingEndsAt,
            rentals::Column::BilledSeconds,
            rentals::Column::Settled,
        ])
        .filter(rentals::Column::RunningSince.lt(end))
        .filter(rentals::Column::BillingEndsAt.is_null().or(rentals::Column::BillingEndsAt.gt(start)))
        .into_tuple()
        .all(conn)
        .await
        .context("loading billed rentals")?;
    for (gpu_count, since, billing_end, billed, settled) in rows {
        let Some(since) = since else { continue };
        let until = if settled {
            since + Duration::seconds(billed)
        } else {
            Ord::max(Ord::min(billing_end.unwrap_or(now), now), since)
        };
        for bucket in buckets.iter_mut() {
            bucket.rented_gpu_seconds += i64::from(gpu_count) * overlap_seconds(since, until, bucket.start, bucket.end);
        }
    }
    Ok(())
}

/// Adds the GPU-seconds of hosts that were online in each bucket: the window's status
/// changes and each host's last one before it, which says how the window began.
async fn online(conn: &impl ConnectionTrait, buckets: &mut [ReportBucket], now: DateTime<Utc>) -> AppResult<()> {
    let (Some(start), Some(end)) = (buckets.first().map(|b| b.start), buckets.last().map(|b| b.end)) else {
        return Ok(());
    };
    let end = Ord::min(end, now);
    let mut gpus_of: HashMap<i64, i64> = HashMap::new();
    let host_ids: Vec<i64> = gpus::Entity::find()
        .select_only()
        .column(gpus::Column::HostId)
        .filter(gpus::Column::ParentId.is_null())
        .into_tuple()
        .all(conn)
        .await
        .context("counting GPUs")?;
    for host in host_ids {
        *gpus_of.entry(host).or_default() += 1;
    }
    let known: Vec<i64> = hosts::Entity::find()
        .select_only()
        .column(hosts::Column::Id)
        .filter(hosts::Column::CreatedAt.lt(end))
        .into_tuple()
        .all(conn)
        .await
        .context("loading hosts")?;
    let changes = crate::hosts::status_changes_since(conn, None, start, MAX_STATUS_CHANGES).await?;
    for host in known {
        let Some(&count) = gpus_of.get(&host) else { continue };
        let transitions: Vec<(DateTime<Utc>, bool)> =
            changes.iter().filter(|c| c.0 == host && c.1 < end).map(|c| (c.1, c.2)).collect();
        for (from, to) in online_intervals(&transitions, start, end) {
            for bucket in buckets.iter_mut() {
                bucket.online_gpu_seconds += count * overlap_seconds(from, to, bucket.start, bucket.end);
            }
        }
    }
    Ok(())
}

/// The online stretches within `[from, to)`, given status changes in time order (online or
/// not); a host is offline until its first change to online.
pub fn online_intervals(
    transitions: &[(DateTime<Utc>, bool)],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let mut out = Vec::new();
    let mut up_since: Option<DateTime<Utc>> = None;
    for &(at, online) in transitions {
        let at = at.clamp(from, to);
        match (up_since, online) {
            (None, true) => up_since = Some(at),
            (Some(since), false) => {
                if at > since {
                    out.push((since, at));
                }
                up_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = up_since.filter(|s| *s < to) {
        out.push((since, to));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").unwrap().with_timezone(&Utc) + Duration::hours(h)
    }

    #[test]
    fn online_stretches_follow_the_status_changes() {
        // Online before the window, offline 2h–3h, online again until a revocation at 5h.
        let changes = [(at(-10), true), (at(2), false), (at(3), true), (at(5), false)];
        assert_eq!(online_intervals(&changes, at(0), at(6)), vec![(at(0), at(2)), (at(3), at(5))]);
        // Never online: nothing; online to the end: up to the end.
        assert!(online_intervals(&[(at(1), false)], at(0), at(6)).is_empty());
        assert_eq!(online_intervals(&[(at(4), true)], at(0), at(6)), vec![(at(4), at(6))]);
        // A repeated "online" changes nothing.
        assert_eq!(online_intervals(&[(at(1), true), (at(2), true)], at(0), at(3)), vec![(at(1), at(3))]);
    }
}
