//! Offer search at the service level, on both backends: only listed, online, priced hosts with
//! available GPUs appear; every filter, sort and page works in SQL; bad filters are refused.

use cardpool_domain::{
    AppError,
    host::GpuModelPrice,
    offers::{OfferQuery, OfferSort, RentalKind},
};
use cardpool_protocol::{GpuInfo, HostFacts, Inventory, PROTOCOL_VERSION};
use cardpool_service::{
    Services, Settings,
    auth::Principal,
    backend_tests, hosts, offers,
    testing::{self, Backend},
};
use sea_orm::EntityTrait;

struct Spec {
    name: &'static str,
    location: &'static str,
    model: &'static str,
    gpus: usize,
    vram_gib: u64,
    cuda: &'static str,
    nvlink: bool,
    on_demand: i64,
    online: bool,
    listed: bool,
}

const fn spec(
    name: &'static str,
    location: &'static str,
    model: &'static str,
    gpus: usize,
    vram_gib: u64,
    on_demand: i64,
) -> Spec {
    Spec { name, location, model, gpus, vram_gib, cuda: "12.4", nvlink: false, on_demand, online: true, listed: true }
}

/// Enrolls, inventories, prices and (per spec) lists and brings online a host.
async fn host(services: &Services, provider: &Principal, spec: Spec) -> i64 {
    let token =
        hosts::create_enrollment_token(services, provider, Some(spec.location), "http://127.0.0.1:3000").await.unwrap();
    let enrolled = hosts::enroll_host(services, &token.token, spec.name).await.unwrap();
    let row = hosts::authenticate_host(services, &enrolled.credential).await.unwrap();
    let uuids: Vec<String> = (0..spec.gpus).map(|i| format!("GPU-{}-{i}", spec.name)).collect();
    let inventory = Inventory {
        protocol: PROTOCOL_VERSION,
        host: HostFacts {
            hostname: spec.name.into(),
            cpu_model: "AMD EPYC".into(),
            cpu_cores: 64,
            ram_bytes: 512 << 30,
            disk_bytes: 4 << 40,
            os: "Debian 12".into(),
            agent_version: "0.1.0".into(),
            location: Some(spec.location.into()),
            nics: vec![],
        },
        gpus: uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| GpuInfo {
                index: i as u32,
                uuid: uuid.clone(),
                name: spec.model.into(),
                pci_bus_id: format!("00000000:{i:02X}:00.0"),
                memory_total_bytes: spec.vram_gib << 30,
                driver_version: "550.54.15".into(),
                cuda_version: spec.cuda.into(),
                power_limit_milliwatts: None,
                mig_enabled: None,
                mig_instances: vec![],
                nvlink_peers: if spec.nvlink { uuids.iter().filter(|u| *u != uuid).cloned().collect() } else { vec![] },
                mig_profiles: vec![],
            })
            .collect(),
    };
    hosts::record_inventory(services, &row, &inventory).await.unwrap();
    let price = GpuModelPrice {
        gpu_model: spec.model.into(),
        on_demand_micros: spec.on_demand,
        reserved_micros: spec.on_demand / 5 * 4,
        spot_min_bid_micros: spec.on_demand / 2,
    };
    hosts::update_host_pricing(services, provider, row.id, &price).await.unwrap();
    if spec.listed {
        hosts::set_host_listed(services, provider, row.id, true).await.unwrap();
    }
    if spec.online {
        hosts::record_heartbeat(services, &row).await.unwrap();
    }
    row.id
}

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";
const L4: &str = "NVIDIA L4";

async fn market(services: &Services) -> Vec<i64> {
    let p = testing::provider(services, "market@example.com").await;
    vec![
        host(services, &p, Spec { nvlink: true, ..spec("fra-h100", "Frankfurt, DE", H100, 8, 80, 2_490_000) }).await,
        host(services, &p, spec("pdx-a100", "Oregon, US", A100, 4, 80, 1_290_000)).await,
        host(services, &p, Spec { cuda: "11.8", ..spec("waw-l4", "Warsaw, PL", L4, 2, 24, 390_000) }).await,
        host(services, &p, spec("ber-h100", "Berlin, DE", H100, 2, 80, 2_190_000)).await,
        // Never shown: offline, and unlisted.
        host(services, &p, Spec { online: false, ..spec("off-h100", "Paris, FR", H100, 8, 80, 100_000) }).await,
        host(services, &p, Spec { listed: false, ..spec("unl-h100", "Paris, FR", H100, 8, 80, 100_000) }).await,
    ]
}

async fn search(services: &Services, query: OfferQuery) -> Vec<(String, u32)> {
    offers::list_offers(services, &query)
        .await
        .unwrap()
        .offers
        .into_iter()
        .map(|o| (o.location.unwrap_or_default(), o.gpus_free))
        .collect()
}

fn names(found: &[(String, u32)]) -> Vec<&str> {
    found.iter().map(|(l, _)| l.as_str()).collect()
}

async fn only_live_listed_hosts_are_offered(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let ids = market(&services).await;
    let page = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    assert_eq!(page.total, 4);
    assert_eq!(
        names(&search(&services, OfferQuery::default()).await),
        ["Warsaw, PL", "Oregon, US", "Berlin, DE", "Frankfurt, DE"],
        "cheapest on-demand first"
    );
    let frankfurt = page.offers.iter().find(|o| o.host_id == ids[0]).unwrap();
    assert_eq!(frankfurt.gpus_free, 8);
    assert_eq!(frankfurt.interconnect, "nvlink");
    assert_eq!(frankfurt.vram_bytes, 80 << 30);
    assert_eq!(frankfurt.cpu_millicores_per_gpu, Some(8000));
    assert_eq!(frankfurt.reserved_micros, 1_992_000);
    // Online since its first heartbeat, a moment after enrollment (the arithmetic is unit-tested).
    assert!((1..=1000).contains(&frankfurt.uptime_permille), "{}", frankfurt.uptime_permille);
    assert_eq!(page.offers.iter().find(|o| o.host_id == ids[3]).unwrap().interconnect, "pcie");

    // Uptime over the last week, from the week's transitions and the last one before it: online
    // since a month ago, then down from 3.5 days ago until 1.75 days ago is 75 %.
    use cardpool_service::entities::{host_events, hosts as host_rows};
    use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, IntoActiveModel, QueryFilter};
    let now = chrono::Utc::now();
    host_events::Entity::delete_many().filter(host_events::Column::HostId.eq(ids[0])).exec(&services.db).await.unwrap();
    for (hours_ago, status) in [(720, "online"), (84, "offline"), (42, "online")] {
        host_events::ActiveModel {
            host_id: Set(ids[0]),
            status: Set(status.into()),
            reason: Set("test".into()),
            at: Set(now - chrono::Duration::hours(hours_ago)),
            ..Default::default()
        }
        .insert(&services.db)
        .await
        .unwrap();
    }
    let mut row = host_rows::Entity::find_by_id(ids[0]).one(&services.db).await.unwrap().unwrap().into_active_model();
    row.created_at = Set(now - chrono::Duration::days(60));
    row.update(&services.db).await.unwrap();
    let page = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    let frankfurt = page.offers.iter().find(|o| o.host_id == ids[0]).unwrap();
    assert!((749..=751).contains(&frankfurt.uptime_permille), "{}", frankfurt.uptime_permille);

    // A host that goes silent disappears at once.
    hosts::mark_silent_hosts_offline(&services, std::time::Duration::ZERO).await.unwrap();
    assert_eq!(offers::list_offers(&services, &OfferQuery::default()).await.unwrap().total, 0);
}

async fn filters_sorts_and_pages_work(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    market(&services).await;
    let q = |f: fn(&mut OfferQuery)| {
        let mut query = OfferQuery::default();
        f(&mut query);
        query
    };
    assert_eq!(
        names(&search(&services, q(|q| q.gpu_model = Some(H100.into()))).await),
        ["Berlin, DE", "Frankfurt, DE"]
    );
    assert_eq!(names(&search(&services, q(|q| q.min_gpus = Some(4))).await), ["Oregon, US", "Frankfurt, DE"]);
    assert_eq!(names(&search(&services, q(|q| q.min_vram_gib = Some(40))).await).len(), 3);
    assert_eq!(names(&search(&services, q(|q| q.max_price = Some("1.29".into()))).await), ["Warsaw, PL", "Oregon, US"]);
    // Spot minimum bids are half the on-demand price here.
    let spot = q(|q| {
        q.kind = Some(RentalKind::Spot);
        q.max_price = Some("1.10".into());
    });
    assert_eq!(names(&search(&services, spot).await), ["Warsaw, PL", "Oregon, US", "Berlin, DE"]);
    assert_eq!(names(&search(&services, q(|q| q.location = Some("de".into()))).await), ["Berlin, DE", "Frankfurt, DE"]);
    assert_eq!(names(&search(&services, q(|q| q.min_cuda = Some("12.0".into()))).await).len(), 3);
    assert_eq!(
        names(&search(&services, q(|q| q.sort = Some(OfferSort::Availability))).await),
        ["Frankfurt, DE", "Oregon, US", "Warsaw, PL", "Berlin, DE"],
        "ties keep host order"
    );
    // Per GiB: the L4's 24 GiB at $0.39 is $0.01625/GiB, the A100's 80 GiB at $1.29 $0.0161.
    assert_eq!(
        names(&search(&services, q(|q| q.sort = Some(OfferSort::PricePerVram))).await),
        ["Oregon, US", "Warsaw, PL", "Berlin, DE", "Frankfurt, DE"]
    );

    let first = offers::list_offers(&services, &q(|q| q.per_page = Some(3))).await.unwrap();
    let second = offers::list_offers(
        &services,
        &q(|q| {
            q.per_page = Some(3);
            q.page = Some(2);
        }),
    )
    .await
    .unwrap();
    assert_eq!((first.total, first.offers.len(), second.offers.len()), (4, 3, 1));
    assert_eq!(second.total, 4);
    // Past the last page: no offers, and still the right total.
    let beyond = offers::list_offers(
        &services,
        &q(|q| {
            q.per_page = Some(3);
            q.page = Some(5);
        }),
    )
    .await
    .unwrap();
    assert_eq!((beyond.total, beyond.offers.len()), (4, 0));
    assert_eq!(second.offers[0].location.as_deref(), Some("Frankfurt, DE"));

    for bad in [
        q(|q| q.max_price = Some("cheap".into())),
        q(|q| q.min_cuda = Some("twelve".into())),
        q(|q| q.per_page = Some(1000)),
    ] {
        assert!(matches!(offers::list_offers(&services, &bad).await, Err(AppError::Validation { .. })), "{bad:?}");
    }
}

/// The stock carries each offer's market facts; every change to them shows in the next search.
async fn market_changes_show_at_once(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let p = testing::provider(&services, "market@example.com").await;
    let fra = host(&services, &p, spec("fra-h100", "Frankfurt, DE", H100, 8, 80, 2_490_000)).await;
    let pdx = host(&services, &p, spec("pdx-a100", "Oregon, US", A100, 4, 80, 1_290_000)).await;
    let all = || search(&services, OfferQuery::default());
    assert_eq!(names(&all().await), ["Oregon, US", "Frankfurt, DE"]);

    let cheaper = GpuModelPrice {
        gpu_model: H100.into(),
        on_demand_micros: 990_000,
        reserved_micros: 800_000,
        spot_min_bid_micros: 400_000,
    };
    hosts::update_host_pricing(&services, &p, fra, &cheaper).await.unwrap();
    assert_eq!(names(&all().await), ["Frankfurt, DE", "Oregon, US"], "a new price re-sorts");
    let under_a_dollar = OfferQuery { max_price: Some("1.00".into()), ..OfferQuery::default() };
    assert_eq!(names(&search(&services, under_a_dollar).await), ["Frankfurt, DE"]);
    let oregon = OfferQuery { location: Some("OREGON".into()), ..OfferQuery::default() };
    assert_eq!(names(&search(&services, oregon).await), ["Oregon, US"], "location matches without case");

    hosts::set_host_listed(&services, &p, fra, false).await.unwrap();
    assert_eq!(names(&all().await), ["Oregon, US"], "unlisted: off the market");
    hosts::set_host_listed(&services, &p, fra, true).await.unwrap();
    assert_eq!(all().await.len(), 2, "listed again");

    // Each offer shows its latest spot clearing price (never under the minimum bid).
    use cardpool_service::entities::spot_prices;
    let now = chrono::Utc::now();
    for (model, price, ago) in [(A100, 700_000, 60), (A100, 900_000, 10), (A100, 100_000, 30), (H100, 50_000, 5)] {
        let row = spot_prices::ActiveModel {
            host_id: sea_orm::ActiveValue::Set(if model == A100 { pdx } else { fra }),
            gpu_model: sea_orm::ActiveValue::Set(model.into()),
            price_micros: sea_orm::ActiveValue::Set(price),
            at: sea_orm::ActiveValue::Set(now - chrono::Duration::seconds(ago)),
            ..Default::default()
        };
        spot_prices::Entity::insert(row).exec(&services.db).await.unwrap();
    }
    let page = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    let spot = |id: i64| page.offers.iter().find(|o| o.host_id == id).unwrap().spot_price_micros;
    assert_eq!(spot(pdx), 900_000, "the latest clearing price");
    assert_eq!(spot(fra), 400_000, "never under the minimum bid");

    hosts::mark_silent_hosts_offline(&services, std::time::Duration::ZERO).await.unwrap();
    assert!(all().await.is_empty(), "offline: off the market");
    let row = cardpool_service::entities::hosts::Entity::find_by_id(pdx).one(&services.db).await.unwrap().unwrap();
    hosts::record_heartbeat(&services, &row).await.unwrap();
    assert_eq!(names(&all().await), ["Oregon, US"], "heard from again: back on the market");

    hosts::revoke_host(&services, &p, pdx).await.unwrap();
    assert!(all().await.is_empty(), "revoked: off the market");
    assert_eq!(offers::list_offers(&services, &OfferQuery::default()).await.unwrap().total, 0);
}

backend_tests!(only_live_listed_hosts_are_offered, filters_sorts_and_pages_work, market_changes_show_at_once);
