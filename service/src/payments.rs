//! Renters' money: wallets, Stripe top-ups, the webhook inbox, history, receipts, and admin
//! credits and refunds.
//!
//! A top-up is credited only by Stripe's signed `checkout.session.completed` (or
//! `async_payment_succeeded`) webhook, never by the browser coming back from Checkout. Each
//! event id is inserted into the `stripe_events` inbox in the same transaction as its effect,
//! and the ledger reference `top_up:<id>` is unique, so a duplicate, late or reordered delivery
//! changes nothing: a top-up ends credited exactly when some delivered event says it was paid.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{ledger_postings, ledger_transactions, stripe_events, top_ups, users},
    ledger::{self, Book, Entry},
};
use cardpool_domain::{
    admin::AuditAction,
    money::{MICROS_PER_CENT, MICROS_PER_DOLLAR, format_dollars, parse_dollars},
    payments::{
        Adjustment, AdjustmentKind, AdminCreditRequest, CreateTopUpRequest, HistoryQuery, LedgerEntry, Receipt,
        TOP_UP_MAX_MICROS, TOP_UP_MIN_MICROS, TopUp, TopUpCreated, TopUpStatus, Wallet,
    },
};
use chrono::Utc;
use rand::RngCore;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, sea_query::OnConflict,
};
use stripe_webhook::{Event, EventObject, Webhook, WebhookError};

const CURRENCY: &str = "usd";
const MAX_REASON_LEN: usize = 500;
const ADJUSTMENT_MAX_MICROS: i64 = 10_000 * MICROS_PER_DOLLAR;

/// The renter's wallet.
pub async fn get_wallet(services: &Services, principal: &Principal) -> AppResult<Wallet> {
    let pending_top_ups = top_ups::Entity::find()
        .filter(top_ups::Column::UserId.eq(principal.user_id))
        .filter(top_ups::Column::Status.is_in([TopUpStatus::Open.as_str(), TopUpStatus::Processing.as_str()]))
        .filter(top_ups::Column::StripeSessionId.is_not_null())
        .order_by_desc(top_ups::Column::Id)
        .all(&services.db)
        .await
        .context("loading pending top-ups")?
        .iter()
        .map(top_up_dto)
        .collect();
    Ok(Wallet {
        balance_micros: ledger::balance(&services.db, Book::Wallet(principal.user_id)).await?,
        held_micros: ledger::balance(&services.db, Book::Held(principal.user_id)).await?,
        currency: CURRENCY.into(),
        pending_top_ups,
    })
}

fn top_up_dto(row: &top_ups::Model) -> TopUp {
    TopUp {
        id: row.id,
        amount_micros: row.amount_micros,
        status: TopUpStatus::parse(&row.status).unwrap_or(TopUpStatus::Failed),
        created_at: row.created_at,
    }
}

/// One of the caller's top-ups (for the page Checkout returns to).
pub async fn get_top_up(services: &Services, principal: &Principal, top_up_id: i64) -> AppResult<TopUp> {
    let row = top_ups::Entity::find_by_id(top_up_id)
        .one(&services.db)
        .await
        .context("loading top-up")?
        .filter(|t| t.user_id == principal.user_id)
        .ok_or_else(|| AppError::not_found("top-up"))?;
    Ok(top_up_dto(&row))
}

/// Parses a top-up amount: dollars, whole cents, within the allowed range.
pub fn parse_top_up_amount(raw: &str) -> AppResult<i64> {
    let micros = parse_dollars(raw).map_err(|m| AppError::invalid_field("amount", m))?;
    if micros % MICROS_PER_CENT != 0 {
        return Err(AppError::invalid_field("amount", "use whole cents"));
    }
    if !(TOP_UP_MIN_MICROS..=TOP_UP_MAX_MICROS).contains(&micros) {
        return Err(AppError::invalid_field(
            "amount",
            format!("top up between ${} and ${}", format_dollars(TOP_UP_MIN_MICROS), format_dollars(TOP_UP_MAX_MICROS)),
        ));
    }
    Ok(micros)
}

/// Starts a top-up: records it, opens a Stripe Checkout session for it and returns where to
/// pay. Nothing is credited until Stripe's webhook says the session was paid.
pub async fn create_top_up(
    services: &Services,
    principal: &Principal,
    request: &CreateTopUpRequest,
) -> AppResult<TopUpCreated> {
    let amount = parse_top_up_amount(&request.amount)?;
    let now = Utc::now();
    let row = top_ups::ActiveModel {
        user_id: Set(principal.user_id),
        amount_micros: Set(amount),
        currency: Set(CURRENCY.into()),
        status: Set(TopUpStatus::Open.as_str().into()),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&services.db)
    .await
    .context("recording top-up")?;

    let base = &services.settings.payments.public_url;
    let success_url = format!("{base}/wallet?top_up={}", row.id);
    let cancel_url = format!("{base}/wallet?top_up={}&cancelled=1", row.id);
    let session = match services
        .stripe
        .create_checkout_session(row.id, amount / MICROS_PER_CENT, &principal.email, &success_url, &cancel_url)
        .await
    {
        Ok(session) => session,
        Err(err) => {
            let mut failed = row.into_active_model();
            failed.status = Set(TopUpStatus::Failed.as_str().into());
            failed.updated_at = Set(Utc::now());
            failed.update(&services.db).await.context("marking top-up failed")?;
            return Err(err);
        }
    };
    let mut open = row.into_active_model();
    open.stripe_session_id = Set(Some(session.id.clone()));
    open.checkout_url = Set(Some(session.url.clone()));
    open.updated_at = Set(Utc::now());
    let row = open.update(&services.db).await.context("saving checkout session")?;
    tracing::info!(top_up.id = row.id, user.id = principal.user_id, amount = %format_dollars(amount), "top-up started");
    Ok(TopUpCreated { top_up: top_up_dto(&row), checkout_url: session.url })
}

/// Why a webhook delivery was refused (answered 400; nothing written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRejection {
    #[error("missing or invalid Stripe-Signature")]
    BadSignature,
    #[error("signature timestamp outside the tolerance")]
    StaleTimestamp,
    #[error("malformed event payload")]
    Malformed,
}

/// What happened to a verified delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// First delivery of this event; its effect (possibly none) is recorded.
    Applied(String),
    /// This event id was processed before; nothing changed.
    Duplicate,
}

/// The Stripe event a delivery carries, if its `Stripe-Signature` header signs it with
/// `secret` within the tolerance of `now` and it parses; nothing is stored or applied here.
pub fn verify_event(payload: &str, signature: &str, secret: &str, now: i64) -> Result<Event, WebhookRejection> {
    Webhook::construct_event_with_timestamp(payload, signature, secret, now).map_err(|err| {
        tracing::warn!(error = %err, "webhook rejected");
        match err {
            WebhookError::BadTimestamp(_) => WebhookRejection::StaleTimestamp,
            WebhookError::BadParse(_) => WebhookRejection::Malformed,
            WebhookError::BadKey | WebhookError::BadHeader(_) | WebhookError::BadSignature => {
                WebhookRejection::BadSignature
            }
        }
    })
}

/// Verifies and applies one webhook delivery. `now` is the current Unix time (a parameter so
/// tests can check the timestamp tolerance).
pub async fn handle_webhook(
    services: &Services,
    payload: &str,
    signature: Option<&str>,
    now: i64,
) -> Result<WebhookOutcome, WebhookFailure> {
    let signature = signature.ok_or(WebhookFailure::Rejected(WebhookRejection::BadSignature))?;
    let event =
        verify_event(payload, signature, services.stripe.webhook_secret(), now).map_err(WebhookFailure::Rejected)?;
    let event_id = event.id.to_string();
    let event_type = event.type_.as_str().to_owned();

    // Connect account status is fetched fresh rather than taken from the (possibly stale,
    // reordered) event body, before the write transaction so no lock is held over the network.
    let account_status = match &event.data.object {
        EventObject::AccountUpdated(account) => {
            Some((account.id.to_string(), services.stripe.retrieve_connect_account(account.id.as_str()).await?))
        }
        _ => None,
    };

    let txn = services.begin_write().await.context("starting webhook transaction")?;
    // The inbox row goes first: a concurrent duplicate waits on its key, then finds it.
    let inserted = stripe_events::Entity::insert(stripe_events::ActiveModel {
        id: Set(event_id.clone()),
        event_type: Set(event_type.clone()),
        stripe_created: Set(event.created),
        outcome: Set("received".into()),
        payload: Set(payload.to_owned()),
        received_at: Set(Utc::now()),
    })
    .on_conflict(OnConflict::column(stripe_events::Column::Id).do_nothing().to_owned())
    .exec_without_returning(&txn)
    .await
    .context("recording webhook event")?;
    if inserted == 0 {
        tracing::info!(event.id = %event_id, "duplicate webhook delivery ignored");
        return Ok(WebhookOutcome::Duplicate);
    }

    let outcome = match &event.data.object {
        EventObject::CheckoutSessionCompleted(session) => {
            let paid = session.payment_status == stripe_shared::CheckoutSessionPaymentStatus::Paid;
            apply_checkout(&txn, session, if paid { Paid } else { Pending }).await?
        }
        EventObject::CheckoutSessionAsyncPaymentSucceeded(session) => apply_checkout(&txn, session, Paid).await?,
        EventObject::CheckoutSessionAsyncPaymentFailed(session) => apply_checkout(&txn, session, Failed).await?,
        EventObject::CheckoutSessionExpired(session) => apply_checkout(&txn, session, Expired).await?,
        EventObject::AccountUpdated(_) => match account_status {
            Some((account, status)) => crate::payouts::apply_account_status(&txn, &account, status).await?,
            None => "ignored".to_owned(),
        },
        _ => "ignored: not an event Cardpool acts on".to_owned(),
    };
    stripe_events::Entity::update(stripe_events::ActiveModel {
        id: Set(event_id.clone()),
        outcome: Set(outcome.clone()),
        ..Default::default()
    })
    .exec(&txn)
    .await
    .context("recording webhook outcome")?;
    txn.commit().await.context("committing webhook")?;
    tracing::info!(event.id = %event_id, event.type_ = %event_type, %outcome, "webhook applied");
    Ok(WebhookOutcome::Applied(outcome))
}

/// A webhook delivery that was not applied: refused (400, never retried usefully) or failed on
/// our side (500, so Stripe retries later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookFailure {
    Rejected(WebhookRejection),
    Failed(AppError),
}

impl From<AppError> for WebhookFailure {
    fn from(err: AppError) -> Self {
        WebhookFailure::Failed(err)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckoutSignal {
    Paid,
    Pending,
    Failed,
    Expired,
}
use CheckoutSignal::*;

/// Moves a top-up by one Checkout event. Payment wins over everything: a paid event credits
/// the top-up unless it already is, whatever arrived before; the other events only move a
/// top-up that is still open or processing.
async fn apply_checkout(
    conn: &impl ConnectionTrait,
    session: &stripe_shared::CheckoutSession,
    signal: CheckoutSignal,
) -> AppResult<String> {
    let Some(top_up_id) = session.client_reference_id.as_deref().and_then(|r| r.parse::<i64>().ok()) else {
        return Ok("ignored: no Cardpool top-up reference".into());
    };
    let Some(row) = top_ups::Entity::find_by_id(top_up_id).one(conn).await.context("loading top-up")? else {
        tracing::warn!(top_up.id = top_up_id, "webhook names an unknown top-up");
        return Ok(format!("ignored: unknown top-up {top_up_id}"));
    };
    let session_id = session.id.to_string();
    if row.stripe_session_id.as_deref().is_some_and(|id| id != session_id) {
        tracing::error!(top_up.id = top_up_id, session = %session_id, "webhook session does not match the top-up");
        return Ok(format!("rejected: session {session_id} does not belong to top-up {top_up_id}"));
    }
    let status = TopUpStatus::parse(&row.status).unwrap_or(TopUpStatus::Failed);
    if status == TopUpStatus::Credited {
        return Ok(format!("unchanged: top-up {top_up_id} already credited"));
    }
    let now = Utc::now();
    let mut update = row.clone().into_active_model();
    update.stripe_session_id = Set(Some(session_id));
    update.updated_at = Set(now);
    let outcome = match signal {
        Paid => {
            let currency_ok = session.currency.as_ref().is_none_or(|c| *c == stripe_types::Currency::USD);
            if session.amount_total != Some(row.amount_micros / MICROS_PER_CENT) || !currency_ok {
                tracing::error!(top_up.id = top_up_id, amount = ?session.amount_total, "paid amount does not match the top-up");
                return Ok(format!("rejected: amount does not match top-up {top_up_id}"));
            }
            let entry = Entry::new("top_up", format!("top_up:{top_up_id}"), "Wallet top-up via Stripe Checkout")
                .transfer(Book::StripeClearing, Book::Wallet(row.user_id), row.amount_micros);
            let tx = ledger::post(conn, entry).await?;
            update.status = Set(TopUpStatus::Credited.as_str().into());
            update.ledger_transaction_id = Set(Some(tx));
            format!("credited top-up {top_up_id}")
        }
        _ if status.is_final() => return Ok(format!("unchanged: top-up {top_up_id} is {}", status.as_str())),
        Pending => {
            update.status = Set(TopUpStatus::Processing.as_str().into());
            format!("top-up {top_up_id} processing")
        }
        Failed => {
            update.status = Set(TopUpStatus::Failed.as_str().into());
            format!("top-up {top_up_id} failed")
        }
        Expired if status == TopUpStatus::Processing => {
            return Ok(format!("unchanged: top-up {top_up_id} is processing"));
        }
        Expired => {
            update.status = Set(TopUpStatus::Expired.as_str().into());
            format!("top-up {top_up_id} expired")
        }
    };
    update.update(conn).await.context("updating top-up")?;
    Ok(outcome)
}

/// A page of the caller's wallet history, newest first, with the balance after each entry.
pub async fn list_transactions(
    services: &Services,
    principal: &Principal,
    page: &HistoryQuery,
) -> AppResult<Vec<LedgerEntry>> {
    ledger::recent_entries(&services.db, Book::Wallet(principal.user_id), page.before, page.limit()?).await
}

/// Lines of the wallet history CSV read per database round trip.
const CSV_PAGE: u64 = 500;

/// The CSV's header line.
pub const CSV_HEADER: &str = "transaction_id,date_utc,kind,description,amount_usd,balance_usd\n";

/// Where a CSV export has got to: after which transaction, at which balance.
#[derive(Debug, Clone, Copy, Default)]
pub struct CsvCursor {
    after: Option<i64>,
    balance: i64,
}

/// The next lines of the caller's wallet history as CSV (oldest first, amounts in dollars), and
/// where to go on from; `None` when the history is exhausted. An export of any length is
/// written a page at a time, never held whole.
pub async fn transactions_csv_page(
    services: &Services,
    principal: &Principal,
    cursor: CsvCursor,
) -> AppResult<Option<(String, CsvCursor)>> {
    let entries =
        ledger::entries_after(&services.db, Book::Wallet(principal.user_id), cursor.after, cursor.balance, CSV_PAGE)
            .await?;
    let Some(last) = entries.last() else { return Ok(None) };
    let next = CsvCursor { after: Some(last.transaction_id), balance: last.balance_after_micros };
    let mut csv = String::new();
    for e in entries {
        csv.push_str(&format!(
            "{},{},{},{},{},{}\n",
            e.transaction_id,
            e.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
            e.kind,
            csv_field(&e.description),
            format_dollars(e.amount_micros),
            format_dollars(e.balance_after_micros)
        ));
    }
    Ok(Some((csv, next)))
}

/// The caller's whole wallet history as CSV (tests, small exports; the API streams pages).
pub async fn transactions_csv(services: &Services, principal: &Principal) -> AppResult<String> {
    let mut csv = CSV_HEADER.to_owned();
    let mut cursor = CsvCursor::default();
    while let Some((page, next)) = transactions_csv_page(services, principal, cursor).await? {
        csv.push_str(&page);
        cursor = next;
    }
    Ok(csv)
}

/// Quotes a CSV field, and defuses text a spreadsheet would run as a formula.
fn csv_field(raw: &str) -> String {
    let safe = if raw.starts_with(['=', '+', '-', '@']) { format!("'{raw}") } else { raw.to_owned() };
    format!("\"{}\"", safe.replace('"', "\"\""))
}

/// A receipt for one transaction on the caller's wallet.
pub async fn get_receipt(services: &Services, principal: &Principal, transaction_id: i64) -> AppResult<Receipt> {
    let not_found = || AppError::not_found("receipt");
    let tx = ledger_transactions::Entity::find_by_id(transaction_id)
        .one(&services.db)
        .await
        .context("loading transaction")?
        .ok_or_else(not_found)?;
    let (amount_micros, _) =
        ledger::entry_of(&services.db, Book::Wallet(principal.user_id), transaction_id).await?.ok_or_else(not_found)?;
    let stripe_session_id = top_ups::Entity::find()
        .filter(top_ups::Column::LedgerTransactionId.eq(transaction_id))
        .one(&services.db)
        .await
        .context("loading top-up for receipt")?
        .and_then(|t| t.stripe_session_id);
    Ok(Receipt {
        transaction_id,
        number: format!("CP-{}-{transaction_id:06}", tx.created_at.format("%Y%m")),
        account_email: principal.email.clone(),
        kind: tx.kind,
        description: tx.description,
        amount_micros,
        currency: CURRENCY.into(),
        created_at: tx.created_at,
        stripe_session_id,
    })
}

/// An admin credits (promotional) or refunds (from platform fees) a renter's wallet. The
/// reason and the admin are stored with the ledger transaction: that is the audit trail.
pub async fn admin_adjust(
    services: &Services,
    principal: &Principal,
    request: &AdminCreditRequest,
) -> AppResult<Adjustment> {
    principal.require_admin()?;
    let mut fields = cardpool_domain::FieldErrors::new();
    let amount = match parse_dollars(&request.amount) {
        Ok(a) if a <= 0 => {
            fields.insert("amount".into(), "enter an amount above zero".into());
            0
        }
        Ok(a) if a > ADJUSTMENT_MAX_MICROS => {
            fields.insert("amount".into(), format!("at most ${} at once", format_dollars(ADJUSTMENT_MAX_MICROS)));
            0
        }
        Ok(a) => a,
        Err(m) => {
            fields.insert("amount".into(), m);
            0
        }
    };
    let reason = request.reason.trim();
    if reason.chars().count() < 3 || reason.chars().count() > MAX_REASON_LEN || reason.chars().any(char::is_control) {
        fields.insert("reason".into(), format!("say why, in 3 to {MAX_REASON_LEN} printable characters"));
    }
    let email = request.email.trim().to_lowercase();
    let user = users::Entity::find()
        .filter(users::Column::Email.eq(&email))
        .one(&services.db)
        .await
        .context("loading account to credit")?;
    if user.is_none() {
        fields.insert("email".into(), "no account has this email".into());
    }
    let Some(user) = user.filter(|_| fields.is_empty()) else {
        return Err(AppError::invalid_fields(fields));
    };

    let (kind, from, description) = match request.kind {
        AdjustmentKind::Credit => ("credit", Book::PromotionalCredit, "Credit from Cardpool"),
        AdjustmentKind::Refund => ("refund", Book::PlatformFees, "Refund from Cardpool"),
    };
    let mut nonce = [0u8; 12];
    rand::rng().fill_bytes(&mut nonce);
    let mut entry = Entry::new(kind, format!("adjustment:{}", hex::encode(nonce)), description).transfer(
        from,
        Book::Wallet(user.id),
        amount,
    );
    entry.actor_user_id = Some(principal.user_id);
    entry.reason = Some(reason.to_owned());
    let created_at = entry.at;
    let txn = services.begin_write().await.context("starting adjustment")?;
    let balance_before = ledger::balance(&txn, Book::Wallet(user.id)).await?;
    let transaction_id = ledger::post(&txn, entry).await?;
    let action = match request.kind {
        AdjustmentKind::Credit => AuditAction::WalletCredit,
        AdjustmentKind::Refund => AuditAction::WalletRefund,
    };
    let line = crate::admin::audit::Change {
        action,
        subject_id: user.id,
        reason,
        before: serde_json::json!({"balance_micros": balance_before}),
        after: serde_json::json!({"balance_micros": balance_before + amount, "transaction_id": transaction_id}),
    };
    crate::admin::audit::record(&txn, Some(principal), line).await?;
    txn.commit().await.context("committing adjustment")?;
    tracing::info!(
        audit = "admin_adjustment",
        admin.id = principal.user_id,
        user.id = user.id,
        kind,
        amount = %format_dollars(amount),
        reason,
        "admin adjusted a wallet"
    );
    Ok(Adjustment {
        transaction_id,
        kind: kind.into(),
        account_email: user.email,
        amount_micros: amount,
        reason: reason.to_owned(),
        actor_email: principal.email.clone(),
        created_at,
    })
}

/// Every admin credit and refund, newest first.
pub async fn list_adjustments(services: &Services, principal: &Principal) -> AppResult<Vec<Adjustment>> {
    principal.require_admin()?;
    let txs = ledger_transactions::Entity::find()
        .filter(ledger_transactions::Column::ActorUserId.is_not_null())
        .order_by_desc(ledger_transactions::Column::Id)
        .all(&services.db)
        .await
        .context("loading adjustments")?;
    let emails: std::collections::HashMap<i64, String> = users::Entity::find()
        .all(&services.db)
        .await
        .context("loading users")?
        .into_iter()
        .map(|u| (u.id, u.email))
        .collect();
    let mut out = Vec::with_capacity(txs.len());
    for tx in txs {
        // The credited leg is the one on a wallet.
        let postings = ledger_postings::Entity::find()
            .filter(ledger_postings::Column::TransactionId.eq(tx.id))
            .all(&services.db)
            .await
            .context("loading adjustment postings")?;
        let wallet_leg = postings.iter().find(|p| p.amount_micros > 0);
        let account = match wallet_leg {
            Some(p) => crate::entities::ledger_accounts::Entity::find_by_id(p.ledger_account_id)
                .one(&services.db)
                .await
                .context("loading adjustment account")?,
            None => None,
        };
        out.push(Adjustment {
            transaction_id: tx.id,
            kind: tx.kind,
            account_email: account.and_then(|a| a.user_id).and_then(|id| emails.get(&id).cloned()).unwrap_or_default(),
            amount_micros: wallet_leg.map_or(0, |p| p.amount_micros),
            reason: tx.reason.unwrap_or_default(),
            actor_email: tx.actor_user_id.and_then(|id| emails.get(&id).cloned()).unwrap_or_default(),
            created_at: tx.created_at,
        });
    }
    Ok(out)
}
