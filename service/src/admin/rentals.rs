//! Admins over rentals: every rental, filtered by state, kind, host, renter and booking day,
//! and refunds on one rental posted through the ledger.
//!
//! A refund gives money the renter paid for the rental back to their wallet, split as the
//! charge was: the provider's share from their earnings (what is already paid out, the
//! platform covers), the fee from the platform's. It is bounded by what the rental charged
//! less what was refunded on it before, checked under the rental's lock, so two admins
//! refunding at once cannot give back more than was paid. Each refund is one ledger entry
//! (with the admin and the reason) and one audit line, in one transaction.

use super::audit::{self, Change};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{hosts, rentals, users},
    ledger::{self, Book},
};
use cardpool_domain::{
    FieldErrors,
    admin::{AdminRental, AdminRentalPage, AdminRentalQuery, AuditAction, RentalRefundRequest, check_reason},
    money::{format_dollars, parse_dollars},
    offers::RentalKind,
    rentals::RentalState,
};
use chrono::{NaiveDate, TimeZone, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, EntityTrait, IntoActiveModel, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::json;
use std::collections::HashMap;

const DEFAULT_PER_PAGE: u32 = 25;
const MAX_PER_PAGE: u32 = 100;

/// Rentals newest first, filtered by `query` (admins only).
pub async fn list(services: &Services, principal: &Principal, query: &AdminRentalQuery) -> AppResult<AdminRentalPage> {
    principal.require_admin()?;
    let mut fields = FieldErrors::new();
    let per_page = query.per_page.unwrap_or(DEFAULT_PER_PAGE);
    if !(1..=MAX_PER_PAGE).contains(&per_page) {
        fields.insert("per_page".into(), format!("1 to {MAX_PER_PAGE}"));
    }
    let page = query.page.unwrap_or(1).clamp(1, 10_000);
    let mut select = rentals::Entity::find();
    if let Some(raw) = given(&query.state) {
        match RentalState::parse(raw) {
            Some(state) => select = select.filter(rentals::Column::State.eq(state.as_str())),
            None => {
                fields.insert("state".into(), "not a rental state".into());
            }
        }
    }
    if let Some(raw) = given(&query.kind) {
        match RentalKind::parse(raw) {
            Some(kind) => select = select.filter(rentals::Column::Kind.eq(kind.as_str())),
            None => {
                fields.insert("kind".into(), "on_demand, reserved or spot".into());
            }
        }
    }
    if let Some(host_id) = query.host_id {
        select = select.filter(rentals::Column::HostId.eq(host_id));
    }
    if let Some(renter_id) = query.renter_id {
        select = select.filter(rentals::Column::RenterId.eq(renter_id));
    }
    if let Some(email) = given(&query.renter) {
        if email.chars().count() > 254 || email.chars().any(char::is_control) {
            fields.insert("renter".into(), "at most 254 printable characters".into());
        } else {
            let ids: Vec<i64> = users::Entity::find()
                .select_only()
                .column(users::Column::Id)
                .filter(users::Column::Email.contains(email.to_lowercase()))
                .limit(1_000)
                .into_tuple()
                .all(&services.db)
                .await
                .context("finding renters")?;
            select = select.filter(rentals::Column::RenterId.is_in(ids));
        }
    }
    let since = day(&query.since, "since", &mut fields);
    let until = day(&query.until, "until", &mut fields);
    if let (Some(since), Some(until)) = (since, until)
        && until < since
    {
        fields.insert("until".into(), "on or after the first day".into());
    }
    if !fields.is_empty() {
        return Err(AppError::invalid_fields(fields));
    }
    let mut window = Condition::all();
    if let Some(since) = since {
        window = window.add(rentals::Column::CreatedAt.gte(midnight(since)));
    }
    if let Some(until) = until.and_then(|d| d.succ_opt()) {
        window = window.add(rentals::Column::CreatedAt.lt(midnight(until)));
    }
    let select = select.filter(window);
    let total = select.clone().count(&services.db).await.context("counting rentals")?;
    let rows = select
        .order_by_desc(rentals::Column::CreatedAt)
        .order_by_desc(rentals::Column::Id)
        .limit(u64::from(per_page))
        .offset(u64::from(page - 1) * u64::from(per_page))
        .all(&services.db)
        .await
        .context("listing rentals")?;
    Ok(AdminRentalPage { rentals: views(services, rows).await?, total, page, per_page })
}

/// Refunds `request.amount` of what `rental_id` charged to its renter's wallet, with the
/// reason on the ledger entry and in the audit log (admins only).
pub async fn refund(
    services: &Services,
    principal: &Principal,
    rental_id: i64,
    request: &RentalRefundRequest,
) -> AppResult<AdminRental> {
    principal.require_admin()?;
    let mut fields = FieldErrors::new();
    let reason = match check_reason(&request.reason) {
        Ok(reason) => reason,
        Err(err) => {
            fields.insert("reason".into(), err.field("reason").unwrap_or("say why").to_owned());
            String::new()
        }
    };
    let amount = match parse_dollars(&request.amount) {
        Ok(amount) if amount > 0 => amount,
        Ok(_) => {
            fields.insert("amount".into(), "enter an amount above zero".into());
            0
        }
        Err(message) => {
            fields.insert("amount".into(), message);
            0
        }
    };
    if !fields.is_empty() {
        return Err(AppError::invalid_fields(fields));
    }
    let txn = services.begin_write().await.context("starting refund")?;
    let rental = crate::rentals::load_for_update(&txn, rental_id).await?;
    let refundable = (rental.charged_micros - rental.refunded_micros).max(0);
    if amount > refundable {
        return Err(AppError::invalid_field(
            "amount",
            format!("at most ${} is left to refund on this rental", format_dollars(refundable)),
        ));
    }
    let provider = hosts::Entity::find_by_id(rental.host_id)
        .one(&txn)
        .await
        .context("loading host")?
        .ok_or(AppError::Internal)?
        .provider_id;
    let reference = format!("rental-{}-admin-refund-{}", rental.id, rental.refunded_micros);
    let description = format!("Rental #{}: refund from Cardpool", rental.id);
    let fee = services.settings.payments.platform_fee_bps;
    let to = Book::Wallet(rental.renter_id);
    let mut entry =
        ledger::usage_reversal(&txn, "rental_refund", to, provider, amount, fee, reference, description).await?;
    entry.actor_user_id = Some(principal.user_id);
    entry.reason = Some(reason.clone());
    let wallet_before = ledger::balance(&txn, to).await?;
    let transaction_id = ledger::post(&txn, entry).await?;
    let before = json!({
        "charged_micros": rental.charged_micros,
        "refunded_micros": rental.refunded_micros,
        "wallet_micros": wallet_before,
    });
    let refunded = rental.refunded_micros + amount;
    let mut row = rental.into_active_model();
    row.refunded_micros = Set(refunded);
    let rental = row.update(&txn).await.context("recording refund")?;
    let after = json!({
        "charged_micros": rental.charged_micros,
        "refunded_micros": rental.refunded_micros,
        "wallet_micros": wallet_before + amount,
        "transaction_id": transaction_id,
        "amount_micros": amount,
    });
    let line = Change { action: AuditAction::RentalRefund, subject_id: rental.id, reason: &reason, before, after };
    audit::record(&txn, Some(principal), line).await?;
    txn.commit().await.context("committing refund")?;
    tracing::info!(
        audit = "rental.refund",
        admin.id = principal.user_id,
        rental.id = rental.id,
        amount = %format_dollars(amount),
        "admin refunded a rental"
    );
    Ok(views(services, vec![rental]).await?.remove(0))
}

/// `rows` with their renters' emails and hosts' names, in one query each.
async fn views(services: &Services, rows: Vec<rentals::Model>) -> AppResult<Vec<AdminRental>> {
    let renter_ids: Vec<i64> = rows.iter().map(|r| r.renter_id).collect();
    let host_ids: Vec<i64> = rows.iter().map(|r| r.host_id).collect();
    let emails: HashMap<i64, String> = users::Entity::find()
        .select_only()
        .columns([users::Column::Id, users::Column::Email])
        .filter(users::Column::Id.is_in(renter_ids))
        .into_tuple()
        .all(&services.db)
        .await
        .context("loading renters")?
        .into_iter()
        .collect();
    let names: HashMap<i64, String> = hosts::Entity::find()
        .select_only()
        .columns([hosts::Column::Id, hosts::Column::Hostname])
        .filter(hosts::Column::Id.is_in(host_ids))
        .into_tuple()
        .all(&services.db)
        .await
        .context("loading hosts")?
        .into_iter()
        .collect();
    Ok(rows
        .into_iter()
        .map(|r| AdminRental {
            id: r.id,
            renter_id: r.renter_id,
            renter_email: emails.get(&r.renter_id).cloned().unwrap_or_default(),
            host_id: r.host_id,
            hostname: names.get(&r.host_id).cloned().unwrap_or_default(),
            gpu_model: r.gpu_model,
            gpu_count: u32::try_from(r.gpu_count).unwrap_or(0),
            kind: RentalKind::parse(&r.kind).unwrap_or(RentalKind::OnDemand),
            state: RentalState::parse(&r.state).unwrap_or(RentalState::Failed),
            price_micros: r.price_micros,
            created_at: r.created_at,
            running_since: r.running_since,
            ends_at: r.ends_at,
            billed_seconds: r.billed_seconds,
            charged_micros: r.charged_micros,
            refunded_micros: r.refunded_micros,
        })
        .collect())
}

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn day(value: &Option<String>, field: &str, fields: &mut FieldErrors) -> Option<NaiveDate> {
    let raw = given(value)?;
    match NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        Ok(day) => Some(day),
        Err(_) => {
            fields.insert(field.into(), "a day as YYYY-MM-DD".into());
            None
        }
    }
}

fn midnight(day: NaiveDate) -> chrono::DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap_or_default())
}
