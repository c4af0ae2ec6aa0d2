//! Retention: one-minute rollups older than the configured days are deleted by a worker.

use crate::{AppResult, Services, db::DbResultExt, entities::gpu_rollups};
use chrono::{Duration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

/// Deletes rollups older than the retention period. Returns how many rows went.
pub async fn apply_retention(services: &Services) -> AppResult<u64> {
    let keep_days = services.settings.telemetry.retention_days.max(1);
    let cutoff = Utc::now() - Duration::days(i64::from(keep_days));
    Ok(gpu_rollups::Entity::delete_many()
        .filter(gpu_rollups::Column::Minute.lt(cutoff))
        .exec(&services.db)
        .await
        .context("deleting old rollups")?
        .rows_affected)
}
