//! What a host's agent must do now (attach, preemption notice, detach, carve a MIG layout),
//! derived from the database each time, so the agent's handling can be idempotent and nothing is queued.

use super::state::{LIVE, names};
use crate::{
    AppResult, Services,
    db::DbResultExt,
    entities::{gpus, rental_gpus, rentals},
};
use cardpool_domain::{
    offers::profile_sevenths,
    rentals::{RentalState, Workload},
};
use cardpool_protocol::{AttachSpec, ServerMessage};
use chrono::{Duration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::collections::{HashMap, HashSet};

/// What the host's agent must do now, given the rentals it says it runs (`None`: unknown).
/// Sent on connect, on every change and periodically; the agent's handling is idempotent.
pub async fn commands_for_host(
    services: &Services,
    host_id: i64,
    running_on_agent: Option<&[i64]>,
) -> AppResult<Vec<ServerMessage>> {
    let live = live_of(services, &[host_id]).await?.remove(&host_id).unwrap_or_default();
    let layouts =
        crate::hosts::layout_commands_of(&services.db, &[host_id]).await?.remove(&host_id).unwrap_or_default();
    commands_from(services, running_on_agent, live, layouts).await
}

/// Heartbeats' answers, `(host, rentals its agent runs)` each, in order: rentals whose
/// workload vanished from the agent's list fail ([`super::reconcile_running`]), then what the
/// agent must do now. Every host's live rentals and pending layouts are read in one query
/// each for the whole batch: at thousands of agents heartbeats are most of the gateway's work.
pub(crate) async fn answer_heartbeats(
    services: &Services,
    beats: &[(i64, &[i64])],
) -> AppResult<Vec<AppResult<Vec<ServerMessage>>>> {
    if beats.is_empty() {
        return Ok(Vec::new());
    }
    let hosts: Vec<i64> = beats.iter().map(|(host, _)| *host).collect();
    let live = live_of(services, &hosts).await?;
    let layouts = crate::hosts::layout_commands_of(&services.db, &hosts).await?;
    let mut answers = Vec::with_capacity(beats.len());
    // A host may beat twice in one batch (an old connection's last beat): each answer gets all.
    for &(host_id, running_on_agent) in beats {
        let mut here = live.get(&host_id).cloned().unwrap_or_default();
        let layouts = layouts.get(&host_id).cloned().unwrap_or_default();
        let answer = async {
            let vanished = super::lifecycle::reconcile_loaded(services, host_id, running_on_agent, &here).await?;
            here.retain(|r| !vanished.contains(&r.id));
            commands_from(services, Some(running_on_agent), here, layouts).await
        };
        answers.push(answer.await);
    }
    Ok(answers)
}

/// The live rentals of each of `hosts`.
async fn live_of(services: &Services, hosts: &[i64]) -> AppResult<HashMap<i64, Vec<rentals::Model>>> {
    let mut live: HashMap<i64, Vec<rentals::Model>> = HashMap::new();
    for rental in rentals::Entity::find()
        .filter(rentals::Column::HostId.is_in(hosts.iter().copied()))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .all(&services.db)
        .await
        .context("loading host rentals")?
    {
        live.entry(rental.host_id).or_default().push(rental);
    }
    Ok(live)
}

async fn commands_from(
    services: &Services,
    running_on_agent: Option<&[i64]>,
    live: Vec<rentals::Model>,
    layouts: Vec<ServerMessage>,
) -> AppResult<Vec<ServerMessage>> {
    let now = Utc::now();
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    let mut commands = Vec::new();
    // Attaching, and running gang members too: an attach the agent already runs only updates
    // its gang's peers (a replacement member's address), so it is repeated for them.
    let attaching: Vec<&rentals::Model> = live
        .iter()
        .filter(|r| {
            (r.state == RentalState::Requested.as_str()
                || r.state == RentalState::Provisioning.as_str()
                || (r.state == RentalState::Running.as_str() && r.gang_id.is_some()))
                && r.starts_at <= now
        })
        .collect();
    // Most heartbeats find nothing to attach: no queries for GPUs then (this runs on every one).
    let (held, devices) = if attaching.is_empty() {
        (Vec::new(), HashMap::new())
    } else {
        let held = rental_gpus::Entity::find()
            .filter(rental_gpus::Column::RentalId.is_in(attaching.iter().map(|r| r.id)))
            .all(&services.db)
            .await
            .context("loading held gpus")?;
        let devices: HashMap<i64, gpus::Model> = gpus::Entity::find()
            .filter(gpus::Column::Id.is_in(held.iter().map(|h| h.gpu_id)))
            .all(&services.db)
            .await
            .context("loading gpus")?
            .into_iter()
            .map(|g| (g.id, g))
            .collect();
        (held, devices)
    };
    for rental in attaching {
        let mut mine: Vec<&gpus::Model> =
            held.iter().filter(|h| h.rental_id == rental.id).filter_map(|h| devices.get(&h.gpu_id)).collect();
        mine.sort_by_key(|g| (g.device_index, g.slot_from));
        let workload: Workload = serde_json::from_str(&rental.workload).unwrap_or_default();
        let (gang_env, gang) = super::gangs::rendezvous(&services.db, rental).await?.unzip();
        let mut env = workload.env;
        env.extend(gang_env.into_iter().flatten());
        commands.push(ServerMessage::Attach(AttachSpec {
            rental_id: rental.id,
            gpu_indexes: mine.iter().map(|g| u32::try_from(g.device_index).unwrap_or(0)).collect(),
            gpu_uuids: mine.iter().map(|g| g.uuid.clone()).collect(),
            command: workload.command.filter(|c| !c.trim().is_empty()),
            image: workload.image.filter(|i| !i.trim().is_empty()),
            env,
            ssh_public_key: workload.ssh_public_key.filter(|k| !k.trim().is_empty()),
            share_sevenths: Some(mine.iter().map(|g| g.mig_profile.as_deref().map_or(7, profile_sevenths)).sum()),
            gang,
        }));
    }
    for rental in &live {
        if rental.state == RentalState::Preempting.as_str() {
            let deadline = rental.notice_given_at.unwrap_or(now) + notice;
            let grace = (deadline - now).num_seconds().max(0);
            commands.push(ServerMessage::PreemptNotice { rental_id: rental.id, grace_secs: grace as u64 });
        } else if rental.state == RentalState::Stopping.as_str() {
            commands.push(ServerMessage::Detach { rental_id: rental.id });
        }
    }
    commands.extend(layouts);
    if let Some(running) = running_on_agent {
        let known: HashSet<i64> = live.iter().map(|r| r.id).collect();
        for id in running.iter().filter(|id| !known.contains(id)) {
            commands.push(ServerMessage::Detach { rental_id: *id });
        }
    }
    Ok(commands)
}
