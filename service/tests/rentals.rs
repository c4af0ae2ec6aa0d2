//! Booking at the service level, on both backends: a storm of concurrent bookings against few
//! GPUs never gives a GPU to two rentals; stopping and ending release GPUs; the database
//! itself refuses an overlapping hold even when the service is bypassed.

use cardpool_domain::{
    AppError,
    account::SignUpRequest,
    host::GpuModelPrice,
    offers::{OfferQuery, RentalKind},
    rentals::{BookOfferRequest, RentalState, Workload},
};
use cardpool_protocol::{GpuInfo, HostFacts, Inventory, PROTOCOL_VERSION};
use cardpool_service::{
    Services, Settings, accounts,
    auth::{Credential, Principal},
    backend_tests,
    db::begin_write,
    entities::rental_gpus,
    hosts,
    ledger::{self, Book, Entry},
    offers, rentals,
    testing::{self, Backend},
};
use sea_orm::{ActiveValue::Set, EntityTrait};

const MODEL: &str = "NVIDIA H100 80GB HBM3";

async fn person(services: &Services, email: &str, provider: bool, dollars: i64) -> Principal {
    let me =
        accounts::sign_up(services, &SignUpRequest { email: email.into(), password: "correct horse battery".into() })
            .await
            .unwrap();
    let mut principal = Principal { user_id: me.id, email: me.email, roles: me.roles, credential: Credential::Session };
    if provider {
        principal.roles = accounts::enable_provider(services, &principal).await.unwrap().roles;
    }
    if dollars > 0 {
        let txn = begin_write(&services.db).await.unwrap();
        let entry = Entry::new("credit", format!("seed:{email}"), "seed").transfer(
            Book::PromotionalCredit,
            Book::Wallet(me.id),
            dollars * 1_000_000,
        );
        ledger::post(&txn, entry).await.unwrap();
        txn.commit().await.unwrap();
    }
    principal
}

/// A listed, online host with `n` GPUs in two NVLink islands.
async fn host(services: &Services, provider: &Principal, n: usize) -> i64 {
    let token = hosts::create_enrollment_token(services, provider, Some("Lab"), "http://x").await.unwrap();
    let enrolled = hosts::enroll_host(services, &token.token, "storm").await.unwrap();
    let row = hosts::authenticate_host(services, &enrolled.credential).await.unwrap();
    let uuids: Vec<String> = (0..n).map(|i| format!("GPU-{i}")).collect();
    let island = |i: usize| i * 2 / n.max(1);
    let inventory = Inventory {
        protocol: PROTOCOL_VERSION,
        host: HostFacts {
            hostname: "storm".into(),
            cpu_model: "EPYC".into(),
            cpu_cores: 64,
            ram_bytes: 1 << 39,
            disk_bytes: 1 << 41,
            os: "Debian".into(),
            agent_version: "0.1.0".into(),
            location: None,
        },
        gpus: (0..n)
            .map(|i| GpuInfo {
                index: i as u32,
                uuid: uuids[i].clone(),
                name: MODEL.into(),
                pci_bus_id: format!("00000000:{i:02X}:00.0"),
                memory_total_bytes: 80 << 30,
                driver_version: "550".into(),
                cuda_version: "12.4".into(),
                power_limit_milliwatts: None,
                mig_enabled: None,
                nvlink_peers: (0..n).filter(|j| *j != i && island(*j) == island(i)).map(|j| uuids[j].clone()).collect(),
            })
            .collect(),
    };
    hosts::record_inventory(services, &row, &inventory).await.unwrap();
    let price = GpuModelPrice {
        gpu_model: MODEL.into(),
        on_demand_micros: 2_000_000,
        reserved_micros: 1_600_000,
        spot_min_bid_micros: 800_000,
    };
    hosts::update_host_pricing(services, provider, row.id, &price).await.unwrap();
    hosts::set_host_listed(services, provider, row.id, true).await.unwrap();
    hosts::record_heartbeat(services, &row).await.unwrap();
    row.id
}

fn request(host_id: i64, gpu_count: u32) -> BookOfferRequest {
    BookOfferRequest {
        host_id,
        gpu_model: MODEL.into(),
        gpu_count,
        kind: RentalKind::OnDemand,
        workload: Workload { command: Some("python train.py".into()), ..Workload::default() },
    }
}

/// Every pair of active holds on the same GPU must not overlap in time.
async fn assert_no_overlaps(services: &Services) -> usize {
    let holds: Vec<rental_gpus::Model> =
        rental_gpus::Entity::find().all(&services.db).await.unwrap().into_iter().filter(|h| h.active).collect();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            assert!(
                a.gpu_id != b.gpu_id || a.ends_at <= b.starts_at || b.ends_at <= a.starts_at,
                "GPU {} held twice: {a:?} {b:?}",
                a.gpu_id
            );
        }
    }
    holds.len()
}

async fn booking_storm_never_overbooks(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = person(&services, "owner@example.com", true, 0).await;
    let host_id = host(&services, &provider, 8).await;
    let mut renters = Vec::new();
    for i in 0..4 {
        renters.push(person(&services, &format!("renter{i}@example.com"), false, 1_000).await);
    }
    let attempts = 40;
    let tasks: Vec<_> = (0..attempts)
        .map(|i| {
            let services = services.clone();
            let renter = renters[i % renters.len()].clone();
            let count = 1 + (i % 3) as u32;
            tokio::spawn(
                async move { (count, rentals::book_offer(&services, &renter, &request(host_id, count)).await) },
            )
        })
        .collect();
    let (mut accepted, mut rejected, mut gpus_given) = (0, 0, 0u32);
    for task in tasks {
        match task.await.unwrap() {
            (count, Ok(rental)) => {
                accepted += 1;
                gpus_given += count;
                assert_eq!(rental.gpu_indexes.len(), count as usize);
            }
            (_, Err(AppError::Conflict(_))) => rejected += 1,
            (_, Err(other)) => panic!("unexpected failure: {other:?}"),
        }
    }
    assert_eq!(accepted + rejected, attempts);
    assert!(gpus_given <= 8, "{gpus_given} GPUs handed out of 8");
    assert!(accepted >= 1);
    assert_eq!(assert_no_overlaps(&services).await as u32, gpus_given);
    // The market shows what is left, live.
    let left: u32 =
        offers::list_offers(&services, &OfferQuery::default()).await.unwrap().offers.iter().map(|o| o.gpus_free).sum();
    assert_eq!(left, 8 - gpus_given);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn bookings_prefer_nvlink_and_release_on_end(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = person(&services, "owner@example.com", true, 0).await;
    let host_id = host(&services, &provider, 8).await;
    let renter = person(&services, "renter@example.com", false, 100).await;

    // GPU 0 taken alone, then 4 more: they come from the untouched island (4..8), all NVLinked.
    let one = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    assert_eq!(one.gpu_indexes, vec![0]);
    let four = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap();
    assert_eq!(four.gpu_indexes, vec![4, 5, 6, 7]);
    assert_eq!(four.state, RentalState::Requested);
    let refused = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap_err();
    assert_eq!(refused, AppError::conflict(format!("only 3 {MODEL} free on this host right now")));

    // Stopping goes through the machine; ending releases the GPUs.
    let stopping = rentals::stop_rental(&services, &renter, four.id).await.unwrap();
    assert_eq!(stopping.state, RentalState::Stopping);
    assert!(rentals::transition(&services, four.id, RentalState::Running, "bad").await.is_err());
    rentals::transition(&services, four.id, RentalState::Ended, "agent detached").await.unwrap();
    let again = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap();
    assert_eq!(again.gpu_indexes, vec![4, 5, 6, 7]);

    // Someone else's rental is invisible to stop.
    let other = person(&services, "other@example.com", false, 0).await;
    assert!(matches!(rentals::stop_rental(&services, &other, again.id).await, Err(AppError::NotFound(_))));
    // No money, no booking: the shortfall is named.
    let poor = rentals::book_offer(&services, &other, &request(host_id, 1)).await.unwrap_err();
    assert!(matches!(&poor, AppError::PaymentRequired(m) if m.contains("short by $2.00")), "{poor:?}");
    // Providers cannot rent their own hosts.
    let provider_rich = provider.clone();
    assert!(matches!(
        rentals::book_offer(&services, &provider_rich, &request(host_id, 1)).await,
        Err(AppError::Conflict(_))
    ));
}

async fn the_database_refuses_overlapping_holds(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = person(&services, "owner@example.com", true, 0).await;
    let host_id = host(&services, &provider, 2).await;
    let renter = person(&services, "renter@example.com", false, 100).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    let held = rental_gpus::Entity::find().one(&services.db).await.unwrap().unwrap();
    // Bypass the service: insert a second hold on the same GPU over an overlapping window.
    let overlapping = rental_gpus::Entity::insert(rental_gpus::ActiveModel {
        rental_id: Set(rental.id),
        gpu_id: Set(held.gpu_id),
        starts_at: Set(held.starts_at + chrono::Duration::hours(1)),
        ends_at: Set(held.starts_at + chrono::Duration::hours(2)),
        active: Set(true),
        ..Default::default()
    })
    .exec(&services.db)
    .await;
    let err = overlapping.expect_err("the database accepted an overlapping hold");
    assert!(err.to_string().contains("rental_gpus_no_overlap"), "{err}");
    // An inactive (released) hold does not count.
    rental_gpus::Entity::insert(rental_gpus::ActiveModel {
        rental_id: Set(rental.id),
        gpu_id: Set(held.gpu_id),
        starts_at: Set(held.starts_at),
        ends_at: Set(held.starts_at + chrono::Duration::hours(1)),
        active: Set(false),
        ..Default::default()
    })
    .exec(&services.db)
    .await
    .unwrap();
}

backend_tests!(
    booking_storm_never_overbooks,
    bookings_prefer_nvlink_and_release_on_end,
    the_database_refuses_overlapping_holds
);
