//! The cost advisor's vocabulary: a job (how many GPUs for how long, by when, whether it can be
//! interrupted and how often it checkpoints) and the mix of reserved, on-demand and spot
//! capacity recommended for it on one offer, with the expected cost, its spread and the saving
//! against running it all on-demand.

use crate::{AppError, FieldErrors};
use serde::{Deserialize, Serialize};

/// The longest job the advisor plans, hours (a month).
pub const MAX_HOURS: u32 = 24 * 31;
/// The longest checkpoint interval, minutes.
pub const MAX_CHECKPOINT_MINUTES: u32 = 24 * 60;

/// A job to plan on one offer (a GPU model on a host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct AdviceRequest {
    pub host_id: i64,
    pub gpu_model: String,
    /// GPUs the job runs on at once.
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 64))]
    pub gpus: u32,
    /// How long the job runs on them without interruptions, hours.
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 744))]
    pub hours: u32,
    /// It must be done within this many hours from now (at least `hours`).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 744))]
    pub deadline_hours: u32,
    /// The job survives being stopped and restarted (spot may be used).
    #[serde(default)]
    pub interruptible: bool,
    /// How often it saves a checkpoint, minutes (work since the last one is lost on a stop).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 1440))]
    pub checkpoint_minutes: u32,
}

impl AdviceRequest {
    pub fn checked(&self) -> Result<(), AppError> {
        let mut fields = FieldErrors::new();
        if !(1..=64).contains(&self.gpus) {
            fields.insert("gpus".into(), "between 1 and 64 GPUs".into());
        }
        if !(1..=MAX_HOURS).contains(&self.hours) {
            fields.insert("hours".into(), format!("between 1 and {MAX_HOURS} hours"));
        }
        if self.deadline_hours < self.hours || self.deadline_hours > MAX_HOURS {
            fields.insert("deadline_hours".into(), format!("at least the job's hours, at most {MAX_HOURS}"));
        }
        if self.checkpoint_minutes > MAX_CHECKPOINT_MINUTES {
            fields.insert("checkpoint_minutes".into(), "at most 1440 minutes".into());
        }
        if self.gpu_model.trim().is_empty() || self.gpu_model.len() > 200 {
            fields.insert("gpu_model".into(), "the offer's GPU model".into());
        }
        if fields.is_empty() { Ok(()) } else { Err(AppError::invalid_fields(fields)) }
    }
}

/// The advisor's form on the booking page: every field a string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdviceForm {
    pub host_id: i64,
    pub gpu_model: String,
    pub gpus: String,
    pub hours: String,
    pub deadline_hours: String,
    /// A checkbox: present when ticked.
    #[serde(default)]
    pub interruptible: Option<String>,
    #[serde(default)]
    pub checkpoint_minutes: String,
}

impl AdviceForm {
    pub fn parse(&self) -> Result<AdviceRequest, AppError> {
        let mut fields = FieldErrors::new();
        let mut number = |raw: &str, name: &str, what: &str| {
            raw.trim().parse::<u32>().map_err(|_| fields.insert(name.into(), what.into())).unwrap_or(0)
        };
        let gpus = number(&self.gpus, "gpus", "a whole number of GPUs");
        let hours = number(&self.hours, "hours", "a whole number of hours");
        let deadline_hours = number(&self.deadline_hours, "deadline_hours", "a whole number of hours");
        let checkpoint_minutes = if self.checkpoint_minutes.trim().is_empty() {
            0
        } else {
            number(&self.checkpoint_minutes, "checkpoint_minutes", "a whole number of minutes")
        };
        if !fields.is_empty() {
            return Err(AppError::invalid_fields(fields));
        }
        let request = AdviceRequest {
            host_id: self.host_id,
            gpu_model: self.gpu_model.trim().to_owned(),
            gpus,
            hours,
            deadline_hours,
            interruptible: self.interruptible.is_some(),
            checkpoint_minutes,
        };
        request.checked()?;
        Ok(request)
    }
}

/// One part of the recommended mix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdvicePart {
    pub kind: crate::offers::RentalKind,
    /// Hours of the job's work done this way (on all its GPUs at once).
    pub hours: u32,
    /// Expected cost of this part, micro-dollars.
    pub expected_micros: i64,
    /// Why this part is booked this way.
    pub why: String,
}

/// The recommendation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Advice {
    pub parts: Vec<AdvicePart>,
    /// Expected cost of the whole mix, and a likely range (10th to 90th percentile of the
    /// spot price and of the preemptions), micro-dollars.
    pub expected_micros: i64,
    pub low_micros: i64,
    pub high_micros: i64,
    /// The same job all on-demand.
    pub all_on_demand_micros: i64,
    /// `all_on_demand_micros - expected_micros`.
    pub saving_micros: i64,
    /// Expected hours from start to done (preempted work redone included).
    pub expected_wall_hours_tenths: u32,
    /// What the advice was based on, sentence by sentence.
    pub basis: Vec<String>,
}
