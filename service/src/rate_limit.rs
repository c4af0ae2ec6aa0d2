//! Sign-in and sign-up throttling, by account *and* source, so that nothing a stranger does can
//! lock someone else out.
//!
//! Failed sign-ins are counted per (account, client address): an attacker guessing a victim's
//! password from their own address runs out of tries there, while the owner, elsewhere, signs
//! in as usual (a correct password clears that pair's count). Failures are also counted per
//! address whichever account they name, which stops one address from spraying many accounts;
//! successful sign-ins do not count, so an office or a CI runner behind one address is never
//! refused for signing in often. Sign-ups are counted per address. Windows slide.
//!
//! The counts live in the database (`sign_in_throttle`: one row per counted event, keyed by a
//! digest of the account and address), so every replica of a cluster counts the same attempts
//! and a restart forgets none. Only refused-worthy events are written (failures, SSH attempts,
//! sign-ups); a sign-in that succeeds costs one read per budget.

use crate::{AppError, AppResult, db::DbResultExt, entities::sign_in_throttle as throttle, secrets::digest};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use std::{net::IpAddr, time::Duration};

/// A budget of `max` events per sliding `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub max: u32,
    pub window: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// Failed sign-ins per account from one client address.
    pub per_account: Limit,
    /// Failed sign-ins per client address, whichever accounts they name (and SSH logins).
    pub per_ip: Limit,
    /// Accounts created per client address.
    pub sign_ups_per_ip: Limit,
}

impl Default for SignInLimits {
    fn default() -> Self {
        SignInLimits {
            per_account: Limit { max: 5, window: Duration::from_secs(15 * 60) },
            per_ip: Limit { max: 30, window: Duration::from_secs(5 * 60) },
            sign_ups_per_ip: Limit { max: 10, window: Duration::from_secs(60 * 60) },
        }
    }
}

/// What a budget counts.
#[derive(Debug, Clone, Copy)]
enum Budget {
    /// Failures per (account, source).
    Account,
    /// Failures and SSH attempts per source.
    Source,
    SignUp,
}

impl Budget {
    fn as_str(self) -> &'static str {
        match self {
            Budget::Account => "account",
            Budget::Source => "source",
            Budget::SignUp => "sign_up",
        }
    }
}

fn account_key(account: &str, ip: Option<IpAddr>) -> String {
    digest(&format!("{account}\n{}", ip.map(|ip| ip.to_string()).unwrap_or_default()))
}

fn source_key(ip: IpAddr) -> String {
    digest(&ip.to_string())
}

fn limited(wait: Duration) -> AppError {
    AppError::RateLimited { retry_after_secs: wait.as_secs().max(1) }
}

/// The sign-in throttle shared by every adapter (and every replica).
pub struct SignInLimiter {
    db: DatabaseConnection,
    limits: SignInLimits,
}

impl SignInLimiter {
    pub fn new(db: DatabaseConnection, limits: SignInLimits) -> Self {
        SignInLimiter { db, limits }
    }

    fn limit(&self, budget: Budget) -> Limit {
        match budget {
            Budget::Account => self.limits.per_account,
            Budget::Source => self.limits.per_ip,
            Budget::SignUp => self.limits.sign_ups_per_ip,
        }
    }

    /// How long until `key` may try again, if it has used up its budget: the oldest event in
    /// the window has to leave it.
    async fn wait(&self, budget: Budget, key: &str) -> AppResult<Option<Duration>> {
        let limit = self.limit(budget);
        let window = chrono::Duration::from_std(limit.window).unwrap_or(chrono::Duration::hours(1));
        let now = Utc::now();
        let recent: Vec<chrono::DateTime<Utc>> = throttle::Entity::find()
            .select_only()
            .column(throttle::Column::At)
            .filter(throttle::Column::Budget.eq(budget.as_str()))
            .filter(throttle::Column::KeyDigest.eq(key))
            .filter(throttle::Column::At.gt(now - window))
            .order_by_asc(throttle::Column::At)
            .limit(u64::from(limit.max) + 1)
            .into_tuple()
            .all(&self.db)
            .await
            .context("reading sign-in throttle")?;
        if recent.len() < limit.max as usize {
            return Ok(None);
        }
        Ok(recent.first().map(|oldest| (*oldest + window - now).to_std().unwrap_or_default()))
    }

    /// Counts an event for `key`, and forgets its events that have left the window.
    async fn record(&self, budget: Budget, key: String) -> AppResult<()> {
        let window = chrono::Duration::from_std(self.limit(budget).window).unwrap_or(chrono::Duration::hours(1));
        let now = Utc::now();
        throttle::Entity::delete_many()
            .filter(throttle::Column::Budget.eq(budget.as_str()))
            .filter(throttle::Column::KeyDigest.eq(&key))
            .filter(throttle::Column::At.lte(now - window))
            .exec(&self.db)
            .await
            .context("pruning sign-in throttle")?;
        throttle::ActiveModel {
            budget: Set(budget.as_str().into()),
            key_digest: Set(key),
            at: Set(now),
            ..Default::default()
        }
        .insert(&self.db)
        .await
        .context("counting a sign-in attempt")?;
        Ok(())
    }

    /// Counts an event for `key` if its budget allows, else `RateLimited`.
    async fn take(&self, budget: Budget, key: String) -> AppResult<()> {
        if let Some(wait) = self.wait(budget, &key).await? {
            return Err(limited(wait));
        }
        self.record(budget, key).await
    }

    /// Admits a sign-in attempt for `account` from `ip`, or answers `RateLimited` with how long
    /// to wait. Only its failure counts ([`SignInLimiter::record_failure`]).
    pub async fn admit(&self, account: &str, ip: Option<IpAddr>) -> AppResult<()> {
        let account_wait = self.wait(Budget::Account, &account_key(account, ip)).await?;
        let ip_wait = match ip {
            Some(ip) => self.wait(Budget::Source, &source_key(ip)).await?,
            None => None,
        };
        match account_wait.into_iter().chain(ip_wait).max() {
            Some(wait) => Err(limited(wait)),
            None => Ok(()),
        }
    }

    /// Admits an attempt from `ip` that names no account (an SSH login, which names a
    /// rental), counted against the address's budget only: nothing a stranger does locks
    /// anyone else out.
    pub async fn admit_source(&self, ip: IpAddr) -> AppResult<()> {
        self.take(Budget::Source, source_key(ip)).await
    }

    /// Admits and counts an account created from `ip`. This machine's own address is not
    /// limited: behind a local proxy that is not configured as trusted, every client would
    /// share it, and the site could take no more sign-ups.
    pub async fn admit_sign_up(&self, ip: Option<IpAddr>) -> AppResult<()> {
        let Some(ip) = ip.filter(|ip| !ip.is_loopback()) else { return Ok(()) };
        self.take(Budget::SignUp, source_key(ip)).await
    }

    /// Counts a failed attempt against the account from that source, and against the source.
    pub async fn record_failure(&self, account: &str, ip: Option<IpAddr>) -> AppResult<()> {
        self.record(Budget::Account, account_key(account, ip)).await?;
        if let Some(ip) = ip {
            self.record(Budget::Source, source_key(ip)).await?;
        }
        Ok(())
    }

    /// A correct password clears the account's failures from that source.
    pub async fn record_success(&self, account: &str, ip: Option<IpAddr>) -> AppResult<()> {
        throttle::Entity::delete_many()
            .filter(throttle::Column::Budget.eq(Budget::Account.as_str()))
            .filter(throttle::Column::KeyDigest.eq(account_key(account, ip)))
            .exec(&self.db)
            .await
            .context("clearing sign-in failures")?;
        Ok(())
    }

    /// Forgets every event older than the longest window (keys never seen again keep rows
    /// otherwise). Returns how many went.
    pub async fn sweep(&self) -> AppResult<u64> {
        let longest = [self.limits.per_account, self.limits.per_ip, self.limits.sign_ups_per_ip]
            .iter()
            .map(|l| l.window)
            .max()
            .unwrap_or_default();
        let cutoff = Utc::now() - chrono::Duration::from_std(longest).unwrap_or(chrono::Duration::hours(1));
        Ok(throttle::Entity::delete_many()
            .filter(throttle::Column::At.lte(cutoff))
            .exec(&self.db)
            .await
            .context("sweeping sign-in throttle")?
            .rows_affected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, Backend};

    crate::backend_tests!(
        an_attacker_locks_out_only_their_own_address,
        a_source_is_limited_by_its_failures_not_its_successes,
        ssh_logins_share_the_sources_budget_and_lock_out_no_account,
        sign_ups_are_counted_per_source_and_two_replicas_share_the_counts,
    );

    async fn limiter(backend: Backend, account_max: u32, ip_max: u32) -> (testing::TestDb, SignInLimiter) {
        let db = testing::TestDb::new(backend).await;
        let conn = db.connect().await;
        let limits = SignInLimits {
            per_account: Limit { max: account_max, window: Duration::from_secs(60) },
            per_ip: Limit { max: ip_max, window: Duration::from_secs(60) },
            sign_ups_per_ip: Limit { max: 2, window: Duration::from_secs(60) },
        };
        (db, SignInLimiter::new(conn, limits))
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    fn wait_of(result: AppResult<()>) -> u64 {
        match result {
            Err(AppError::RateLimited { retry_after_secs }) => retry_after_secs,
            other => panic!("expected RateLimited, got {other:?}"),
        }
    }

    async fn an_attacker_locks_out_only_their_own_address(backend: Backend) {
        let (_db, l) = limiter(backend, 2, 100).await;
        let (attacker, owner) = (ip("203.0.113.9"), ip("198.51.100.4"));
        for _ in 0..2 {
            l.admit("a@x.io", attacker).await.unwrap();
            l.record_failure("a@x.io", attacker).await.unwrap();
        }
        let wait = wait_of(l.admit("a@x.io", attacker).await);
        assert!((50..=60).contains(&wait), "{wait}");
        assert!(l.admit("a@x.io", owner).await.is_ok(), "the owner, elsewhere, is not locked out");
        assert!(l.admit("b@x.io", attacker).await.is_ok(), "other accounts are unaffected");
        l.record_success("a@x.io", attacker).await.unwrap();
        assert!(l.admit("a@x.io", attacker).await.is_ok());
    }

    async fn a_source_is_limited_by_its_failures_not_its_successes(backend: Backend) {
        let (_db, l) = limiter(backend, 100, 3).await;
        let office = ip("203.0.113.9");
        for n in 0..20 {
            l.admit(&format!("u{n}@x.io"), office).await.unwrap();
            l.record_success(&format!("u{n}@x.io"), office).await.unwrap();
        }
        for n in 0..3 {
            l.admit(&format!("v{n}@x.io"), office).await.unwrap();
            l.record_failure(&format!("v{n}@x.io"), office).await.unwrap();
        }
        assert!(l.admit("u9@x.io", office).await.is_err(), "spraying accounts runs out");
        assert!(l.admit("u9@x.io", ip("203.0.113.10")).await.is_ok());
    }

    async fn ssh_logins_share_the_sources_budget_and_lock_out_no_account(backend: Backend) {
        let (_db, l) = limiter(backend, 1, 3).await;
        let source = ip("203.0.113.9");
        l.admit("victim@x.io", source).await.unwrap();
        l.record_failure("victim@x.io", source).await.unwrap();
        l.admit_source(source.unwrap()).await.unwrap();
        l.admit_source(source.unwrap()).await.unwrap();
        assert!(l.admit_source(source.unwrap()).await.is_err(), "one budget per source, SSH and sign-in alike");
        assert!(l.admit("victim@x.io", ip("203.0.113.10")).await.is_ok(), "the account is not locked");
    }

    /// Two limiters over one database (two replicas) count the same sign-ups; old events are
    /// swept.
    async fn sign_ups_are_counted_per_source_and_two_replicas_share_the_counts(backend: Backend) {
        let (db, a) = limiter(backend, 1, 1).await;
        let b = SignInLimiter::new(db.connect().await, a.limits);
        a.admit_sign_up(ip("203.0.113.9")).await.unwrap();
        b.admit_sign_up(ip("203.0.113.9")).await.unwrap();
        assert!(a.admit_sign_up(ip("203.0.113.9")).await.is_err());
        assert!(b.admit_sign_up(ip("203.0.113.9")).await.is_err(), "the other replica counts them too");
        assert!(b.admit_sign_up(ip("203.0.113.10")).await.is_ok());
        for _ in 0..5 {
            assert!(a.admit_sign_up(ip("127.0.0.1")).await.is_ok());
        }
        assert_eq!(a.sweep().await.unwrap(), 0, "nothing is older than the window yet");
    }
}
