//! The double-entry ledger: the only place money moves.
//!
//! Every movement is one [`Entry`] whose legs sum to zero, posted inside the caller's database
//! transaction so it commits or vanishes together with the state change it pays for (a credited
//! top-up, a settled rental minute). Balances are derived from postings; the cached
//! `balance_micros` on each account is updated in the same statement that guards it, and
//! [`verify`] proves the two agree. Nothing is ever updated or deleted: a correction is a new
//! entry. Each entry carries a unique `reference` naming the business event it books
//! (`top_up:17`, `payout:4`), so no event can be booked twice, whatever retries happen.
//!
//! Sign convention: a positive amount raises the account's balance. Accounts that belong to
//! people (wallet, held, earnings) can never go below zero; the platform's own accounts (Stripe
//! clearing, fees, promotional credit) are counterweights and may.

use crate::{
    AppError, AppResult,
    db::{DbResultExt, Violation},
    entities::*,
};
use cardpool_domain::money::format_dollars;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect,
    sea_query::OnConflict,
    sea_query::{Expr, ExprTrait},
};

mod audit;
mod history;

pub use audit::{LedgerCheck, verify};
pub use history::{MAX_ENTRIES, credits_since, entries_after, entry_of, recent_entries, rental_spend_since};

/// One account of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Book {
    /// A renter's spendable money.
    Wallet(i64),
    /// A renter's money held for prepaid reservations.
    Held(i64),
    /// A provider's earnings not yet paid out.
    Earnings(i64),
    /// The platform's cut of usage.
    PlatformFees,
    /// Money that is in (positive) or came through (negative) Stripe.
    StripeClearing,
    /// Source of promotional and goodwill credit.
    PromotionalCredit,
}

impl Book {
    pub fn kind(self) -> &'static str {
        match self {
            Book::Wallet(_) => "wallet",
            Book::Held(_) => "held",
            Book::Earnings(_) => "earnings",
            Book::PlatformFees => "platform_fees",
            Book::StripeClearing => "stripe_clearing",
            Book::PromotionalCredit => "promotional_credit",
        }
    }

    pub fn user_id(self) -> Option<i64> {
        match self {
            Book::Wallet(id) | Book::Held(id) | Book::Earnings(id) => Some(id),
            _ => None,
        }
    }

    /// Unique name of the account row, e.g. `wallet:12`.
    pub fn code(self) -> String {
        match self.user_id() {
            Some(id) => format!("{}:{id}", self.kind()),
            None => self.kind().to_owned(),
        }
    }

    /// People's accounts never go below zero.
    fn must_stay_non_negative(self) -> bool {
        self.user_id().is_some()
    }
}

/// A balanced movement of money, ready to post.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `top_up`, `usage`, `credit`, `refund`, `rental_refund`, `hold`, `release`, `capture`,
    /// `payout`, ...
    pub kind: &'static str,
    /// Names the business event; unique across the ledger.
    pub reference: String,
    pub description: String,
    /// Who did it, when a person did (admin adjustments).
    pub actor_user_id: Option<i64>,
    pub reason: Option<String>,
    pub legs: Vec<(Book, i64)>,
    pub at: DateTime<Utc>,
}

impl Entry {
    pub fn new(kind: &'static str, reference: impl Into<String>, description: impl Into<String>) -> Self {
        Entry {
            kind,
            reference: reference.into(),
            description: description.into(),
            actor_user_id: None,
            reason: None,
            legs: Vec::new(),
            at: Utc::now(),
        }
    }

    /// Moves `amount` from one account to another.
    pub fn transfer(mut self, from: Book, to: Book, amount: i64) -> Self {
        self.legs.push((from, -amount));
        self.legs.push((to, amount));
        self
    }

    pub fn leg(mut self, book: Book, amount: i64) -> Self {
        self.legs.push((book, amount));
        self
    }
}

/// The platform's cut of `amount` at `fee_bps` basis points, rounded down, and the rest.
/// Returns `(provider_share, fee)`; they always add up to `amount`.
pub fn split_fee(amount: i64, fee_bps: u32) -> (i64, i64) {
    let fee = i64::try_from(i128::from(amount) * i128::from(Ord::min(fee_bps, 10_000)) / 10_000).unwrap_or(0);
    (amount - fee, fee)
}

/// Posts `entry` inside `conn` (a transaction the caller commits). Fails with `PaymentRequired`
/// naming the shortfall if a person's account would go negative, with `Conflict` if the
/// reference was booked already; in both cases the caller's transaction must be dropped.
pub async fn post(conn: &impl ConnectionTrait, entry: Entry) -> AppResult<i64> {
    check_balanced(&entry)?;
    if ledger_transactions::Entity::find()
        .filter(ledger_transactions::Column::Reference.eq(&entry.reference))
        .one(conn)
        .await
        .context("checking ledger reference")?
        .is_some()
    {
        return Err(AppError::conflict(format!("{} was already recorded", entry.reference)));
    }

    // Merge legs per account and lock accounts in one global order (their code), so two
    // concurrent entries never wait on each other crosswise.
    let mut per_book: Vec<(Book, i64)> = Vec::new();
    for (book, amount) in &entry.legs {
        match per_book.iter_mut().find(|(b, _)| b == book) {
            Some((_, total)) => *total += amount,
            None => per_book.push((*book, *amount)),
        }
    }
    per_book.retain(|(_, amount)| *amount != 0);
    per_book.sort_by_key(|(book, _)| book.code());

    let tx = ledger_transactions::Entity::insert(ledger_transactions::ActiveModel {
        kind: Set(entry.kind.to_owned()),
        reference: Set(entry.reference.clone()),
        description: Set(entry.description.clone()),
        actor_user_id: Set(entry.actor_user_id),
        reason: Set(entry.reason.clone()),
        created_at: Set(entry.at),
        ..Default::default()
    })
    .exec(conn)
    .await
    .or_violation(
        Violation::Unique,
        || AppError::conflict(format!("{} was already recorded", entry.reference)),
        "inserting ledger transaction",
    )?
    .last_insert_id;

    for (book, amount) in per_book {
        let account_id = account_id(conn, book).await?;
        let mut update = ledger_accounts::Entity::update_many()
            .col_expr(
                ledger_accounts::Column::BalanceMicros,
                Expr::col(ledger_accounts::Column::BalanceMicros).add(amount),
            )
            .filter(ledger_accounts::Column::Id.eq(account_id));
        if book.must_stay_non_negative() && amount < 0 {
            update = update.filter(ledger_accounts::Column::BalanceMicros.gte(-amount));
        }
        let updated = update.exec(conn).await.context("updating ledger balance")?;
        if updated.rows_affected == 0 {
            let balance = balance(conn, book).await?;
            return Err(AppError::PaymentRequired(format!(
                "insufficient {}: ${} needed, ${} available (short by ${})",
                match book {
                    Book::Earnings(_) => "earnings",
                    Book::Held(_) => "held funds",
                    _ => "balance",
                },
                format_dollars(-amount),
                format_dollars(balance),
                format_dollars(-amount - balance)
            )));
        }
    }
    for (book, amount) in &entry.legs {
        if *amount == 0 {
            continue;
        }
        let account_id = account_id(conn, *book).await?;
        ledger_postings::Entity::insert(ledger_postings::ActiveModel {
            transaction_id: Set(tx),
            ledger_account_id: Set(account_id),
            amount_micros: Set(*amount),
            ..Default::default()
        })
        .exec_without_returning(conn)
        .await
        .context("inserting ledger posting")?;
    }
    Ok(tx)
}

fn check_balanced(entry: &Entry) -> AppResult<()> {
    let sum = entry.legs.iter().try_fold(0i64, |acc, (_, amount)| acc.checked_add(*amount));
    let ok = !entry.legs.is_empty() && sum == Some(0) && entry.legs.iter().any(|(_, amount)| *amount != 0);
    if ok {
        Ok(())
    } else {
        tracing::error!(reference = %entry.reference, legs = ?entry.legs, "refusing an unbalanced ledger entry");
        Err(AppError::Internal)
    }
}

/// The row id of `book`'s account, created on first use.
async fn account_id(conn: &impl ConnectionTrait, book: Book) -> AppResult<i64> {
    let code = book.code();
    if let Some(id) = find_account(conn, &code).await? {
        return Ok(id);
    }
    ledger_accounts::Entity::insert(ledger_accounts::ActiveModel {
        code: Set(code.clone()),
        kind: Set(book.kind().to_owned()),
        user_id: Set(book.user_id()),
        balance_micros: Set(0),
        created_at: Set(Utc::now()),
        ..Default::default()
    })
    .on_conflict(OnConflict::column(ledger_accounts::Column::Code).do_nothing().to_owned())
    .exec_without_returning(conn)
    .await
    .context("creating ledger account")?;
    find_account(conn, &code).await?.ok_or(AppError::Internal)
}

async fn find_account(conn: &impl ConnectionTrait, code: &str) -> AppResult<Option<i64>> {
    Ok(find_account_row(conn, code).await?.map(|a| a.id))
}

pub(super) async fn find_account_row(
    conn: &impl ConnectionTrait,
    code: &str,
) -> AppResult<Option<ledger_accounts::Model>> {
    ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(conn)
        .await
        .context("loading ledger account")
}

/// Locks `book`'s account (created if new) until the caller's transaction ends, so a decision
/// read from its balance (a payout of available earnings) cannot race another. SQLite's write
/// transactions are serialized already; PostgreSQL takes the row lock.
pub async fn lock(conn: &impl ConnectionTrait, book: Book) -> AppResult<()> {
    let id = account_id(conn, book).await?;
    if conn.get_database_backend() == sea_orm::DbBackend::Postgres {
        ledger_accounts::Entity::find_by_id(id).lock_exclusive().one(conn).await.context("locking ledger account")?;
    }
    Ok(())
}

/// Current balance of `book` (zero for an account never used).
pub async fn balance(conn: &impl ConnectionTrait, book: Book) -> AppResult<i64> {
    Ok(ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(book.code()))
        .one(conn)
        .await
        .context("loading ledger balance")?
        .map_or(0, |a| a.balance_micros))
}

/// Charges `amount` of usage to a renter's wallet and credits the provider, less the platform
/// fee of `fee_bps` basis points. `PaymentRequired` (with the shortfall) if the wallet is short.
pub async fn charge_usage(
    conn: &impl ConnectionTrait,
    renter: i64,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> AppResult<i64> {
    post(conn, provider_payment("usage", Book::Wallet(renter), provider, amount, fee_bps, reference, description)).await
}

/// Moves `amount` of a renter's wallet into held funds (a prepaid reservation).
pub async fn hold(
    conn: &impl ConnectionTrait,
    renter: i64,
    amount: i64,
    reference: String,
    description: String,
) -> AppResult<i64> {
    post(conn, Entry::new("hold", reference, description).transfer(Book::Wallet(renter), Book::Held(renter), amount))
        .await
}

/// Gives held funds back to the renter's wallet (a cancelled or unused reservation).
pub async fn release(
    conn: &impl ConnectionTrait,
    renter: i64,
    amount: i64,
    reference: String,
    description: String,
) -> AppResult<i64> {
    post(conn, Entry::new("release", reference, description).transfer(Book::Held(renter), Book::Wallet(renter), amount))
        .await
}

/// Pays the provider from held funds (a reservation that was delivered), less the fee.
pub async fn capture(
    conn: &impl ConnectionTrait,
    renter: i64,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> AppResult<i64> {
    post(conn, provider_payment("capture", Book::Held(renter), provider, amount, fee_bps, reference, description)).await
}

/// Gives back `amount` the renter paid for time the host did not deliver (billed past an
/// interrupted host's last heartbeat) into `to` (their wallet, or held funds for a
/// reservation). See [`usage_reversal`] for who pays.
pub async fn refund_usage(
    conn: &impl ConnectionTrait,
    to: Book,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> AppResult<i64> {
    let entry = usage_reversal(conn, "usage_refund", to, provider, amount, fee_bps, reference, description).await?;
    post(conn, entry).await
}

/// An entry that gives `amount` of rental charges back into `to`, paid as the charge was
/// split: the provider's share from their earnings, the fee from the platform's. What the
/// provider no longer has (already paid out) the platform pays.
#[allow(clippy::too_many_arguments)]
pub async fn usage_reversal(
    conn: &impl ConnectionTrait,
    kind: &'static str,
    to: Book,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> AppResult<Entry> {
    let (share, _) = split_fee(amount, fee_bps);
    let earnings = balance(conn, Book::Earnings(provider)).await?;
    let from_provider = std::cmp::Ord::clamp(earnings, 0, share);
    Ok(Entry::new(kind, reference, description)
        .leg(to, amount)
        .leg(Book::Earnings(provider), -from_provider)
        .leg(Book::PlatformFees, from_provider - amount))
}

/// `amount` from `from` to the provider's earnings, the platform fee split off.
fn provider_payment(
    kind: &'static str,
    from: Book,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> Entry {
    let (share, fee) = split_fee(amount, fee_bps);
    Entry::new(kind, reference, description)
        .leg(from, -amount)
        .leg(Book::Earnings(provider), share)
        .leg(Book::PlatformFees, fee)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fee_split_adds_up(amount in 0i64..1_000_000_000_000, bps in 0u32..=10_000) {
            let (share, fee) = split_fee(amount, bps);
            prop_assert_eq!(share + fee, amount);
            prop_assert!(fee >= 0 && share >= 0);
            prop_assert!(i128::from(fee) * 10_000 <= i128::from(amount) * i128::from(bps));
        }
    }
}
