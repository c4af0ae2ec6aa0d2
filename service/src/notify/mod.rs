//! Telling people what happened: one [`emit`] per event, inside the transaction of the change
//! it tells of, writes the notification (the bell) and a pending delivery for each of the
//! account's webhooks. So an event is told exactly when its change commits, never lost to a
//! crash after it, and never twice (`dedupe_key`). Delivery happens later, retried until the
//! receiver answers 2xx (see `delivery`).

use crate::{AppError, AppResult, Services, auth::Principal, db::DbResultExt, entities::*};
use cardpool_domain::notifications::{
    DeliveryState, EventKind, Notification, NotificationPage, PAGE_SIZE, WebhookEvent,
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, OnConflict},
};

pub mod delivery;
pub mod webhooks;

/// One thing to tell one account.
#[derive(Debug, Clone)]
pub struct Notice {
    pub user_id: i64,
    pub kind: EventKind,
    pub rental_id: Option<i64>,
    pub title: String,
    pub body: String,
    /// The details a webhook receives under `data`.
    pub data: serde_json::Value,
    /// The same key is never told twice to one account (e.g. `limit-warning:daily:2026-12-03`).
    pub dedupe_key: Option<String>,
}

impl Notice {
    pub fn new(user_id: i64, kind: EventKind, title: impl Into<String>, body: impl Into<String>) -> Self {
        Notice {
            user_id,
            kind,
            rental_id: None,
            title: title.into(),
            body: body.into(),
            data: serde_json::json!({}),
            dedupe_key: None,
        }
    }

    pub fn rental(mut self, rental_id: i64) -> Self {
        self.rental_id = Some(rental_id);
        self
    }

    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = data;
        self
    }

    pub fn once(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }
}

/// Records `notice` inside `conn` (the caller's transaction) with a delivery per live webhook
/// of the account. Returns the notification's id, or `None` when its dedupe key was told
/// already.
pub async fn emit(conn: &impl ConnectionTrait, notice: Notice, now: DateTime<Utc>) -> AppResult<Option<i64>> {
    emit_to(conn, notice, now, None).await
}

/// [`emit`], to the one webhook `only` when given (a test event, which the bell shows read).
pub(crate) async fn emit_to(
    conn: &impl ConnectionTrait,
    notice: Notice,
    now: DateTime<Utc>,
    only: Option<i64>,
) -> AppResult<Option<i64>> {
    let mut data = notice.data;
    if let (Some(id), Some(map)) = (notice.rental_id, data.as_object_mut()) {
        map.entry("rental_id").or_insert(id.into());
    }
    let row = notifications::ActiveModel {
        user_id: Set(notice.user_id),
        event: Set(notice.kind.as_str().into()),
        rental_id: Set(notice.rental_id),
        title: Set(notice.title.clone()),
        body: Set(notice.body.clone()),
        data: Set(data.to_string()),
        dedupe_key: Set(notice.dedupe_key.clone()),
        created_at: Set(now),
        read_at: Set(only.map(|_| now)),
        ..Default::default()
    };
    let id = match &notice.dedupe_key {
        Some(key) => {
            // Another settlement may tell the same thing at the same moment: the unique index
            // keeps one, and this insert then does nothing.
            let inserted = notifications::Entity::insert(row)
                .on_conflict(
                    OnConflict::columns([notifications::Column::UserId, notifications::Column::DedupeKey])
                        .do_nothing()
                        .to_owned(),
                )
                .exec_without_returning(conn)
                .await
                .context("recording notification")?;
            if inserted == 0 {
                return Ok(None);
            }
            notifications::Entity::find()
                .select_only()
                .column(notifications::Column::Id)
                .filter(notifications::Column::UserId.eq(notice.user_id))
                .filter(notifications::Column::DedupeKey.eq(key))
                .into_tuple::<i64>()
                .one(conn)
                .await
                .context("finding notification")?
                .ok_or(AppError::Internal)?
        }
        None => notifications::Entity::insert(row).exec(conn).await.context("recording notification")?.last_insert_id,
    };
    let mut hooks: Vec<i64> = webhooks::live_ids(conn, notice.user_id).await?;
    if let Some(only) = only {
        hooks.retain(|id| *id == only);
    }
    if !hooks.is_empty() {
        let payload = serde_json::to_string(&WebhookEvent {
            id: format!("evt_{id}"),
            kind: notice.kind,
            created_at: now,
            title: notice.title,
            body: notice.body,
            data,
        })
        .map_err(|_| AppError::Internal)?;
        let rows = hooks.into_iter().map(|webhook_id| webhook_deliveries::ActiveModel {
            webhook_id: Set(webhook_id),
            notification_id: Set(id),
            event: Set(notice.kind.as_str().into()),
            payload: Set(payload.clone()),
            state: Set(DeliveryState::Pending.as_str().into()),
            attempts: Set(0),
            next_attempt_at: Set(Some(now)),
            last_status: Set(None),
            last_error: Set(None),
            created_at: Set(now),
            delivered_at: Set(None),
            ..Default::default()
        });
        webhook_deliveries::Entity::insert_many(rows)
            .exec_without_returning(conn)
            .await
            .context("queueing webhook deliveries")?;
    }
    Ok(Some(id))
}

fn dto(row: notifications::Model) -> Notification {
    Notification {
        id: row.id,
        event: EventKind::parse(&row.event).unwrap_or(EventKind::Test),
        title: row.title,
        body: row.body,
        rental_id: row.rental_id,
        created_at: row.created_at,
        read: row.read_at.is_some(),
    }
}

async fn unread(services: &Services, user_id: i64) -> AppResult<u64> {
    notifications::Entity::find()
        .filter(notifications::Column::UserId.eq(user_id))
        .filter(notifications::Column::ReadAt.is_null())
        .count(&services.db)
        .await
        .context("counting unread notifications")
}

/// The caller's notifications, newest first: a page of [`PAGE_SIZE`] older than `before`.
pub async fn list(services: &Services, principal: &Principal, before: Option<i64>) -> AppResult<NotificationPage> {
    let mut query = notifications::Entity::find()
        .filter(notifications::Column::UserId.eq(principal.user_id))
        .order_by_desc(notifications::Column::Id)
        .limit(PAGE_SIZE + 1);
    if let Some(before) = before {
        query = query.filter(notifications::Column::Id.lt(before));
    }
    let mut rows = query.all(&services.db).await.context("loading notifications")?;
    let more = rows.len() as u64 > PAGE_SIZE;
    rows.truncate(PAGE_SIZE as usize);
    let next_before = if more { rows.last().map(|r| r.id) } else { None };
    Ok(NotificationPage {
        items: rows.into_iter().map(dto).collect(),
        unread: unread(services, principal.user_id).await?,
        next_before,
    })
}

/// How many of the caller's notifications are unread (the bell's badge).
pub async fn unread_count(services: &Services, principal: &Principal) -> AppResult<u64> {
    unread(services, principal.user_id).await
}

/// Marks the caller's notifications read: those up to and including `up_to` (the newest the
/// caller has seen), or all of them. Returns how many were unread.
pub async fn mark_read(services: &Services, principal: &Principal, up_to: Option<i64>) -> AppResult<u64> {
    let mut update = notifications::Entity::update_many()
        .col_expr(notifications::Column::ReadAt, Expr::value(Utc::now()))
        .filter(notifications::Column::UserId.eq(principal.user_id))
        .filter(notifications::Column::ReadAt.is_null());
    if let Some(up_to) = up_to {
        update = update.filter(notifications::Column::Id.lte(up_to));
    }
    Ok(update.exec(&services.db).await.context("marking notifications read")?.rows_affected)
}

/// How long read notifications are kept, days, and finished deliveries (delivered or given up).
pub const KEEP_READ_DAYS: i64 = 90;
pub const KEEP_DELIVERIES_DAYS: i64 = 30;

/// Deletes finished deliveries older than [`KEEP_DELIVERIES_DAYS`] and read notifications older
/// than [`KEEP_READ_DAYS`] (with whatever deliveries still name them), so neither table grows
/// without end. Unread notifications are kept until read. Returns how many rows went.
pub async fn apply_retention(services: &Services) -> AppResult<u64> {
    let now = Utc::now();
    let finished = [DeliveryState::Delivered.as_str(), DeliveryState::Failed.as_str()];
    let mut deleted = webhook_deliveries::Entity::delete_many()
        .filter(webhook_deliveries::Column::State.is_in(finished))
        .filter(webhook_deliveries::Column::CreatedAt.lt(now - chrono::Duration::days(KEEP_DELIVERIES_DAYS)))
        .exec(&services.db)
        .await
        .context("deleting old deliveries")?
        .rows_affected;
    let old_read = notifications::Entity::find()
        .select_only()
        .column(notifications::Column::Id)
        .filter(notifications::Column::ReadAt.lt(now - chrono::Duration::days(KEEP_READ_DAYS)))
        .limit(10_000)
        .into_tuple::<i64>()
        .all(&services.db)
        .await
        .context("finding old notifications")?;
    if !old_read.is_empty() {
        let txn = services.begin_write().await.context("starting notification retention")?;
        deleted += webhook_deliveries::Entity::delete_many()
            .filter(webhook_deliveries::Column::NotificationId.is_in(old_read.iter().copied()))
            .exec(&txn)
            .await
            .context("deleting their deliveries")?
            .rows_affected;
        deleted += notifications::Entity::delete_many()
            .filter(notifications::Column::Id.is_in(old_read))
            .exec(&txn)
            .await
            .context("deleting old notifications")?
            .rows_affected;
        txn.commit().await.context("committing notification retention")?;
    }
    Ok(deleted)
}
