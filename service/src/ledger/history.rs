//! Reading a book's history a page at a time: newest first for pages people look at, oldest
//! first for exports, one transaction's entry for receipts, and recent credits for the
//! earnings hold. Each read is one range of the (account, transaction) index, so its cost
//! follows the page asked for, not how long the account's history has grown.

use super::{Book, find_account_row};
use crate::{
    AppResult,
    db::{DbResultExt, Sql},
    entities::ledger_transactions,
};
use cardpool_domain::payments::LedgerEntry;
use chrono::{DateTime, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement,
};

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

pub(super) async fn sum(conn: &impl ConnectionTrait, sql: Sql, text: String) -> AppResult<i64> {
    Ok(Total::find_by_statement(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .one(conn)
        .await
        .context("summing postings")?
        .map_or(0, |t| t.total))
}

/// Sum of the positive postings to `book` made at or after `since` (recent credits): those of
/// the transactions from the first one at or after `since` on (transaction ids grow with
/// time), found first through the index on transaction time, then summed over one range of
/// the (account, transaction) index with that id as a value (as a subquery PostgreSQL could
/// not estimate it, and read half the table), so the cost follows the recent postings, not
/// the account's whole history.
pub async fn credits_since(conn: &impl ConnectionTrait, book: Book, since: DateTime<Utc>) -> AppResult<i64> {
    let Some(account) = find_account_row(conn, &book.code()).await? else {
        return Ok(0);
    };
    let Some(first) = first_transaction_since(conn, since).await? else { return Ok(0) };
    let mut sql = Sql::new(conn.get_database_backend());
    let (account, first) = (sql.bind(account.id), sql.bind(first));
    let text = format!(
        "SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS total FROM ledger_postings \
         WHERE ledger_account_id = {account} AND amount_micros > 0 AND transaction_id >= {first}"
    );
    sum(conn, sql, text).await
}

/// What `renter` committed to rentals at or after `since` (the spend limits' measure): usage
/// charged to the wallet and reservations prepaid, less released holds and usage refunds
/// (automatic and admins'),
/// never below zero. Read like [`credits_since`]: one range of the wallet's postings.
pub async fn rental_spend_since(conn: &impl ConnectionTrait, renter: i64, since: DateTime<Utc>) -> AppResult<i64> {
    let Some(account) = find_account_row(conn, &Book::Wallet(renter).code()).await? else {
        return Ok(0);
    };
    let Some(first) = first_transaction_since(conn, since).await? else { return Ok(0) };
    let mut sql = Sql::new(conn.get_database_backend());
    let (account, first) = (sql.bind(account.id), sql.bind(first));
    let text = format!(
        "SELECT CAST(COALESCE(SUM(-p.amount_micros), 0) AS BIGINT) AS total FROM ledger_postings p \
         JOIN ledger_transactions t ON t.id = p.transaction_id \
         WHERE p.ledger_account_id = {account} AND p.transaction_id >= {first} \
         AND t.kind IN ('usage', 'hold', 'release', 'usage_refund', 'rental_refund')"
    );
    Ok(sum(conn, sql, text).await?.max(0))
}

/// The first transaction made at or after `since` (ids grow with time), through the index on
/// transaction time.
async fn first_transaction_since(conn: &impl ConnectionTrait, since: DateTime<Utc>) -> AppResult<Option<i64>> {
    ledger_transactions::Entity::find()
        .select_only()
        .column(ledger_transactions::Column::Id)
        .filter(ledger_transactions::Column::CreatedAt.gte(since))
        .order_by_asc(ledger_transactions::Column::CreatedAt)
        .order_by_asc(ledger_transactions::Column::Id)
        .limit(1)
        .into_tuple()
        .one(conn)
        .await
        .context("finding the window's first transaction")
}
