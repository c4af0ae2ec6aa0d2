//! Who may see what: a [`Grant`] (from [`grant`]) says which hosts and GPUs a viewer may see
//! and when; a live feed holds one and re-checks it, with the viewer's sign-in, while it runs
//! ([`recheck`]), so a renter stops seeing a GPU when the rental ends and a feed ends when its
//! session signs out or its API token is revoked.

use super::hub::Published;
use crate::{
    AppError, AppResult, Services,
    auth::{self, Principal},
    db::DbResultExt,
    entities::{gpus, hosts, rental_gpus},
    rentals::{Audience, visible_rental},
};
use cardpool_domain::{
    rentals::RentalState,
    telemetry::{HostSample, LiveEvent, TelemetryScope},
};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
};

/// What one viewer may see: hosts, and per host all GPUs (`None`) or some, from a time on.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub scope: TelemetryScope,
    pub(super) hosts: GrantHosts,
    /// Nothing before this (a rental's own window).
    pub(super) since: Option<DateTime<Utc>>,
    /// Nothing after this (an ended rental).
    pub(super) until: Option<DateTime<Utc>>,
    /// A live feed may follow.
    pub live: bool,
}

/// The hosts a grant covers: every host (an admin's fleet view: nothing to list, so a fleet feed
/// stays small and its re-check cheap however large the fleet), or those listed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum GrantHosts {
    All,
    Listed(BTreeMap<i64, Option<BTreeSet<u32>>>),
}

impl Grant {
    /// The part of `published` this viewer may see, as the feed's JSON (the shared text itself
    /// when the viewer may see the whole frame: no copy per dashboard).
    pub fn admit<'p>(&self, published: &'p Published) -> Option<Cow<'p, str>> {
        match self.covers(&published.sample)? {
            None => Some(Cow::Borrowed(&published.json)),
            only => serde_json::to_string(&LiveEvent::Sample(restricted(&published.sample, only))).ok().map(Cow::Owned),
        }
    }

    pub(super) fn admits_sample(&self, sample: &HostSample) -> Option<HostSample> {
        self.covers(sample).map(|only| restricted(sample, only))
    }

    /// Whether this grant covers `sample` (its host, inside the time window), and if so which
    /// of its GPUs: `Some(None)` all of them, `Some(Some(indexes))` only those.
    fn covers(&self, sample: &HostSample) -> Option<Option<&BTreeSet<u32>>> {
        let gpus = match &self.hosts {
            GrantHosts::All => None,
            GrantHosts::Listed(hosts) => hosts.get(&sample.host_id)?.as_ref(),
        };
        let at = sample.at_ms;
        let in_window = self.since.is_none_or(|s| at >= s.timestamp_millis())
            && self.until.is_none_or(|u| at < u.timestamp_millis());
        in_window.then_some(gpus)
    }
}

/// `sample` with only the GPUs in `only` (all of them when `None`).
fn restricted(sample: &HostSample, only: Option<&BTreeSet<u32>>) -> HostSample {
    HostSample {
        gpus: sample.gpus.iter().filter(|g| only.is_none_or(|i| i.contains(&g.index))).cloned().collect(),
        ..sample.clone()
    }
}

/// Decides what `principal` may see of `scope`: a renter their rental's GPUs while it holds
/// them (and its own past window as history), a provider their hosts, an admin everything.
/// Anything else is "not found", so ids of other people's rentals and hosts reveal nothing.
pub async fn grant(services: &Services, principal: &Principal, scope: TelemetryScope) -> AppResult<Grant> {
    let mut listed = BTreeMap::new();
    let mut grant = Grant { scope, hosts: GrantHosts::All, since: None, until: None, live: true };
    match scope {
        TelemetryScope::Rental(id) => {
            let rental = visible_rental(services, principal, id, Audience::Renter).await?;
            let gpu_ids: Vec<i64> = rental_gpus::Entity::find()
                .filter(rental_gpus::Column::RentalId.eq(id))
                .all(&services.db)
                .await
                .context("loading rental gpus")?
                .into_iter()
                .map(|h| h.gpu_id)
                .collect();
            let indexes: BTreeSet<u32> = gpus::Entity::find()
                .filter(gpus::Column::Id.is_in(gpu_ids))
                .all(&services.db)
                .await
                .context("loading gpus")?
                .into_iter()
                .filter_map(|g| u32::try_from(g.device_index).ok())
                .collect();
            let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
            let holding = matches!(
                state,
                RentalState::Provisioning | RentalState::Running | RentalState::Stopping | RentalState::Preempting
            );
            listed.insert(rental.host_id, Some(indexes));
            grant.since = Some(rental.starts_at);
            grant.live = holding;
            if !holding {
                grant.until = Some(rental.ends_at.or(rental.billing_ends_at).unwrap_or(rental.starts_at));
            }
        }
        TelemetryScope::Host(id) => {
            let host = hosts::Entity::find_by_id(id)
                .one(&services.db)
                .await
                .context("loading host")?
                .filter(|h| h.provider_id == principal.user_id || principal.roles.admin)
                .ok_or_else(|| AppError::not_found("host"))?;
            listed.insert(host.id, None);
        }
        TelemetryScope::Mine => {
            let owned = hosts::Entity::find()
                .filter(hosts::Column::ProviderId.eq(principal.user_id))
                .filter(hosts::Column::RevokedAt.is_null())
                .all(&services.db)
                .await
                .context("loading hosts")?;
            listed.extend(owned.into_iter().map(|h| (h.id, None)));
        }
        TelemetryScope::Fleet => {
            principal.require_admin()?;
            return Ok(grant);
        }
    }
    grant.hosts = GrantHosts::Listed(listed);
    Ok(grant)
}

/// What a live feed's periodic re-check found.
#[derive(Debug)]
pub enum Recheck {
    /// Keep going, with the viewer's current roles and grant.
    Continue(Principal, Grant),
    /// End the feed, telling the viewer why.
    End(String),
    /// The check itself failed (a database hiccup): keep going and check again next time; that
    /// is no reason to cut a dashboard.
    Retry,
}

/// Re-checks a live feed's viewer and grant: the sign-in it came with must still be good
/// (`session`: the browser session's id, for session callers) and the grant still live.
pub async fn recheck(
    services: &Services,
    principal: &Principal,
    session: Option<tower_sessions::session::Id>,
    scope: TelemetryScope,
) -> Recheck {
    let principal = match auth::reauthenticate(services, principal, session).await {
        Ok(Some(principal)) => principal,
        Ok(None) => return Recheck::End("signed out: sign in again to keep watching".into()),
        Err(_) => return Recheck::Retry,
    };
    match grant(services, &principal, scope).await {
        Ok(grant) if grant.live => Recheck::Continue(principal, grant),
        _ => Recheck::End("this feed is no longer available (the rental ended?)".into()),
    }
}
