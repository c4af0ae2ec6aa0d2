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
    db::{DbResultExt, Sql, Violation},
    entities::*,
};
use cardpool_domain::{money::format_dollars, payments::LedgerEntry};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, PaginatorTrait, QueryFilter, QuerySelect, Statement,
    sea_query::OnConflict,
    sea_query::{Expr, ExprTrait},
};

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
    /// `top_up`, `usage`, `credit`, `refund`, `hold`, `release`, `capture`, `payout`, ...
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

async fn find_account_row(conn: &impl ConnectionTrait, code: &str) -> AppResult<Option<ledger_accounts::Model>> {
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

/// Entries one read returns at most.
pub const MAX_ENTRIES: u64 = 500;

#[derive(Debug, FromQueryResult)]
struct EntryRow {
    transaction_id: i64,
    kind: String,
    description: String,
    amount_micros: i64,
    created_at: DateTime<Utc>,
}

/// `book`'s postings joined to their transactions, in transaction order, `newest_first` or not,
/// those past `cursor` (a transaction id), at most `limit` of them. One index range scan.
async fn entry_rows(
    conn: &impl ConnectionTrait,
    account_id: i64,
    cursor: Option<i64>,
    newest_first: bool,
    limit: u64,
) -> AppResult<Vec<EntryRow>> {
    let mut sql = Sql::new(conn.get_database_backend());
    let account = sql.bind(account_id);
    let (direction, past) = if newest_first { ("DESC", "<") } else { ("ASC", ">") };
    let cursor = cursor.map(|c| format!(" AND p.transaction_id {past} {}", sql.bind(c))).unwrap_or_default();
    let limit = sql.bind(i64::try_from(std::cmp::Ord::min(limit, MAX_ENTRIES)).unwrap_or(1));
    let text = format!(
        "SELECT p.transaction_id, t.kind, t.description, p.amount_micros, t.created_at \
         FROM ledger_postings p JOIN ledger_transactions t ON t.id = p.transaction_id \
         WHERE p.ledger_account_id = {account}{cursor} ORDER BY p.transaction_id {direction}, p.id {direction} LIMIT {limit}"
    );
    EntryRow::find_by_statement(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .all(conn)
        .await
        .context("loading ledger entries")
}

fn entry(row: EntryRow, balance_after_micros: i64) -> LedgerEntry {
    LedgerEntry {
        transaction_id: row.transaction_id,
        kind: row.kind,
        description: row.description,
        amount_micros: row.amount_micros,
        balance_after_micros,
        created_at: row.created_at,
    }
}

/// `book`'s newest entries, newest first, with the balance after each: the `limit` (at most
/// [`MAX_ENTRIES`]) before transaction `before` when given. The balance after the newest is
/// the account's (verified) balance less what came after it, so a page costs the same at any
/// depth of history.
pub async fn recent_entries(
    conn: &impl ConnectionTrait,
    book: Book,
    before: Option<i64>,
    limit: u64,
) -> AppResult<Vec<LedgerEntry>> {
    let Some(account) = find_account_row(conn, &book.code()).await? else {
        return Ok(Vec::new());
    };
    let later = match before {
        None => 0,
        Some(before) => {
            let mut sql = Sql::new(conn.get_database_backend());
            let text = format!(
                "SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS total FROM ledger_postings \
                 WHERE ledger_account_id = {} AND transaction_id >= {}",
                sql.bind(account.id),
                sql.bind(before)
            );
            sum(conn, sql, text).await?
        }
    };
    let mut balance = account.balance_micros - later;
    let rows = entry_rows(conn, account.id, before, true, limit).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let after = balance;
            balance -= row.amount_micros;
            entry(row, after)
        })
        .collect())
}

/// `book`'s entries oldest first from the beginning, a page at a time: the `limit` after
/// transaction `after`, given the balance before them (zero from the start). For exports.
pub async fn entries_after(
    conn: &impl ConnectionTrait,
    book: Book,
    after: Option<i64>,
    balance_before: i64,
    limit: u64,
) -> AppResult<Vec<LedgerEntry>> {
    let Some(account) = find_account_row(conn, &book.code()).await? else {
        return Ok(Vec::new());
    };
    let mut balance = balance_before;
    Ok(entry_rows(conn, account.id, after, false, limit)
        .await?
        .into_iter()
        .map(|row| {
            balance += row.amount_micros;
            entry(row, balance)
        })
        .collect())
}

/// `book`'s entry for transaction `transaction_id`, if it touched `book`.
pub async fn entry_of(
    conn: &impl ConnectionTrait,
    book: Book,
    transaction_id: i64,
) -> AppResult<Option<(i64, DateTime<Utc>)>> {
    let Some(account) = find_account_row(conn, &book.code()).await? else {
        return Ok(None);
    };
    let rows = entry_rows(conn, account.id, Some(transaction_id - 1), false, 1).await?;
    Ok(rows.into_iter().find(|r| r.transaction_id == transaction_id).map(|r| (r.amount_micros, r.created_at)))
}

#[derive(Debug, FromQueryResult)]
struct Total {
    total: i64,
}

async fn sum(conn: &impl ConnectionTrait, sql: Sql, text: String) -> AppResult<i64> {
    Ok(Total::find_by_statement(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .one(conn)
        .await
        .context("summing postings")?
        .map_or(0, |t| t.total))
}

/// Sum of the positive postings to `book` made at or after `since` (recent credits): those
/// of the transactions from the first one at or after `since` on (transaction ids grow with
/// time), one range of the (account, transaction) index, so the cost follows the recent
/// postings, not the account's whole history.
pub async fn credits_since(conn: &impl ConnectionTrait, book: Book, since: DateTime<Utc>) -> AppResult<i64> {
    let Some(account) = find_account_row(conn, &book.code()).await? else {
        return Ok(0);
    };
    let mut sql = Sql::new(conn.get_database_backend());
    let (account, since) = (sql.bind(account.id), sql.bind(since));
    let text = format!(
        "SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS total FROM ledger_postings \
         WHERE ledger_account_id = {account} AND amount_micros > 0 AND transaction_id >= \
         (SELECT COALESCE(MIN(id), 9223372036854775807) FROM ledger_transactions WHERE created_at >= {since})"
    );
    sum(conn, sql, text).await
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerCheck {
    pub transactions: u64,
    pub accounts: u64,
    /// Transactions whose postings do not sum to zero.
    pub unbalanced_transactions: Vec<i64>,
    /// Accounts whose cached balance differs from the sum of their postings.
    pub drifted_accounts: Vec<String>,
    /// People's accounts below zero.
    pub negative_accounts: Vec<String>,
    /// Sum of every balance; zero when money is conserved.
    pub total_micros: i64,
}

impl LedgerCheck {
    pub fn is_sound(&self) -> bool {
        self.unbalanced_transactions.is_empty()
            && self.drifted_accounts.is_empty()
            && self.negative_accounts.is_empty()
            && self.total_micros == 0
    }
}

#[derive(Debug, FromQueryResult)]
struct AccountSum {
    code: String,
    user_id: Option<i64>,
    balance_micros: i64,
    derived: i64,
}

/// Checks the ledger's invariants from the postings up, as aggregates the database computes:
/// memory stays flat however many postings there are (the hourly audit runs this). Lists at
/// most [`MAX_ENTRIES`] offenders of each kind.
pub async fn verify(conn: &impl ConnectionTrait) -> AppResult<LedgerCheck> {
    let backend = conn.get_database_backend();
    let limit = MAX_ENTRIES;
    #[derive(Debug, FromQueryResult)]
    struct Id {
        transaction_id: i64,
    }
    let unbalanced = Id::find_by_statement(Statement::from_string(
        backend,
        format!(
            "SELECT transaction_id FROM ledger_postings GROUP BY transaction_id \
             HAVING SUM(amount_micros) <> 0 ORDER BY transaction_id LIMIT {limit}"
        ),
    ))
    .all(conn)
    .await
    .context("checking transactions balance")?;
    let offenders = AccountSum::find_by_statement(Statement::from_string(
        backend,
        format!(
            "SELECT a.code, a.user_id, a.balance_micros, CAST(COALESCE(d.derived, 0) AS BIGINT) AS derived \
             FROM ledger_accounts a LEFT JOIN (SELECT ledger_account_id, SUM(amount_micros) AS derived \
             FROM ledger_postings GROUP BY ledger_account_id) d ON d.ledger_account_id = a.id \
             WHERE COALESCE(d.derived, 0) <> a.balance_micros OR (a.user_id IS NOT NULL AND COALESCE(d.derived, 0) < 0) \
             ORDER BY a.code LIMIT {limit}"
        ),
    ))
    .all(conn)
    .await
    .context("checking account balances")?;
    let total = sum(
        conn,
        Sql::new(backend),
        "SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS total FROM ledger_postings".into(),
    )
    .await?;
    let mut check = LedgerCheck {
        transactions: ledger_transactions::Entity::find().count(conn).await.context("counting transactions")?,
        accounts: ledger_accounts::Entity::find().count(conn).await.context("counting ledger accounts")?,
        unbalanced_transactions: unbalanced.into_iter().map(|u| u.transaction_id).collect(),
        total_micros: total,
        ..Default::default()
    };
    for account in offenders {
        if account.derived != account.balance_micros {
            check.drifted_accounts.push(account.code.clone());
        }
        if account.user_id.is_some() && account.derived < 0 {
            check.negative_accounts.push(account.code);
        }
    }
    Ok(check)
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
/// reservation): the provider's share from their earnings, the fee from the platform's. What
/// the provider no longer has (already paid out) the platform pays.
pub async fn refund_usage(
    conn: &impl ConnectionTrait,
    to: Book,
    provider: i64,
    amount: i64,
    fee_bps: u32,
    reference: String,
    description: String,
) -> AppResult<i64> {
    let (share, _) = split_fee(amount, fee_bps);
    let earnings = balance(conn, Book::Earnings(provider)).await?;
    let from_provider = std::cmp::Ord::clamp(earnings, 0, share);
    let entry = Entry::new("usage_refund", reference, description)
        .leg(to, amount)
        .leg(Book::Earnings(provider), -from_provider)
        .leg(Book::PlatformFees, from_provider - amount);
    post(conn, entry).await
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
