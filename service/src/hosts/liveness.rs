//! Liveness: a host is online while its agent is heard from. Each agent connection that says
//! hello takes its host over (`hosts.connection_id`), so with several replicas only the newest
//! connection's heartbeats and disconnect count; a host silent for the grace goes offline (the
//! leader's reaper), its rentals interrupted. A closed connection alone is not an outage.

use super::record_event;
use crate::{AppError, AppResult, Services, db::DbResultExt, entities::hosts};
use cardpool_domain::{host::HostStatus, telemetry::AlertKind};
use chrono::{Duration, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter,
    sea_query::{Expr, Query},
};
use std::collections::HashSet;

/// Which connection a heartbeat comes through.
#[derive(Debug, Clone, Copy)]
enum Through<'a> {
    /// Whichever (the host is heard from, never mind how: tests, tools).
    Any,
    /// A connection that has just said hello: it takes the host over.
    Claiming(&'a str),
    /// A connection heard from again: it counts only while it owns the host.
    Owner(&'a str),
}

/// Records that `host` was heard from now; an offline host comes back online.
pub async fn record_heartbeat(services: &Services, host: &hosts::Model) -> AppResult<()> {
    heard_from(services, host.id, Through::Any).await.map(|_| ())
}

/// Agent connection `connection` of `host` has said hello: from now on it owns the host (its
/// heartbeats and disconnect count, an older connection's no longer do), and the host is heard
/// from. A connection of the host elsewhere that no longer owns it is told to end (`bus`).
pub async fn connect_host(services: &Services, host: &hosts::Model, connection: &str) -> AppResult<()> {
    heard_from(services, host.id, Through::Claiming(connection)).await?;
    services.telemetry.alerts.forget(host.id);
    services.bus.tell(crate::bus::Note::Kick { host_id: host.id });
    Ok(())
}

/// A heartbeat through agent connection `connection`. `false` (and nothing recorded) when
/// another connection has taken the host over since: this one should end. `Unauthorized` when
/// the host has been revoked.
pub async fn record_connection_heartbeat(services: &Services, host_id: i64, connection: &str) -> AppResult<bool> {
    if heard_from(services, host_id, Through::Owner(connection)).await? {
        return Ok(true);
    }
    let revoked = hosts::Entity::find_by_id(host_id)
        .one(&services.db)
        .await
        .context("loading host")?
        .is_none_or(|h| h.revoked_at.is_some());
    if revoked { Err(AppError::Unauthorized) } else { Ok(false) }
}

/// Heartbeats through many connections, `(host, connection)`, in one statement: the hosts
/// whose beat counted, i.e. online, not revoked, and still owned by that connection. The rest
/// (a host coming back online, taken over, revoked) go through [`record_connection_heartbeat`]
/// one by one. Connection ids are unique to one connection of one host (`bus::connection_id`),
/// so matching ids and connections as two lists is matching them as pairs.
pub(super) async fn record_owned_heartbeats(services: &Services, beats: &[(i64, &str)]) -> AppResult<HashSet<i64>> {
    if beats.is_empty() {
        return Ok(HashSet::new());
    }
    let mut update = Query::update();
    update
        .table(hosts::Entity)
        .value(hosts::Column::LastHeartbeatAt, Utc::now())
        .and_where(hosts::Column::Id.is_in(beats.iter().map(|(id, _)| *id)))
        .and_where(hosts::Column::ConnectionId.is_in(beats.iter().map(|(_, connection)| *connection)))
        .and_where(hosts::Column::RevokedAt.is_null())
        .and_where(hosts::Column::Status.eq(HostStatus::Online.as_str()))
        .returning_col(hosts::Column::Id);
    let _turn = services.writes.turn().await;
    let rows = services.db.query_all(&update).await.context("recording heartbeats")?;
    rows.iter().map(|row| row.try_get::<i64>("", "id").context("reading heartbeat rows")).collect()
}

/// Whether `connection` still owns the host.
pub async fn owns_connection(services: &Services, host_id: i64, connection: &str) -> AppResult<bool> {
    Ok(hosts::Entity::find_by_id(host_id)
        .one(&services.db)
        .await
        .context("loading host")?
        .is_some_and(|h| h.connection_id.as_deref() == Some(connection)))
}

/// Whether some replica holds an agent connection of the host.
pub async fn is_connected_anywhere(services: &Services, host_id: i64) -> AppResult<bool> {
    Ok(hosts::Entity::find_by_id(host_id)
        .one(&services.db)
        .await
        .context("loading host")?
        .is_some_and(|h| h.connection_id.is_some()))
}

/// Agent connection `connection` closed: the host has no connection now, unless another one
/// owns it already. The host stays online through the offline grace (a blip is not an outage).
pub async fn disconnect_host(services: &Services, host_id: i64, connection: &str) -> AppResult<()> {
    hosts::Entity::update_many()
        .col_expr(hosts::Column::ConnectionId, Expr::value(Option::<String>::None))
        .filter(hosts::Column::Id.eq(host_id))
        .filter(hosts::Column::ConnectionId.eq(connection))
        .exec(&services.db)
        .await
        .context("recording agent disconnect")?;
    Ok(())
}

/// Returns `false` when the heartbeat came through a connection that does not own the host.
async fn heard_from(services: &Services, host_id: i64, through: Through<'_>) -> AppResult<bool> {
    let now = Utc::now();
    let owned_by = |update: sea_orm::UpdateMany<hosts::Entity>| match through {
        Through::Owner(connection) => update.filter(hosts::Column::ConnectionId.eq(connection)),
        Through::Any | Through::Claiming(_) => update,
    };
    // Nearly every heartbeat is from the owner of a host that is online already: one statement
    // for those, with no transaction around it (in the write turn on SQLite).
    if let Through::Owner(_) = through {
        let _turn = services.writes.turn().await;
        let beat = hosts::Entity::update_many().col_expr(hosts::Column::LastHeartbeatAt, Expr::value(now));
        let heard = owned_by(beat)
            .filter(hosts::Column::Id.eq(host_id))
            .filter(hosts::Column::RevokedAt.is_null())
            .filter(hosts::Column::Status.eq(HostStatus::Online.as_str()))
            .exec(&services.db)
            .await
            .context("recording heartbeat")?
            .rows_affected
            == 1;
        if heard {
            return Ok(true);
        }
    }
    let txn = services.begin_write().await.context("starting heartbeat")?;
    let mut online = hosts::Entity::update_many()
        .col_expr(hosts::Column::Status, Expr::value(HostStatus::Online.as_str()))
        .col_expr(hosts::Column::LastHeartbeatAt, Expr::value(now));
    if let Through::Claiming(connection) = through {
        online = online.col_expr(hosts::Column::ConnectionId, Expr::value(connection));
    }
    let came_online = owned_by(online)
        .filter(hosts::Column::Id.eq(host_id))
        .filter(hosts::Column::RevokedAt.is_null())
        .filter(hosts::Column::Status.ne(HostStatus::Online.as_str()))
        .exec(&txn)
        .await
        .context("marking host online")?
        .rows_affected
        == 1;
    let mut stock_change = None;
    let mut heard = true;
    if came_online {
        record_event(&txn, host_id, HostStatus::Online, "agent connected", now).await?;
        crate::alerts::resolve(&txn, AlertKind::HostOffline, host_id, None).await?;
        stock_change = Some(crate::stock::refresh_stock(&txn, host_id).await?);
    } else {
        let mut beat = hosts::Entity::update_many().col_expr(hosts::Column::LastHeartbeatAt, Expr::value(now));
        if let Through::Claiming(connection) = through {
            beat = beat.col_expr(hosts::Column::ConnectionId, Expr::value(connection));
        }
        heard = owned_by(beat)
            .filter(hosts::Column::Id.eq(host_id))
            .filter(hosts::Column::RevokedAt.is_null())
            .exec(&txn)
            .await
            .context("recording heartbeat")?
            .rows_affected
            == 1;
    }
    txn.commit().await.context("committing heartbeat")?;
    if let Some(change) = stock_change {
        change.published(services);
    }
    Ok(heard || !matches!(through, Through::Owner(_)))
}

/// Marks online hosts silent for longer than `grace` offline. Returns the ids it marked.
pub async fn mark_silent_hosts_offline(services: &Services, grace: std::time::Duration) -> AppResult<Vec<i64>> {
    let now = Utc::now();
    let cutoff = now - Duration::from_std(grace).unwrap_or(Duration::seconds(20));
    let silent: Vec<hosts::Model> = hosts::Entity::find()
        .filter(hosts::Column::Status.eq(HostStatus::Online.as_str()))
        .filter(hosts::Column::LastHeartbeatAt.lt(cutoff))
        .all(&services.db)
        .await
        .context("finding silent hosts")?;
    let mut marked = Vec::new();
    for host in silent {
        // How long it had been silent, and whether a replica still held its agent's
        // connection: a connected host going silent points at the server or the database
        // (heartbeats not recorded), not at the agent.
        let silent_ms = host.last_heartbeat_at.map(|at| (now - at).num_milliseconds());
        if set_offline(services, host.id, "missed heartbeats", cutoff).await? {
            tracing::info!(
                host.id = host.id,
                silent_ms,
                connected = host.connection_id.is_some(),
                "host silent past the offline grace"
            );
            marked.push(host.id);
        }
    }
    Ok(marked)
}

/// Moves an online host offline, recording why, if it has not been heard from since `cutoff`
/// (a heartbeat recorded after the sweep found it silent keeps it online). Returns whether it
/// was moved.
async fn set_offline(
    services: &Services,
    host_id: i64,
    reason: &str,
    cutoff: chrono::DateTime<Utc>,
) -> AppResult<bool> {
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting offline transition")?;
    let changed = hosts::Entity::update_many()
        .col_expr(hosts::Column::Status, Expr::value(HostStatus::Offline.as_str()))
        .filter(hosts::Column::Id.eq(host_id))
        .filter(hosts::Column::Status.eq(HostStatus::Online.as_str()))
        .filter(hosts::Column::LastHeartbeatAt.lt(cutoff))
        .exec(&txn)
        .await
        .context("marking host offline")?
        .rows_affected
        == 1;
    let mut stock_change = None;
    if changed {
        record_event(&txn, host_id, HostStatus::Offline, reason, now).await?;
        if let Some(host) = hosts::Entity::find_by_id(host_id).one(&txn).await.context("loading host")? {
            let notice = crate::notify::Notice::new(
                host.provider_id,
                cardpool_domain::notifications::EventKind::HostOffline,
                format!("Host {} is offline", host.hostname),
                format!("{} stopped answering ({reason}); its running rentals were interrupted.", host.hostname),
            )
            .data(serde_json::json!({ "host_id": host_id, "host_name": host.hostname, "reason": reason }));
            crate::notify::emit(&txn, notice, now).await?;
        }
        crate::alerts::raise(&txn, AlertKind::HostOffline, host_id, None, None, format!("host went offline: {reason}"))
            .await?;
        stock_change = Some(crate::stock::refresh_stock(&txn, host_id).await?);
    }
    txn.commit().await.context("committing offline transition")?;
    if let Some(change) = stock_change {
        change.published(services);
    }
    if changed {
        let last_heartbeat = hosts::Entity::find_by_id(host_id)
            .one(&services.db)
            .await
            .context("loading host")?
            .and_then(|h| h.last_heartbeat_at);
        crate::rentals::interrupt_host(services, host_id, last_heartbeat, "the host went offline").await?;
    }
    Ok(changed)
}
