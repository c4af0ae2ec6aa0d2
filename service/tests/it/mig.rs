//! MIG slices as units of sale, on both backends: a provider sells a GPU as its MIG instances,
//! prices a profile per slice-hour, renters find and book slices like GPUs, the agent is told
//! the slices' `MIG-…` UUIDs, and neither the service nor the database ever lets a slice hold
//! meet a whole-GPU hold on the same GPU. Layout changes from the agent retire slices.

use crate::rentals::{request, wallet};
use cardpool_domain::{
    AppError,
    host::GpuSale,
    offers::{OfferQuery, OfferUnit, slice_unit},
    rentals::BookOfferRequest,
};
use cardpool_protocol::{GpuInfo, Inventory, MigInstance, PROTOCOL_VERSION, ServerMessage};
use cardpool_service::{
    Settings, backend_tests, db,
    entities::{hosts as host_rows, rental_gpus},
    hosts, offers, rentals,
    testing::{self, Backend},
};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};

const MODEL: &str = testing::TEST_GPU_MODEL;
/// An H100-80GB cut the way providers often do: 3 + 2 + 1 + 1 compute slices.
const LAYOUT: [&str; 4] = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"];

fn small() -> String {
    slice_unit(MODEL, "1g.10gb")
}

fn slice_request(host_id: i64, count: u32) -> BookOfferRequest {
    BookOfferRequest { gpu_model: small(), ..request(host_id, count) }
}

fn slice_price() -> cardpool_domain::host::GpuModelPrice {
    cardpool_domain::host::GpuModelPrice {
        gpu_model: small(),
        on_demand_micros: 400_000,
        reserved_micros: 320_000,
        spot_min_bid_micros: 150_000,
    }
}

fn slices(profile: Option<&str>) -> OfferQuery {
    OfferQuery { unit: Some(OfferUnit::Slice), mig_profile: profile.map(str::to_owned), ..OfferQuery::default() }
}

async fn slices_are_sold_booked_and_never_meet_a_whole_gpu_hold(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "cut").gpus(2).mig(&LAYOUT).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;

    // Reported, not sold: the host lists its two GPUs whole and no slice is on offer.
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!(detail.gpus.len(), 2, "slices are not GPUs of the host");
    assert!(detail.gpus.iter().all(|g| g.sold_as == GpuSale::Whole && g.mig_instances.len() == 4));
    assert_eq!(detail.host.gpu_count, 2);
    assert_eq!(offers::list_offers(&services, &slices(None)).await.unwrap().total, 0);

    // GPU 1 sold as MIG: the whole offer drops to one GPU; slices wait for a price.
    hosts::set_gpu_sale(&services, &provider, host_id, 1, GpuSale::Mig).await.unwrap();
    let whole = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    assert_eq!((whole.total, whole.offers[0].gpus_free), (1, 1));
    assert_eq!(offers::list_offers(&services, &slices(None)).await.unwrap().total, 0, "unpriced slices are not sold");
    // Listing again names what has no price yet.
    let unpriced = hosts::set_host_listed(&services, &provider, host_id, true).await.unwrap_err();
    assert!(matches!(&unpriced, AppError::Conflict(m) if m.contains(&small())), "{unpriced:?}");

    hosts::update_host_pricing(&services, &provider, host_id, &slice_price()).await.unwrap();
    let found = offers::list_offers(&services, &slices(Some("1g.10gb"))).await.unwrap();
    assert_eq!(found.total, 1);
    let offer = &found.offers[0];
    assert_eq!(
        (offer.gpu_model.as_str(), offer.mig_profile.as_deref(), offer.gpus_free, offer.vram_bytes),
        (small().as_str(), Some("1g.10gb"), 2, 10 << 30)
    );
    assert_eq!(offer.on_demand_micros, 400_000);
    // Whole GPUs only: the slice offer is not among them.
    let gpus_only = OfferQuery { unit: Some(OfferUnit::Gpu), ..OfferQuery::default() };
    assert!(offers::list_offers(&services, &gpus_only).await.unwrap().offers.iter().all(|o| o.mig_profile.is_none()));
    let nonsense = OfferQuery { mig_profile: Some("1g;drop".into()), ..OfferQuery::default() };
    assert!(offers::list_offers(&services, &nonsense).await.unwrap_err().field("mig_profile").is_some());

    // Two 1g.10gb slices: both on GPU 1, each its own MIG UUID for the agent.
    let before = wallet(&services, &renter).await;
    let rental = rentals::book_offer(&services, &renter, &slice_request(host_id, 2)).await.unwrap();
    assert_eq!((rental.gpu_model.as_str(), rental.gpu_indexes.as_slice()), (small().as_str(), &[1, 1][..]));
    let commands = rentals::commands_for_host(&services, host_id, Some(&[])).await.unwrap();
    let attach = commands
        .iter()
        .find_map(|c| match c {
            ServerMessage::Attach(spec) if spec.rental_id == rental.id => Some(spec.clone()),
            _ => None,
        })
        .expect("an attach for the slice rental");
    assert_eq!(attach.gpu_uuids, vec!["MIG-cut-1-2".to_owned(), "MIG-cut-1-3".to_owned()]);
    assert_eq!(attach.gpu_indexes, vec![1, 1]);
    assert_eq!(attach.sevenths(), 2, "two 1g slices: two sevenths of a GPU's share of the host");
    assert_eq!(wallet(&services, &renter).await, before, "nothing is charged before the workload is ready");

    // Sold out: no third 1g.10gb; the GPU cannot be re-cut or sold whole while rented.
    let refused = rentals::book_offer(&services, &renter, &slice_request(host_id, 1)).await.unwrap_err();
    assert_eq!(refused, AppError::conflict(format!("only 0 {} free on this host right now", small())));
    let recut = hosts::set_gpu_sale(&services, &provider, host_id, 1, GpuSale::Whole).await.unwrap_err();
    assert!(matches!(recut, AppError::Conflict(_)), "{recut:?}");
    // The whole GPU 0 still rents as before.
    let whole_rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    assert_eq!(whole_rental.gpu_indexes, vec![0]);
    let busy = hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Mig).await.unwrap_err();
    assert!(matches!(busy, AppError::Conflict(_)), "{busy:?}");

    // The database's own rule, bypassing the service: a whole-GPU hold on GPU 1 over the
    // slices' time is refused; a hold on a free slot of GPU 1 (the 3g.40gb) is not.
    let held = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::RentalId.eq(rental.id))
        .one(&services.db)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.slot_to - held.slot_from, 1, "a slice covers one slot");
    let hold = |from: i32, to: i32| rental_gpus::ActiveModel {
        rental_id: Set(whole_rental.id),
        gpu_id: Set(held.physical_gpu_id),
        starts_at: Set(held.starts_at + chrono::Duration::hours(1)),
        ends_at: Set(held.starts_at + chrono::Duration::hours(2)),
        active: Set(true),
        physical_gpu_id: Set(held.physical_gpu_id),
        slot_from: Set(from),
        slot_to: Set(to),
        ..Default::default()
    };
    let err = rental_gpus::Entity::insert(hold(0, 8)).exec(&services.db).await.expect_err("whole over slices");
    assert!(db::Violation::Named("rental_gpus_no_overlap").matches(&err), "{err:?}");
    rental_gpus::Entity::insert(hold(0, 1)).exec(&services.db).await.expect("another slot of the GPU is free");
    rental_gpus::Entity::insert(hold(3, 2)).exec(&services.db).await.expect_err("slots run forwards");

    // Ended, the slices are free again and the GPU can be sold whole (the stray hold on
    // slot 0 above is the test's own: take it back first).
    rental_gpus::Entity::delete_many()
        .filter(rental_gpus::Column::RentalId.eq(whole_rental.id))
        .filter(rental_gpus::Column::PhysicalGpuId.eq(held.physical_gpu_id))
        .exec(&services.db)
        .await
        .unwrap();
    rentals::stop_rental(&services, &renter, rental.id).await.unwrap();
    rentals::transition(&services, rental.id, cardpool_domain::rentals::RentalState::Ended, "agent detached")
        .await
        .unwrap();
    assert_eq!(offers::list_offers(&services, &slices(Some("1g.10gb"))).await.unwrap().offers[0].gpus_free, 2);
    hosts::set_gpu_sale(&services, &provider, host_id, 1, GpuSale::Whole).await.unwrap();
    assert_eq!(offers::list_offers(&services, &slices(None)).await.unwrap().total, 0);
    let rented_whole = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    assert_eq!(rented_whole.gpu_indexes, vec![1]);
    // Sold whole and rented, it cannot be cut again.
    let rented = hosts::set_gpu_sale(&services, &provider, host_id, 1, GpuSale::Mig).await.unwrap_err();
    assert!(matches!(rented, AppError::Conflict(_)), "{rented:?}");
}

/// The agent's report decides which slices exist: a new layout retires the old slices, MIG
/// off retires them all, and reports that would confuse a slice with a GPU are refused.
async fn layout_changes_retire_slices(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "cut").gpus(1).mig(&LAYOUT).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Mig).await.unwrap();
    hosts::update_host_pricing(&services, &provider, host_id, &slice_price()).await.unwrap();
    assert_eq!(offers::list_offers(&services, &slices(None)).await.unwrap().offers[0].gpus_free, 2);
    // Selling a GPU as MIG needs instances; a GPU without MIG cannot be.
    let host = host_rows::Entity::find_by_id(host_id).one(&services.db).await.unwrap().unwrap();
    let report = |instances: Vec<MigInstance>, mig: Option<bool>| Inventory {
        protocol: PROTOCOL_VERSION,
        host: testing::host_facts("cut"),
        gpus: vec![GpuInfo {
            index: 0,
            uuid: "GPU-cut-0".into(),
            name: MODEL.into(),
            pci_bus_id: "00000000:00:00.0".into(),
            memory_total_bytes: 80 << 30,
            driver_version: "550".into(),
            cuda_version: "12.4".into(),
            power_limit_milliwatts: None,
            mig_enabled: mig,
            mig_instances: instances,
            nvlink_peers: vec![],
            mig_profiles: vec![],
        }],
    };
    let instance = |uuid: &str, profile: &str, gib: u64| MigInstance {
        uuid: uuid.into(),
        profile: profile.into(),
        compute_slices: 1,
        memory_bytes: gib << 30,
        gpu_instance_id: None,
        compute_instance_id: None,
    };
    // One 1g.10gb left of the two (the other re-cut into a 1g.20gb): one slice on offer.
    let recut = vec![
        instance("MIG-cut-0-0", "3g.40gb", 40),
        instance("MIG-cut-0-2", "1g.10gb", 10),
        instance("MIG-new", "1g.20gb", 20),
    ];
    hosts::record_inventory(&services, &host, &report(recut, Some(true))).await.unwrap();
    assert_eq!(offers::list_offers(&services, &slices(Some("1g.10gb"))).await.unwrap().offers[0].gpus_free, 1);
    let slice = rentals::book_offer(&services, &renter, &slice_request(host_id, 1)).await.unwrap();
    assert_eq!(slice.gpu_indexes, vec![0]);
    // A MIG UUID that repeats the GPU's own, or a profile that is no profile, changes nothing.
    let confused = report(vec![instance("GPU-cut-0", "1g.10gb", 10)], Some(true));
    assert!(hosts::record_inventory(&services, &host, &confused).await.is_err());
    let twice = report(vec![instance("MIG-twin", "1g.10gb", 10), instance("MIG-twin", "1g.10gb", 10)], Some(true));
    assert!(hosts::record_inventory(&services, &host, &twice).await.unwrap_err().field("gpus").is_some());
    let odd = report(vec![instance("MIG-x", "1g 10gb; --", 10)], Some(true));
    assert!(hosts::record_inventory(&services, &host, &odd).await.unwrap_err().field("mig_instances").is_some());
    rentals::stop_rental(&services, &renter, slice.id).await.unwrap();
    rentals::transition(&services, slice.id, cardpool_domain::rentals::RentalState::Ended, "agent detached")
        .await
        .unwrap();
    // MIG off: no slices remain on offer, and the GPU sold as MIG sells nothing until sold whole.
    hosts::record_inventory(&services, &host, &report(vec![], Some(false))).await.unwrap();
    assert_eq!(offers::list_offers(&services, &slices(None)).await.unwrap().total, 0);
    assert_eq!(offers::list_offers(&services, &OfferQuery::default()).await.unwrap().total, 0);
    let no_mig = hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Mig).await;
    assert!(no_mig.is_ok(), "already sold as MIG: nothing changes");
    hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Whole).await.unwrap();
    let whole = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    assert_eq!((whole.total, whole.offers[0].gpu_model.as_str()), (1, MODEL));
    let refused = hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Mig).await.unwrap_err();
    assert!(refused.field("sold_as").is_some(), "{refused:?}");
    // Only the host's provider decides how it is sold.
    let stranger = testing::provider(&services, "stranger@example.com").await;
    assert!(hosts::set_gpu_sale(&services, &stranger, host_id, 0, GpuSale::Whole).await.is_err());
}

/// NVML reads power per GPU, not per MIG instance: a slice's energy is its compute share of
/// its GPU's (3g.40gb: three sevenths), a whole GPU's all of it.
async fn a_slice_uses_its_share_of_its_gpus_energy(backend: Backend) {
    use crate::telemetry::{now_frames, run};
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "cut").gpus(2).mig(&LAYOUT).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    hosts::set_gpu_sale(&services, &provider, host_id, 1, GpuSale::Mig).await.unwrap();
    let big = slice_unit(MODEL, "3g.40gb");
    let price = cardpool_domain::host::GpuModelPrice { gpu_model: big.clone(), ..slice_price() };
    hosts::update_host_pricing(&services, &provider, host_id, &price).await.unwrap();
    let whole = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    let slice = BookOfferRequest { gpu_model: big, ..request(host_id, 1) };
    let slice = rentals::book_offer(&services, &renter, &slice).await.unwrap();
    assert_eq!((whole.gpu_indexes.as_slice(), slice.gpu_indexes.as_slice()), (&[0][..], &[1][..]));
    run(&services, host_id, whole.id).await;
    run(&services, host_id, slice.id).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // Both GPUs at 300 W for the same second.
    cardpool_service::telemetry::ingest(&services, host_id, 1, &now_frames(1, 1, 2, 90, 300_000), 0).await.unwrap();
    let energy = cardpool_service::entities::rental_energy::Entity::find().all(&services.db).await.unwrap();
    let of = |id: i64| energy.iter().find(|e| e.rental_id == id).map(|e| e.energy_mj).unwrap();
    assert!(of(whole.id) > 0);
    assert_eq!(of(slice.id), of(whole.id) * 3 / 7);
}

backend_tests!(
    slices_are_sold_booked_and_never_meet_a_whole_gpu_hold,
    layout_changes_retire_slices,
    a_slice_uses_its_share_of_its_gpus_energy
);
