//! Sign-in throttling, per account and per client IP.
//!
//! Per account we count *failed* attempts (a correct password resets the count), so a stranger
//! cannot lock out an owner who knows their password for longer than the window. Per IP we
//! count *every* attempt, which stops one address from spraying many accounts. Windows slide.
//!
//! The state is in memory: right for the one-binary deployment. With several replicas each
//! keeps its own counts, so the effective limit is multiplied by the replica count.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

/// A budget of `max` events per sliding `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub max: u32,
    pub window: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignInLimits {
    /// Failed attempts per account.
    pub per_account: Limit,
    /// Attempts of any outcome per client IP.
    pub per_ip: Limit,
}

impl Default for SignInLimits {
    fn default() -> Self {
        SignInLimits {
            per_account: Limit { max: 5, window: Duration::from_secs(15 * 60) },
            per_ip: Limit { max: 30, window: Duration::from_secs(5 * 60) },
        }
    }
}

/// Sliding-window counters keyed by `K`.
struct Windows<K> {
    limit: Limit,
    events: HashMap<K, VecDeque<Instant>>,
}

impl<K: Eq + Hash + Clone> Windows<K> {
    fn new(limit: Limit) -> Self {
        Windows { limit, events: HashMap::new() }
    }

    /// How long until `key` may try again, if it has used up its budget.
    fn retry_after(&mut self, key: &K, now: Instant) -> Option<Duration> {
        let window = self.limit.window;
        let queue = self.events.get_mut(key)?;
        while queue.front().is_some_and(|t| now.duration_since(*t) >= window) {
            queue.pop_front();
        }
        if queue.len() < self.limit.max as usize {
            return None;
        }
        queue.front().map(|oldest| window.saturating_sub(now.duration_since(*oldest)))
    }

    fn record(&mut self, key: K, now: Instant) {
        if self.events.len() > 10_000 {
            let window = self.limit.window;
            self.events.retain(|_, q| q.back().is_some_and(|t| now.duration_since(*t) < window));
        }
        self.events.entry(key).or_default().push_back(now);
    }

    fn clear(&mut self, key: &K) {
        self.events.remove(key);
    }
}

/// The sign-in throttle shared by every adapter.
pub struct SignInLimiter {
    accounts: Mutex<Windows<String>>,
    ips: Mutex<Windows<IpAddr>>,
}

impl SignInLimiter {
    pub fn new(limits: SignInLimits) -> Self {
        SignInLimiter {
            accounts: Mutex::new(Windows::new(limits.per_account)),
            ips: Mutex::new(Windows::new(limits.per_ip)),
        }
    }

    /// Admits an attempt for `account` from `ip`, or says how long to wait.
    /// An admitted attempt counts against the IP immediately.
    pub fn admit(&self, account: &str, ip: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let mut ips = self.ips.lock().unwrap_or_else(|e| e.into_inner());
        let account_wait =
            self.accounts.lock().unwrap_or_else(|e| e.into_inner()).retry_after(&account.to_owned(), now);
        let ip_wait = ip.and_then(|ip| ips.retry_after(&ip, now));
        if let Some(wait) = account_wait.into_iter().chain(ip_wait).max() {
            return Err(wait);
        }
        if let Some(ip) = ip {
            ips.record(ip, now);
        }
        Ok(())
    }

    /// Admits an attempt from `ip` that names no account (an SSH login, which names a
    /// rental), counted against the IP's budget only: nothing a stranger does locks anyone
    /// else out.
    pub fn admit_source(&self, ip: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        let mut ips = self.ips.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wait) = ips.retry_after(&ip, now) {
            return Err(wait);
        }
        ips.record(ip, now);
        Ok(())
    }

    /// Counts a failed attempt against the account.
    pub fn record_failure(&self, account: &str) {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner()).record(account.to_owned(), Instant::now());
    }

    /// A correct password clears the account's failures.
    pub fn record_success(&self, account: &str) {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner()).clear(&account.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(account_max: u32, ip_max: u32) -> SignInLimiter {
        SignInLimiter::new(SignInLimits {
            per_account: Limit { max: account_max, window: Duration::from_secs(60) },
            per_ip: Limit { max: ip_max, window: Duration::from_secs(60) },
        })
    }

    #[test]
    fn account_locks_after_failures_and_success_resets() {
        let l = limiter(2, 100);
        for _ in 0..2 {
            l.admit("a@x.io", None).unwrap();
            l.record_failure("a@x.io");
        }
        let wait = l.admit("a@x.io", None).unwrap_err();
        assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60));
        assert!(l.admit("b@x.io", None).is_ok(), "other accounts are unaffected");
        l.record_success("a@x.io");
        assert!(l.admit("a@x.io", None).is_ok());
    }

    #[test]
    fn ip_counts_every_attempt_across_accounts() {
        let l = limiter(100, 3);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        for n in 0..3 {
            l.admit(&format!("u{n}@x.io"), Some(ip)).unwrap();
        }
        assert!(l.admit("u9@x.io", Some(ip)).is_err());
        assert!(l.admit("u9@x.io", Some("203.0.113.10".parse().unwrap())).is_ok());
    }

    #[test]
    fn ssh_logins_share_the_sources_budget_and_lock_out_no_account() {
        let l = limiter(1, 3);
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        l.admit("victim@x.io", Some(ip)).unwrap();
        l.admit_source(ip).unwrap();
        l.admit_source(ip).unwrap();
        assert!(l.admit_source(ip).is_err(), "one budget per source, SSH and sign-in alike");
        assert!(l.admit("victim@x.io", Some("203.0.113.10".parse().unwrap())).is_ok(), "the account is not locked");
    }
}
