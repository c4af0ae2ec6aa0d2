//! Offer search: free GPUs of listed, online hosts, per host and model, filtered, sorted and
//! paged by the database, so it stays fast with thousands of hosts.
//!
//! It reads `offer_stock` (kept exact by [`crate::stock`]), so a search is an index scan of one
//! table: the page in index order (joined to `hosts` for its 20 rows' facts), the total from
//! the same conditions on one narrow index. The spot clearing-price history lives here too:
//! it is what an offer's page charts.

use crate::{
    AppError, AppResult, Services,
    db::{DbResultExt, Sql},
    entities::spot_prices,
};
use cardpool_domain::{
    fabric::{FabricView, Interconnect, MAX_FABRIC_ID_LEN},
    money::parse_dollars,
    offers::{
        MAX_MIG_PROFILE_LEN, Offer, OfferDetail, OfferPage, OfferQuery, OfferSort, OfferUnit, PricePoint, RentalKind,
        cuda_version_number,
    },
};
use cardpool_protocol::HostFacts;
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect, Statement,
};
use std::collections::HashMap;

const DEFAULT_PER_PAGE: u32 = 20;
const MAX_PER_PAGE: u32 = 100;
/// The furthest page a search goes (beyond it, narrow the filters).
const MAX_PAGE: u32 = 10_000;
const GIB: i64 = 1 << 30;
/// Uptime is measured over this window (or since enrollment, if shorter).
const UPTIME_WINDOW_DAYS: i64 = 7;
/// Status transitions of one page's hosts read for their uptime, at most.
const MAX_UPTIME_EVENTS: u64 = 20_000;

#[derive(Debug, FromQueryResult)]
struct Row {
    host_id: i64,
    location: Option<String>,
    facts: Option<String>,
    created_at: DateTime<Utc>,
    gpu_model: String,
    mig_profile: Option<String>,
    gpus_free: i64,
    vram_bytes: i64,
    cuda_version: String,
    driver_version: String,
    linked: i64,
    on_demand_micros: i64,
    reserved_micros: i64,
    spot_min_bid_micros: i64,
    /// The latest spot clearing price, if spot ever cleared there.
    spot_price_micros: Option<i64>,
    verified_at: Option<DateTime<Utc>>,
    fabric_id: Option<String>,
    interconnect: Option<String>,
    fabric_gbps: Option<i32>,
}

#[derive(Debug, FromQueryResult)]
struct Count {
    total: i64,
}

/// Validated filters.
struct Filters {
    kind: RentalKind,
    sort: OfferSort,
    page: u32,
    per_page: u32,
    max_price: Option<i64>,
    min_cuda: Option<i32>,
    location: Option<String>,
    gpu_model: Option<String>,
    min_gpus: u32,
    min_vram: Option<i64>,
    host_id: Option<i64>,
    verified: bool,
    unit: Option<OfferUnit>,
    mig_profile: Option<String>,
    fabric: Option<String>,
    interconnect: Option<Interconnect>,
}

/// Whether `query` is a search the market can run (the checks `list_offers` makes first).
pub fn check_query(query: &OfferQuery) -> AppResult<()> {
    validate(query).map(|_| ())
}

fn validate(query: &OfferQuery) -> AppResult<Filters> {
    let mut fields = cardpool_domain::FieldErrors::new();
    let max_price = match query.max_price.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        Some(raw) => parse_dollars(raw).map_err(|m| fields.insert("max_price".into(), m)).ok(),
        None => None,
    };
    let min_cuda = match query.min_cuda.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        Some(raw) => cuda_version_number(raw).or_else(|| {
            fields.insert("min_cuda".into(), "a CUDA version such as 12.2".into());
            None
        }),
        None => None,
    };
    let clean = |raw: &Option<String>| raw.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    let location = clean(&query.location);
    if location.as_ref().is_some_and(|l| l.chars().count() > 64) {
        fields.insert("location".into(), "at most 64 characters".into());
    }
    if query.min_gpus.is_some_and(|n| n > 64) {
        fields.insert("min_gpus".into(), "at most 64".into());
    }
    if query.page.is_some_and(|n| n > MAX_PAGE) {
        fields.insert("page".into(), format!("at most {MAX_PAGE}"));
    }
    let mig_profile = clean(&query.mig_profile);
    if mig_profile.as_ref().is_some_and(|p| {
        p.len() > MAX_MIG_PROFILE_LEN || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+')
    }) {
        fields.insert("mig_profile".into(), "a MIG profile such as 1g.10gb".into());
    }
    if mig_profile.is_some() && query.unit == Some(OfferUnit::Gpu) {
        fields.insert("mig_profile".into(), "a MIG profile names slices, not whole GPUs".into());
    }
    let fabric = clean(&query.fabric).map(|f| f.to_lowercase());
    if fabric.as_ref().is_some_and(|f| f.len() > MAX_FABRIC_ID_LEN) {
        fields.insert("fabric".into(), format!("at most {MAX_FABRIC_ID_LEN} characters"));
    }
    if query.min_vram_gib.is_some_and(|n| n > 4096) {
        fields.insert("min_vram_gib".into(), "at most 4096".into());
    }
    if query.per_page.is_some_and(|n| n == 0 || n > MAX_PER_PAGE) {
        fields.insert("per_page".into(), format!("between 1 and {MAX_PER_PAGE}"));
    }
    if !fields.is_empty() {
        return Err(AppError::invalid_fields(fields));
    }
    Ok(Filters {
        kind: query.kind.unwrap_or_default(),
        sort: query.sort.unwrap_or_default(),
        page: query.page.unwrap_or(1).max(1),
        per_page: query.per_page.unwrap_or(DEFAULT_PER_PAGE),
        max_price,
        min_cuda,
        location,
        gpu_model: clean(&query.gpu_model),
        min_gpus: query.min_gpus.unwrap_or(1).max(1),
        min_vram: query.min_vram_gib.map(|g| i64::from(g) * GIB),
        host_id: query.host_id,
        verified: query.verified == Some(true),
        unit: query.unit,
        mig_profile,
        fabric,
        interconnect: query.interconnect,
    })
}

/// The offers matching `query`, one page of them. Open to everyone, signed in or not.
pub async fn list_offers(services: &Services, query: &OfferQuery) -> AppResult<OfferPage> {
    let filters = validate(query)?;
    let backend = services.db.get_database_backend();
    let price_col = match filters.kind {
        RentalKind::OnDemand => "on_demand_micros",
        RentalKind::Reserved => "reserved_micros",
        RentalKind::Spot => "spot_min_bid_micros",
    };
    let mut sql = Sql::new(backend);
    let on_market = sql.bind(true);
    let mut conditions = vec![format!("s.on_market = {on_market}")];
    // Every stock row has a free GPU, so the default needs no condition here; without one the
    // planner walks the sort's index instead of sorting every offer (SQLite has no statistics).
    if filters.min_gpus > 1 {
        conditions.push(format!("s.gpus_free >= {}", sql.bind(i64::from(filters.min_gpus))));
    }
    if let Some(host_id) = filters.host_id {
        conditions.push(format!("s.host_id = {}", sql.bind(host_id)));
    }
    if filters.verified {
        conditions
            .push("EXISTS (SELECT 1 FROM hosts v WHERE v.id = s.host_id AND v.verified_at IS NOT NULL)".to_owned());
    }
    if let Some(fabric) = &filters.fabric {
        let fabric = sql.bind(fabric.clone());
        conditions.push(format!("EXISTS (SELECT 1 FROM hosts f WHERE f.id = s.host_id AND f.fabric_id = {fabric})"));
    }
    if let Some(interconnect) = filters.interconnect {
        let interconnect = sql.bind(interconnect.as_str());
        conditions
            .push(format!("EXISTS (SELECT 1 FROM hosts f WHERE f.id = s.host_id AND f.interconnect = {interconnect})"));
    }
    if let Some(model) = &filters.gpu_model {
        conditions.push(format!("s.gpu_model = {}", sql.bind(model.clone())));
    }
    match filters.unit {
        Some(OfferUnit::Gpu) => conditions.push("s.mig_profile IS NULL".to_owned()),
        Some(OfferUnit::Slice) => conditions.push("s.mig_profile IS NOT NULL".to_owned()),
        None => {}
    }
    if let Some(profile) = &filters.mig_profile {
        conditions.push(format!("s.mig_profile = {}", sql.bind(profile.clone())));
    }
    if let Some(min_vram) = filters.min_vram {
        conditions.push(format!("s.vram_bytes >= {}", sql.bind(min_vram)));
    }
    if let Some(min_cuda) = filters.min_cuda {
        conditions.push(format!("s.cuda_version_num >= {}", sql.bind(min_cuda)));
    }
    if let Some(location) = &filters.location {
        let pattern = format!("%{}%", location.to_lowercase().replace(['%', '_'], ""));
        conditions.push(format!("s.location_key LIKE {}", sql.bind(pattern)));
    }
    if let Some(max_price) = filters.max_price {
        conditions.push(format!("s.{price_col} <= {}", sql.bind(max_price)));
    }
    let conditions = conditions.join(" AND ");
    // The sort over the columns of table or alias `t`, ties broken by host and model.
    let order = |t: &str| match filters.sort {
        OfferSort::Price => format!("{t}.{price_col} ASC, {t}.host_id ASC, {t}.gpu_model ASC"),
        // Micro-dollars per GiB-hour, in integers: price × 1024 / MiB.
        OfferSort::PricePerVram => format!(
            "({t}.{price_col} * 1024) / (CASE WHEN {t}.vram_bytes < 1048576 THEN 1 ELSE {t}.vram_bytes / 1048576 END) \
             ASC, {t}.host_id ASC, {t}.gpu_model ASC"
        ),
        OfferSort::Availability => format!("{t}.gpus_free DESC, {t}.host_id ASC, {t}.gpu_model ASC"),
    };

    // The total reads the same conditions alone (no join, one index); the page joins `hosts`
    // for its own rows only.
    let count_sql = format!("SELECT COUNT(*) AS total FROM offer_stock s WHERE {conditions}");
    let count_values = sql.values.clone();
    let limit = sql.bind(i64::from(filters.per_page));
    let offset = sql.bind(i64::from(filters.page - 1) * i64::from(filters.per_page));
    // The page first (its order from the index), then each of its rows' latest spot price:
    // an indexed lookup per row of the page, in the same query.
    let (inner_order, outer_order) = (order("s"), order("page"));
    sql.text = format!(
        "SELECT page.*, (SELECT sp.price_micros FROM spot_prices sp WHERE sp.host_id = page.host_id \
         AND sp.gpu_model = page.gpu_model ORDER BY sp.at DESC, sp.id DESC LIMIT 1) AS spot_price_micros \
         FROM (SELECT s.host_id AS host_id, h.location AS location, h.facts AS facts, h.created_at AS created_at, \
         h.verified_at AS verified_at, h.fabric_id AS fabric_id, h.interconnect AS interconnect, \
         h.fabric_gbps AS fabric_gbps, \
         s.gpu_model AS gpu_model, s.mig_profile AS mig_profile, s.gpus_free AS gpus_free, s.vram_bytes AS vram_bytes, \
         s.cuda_version AS cuda_version, s.driver_version AS driver_version, s.linked AS linked, \
         s.on_demand_micros AS on_demand_micros, s.reserved_micros AS reserved_micros, \
         s.spot_min_bid_micros AS spot_min_bid_micros \
         FROM offer_stock s JOIN hosts h ON h.id = s.host_id WHERE {conditions} \
         ORDER BY {inner_order} LIMIT {limit} OFFSET {offset}) page ORDER BY {outer_order}"
    );
    let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, sql.text, sql.values))
        .all(&services.db)
        .await
        .context("searching offers")?;
    let total = if filters.page == 1 && rows.len() < filters.per_page as usize {
        rows.len() as u64
    } else {
        Count::find_by_statement(Statement::from_sql_and_values(backend, count_sql, count_values))
            .one(&services.db)
            .await
            .context("counting offers")?
            .map_or(0, |c| c.total.max(0) as u64)
    };

    let uptimes = uptimes(&services.db, &rows).await?;
    let offers = rows
        .into_iter()
        .map(|row| {
            let facts: Option<HostFacts> = row.facts.as_deref().and_then(|f| serde_json::from_str(f).ok());
            let gpus = u32::try_from(row.gpus_free).unwrap_or(0);
            // The host's CPU, RAM and disk shared among the GPUs offered.
            let host_gpus = gpus.max(1);
            Offer {
                host_id: row.host_id,
                gpu_model: row.gpu_model,
                mig_profile: row.mig_profile,
                vram_bytes: row.vram_bytes,
                gpus_free: gpus,
                on_demand_micros: row.on_demand_micros,
                reserved_micros: row.reserved_micros,
                spot_min_bid_micros: row.spot_min_bid_micros,
                spot_price_micros: row
                    .spot_price_micros
                    .unwrap_or(row.spot_min_bid_micros)
                    .max(row.spot_min_bid_micros),
                location: row.location,
                cpu_millicores_per_gpu: facts.as_ref().map(|f| f.cpu_cores.saturating_mul(1000) / host_gpus),
                ram_bytes_per_gpu: facts.as_ref().map(|f| f.ram_bytes / u64::from(host_gpus)),
                disk_bytes_per_gpu: facts.as_ref().map(|f| f.disk_bytes / u64::from(host_gpus)),
                cuda_version: row.cuda_version,
                driver_version: row.driver_version,
                interconnect: if row.linked >= 2 { "nvlink" } else { "pcie" }.to_owned(),
                uptime_permille: uptimes.get(&row.host_id).copied().unwrap_or(0),
                verified: row.verified_at.is_some(),
                fabric: crate::hosts::declared_fabric(
                    row.fabric_id.as_deref(),
                    row.interconnect.as_deref(),
                    row.fabric_gbps,
                )
                .map(|declared| FabricView::of(declared, facts.as_ref().map_or(&[][..], |f| &f.nics))),
            }
        })
        .collect();
    Ok(OfferPage { offers, total, page: filters.page, per_page: filters.per_page })
}

/// One offer and its spot clearing prices of the last 24 hours.
pub async fn get_offer(services: &Services, host_id: i64, gpu_model: &str) -> AppResult<OfferDetail> {
    let query = OfferQuery {
        host_id: Some(host_id),
        gpu_model: Some(gpu_model.to_owned()),
        per_page: Some(1),
        ..OfferQuery::default()
    };
    let offer = list_offers(services, &query).await?.offers.into_iter().next();
    let since = Utc::now() - Duration::hours(24);
    let spot_prices = spot_price_history(services, host_id, gpu_model, since)
        .await?
        .into_iter()
        .map(|(at, price_micros)| PricePoint { at, price_micros })
        .collect();
    Ok(OfferDetail { host_id, gpu_model: gpu_model.to_owned(), offer, spot_prices, as_of: Utc::now() })
}

/// Uptime of each host on the page, from its recorded status transitions.
async fn uptimes(conn: &impl ConnectionTrait, rows: &[Row]) -> AppResult<HashMap<i64, u32>> {
    let now = Utc::now();
    let window_start = now - Duration::days(UPTIME_WINDOW_DAYS);
    let mut out = HashMap::new();
    let ids: Vec<i64> = rows.iter().map(|r| r.host_id).collect();
    if ids.is_empty() {
        return Ok(out);
    }
    // Only the window's events (the newest `MAX_UPTIME_EVENTS` of them for a page), and each
    // host's last one before it, in one query for the page.
    let changes = crate::hosts::status_changes_since(conn, Some(&ids), window_start, MAX_UPTIME_EVENTS).await?;
    for row in rows {
        let transitions: Vec<(DateTime<Utc>, bool)> =
            changes.iter().filter(|c| c.0 == row.host_id).map(|c| (c.1, c.2)).collect();
        out.insert(row.host_id, uptime_permille(&transitions, row.created_at.max(window_start), now));
    }
    Ok(out)
}

/// Permille of `[from, to)` spent online, given status transitions in time order (a host is
/// offline until its first transition to online).
pub fn uptime_permille(transitions: &[(DateTime<Utc>, bool)], from: DateTime<Utc>, to: DateTime<Utc>) -> u32 {
    let span = (to - from).num_milliseconds();
    if span <= 0 {
        return 0;
    }
    let mut online = false;
    let mut since = from;
    let mut up = 0i64;
    for &(at, is_online) in transitions {
        let at = at.clamp(from, to);
        if online {
            up += (at - since).num_milliseconds();
        }
        online = is_online;
        since = at;
    }
    if online {
        up += (to - since).num_milliseconds();
    }
    u32::try_from(up * 1000 / span).unwrap_or(1000).min(1000)
}

/// The spot clearing-price history of one offer (host and GPU model), oldest first.
pub async fn spot_price_history(
    services: &Services,
    host_id: i64,
    gpu_model: &str,
    since: DateTime<Utc>,
) -> AppResult<Vec<(DateTime<Utc>, i64)>> {
    let rows = spot_prices::Entity::find()
        .filter(spot_prices::Column::HostId.eq(host_id))
        .filter(spot_prices::Column::GpuModel.eq(gpu_model))
        .filter(spot_prices::Column::At.gte(since))
        .order_by_asc(spot_prices::Column::At)
        .order_by_asc(spot_prices::Column::Id)
        .limit(1000)
        .all(&services.db)
        .await
        .context("loading spot prices")?;
    Ok(rows.into_iter().map(|r| (r.at, r.price_micros)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn uptime_counts_online_intervals() {
        assert_eq!(uptime_permille(&[], t(0), t(100)), 0);
        assert_eq!(uptime_permille(&[(t(0), true)], t(0), t(100)), 1000);
        assert_eq!(uptime_permille(&[(t(0), true), (t(25), false), (t(50), true)], t(0), t(100)), 750);
        // Transitions before the window count as the state at its start.
        assert_eq!(uptime_permille(&[(t(-50), true), (t(90), false)], t(0), t(100)), 900);
    }

    proptest! {
        #[test]
        fn uptime_is_a_permille(steps in proptest::collection::vec((0i64..1000, any::<bool>()), 0..20)) {
            let mut at = 0;
            let transitions: Vec<_> = steps.into_iter().map(|(d, on)| { at += d; (t(at), on) }).collect();
            prop_assert!(uptime_permille(&transitions, t(0), t(10_000)) <= 1000);
        }
    }
}
