//! The ledger's audit: its invariants checked from the postings up, as aggregates the
//! database computes, so the hourly check's memory stays flat however many postings there are.

use super::history::{MAX_ENTRIES, sum};
use crate::{
    AppResult,
    db::{DbResultExt, Sql},
    entities::{ledger_accounts, ledger_transactions},
};
use sea_orm::{ConnectionTrait, EntityTrait, FromQueryResult, PaginatorTrait, Statement};

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
