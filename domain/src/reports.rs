//! The platform's revenue and occupancy over time, as admins chart them: one bucket per UTC
//! day, ISO week (from Monday) or calendar month, money from the ledger and GPU-time from the
//! rentals' billed intervals and the hosts' status history.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// How wide one bucket of a report is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Period {
    #[default]
    Day,
    Week,
    Month,
}

impl Period {
    pub const ALL: [Period; 3] = [Period::Day, Period::Week, Period::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    pub fn parse(raw: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == raw)
    }

    /// How many buckets a report shows by default: 30 days, 12 weeks, 12 months.
    pub fn default_buckets(self) -> u32 {
        match self {
            Period::Day => 30,
            Period::Week => 12,
            Period::Month => 12,
        }
    }

    /// The start of the bucket holding `at`.
    pub fn floor(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let day = at.date_naive();
        let start = match self {
            Period::Day => day,
            Period::Week => day - Duration::days(i64::from(day.weekday().num_days_from_monday())),
            Period::Month => NaiveDate::from_ymd_opt(day.year(), day.month(), 1).unwrap_or(day),
        };
        Utc.from_utc_datetime(&start.and_hms_opt(0, 0, 0).unwrap_or_default())
    }

    /// The start of the bucket after the one starting at `start`.
    pub fn next(self, start: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Period::Day => start + Duration::days(1),
            Period::Week => start + Duration::weeks(1),
            Period::Month => start.checked_add_months(chrono::Months::new(1)).unwrap_or(start + Duration::days(31)),
        }
    }

    /// The bucket boundaries of the `buckets` buckets up to and including the one holding
    /// `now`: `buckets + 1` instants, oldest first.
    pub fn boundaries(self, now: DateTime<Utc>, buckets: u32) -> Vec<DateTime<Utc>> {
        let mut starts = vec![self.floor(now)];
        for _ in 1..buckets {
            let first = starts[0];
            let before = self.floor(first - Duration::seconds(1));
            starts.insert(0, before);
        }
        let last = self.next(*starts.last().unwrap_or(&now));
        starts.push(last);
        starts
    }
}

/// Which report: `period` (default `day`) and how many buckets back (default per period, at
/// most 366).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(default)]
pub struct ReportQuery {
    /// `day`, `week` or `month`.
    pub period: Option<String>,
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 366))]
    pub buckets: Option<u32>,
}

/// The most buckets one report may ask for.
pub const MAX_BUCKETS: u32 = 366;

/// One bucket of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReportBucket {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// What renters paid for GPU time (usage and reservations delivered), micro-dollars.
    pub gross_micros: i64,
    /// What was given back on rentals (billing corrections and admin refunds), micro-dollars.
    pub refunds_micros: i64,
    /// The platform's net take: its fees less what it paid for refunds, micro-dollars.
    pub fees_micros: i64,
    /// GPU-seconds billed to renters.
    pub rented_gpu_seconds: i64,
    /// GPU-seconds on hosts that were online.
    pub online_gpu_seconds: i64,
}

impl ReportBucket {
    /// Rented over online GPU-time, in basis points (0 when nothing was online).
    pub fn occupancy_bps(&self) -> i64 {
        if self.online_gpu_seconds <= 0 {
            return 0;
        }
        let bps = i128::from(self.rented_gpu_seconds) * 10_000 / i128::from(self.online_gpu_seconds);
        i64::try_from(bps).unwrap_or(i64::MAX).min(10_000)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Report {
    pub period: Period,
    /// Oldest first; the last one is the current, unfinished bucket.
    pub buckets: Vec<ReportBucket>,
}

impl Report {
    /// The buckets added up.
    pub fn totals(&self) -> ReportBucket {
        let mut total = ReportBucket::default();
        if let (Some(first), Some(last)) = (self.buckets.first(), self.buckets.last()) {
            total.start = first.start;
            total.end = last.end;
        }
        for b in &self.buckets {
            total.gross_micros += b.gross_micros;
            total.refunds_micros += b.refunds_micros;
            total.fees_micros += b.fees_micros;
            total.rented_gpu_seconds += b.rented_gpu_seconds;
            total.online_gpu_seconds += b.online_gpu_seconds;
        }
        total
    }
}

/// Seconds of `[from, to)` that fall inside `[start, end)`, counted on whole-second marks
/// (instants floored to the second), so splitting an interval at bucket boundaries (whole
/// seconds) loses nothing: the buckets' seconds add up to the interval's.
pub fn overlap_seconds(from: DateTime<Utc>, to: DateTime<Utc>, start: DateTime<Utc>, end: DateTime<Utc>) -> i64 {
    (to.min(end).timestamp() - from.max(start).timestamp()).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn buckets_start_on_days_mondays_and_firsts() {
        let now = at("2026-12-03T15:04:05Z"); // a Thursday
        assert_eq!(Period::Day.floor(now), at("2026-12-03T00:00:00Z"));
        assert_eq!(Period::Week.floor(now), at("2026-11-30T00:00:00Z"));
        assert_eq!(Period::Month.floor(now), at("2026-12-01T00:00:00Z"));
        assert_eq!(Period::Week.floor(at("2026-11-30T00:00:00Z")), at("2026-11-30T00:00:00Z"));
        let months = Period::Month.boundaries(now, 3);
        assert_eq!(
            months,
            vec![
                at("2026-10-01T00:00:00Z"),
                at("2026-11-01T00:00:00Z"),
                at("2026-12-01T00:00:00Z"),
                at("2027-01-01T00:00:00Z")
            ]
        );
        let days = Period::Day.boundaries(now, 30);
        assert_eq!(days.len(), 31);
        assert_eq!(days[0], at("2026-11-04T00:00:00Z"));
        assert_eq!(days[30], at("2026-12-04T00:00:00Z"));
        let weeks = Period::Week.boundaries(now, 2);
        assert_eq!(weeks, vec![at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z"), at("2026-12-07T00:00:00Z")]);
    }

    #[test]
    fn occupancy_is_rented_over_online() {
        let b = ReportBucket { rented_gpu_seconds: 3_600, online_gpu_seconds: 14_400, ..ReportBucket::default() };
        assert_eq!(b.occupancy_bps(), 2_500);
        assert_eq!(ReportBucket::default().occupancy_bps(), 0);
        assert_eq!(
            overlap_seconds(
                at("2026-12-01T23:00:00Z"),
                at("2026-12-02T01:00:00Z"),
                at("2026-12-02T00:00:00Z"),
                at("2026-12-03T00:00:00Z")
            ),
            3_600
        );
        assert_eq!(
            overlap_seconds(
                at("2026-12-04T00:00:00Z"),
                at("2026-12-05T00:00:00Z"),
                at("2026-12-02T00:00:00Z"),
                at("2026-12-03T00:00:00Z")
            ),
            0
        );
        // Split at midnight, the halves add up to the whole.
        let (from, to) = (at("2026-12-01T23:59:58.700Z"), at("2026-12-02T00:00:01.200Z"));
        let midnight = at("2026-12-02T00:00:00Z");
        let halves = overlap_seconds(from, to, at("2026-12-01T00:00:00Z"), midnight)
            + overlap_seconds(from, to, midnight, at("2026-12-03T00:00:00Z"));
        assert_eq!(halves, overlap_seconds(from, to, from, to));
    }
}
