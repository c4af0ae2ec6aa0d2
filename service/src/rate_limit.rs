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

    /// Counts an event for `key` if its budget allows, else says how long to wait.
    fn take(&mut self, key: K, now: Instant) -> Result<(), Duration> {
        if let Some(wait) = self.retry_after(&key, now) {
            return Err(wait);
        }
        self.record(key, now);
        Ok(())
    }

    fn clear(&mut self, key: &K) {
        self.events.remove(key);
    }
}

/// The sign-in throttle shared by every adapter.
pub struct SignInLimiter {
    /// Failures per (account, source).
    accounts: Mutex<Windows<(String, Option<IpAddr>)>>,
    /// Failures (and SSH attempts) per source.
    ips: Mutex<Windows<IpAddr>>,
    sign_ups: Mutex<Windows<IpAddr>>,
}

fn wait_of<K: Eq + Hash + Clone>(windows: &Mutex<Windows<K>>, key: &K, now: Instant) -> Option<Duration> {
    windows.lock().unwrap_or_else(|e| e.into_inner()).retry_after(key, now)
}

impl SignInLimiter {
    pub fn new(limits: SignInLimits) -> Self {
        SignInLimiter {
            accounts: Mutex::new(Windows::new(limits.per_account)),
            ips: Mutex::new(Windows::new(limits.per_ip)),
            sign_ups: Mutex::new(Windows::new(limits.sign_ups_per_ip)),
        }
    }

    /// Admits a sign-in attempt for `account` from `ip`, or says how long to wait. Only its
    /// failure counts ([`SignInLimiter::record_failure`]).
    pub fn admit(&self, account: &str, ip: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let account_wait = wait_of(&self.accounts, &(account.to_owned(), ip), now);
        let ip_wait = ip.and_then(|ip| wait_of(&self.ips, &ip, now));
        match account_wait.into_iter().chain(ip_wait).max() {
            Some(wait) => Err(wait),
            None => Ok(()),
        }
    }

    /// Admits an attempt from `ip` that names no account (an SSH login, which names a
    /// rental), counted against the address's budget only: nothing a stranger does locks
    /// anyone else out.
    pub fn admit_source(&self, ip: IpAddr) -> Result<(), Duration> {
        self.ips.lock().unwrap_or_else(|e| e.into_inner()).take(ip, Instant::now())
    }

    /// Admits and counts an account created from `ip`. This machine's own address is not
    /// limited: behind a local proxy that is not configured as trusted, every client would
    /// share it, and the site could take no more sign-ups.
    pub fn admit_sign_up(&self, ip: Option<IpAddr>) -> Result<(), Duration> {
        let Some(ip) = ip.filter(|ip| !ip.is_loopback()) else { return Ok(()) };
        self.sign_ups.lock().unwrap_or_else(|e| e.into_inner()).take(ip, Instant::now())
    }

    /// Counts a failed attempt against the account from that source, and against the source.
    pub fn record_failure(&self, account: &str, ip: Option<IpAddr>) {
        let now = Instant::now();
        self.accounts.lock().unwrap_or_else(|e| e.into_inner()).record((account.to_owned(), ip), now);
        if let Some(ip) = ip {
            self.ips.lock().unwrap_or_else(|e| e.into_inner()).record(ip, now);
        }
    }

    /// A correct password clears the account's failures from that source.
    pub fn record_success(&self, account: &str, ip: Option<IpAddr>) {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner()).clear(&(account.to_owned(), ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(account_max: u32, ip_max: u32) -> SignInLimiter {
        SignInLimiter::new(SignInLimits {
            per_account: Limit { max: account_max, window: Duration::from_secs(60) },
            per_ip: Limit { max: ip_max, window: Duration::from_secs(60) },
            sign_ups_per_ip: Limit { max: 2, window: Duration::from_secs(60) },
        })
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn an_attacker_locks_out_only_their_own_address() {
        let l = limiter(2, 100);
        let (attacker, owner) = (ip("203.0.113.9"), ip("198.51.100.4"));
        for _ in 0..2 {
            l.admit("a@x.io", attacker).unwrap();
            l.record_failure("a@x.io", attacker);
        }
        let wait = l.admit("a@x.io", attacker).unwrap_err();
        assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60));
        assert!(l.admit("a@x.io", owner).is_ok(), "the owner, elsewhere, is not locked out");
        assert!(l.admit("b@x.io", attacker).is_ok(), "other accounts are unaffected");
        l.record_success("a@x.io", attacker);
        assert!(l.admit("a@x.io", attacker).is_ok());
    }

    #[test]
    fn a_source_is_limited_by_its_failures_not_its_successes() {
        let l = limiter(100, 3);
        let office = ip("203.0.113.9");
        for n in 0..50 {
            l.admit(&format!("u{n}@x.io"), office).unwrap();
            l.record_success(&format!("u{n}@x.io"), office);
        }
        for n in 0..3 {
            l.admit(&format!("v{n}@x.io"), office).unwrap();
            l.record_failure(&format!("v{n}@x.io"), office);
        }
        assert!(l.admit("u9@x.io", office).is_err(), "spraying accounts runs out");
        assert!(l.admit("u9@x.io", ip("203.0.113.10")).is_ok());
    }

    #[test]
    fn ssh_logins_share_the_sources_budget_and_lock_out_no_account() {
        let l = limiter(1, 3);
        let source = ip("203.0.113.9");
        l.admit("victim@x.io", source).unwrap();
        l.record_failure("victim@x.io", source);
        l.admit_source(source.unwrap()).unwrap();
        l.admit_source(source.unwrap()).unwrap();
        assert!(l.admit_source(source.unwrap()).is_err(), "one budget per source, SSH and sign-in alike");
        assert!(l.admit("victim@x.io", ip("203.0.113.10")).is_ok(), "the account is not locked");
    }

    #[test]
    fn sign_ups_are_counted_per_source() {
        let l = limiter(1, 1);
        l.admit_sign_up(ip("203.0.113.9")).unwrap();
        l.admit_sign_up(ip("203.0.113.9")).unwrap();
        assert!(l.admit_sign_up(ip("203.0.113.9")).is_err());
        assert!(l.admit_sign_up(ip("203.0.113.10")).is_ok());
        for _ in 0..5 {
            assert!(l.admit_sign_up(ip("127.0.0.1")).is_ok());
        }
    }
}
