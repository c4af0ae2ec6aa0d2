//! Marketplace offers: what renters search, and how they filter and sort.
//!
//! An offer is one GPU model on one listed, online host, with the GPUs of that model that are
//! free right now. Filters travel in the page's query string, so a search is a shareable URL.
//!
//! The unit of sale is a whole GPU or a MIG slice of one. A slice offer's `gpu_model` names
//! the unit ([`slice_unit`]: `H100-80GB MIG 1g.10gb`) and carries its `mig_profile`, so prices,
//! bookings and rentals name what was sold in one string, and a search can ask for either.

use serde::{Deserialize, Serialize};

/// The kinds of rental a price applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RentalKind {
    #[default]
    OnDemand,
    Reserved,
    Spot,
}

impl RentalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RentalKind::OnDemand => "on_demand",
            RentalKind::Reserved => "reserved",
            RentalKind::Spot => "spot",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [RentalKind::OnDemand, RentalKind::Reserved, RentalKind::Spot].into_iter().find(|k| k.as_str() == raw)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OfferSort {
    /// Cheapest GPU-hour first (for the chosen rental kind).
    #[default]
    Price,
    /// Cheapest per GiB of GPU memory first.
    PricePerVram,
    /// Most free GPUs first.
    Availability,
}

impl OfferSort {
    pub fn as_str(self) -> &'static str {
        match self {
            OfferSort::Price => "price",
            OfferSort::PricePerVram => "price_per_vram",
            OfferSort::Availability => "availability",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [OfferSort::Price, OfferSort::PricePerVram, OfferSort::Availability].into_iter().find(|s| s.as_str() == raw)
    }
}

/// Whole GPUs or MIG slices, in a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OfferUnit {
    /// Whole GPUs only.
    Gpu,
    /// MIG slices only.
    Slice,
}

impl OfferUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            OfferUnit::Gpu => "gpu",
            OfferUnit::Slice => "slice",
        }
    }
}

/// The name a MIG slice is sold under: its GPU's model and its profile.
pub fn slice_unit(gpu_model: &str, profile: &str) -> String {
    format!("{gpu_model} MIG {profile}")
}

/// A MIG profile's compute slices out of a GPU's seven (`3g.40gb` → 3; 1 when the name does
/// not say): a slice's share of its GPU's power, and of its host's CPU and memory.
pub fn profile_sevenths(profile: &str) -> u32 {
    profile.split_once('g').and_then(|(n, _)| n.parse::<u32>().ok()).unwrap_or(1).clamp(1, 7)
}

/// The MIG profile of a unit named by [`slice_unit`] (`None` for a whole GPU's model).
pub fn slice_profile(unit: &str) -> Option<&str> {
    unit.rsplit_once(" MIG ").map(|(_, profile)| profile).filter(|p| !p.is_empty() && !p.contains(' '))
}

/// The longest MIG profile name a host may report (`7g.141gb` is 8).
pub const MAX_MIG_PROFILE_LEN: usize = 32;

/// Search filters, as they appear in the query string (all optional: an absent filter means
/// "any"; a filter given empty is malformed, like any value the document does not allow).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(default)]
pub struct OfferQuery {
    /// Exact GPU model, e.g. "NVIDIA H100 80GB HBM3".
    pub gpu_model: Option<String>,
    /// At least this many free GPUs on the host.
    #[serde(deserialize_with = "lenient::number")]
    #[cfg_attr(feature = "openapi", param(maximum = 64))]
    pub min_gpus: Option<u32>,
    /// At least this much memory per GPU, GiB.
    #[serde(deserialize_with = "lenient::number")]
    #[cfg_attr(feature = "openapi", param(maximum = 4096))]
    pub min_vram_gib: Option<u32>,
    /// At most this price per GPU-hour for the chosen kind, dollars (e.g. "2.50").
    pub max_price: Option<String>,
    /// Which price the price filter and sort use: on_demand (default), reserved or spot.
    #[serde(deserialize_with = "lenient::choice")]
    pub kind: Option<RentalKind>,
    /// Part of the host's location label, e.g. "DE".
    pub location: Option<String>,
    /// At least this CUDA version, e.g. "12.2".
    pub min_cuda: Option<String>,
    #[serde(deserialize_with = "lenient::choice")]
    pub sort: Option<OfferSort>,
    /// 1-based page number (0 is the first page too).
    #[serde(deserialize_with = "lenient::number")]
    #[cfg_attr(feature = "openapi", param(maximum = 10000))]
    pub page: Option<u32>,
    /// Offers per page (at most 100; default 20).
    #[serde(deserialize_with = "lenient::number")]
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 100))]
    pub per_page: Option<u32>,
    /// Only this host's offers.
    #[serde(deserialize_with = "lenient::number")]
    pub host_id: Option<i64>,
    /// Only hosts verified by Cardpool's admins (`true`).
    #[serde(deserialize_with = "lenient::flag")]
    pub verified: Option<bool>,
    /// Whole GPUs (`gpu`) or MIG slices (`slice`) only; both when absent.
    #[serde(deserialize_with = "lenient::choice")]
    pub unit: Option<OfferUnit>,
    /// Only MIG slices of this profile, e.g. "1g.10gb".
    pub mig_profile: Option<String>,
    /// Only hosts of this fabric (as their providers declare it), e.g. "pdx-ib-1".
    pub fabric: Option<String>,
    /// Only hosts on this interconnect: infiniband, roce or ethernet.
    #[serde(deserialize_with = "lenient::choice")]
    pub interconnect: Option<crate::fabric::Interconnect>,
}

impl OfferQuery {
    /// The query string that reproduces this search (for links and pagination).
    pub fn to_query_string(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        let mut push = |key, value: Option<String>| {
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                pairs.push((key, v));
            }
        };
        push("gpu_model", self.gpu_model.clone());
        push("min_gpus", self.min_gpus.map(|n| n.to_string()));
        push("min_vram_gib", self.min_vram_gib.map(|n| n.to_string()));
        push("max_price", self.max_price.clone());
        push("kind", self.kind.map(|k| k.as_str().to_owned()));
        push("location", self.location.clone());
        push("min_cuda", self.min_cuda.clone());
        push("sort", self.sort.map(|s| s.as_str().to_owned()));
        push("page", self.page.filter(|p| *p > 1).map(|n| n.to_string()));
        push("per_page", self.per_page.map(|n| n.to_string()));
        push("host_id", self.host_id.map(|n| n.to_string()));
        push("verified", self.verified.filter(|v| *v).map(|_| "true".to_owned()));
        push("unit", self.unit.map(|u| u.as_str().to_owned()));
        push("mig_profile", self.mig_profile.clone());
        push("fabric", self.fabric.clone());
        push("interconnect", self.interconnect.map(|i| i.as_str().to_owned()));
        pairs.into_iter().map(|(k, v)| format!("{k}={}", percent_encode(&v))).collect::<Vec<_>>().join("&")
    }
}

pub fn percent_encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Query-string deserializers: a query string carries numbers and flags as text, so they are
/// parsed here, exactly as the OpenAPI document states them. A parameter given empty
/// (`?sort=`) is refused like any other malformed value, not taken as absent: a client that
/// sends one has a bug worth hearing about, and the document says the value is an enum.
mod lenient {
    use serde::{Deserialize, Deserializer, de::Error};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }

    pub fn number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64> + std::str::FromStr,
        <T as TryFrom<u64>>::Error: std::fmt::Display,
    {
        match Option::<Raw>::deserialize(d)? {
            None => Ok(None),
            Some(Raw::Number(n)) => T::try_from(n).map(Some).map_err(D::Error::custom),
            Some(Raw::Text(t)) => {
                t.parse().map(Some).map_err(|_| D::Error::custom(format!("{t:?} is not a whole number")))
            }
        }
    }

    pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Flag {
            Bool(bool),
            Text(String),
        }
        match Option::<Flag>::deserialize(d)? {
            None => Ok(None),
            Some(Flag::Bool(b)) => Ok(Some(b)),
            Some(Flag::Text(t)) => match t.as_str() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                other => Err(D::Error::custom(format!("{other:?} is not true or false"))),
            },
        }
    }

    pub fn choice<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) => T::deserialize(serde::de::value::StringDeserializer::<D::Error>::new(t)).map(Some),
        }
    }
}

/// One GPU model on one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Offer {
    pub host_id: i64,
    /// The unit sold: a GPU model, or for a MIG slice the model and profile ([`slice_unit`]).
    pub gpu_model: String,
    /// A slice offer's MIG profile (`1g.10gb`); absent for whole GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// Memory per GPU (per slice for a slice offer), bytes.
    pub vram_bytes: i64,
    /// GPUs of this model free right now.
    pub gpus_free: u32,
    pub on_demand_micros: i64,
    pub reserved_micros: i64,
    pub spot_min_bid_micros: i64,
    /// The spot clearing price now: the minimum bid while GPUs are free, else the lowest
    /// winning bid.
    pub spot_price_micros: i64,
    pub location: Option<String>,
    /// Thousandths of a CPU core per GPU (hosts may have fewer cores than GPUs).
    pub cpu_millicores_per_gpu: Option<u32>,
    pub ram_bytes_per_gpu: Option<u64>,
    pub disk_bytes_per_gpu: Option<u64>,
    pub cuda_version: String,
    pub driver_version: String,
    /// `nvlink` when the free GPUs are linked by NVLink, else `pcie`.
    pub interconnect: String,
    /// Share of the last 7 days (or since enrollment) the host was online, in permille.
    pub uptime_permille: u32,
    /// The host is verified by Cardpool's admins.
    pub verified: bool,
    /// The host's fabric, as its provider declares it and its agent confirms (or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<crate::fabric::FabricView>,
}

/// One spot clearing price, in force from `at` until the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PricePoint {
    pub at: chrono::DateTime<chrono::Utc>,
    pub price_micros: i64,
}

/// One offer (a GPU model on a host) with its spot clearing-price history; `offer` is `None`
/// when none of its GPUs are free right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfferDetail {
    pub host_id: i64,
    pub gpu_model: String,
    pub offer: Option<Offer>,
    /// The last 24 hours, oldest first.
    pub spot_prices: Vec<PricePoint>,
    /// When this was read (the last price holds until then).
    pub as_of: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OfferPage {
    pub offers: Vec<Offer>,
    /// Offers matching the filters, over all pages.
    pub total: u64,
    pub page: u32,
    pub per_page: u32,
}

/// "12.4" → 12004; `None` for anything that is not `major.minor`.
pub fn cuda_version_number(raw: &str) -> Option<i32> {
    let (major, minor) = raw.trim().split_once('.').unwrap_or((raw.trim(), "0"));
    let major: i32 = major.parse().ok()?;
    let minor: i32 = minor.split('.').next()?.parse().ok()?;
    (0..1000).contains(&minor).then_some(major.checked_mul(1000)?.checked_add(minor)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_from_text_and_round_trip() {
        let q: OfferQuery = serde_json::from_value(serde_json::json!({
            "min_gpus": "2", "kind": "spot", "page": 3, "location": "DE", "verified": "true"
        }))
        .unwrap();
        assert_eq!(q.min_gpus, Some(2));
        assert_eq!(q.min_vram_gib, None);
        assert_eq!(q.kind, Some(RentalKind::Spot));
        assert_eq!(q.sort, None);
        assert_eq!(q.page, Some(3));
        assert_eq!(q.verified, Some(true));
        assert_eq!(q.to_query_string(), "min_gpus=2&kind=spot&location=DE&page=3&verified=true");
        for bad in [
            serde_json::json!({"min_gpus": "two"}),
            serde_json::json!({"kind": "free"}),
            serde_json::json!({"sort": ""}),
            serde_json::json!({"min_vram_gib": ""}),
            serde_json::json!({"min_gpus": " 2"}),
            serde_json::json!({"verified": "on"}),
            serde_json::json!({"unit": " "}),
        ] {
            assert!(serde_json::from_value::<OfferQuery>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn cuda_versions_compare_as_numbers() {
        assert_eq!(cuda_version_number("12.4"), Some(12004));
        assert_eq!(cuda_version_number("12"), Some(12000));
        assert_eq!(cuda_version_number("11.8.1"), Some(11008));
        assert!(cuda_version_number("12.10").unwrap() > cuda_version_number("12.9").unwrap());
        for bad in ["", "x", "12.x", "-"] {
            assert_eq!(cuda_version_number(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn slice_units_name_their_profile() {
        let unit = slice_unit("NVIDIA H100 80GB HBM3", "1g.10gb");
        assert_eq!(unit, "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
        assert_eq!(slice_profile(&unit), Some("1g.10gb"));
        assert_eq!(slice_profile("NVIDIA H100 80GB HBM3"), None);
    }
}
