//! Providers' money: earnings, Stripe Connect Express onboarding, and payouts.
//!
//! Earnings credited within the holding period are pending; the rest is available. A payout is
//! booked first (a `payouts` row and a ledger entry moving the amount out of earnings, in one
//! transaction), then transferred with the idempotency key `payout-<id>`. If Stripe refuses,
//! a reversal entry gives the money back; if Stripe cannot be reached, the payout stays
//! pending and [`retry_pending_payouts`] tries again with the same key, so a transfer is made
//! at most once however often it is retried.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{payout_accounts, payouts},
    hosts::require_provider,
    ledger::{self, Book, Entry},
    stripe::ConnectAccountStatus,
};
use cardpool_domain::{
    money::{MICROS_PER_CENT, format_dollars, parse_dollars},
    payments::{
        ConnectState, Earnings, HistoryQuery, LedgerEntry, OnboardingLink, Payout, PayoutStatus, RequestPayoutRequest,
    },
};
use chrono::{Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
};

/// Payouts listed with the earnings (the newest); the totals count them all.
const PAYOUTS_SHOWN: u64 = 50;

/// Smallest payout: one dollar.
const MIN_PAYOUT_MICROS: i64 = 1_000_000;

fn payout_dto(row: &payouts::Model) -> Payout {
    Payout {
        id: row.id,
        amount_micros: row.amount_micros,
        status: PayoutStatus::parse(&row.status).unwrap_or(PayoutStatus::Failed),
        stripe_transfer_id: row.stripe_transfer_id.clone(),
        failure_message: row.failure_message.clone(),
        created_at: row.created_at,
    }
}

/// Pending (inside the holding period) and available earnings of `user_id`.
async fn earnings_split(services: &Services, conn: &impl ConnectionTrait, user_id: i64) -> AppResult<(i64, i64)> {
    let balance = ledger::balance(conn, Book::Earnings(user_id)).await?;
    let hold = Duration::hours(i64::from(services.settings.payments.earnings_hold_hours));
    let recent = ledger::credits_since(conn, Book::Earnings(user_id), Utc::now() - hold).await?;
    let pending = recent.clamp(0, balance.max(0));
    Ok((pending, balance - pending))
}

fn connect_state(account: Option<&payout_accounts::Model>) -> ConnectState {
    match account {
        None => ConnectState::NotStarted,
        Some(a) if a.payouts_enabled => ConnectState::Ready,
        Some(_) => ConnectState::Onboarding,
    }
}

/// The provider's earnings, Connect status and payouts. While onboarding is unfinished the
/// account's status is refreshed from Stripe, so returning from onboarding shows it at once.
pub async fn get_earnings(services: &Services, principal: &Principal) -> AppResult<Earnings> {
    require_provider(principal)?;
    let mut account = payout_account(&services.db, principal.user_id).await?;
    if let Some(a) = account.as_ref().filter(|a| !a.payouts_enabled) {
        match services.stripe.retrieve_connect_account(&a.stripe_account_id).await {
            Ok(status) => {
                apply_account_status(&services.db, &a.stripe_account_id, status).await?;
                account = payout_account(&services.db, principal.user_id).await?;
            }
            Err(err) => tracing::warn!(error = %err, "could not refresh Connect status"),
        }
    }
    let (pending, available) = earnings_split(services, &services.db, principal.user_id).await?;
    let rows = payouts::Entity::find()
        .filter(payouts::Column::UserId.eq(principal.user_id))
        .order_by_desc(payouts::Column::Id)
        .limit(PAYOUTS_SHOWN)
        .all(&services.db)
        .await
        .context("loading payouts")?;
    let totals: Vec<(String, Option<i64>)> = payouts::Entity::find()
        .select_only()
        .column(payouts::Column::Status)
        .column_as(sea_orm::sea_query::Expr::cust("CAST(SUM(amount_micros) AS BIGINT)"), "total")
        .filter(payouts::Column::UserId.eq(principal.user_id))
        .group_by(payouts::Column::Status)
        .into_tuple()
        .all(&services.db)
        .await
        .context("summing payouts")?;
    let sum = |status: PayoutStatus| -> i64 {
        totals.iter().filter(|(s, _)| s == status.as_str()).filter_map(|(_, t)| *t).sum()
    };
    Ok(Earnings {
        pending_micros: pending,
        available_micros: available,
        paid_out_micros: sum(PayoutStatus::Paid),
        in_transit_micros: sum(PayoutStatus::Pending),
        hold_hours: services.settings.payments.earnings_hold_hours,
        connect: connect_state(account.as_ref()),
        stripe_account_id: account.map(|a| a.stripe_account_id),
        payouts: rows.iter().map(payout_dto).collect(),
    })
}

/// A page of the provider's earnings history, newest first.
pub async fn list_earnings_entries(
    services: &Services,
    principal: &Principal,
    page: &HistoryQuery,
) -> AppResult<Vec<LedgerEntry>> {
    require_provider(principal)?;
    ledger::recent_entries(&services.db, Book::Earnings(principal.user_id), page.before, page.limit()?).await
}

/// Creates the provider's Express account on first use and returns a fresh onboarding link.
pub async fn create_onboarding_link(services: &Services, principal: &Principal) -> AppResult<OnboardingLink> {
    require_provider(principal)?;
    let account = match payout_account(&services.db, principal.user_id).await? {
        Some(a) => a.stripe_account_id,
        None => {
            let id = services.stripe.create_connect_account(principal.user_id, &principal.email).await?;
            payout_accounts::Entity::insert(payout_accounts::ActiveModel {
                user_id: Set(principal.user_id),
                stripe_account_id: Set(id.clone()),
                details_submitted: Set(false),
                payouts_enabled: Set(false),
                updated_at: Set(Utc::now()),
            })
            .on_conflict(
                sea_orm::sea_query::OnConflict::column(payout_accounts::Column::UserId).do_nothing().to_owned(),
            )
            .exec_without_returning(&services.db)
            .await
            .context("saving Connect account")?;
            // The idempotency key makes a concurrent second creation return the same account.
            payout_account(&services.db, principal.user_id).await?.map(|a| a.stripe_account_id).unwrap_or(id)
        }
    };
    let base = &services.settings.payments.public_url;
    let url = services
        .stripe
        .create_onboarding_link(
            &account,
            &format!("{base}/provider/earnings?onboarding=refresh"),
            &format!("{base}/provider/earnings?onboarding=return"),
        )
        .await?;
    Ok(OnboardingLink { url })
}

/// Records what Stripe says about a Connect account (from a webhook or a refresh).
pub(crate) async fn apply_account_status(
    conn: &impl ConnectionTrait,
    stripe_account_id: &str,
    status: ConnectAccountStatus,
) -> AppResult<String> {
    let Some(row) = payout_accounts::Entity::find()
        .filter(payout_accounts::Column::StripeAccountId.eq(stripe_account_id))
        .one(conn)
        .await
        .context("loading payout account")?
    else {
        return Ok(format!("ignored: unknown Connect account {stripe_account_id}"));
    };
    if row.details_submitted == status.details_submitted && row.payouts_enabled == status.payouts_enabled {
        return Ok(format!("unchanged: Connect account {stripe_account_id}"));
    }
    let mut update = row.into_active_model();
    update.details_submitted = Set(status.details_submitted);
    update.payouts_enabled = Set(status.payouts_enabled);
    update.updated_at = Set(Utc::now());
    update.update(conn).await.context("updating payout account")?;
    Ok(format!("Connect account {stripe_account_id} payouts_enabled={}", status.payouts_enabled))
}

/// Pays out `amount` (default: all available earnings, whole cents) to the provider's Connect
/// account.
pub async fn request_payout(
    services: &Services,
    principal: &Principal,
    request: &RequestPayoutRequest,
) -> AppResult<Payout> {
    require_provider(principal)?;
    let account = payout_account(&services.db, principal.user_id)
        .await?
        .filter(|a| a.payouts_enabled)
        .ok_or_else(|| AppError::conflict("finish Stripe onboarding before requesting a payout"))?;
    let requested = match request.amount.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        Some(raw) => {
            let micros = parse_dollars(raw).map_err(|m| AppError::invalid_field("amount", m))?;
            if micros % MICROS_PER_CENT != 0 {
                return Err(AppError::invalid_field("amount", "use whole cents"));
            }
            if micros < MIN_PAYOUT_MICROS {
                return Err(AppError::invalid_field(
                    "amount",
                    format!("pay out at least ${}", format_dollars(MIN_PAYOUT_MICROS)),
                ));
            }
            Some(micros)
        }
        None => None,
    };

    let txn = services.begin_write().await.context("starting payout")?;
    // Concurrent requests queue here, each seeing what the one before it booked.
    ledger::lock(&txn, Book::Earnings(principal.user_id)).await?;
    let (_, available) = earnings_split(services, &txn, principal.user_id).await?;
    let amount = requested.unwrap_or(available - available % MICROS_PER_CENT);
    if amount < MIN_PAYOUT_MICROS.min(available.max(1)) || amount <= 0 {
        return Err(AppError::PaymentRequired(format!(
            "nothing to pay out yet: ${} available (at least ${} needed)",
            format_dollars(available),
            format_dollars(MIN_PAYOUT_MICROS)
        )));
    }
    if amount > available {
        return Err(AppError::PaymentRequired(format!(
            "only ${} of your earnings are available to pay out",
            format_dollars(available)
        )));
    }
    let now = Utc::now();
    let row = payouts::ActiveModel {
        user_id: Set(principal.user_id),
        amount_micros: Set(amount),
        status: Set(PayoutStatus::Pending.as_str().into()),
        stripe_account_id: Set(account.stripe_account_id.clone()),
        attempts: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .context("recording payout")?;
    let entry = Entry::new("payout", format!("payout:{}", row.id), "Payout to your Stripe account").transfer(
        Book::Earnings(principal.user_id),
        Book::StripeClearing,
        amount,
    );
    ledger::post(&txn, entry).await?;
    txn.commit().await.context("committing payout")?;
    tracing::info!(payout.id = row.id, user.id = principal.user_id, amount = %format_dollars(amount), "payout booked");
    Ok(payout_dto(&execute_payout(services, row).await?))
}

/// Makes (or retries) the Stripe transfer of a booked payout and records the result. Only a
/// refusal Stripe clearly gave gives the money back; an answer that never came or could not be
/// read leaves the payout pending (the transfer may have been made), and a retry first asks
/// Stripe for a transfer in the payout's group before making one with the same key.
async fn execute_payout(services: &Services, row: payouts::Model) -> AppResult<payouts::Model> {
    let existing = if row.attempts > 0 { services.stripe.find_transfer(row.id).await.map(Some) } else { Ok(None) };
    let result = match existing {
        Ok(Some(Some(transfer_id))) => Ok(transfer_id),
        Ok(_) => {
            services.stripe.create_transfer(row.id, row.amount_micros / MICROS_PER_CENT, &row.stripe_account_id).await
        }
        Err(err) => Err(err),
    };
    let attempts = row.attempts + 1;
    let now = Utc::now();
    match result {
        Ok(transfer_id) => {
            let txn = services.begin_write().await.context("starting payout record")?;
            let notice = crate::notify::Notice::new(
                row.user_id,
                cardpool_domain::notifications::EventKind::PayoutPaid,
                format!("Payout of ${} paid", format_dollars(row.amount_micros)),
                format!("${} of your earnings is on its way to your bank account.", format_dollars(row.amount_micros)),
            )
            .data(serde_json::json!({ "payout_id": row.id, "amount_micros": row.amount_micros }))
            .once(format!("payout:{}", row.id));
            let mut update = row.into_active_model();
            update.status = Set(PayoutStatus::Paid.as_str().into());
            update.stripe_transfer_id = Set(Some(transfer_id));
            update.attempts = Set(attempts);
            update.updated_at = Set(now);
            let row = update.update(&txn).await.context("recording transfer")?;
            crate::notify::emit(&txn, notice, now).await?;
            txn.commit().await.context("committing payout record")?;
            Ok(row)
        }
        Err(err @ (AppError::Conflict(_) | AppError::PaymentRequired(_))) => {
            tracing::warn!(payout.id = row.id, error = %err, "transfer refused; reversing payout");
            let txn = services.begin_write().await.context("starting payout reversal")?;
            let entry = Entry::new(
                "payout_reversal",
                format!("payout_reversal:{}", row.id),
                "Payout refused by Stripe; returned to earnings",
            )
            .transfer(Book::StripeClearing, Book::Earnings(row.user_id), row.amount_micros);
            ledger::post(&txn, entry).await?;
            let mut update = row.into_active_model();
            update.status = Set(PayoutStatus::Failed.as_str().into());
            update.failure_message = Set(Some(err.to_string()));
            update.attempts = Set(attempts);
            update.updated_at = Set(now);
            let row = update.update(&txn).await.context("recording refused payout")?;
            txn.commit().await.context("committing payout reversal")?;
            Ok(row)
        }
        Err(err) => {
            tracing::warn!(payout.id = row.id, error = %err, "transfer not confirmed; it stays pending and is checked again");
            let message = match err {
                AppError::Unavailable(message) => message,
                _ => "Stripe's answer could not be read; the transfer is being checked".to_owned(),
            };
            let mut update = row.into_active_model();
            update.attempts = Set(attempts);
            update.failure_message = Set(Some(message));
            update.updated_at = Set(now);
            update.update(&services.db).await.context("recording transfer attempt")
        }
    }
}

/// Retries payouts whose transfer Stripe has not confirmed, oldest first. Returns how many
/// were settled (paid or failed) in this round.
pub async fn retry_pending_payouts(services: &Services, older_than: std::time::Duration) -> AppResult<usize> {
    let cutoff = Utc::now() - Duration::from_std(older_than).unwrap_or_default();
    let pending = payouts::Entity::find()
        .filter(payouts::Column::Status.eq(PayoutStatus::Pending.as_str()))
        .filter(payouts::Column::UpdatedAt.lt(cutoff))
        .order_by_asc(payouts::Column::Id)
        .all(&services.db)
        .await
        .context("loading pending payouts")?;
    let mut settled = 0;
    for row in pending {
        if execute_payout(services, row).await?.status != PayoutStatus::Pending.as_str() {
            settled += 1;
        }
    }
    Ok(settled)
}

/// Whether a provider has a Connect account row (used by the earnings page).
pub(crate) async fn payout_account(
    conn: &impl ConnectionTrait,
    user_id: i64,
) -> AppResult<Option<payout_accounts::Model>> {
    payout_accounts::Entity::find_by_id(user_id).one(conn).await.context("loading payout account")
}
