//! MIG layouts a provider picks and the agent carves, on both backends: only where the agent
//! can carve, only layouts that fit, never under a rental; pending (off the market, the agent
//! told until it reports) until the inventory shows the layout; a failure is kept and puts the
//! GPU back as it is; asking for the layout the GPU has cancels a pending one.

use crate::rentals::request;
use cardpool_domain::{
    AppError,
    host::{GpuModelPrice, GpuSale},
    offers::{OfferQuery, OfferUnit, slice_unit},
    rentals::{BookOfferRequest, RentalState},
};
use cardpool_protocol::{GpuInfo, Inventory, MigInstance, MigProfile, PROTOCOL_VERSION, ServerMessage};
use cardpool_service::{
    Settings, backend_tests,
    entities::hosts as host_rows,
    hosts, offers, rentals,
    testing::{self, Backend},
};
use sea_orm::EntityTrait;

const MODEL: &str = testing::TEST_GPU_MODEL;

/// What an H100's agent with root and NVML reports it can make.
fn h100_profiles() -> Vec<MigProfile> {
    cardpool_protocol::mig::nvidia_profiles("H100-80GB", 80 << 30).unwrap()
}

/// The host "cut": GPU 0 carved as `layout` by an agent that can carve it, GPU 1 with MIG on but
/// carved by hand (no profiles reported).
fn report(layout: &[&str]) -> Inventory {
    let gpu = |index: u32, layout: &[&str], profiles: Vec<MigProfile>| GpuInfo {
        index,
        uuid: format!("GPU-cut-{index}"),
        name: MODEL.into(),
        pci_bus_id: format!("00000000:{index:02X}:00.0"),
        memory_total_bytes: 80 << 30,
        driver_version: "550".into(),
        cuda_version: "12.4".into(),
        power_limit_milliwatts: None,
        mig_enabled: Some(true),
        nvlink_peers: vec![],
        mig_instances: layout
            .iter()
            .enumerate()
            .map(|(k, profile)| MigInstance {
                uuid: format!("MIG-cut-{index}-{k}-{profile}"),
                profile: (*profile).into(),
                compute_slices: profile[..1].parse().unwrap(),
                memory_bytes: 10 << 30,
                gpu_instance_id: Some(k as u32 + 1),
                compute_instance_id: Some(0),
            })
            .collect(),
        mig_profiles: profiles,
    };
    Inventory {
        protocol: PROTOCOL_VERSION,
        host: testing::host_facts("cut"),
        gpus: vec![gpu(0, layout, h100_profiles()), gpu(1, &["3g.40gb", "3g.40gb"], vec![])],
    }
}

fn names(layout: &[&str]) -> Vec<String> {
    layout.iter().map(|n| (*n).to_owned()).collect()
}

fn price(profile: &str) -> GpuModelPrice {
    GpuModelPrice {
        gpu_model: slice_unit(MODEL, profile),
        on_demand_micros: 400_000,
        reserved_micros: 320_000,
        spot_min_bid_micros: 150_000,
    }
}

async fn free_slices(services: &cardpool_service::Services, profile: &str) -> u32 {
    let query = OfferQuery { unit: Some(OfferUnit::Slice), mig_profile: Some(profile.into()), ..OfferQuery::default() };
    offers::list_offers(services, &query).await.unwrap().offers.first().map_or(0, |o| o.gpus_free)
}

async fn carve_commands(services: &cardpool_service::Services, host_id: i64) -> Vec<(u32, Vec<String>)> {
    rentals::commands_for_host(services, host_id, Some(&[]))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| match c {
            ServerMessage::ApplyMigLayout { gpu_index, profiles } => Some((gpu_index, profiles)),
            _ => None,
        })
        .collect()
}

async fn a_provider_carves_a_gpu_through_its_agent(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "cut").gpus(2).await;
    let host = host_rows::Entity::find_by_id(host_id).one(&services.db).await.unwrap().unwrap();
    let two = ["3g.40gb", "3g.40gb"];
    hosts::record_inventory(&services, &host, &report(&two)).await.unwrap();
    hosts::set_gpu_sale(&services, &provider, host_id, 0, GpuSale::Mig).await.unwrap();
    hosts::update_host_pricing(&services, &provider, host_id, &price("3g.40gb")).await.unwrap();
    assert_eq!(free_slices(&services, "3g.40gb").await, 2);
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!(detail.gpus[0].mig_profiles.len(), 6);
    assert!(detail.gpus[1].mig_profiles.is_empty());

    // Refused, changing nothing: a GPU its agent cannot carve, layouts that do not fit or name
    // no profile of the GPU, and anybody but the host's provider.
    let seven = names(&["1g.10gb"; 7]);
    let by_hand = hosts::set_mig_layout(&services, &provider, host_id, 1, seven.clone()).await.unwrap_err();
    assert!(by_hand.field("profiles").is_some_and(|m| m.contains("nvidia-smi mig")), "{by_hand:?}");
    let too_big = hosts::set_mig_layout(&services, &provider, host_id, 0, names(&["7g.80gb", "1g.10gb"])).await;
    assert!(too_big.unwrap_err().field("profiles").is_some_and(|m| m.contains("8 compute slices")));
    let unknown = hosts::set_mig_layout(&services, &provider, host_id, 0, names(&["5g.50gb"])).await.unwrap_err();
    assert!(unknown.field("profiles").is_some_and(|m| m.contains("its profiles: 1g.10gb")), "{unknown:?}");
    let long = hosts::set_mig_layout(&services, &provider, host_id, 0, vec!["1".repeat(33)]).await;
    assert!(long.unwrap_err().field("profiles").is_some());
    assert!(hosts::set_mig_layout(&services, &provider, host_id, 9, seven.clone()).await.is_err());
    let stranger = testing::provider(&services, "stranger@example.com").await;
    assert!(hosts::set_mig_layout(&services, &stranger, host_id, 0, seven.clone()).await.is_err());
    assert!(carve_commands(&services, host_id).await.is_empty());
    assert_eq!(free_slices(&services, "3g.40gb").await, 2);

    // Never under a rental: a booked slice keeps its GPU's layout until the rental has ended.
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    let slice = BookOfferRequest { gpu_model: slice_unit(MODEL, "3g.40gb"), ..request(host_id, 1) };
    let booked = rentals::book_offer(&services, &renter, &slice).await.unwrap();
    let busy = hosts::set_mig_layout(&services, &provider, host_id, 0, seven.clone()).await.unwrap_err();
    assert!(matches!(busy, AppError::Conflict(_)), "{busy:?}");
    rentals::stop_rental(&services, &renter, booked.id).await.unwrap();
    rentals::transition(&services, booked.id, RentalState::Ended, "agent detached").await.unwrap();

    // Asked: pending, off the market, and the agent is told until its inventory shows it.
    hosts::set_mig_layout(&services, &provider, host_id, 0, seven.clone()).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!(
        (detail.gpus[0].state.as_str(), detail.gpus[0].mig_layout_pending.as_ref()),
        ("reconfiguring", Some(&seven))
    );
    assert_eq!(free_slices(&services, "3g.40gb").await, 0);
    assert!(rentals::book_offer(&services, &renter, &slice).await.is_err(), "a slice about to go is not booked");
    assert_eq!(carve_commands(&services, host_id).await, [(0, seven.clone())]);
    // An inventory from before the carving (a reconnect) leaves it pending.
    hosts::record_inventory(&services, &host, &report(&two)).await.unwrap();
    assert_eq!(free_slices(&services, "3g.40gb").await, 0);
    assert_eq!(carve_commands(&services, host_id).await.len(), 1);
    // Carved: seven 1g.10gb slices on sale once priced (the GPU is sold as MIG), the old ones
    // gone.
    hosts::record_inventory(&services, &host, &report(&["1g.10gb"; 7])).await.unwrap();
    assert!(carve_commands(&services, host_id).await.is_empty());
    hosts::update_host_pricing(&services, &provider, host_id, &price("1g.10gb")).await.unwrap();
    assert_eq!((free_slices(&services, "1g.10gb").await, free_slices(&services, "3g.40gb").await), (7, 0));
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!((detail.gpus[0].state.as_str(), detail.gpus[0].mig_layout_pending.as_ref()), ("available", None));
    let small = BookOfferRequest { gpu_model: slice_unit(MODEL, "1g.10gb"), ..request(host_id, 2) };
    let two_small = rentals::book_offer(&services, &renter, &small).await.unwrap();
    assert_eq!(two_small.gpu_indexes, [0, 0]);
    rentals::stop_rental(&services, &renter, two_small.id).await.unwrap();
    rentals::transition(&services, two_small.id, RentalState::Ended, "agent detached").await.unwrap();

    // The agent could not: the reason is kept, the GPU is back as it is.
    hosts::set_mig_layout(&services, &provider, host_id, 0, names(&two)).await.unwrap();
    assert_eq!(free_slices(&services, "1g.10gb").await, 0);
    hosts::record_layout_failure(&services, &host, 0, "GPU 0 is in use by rental 99").await.unwrap();
    hosts::record_inventory(&services, &host, &report(&["1g.10gb"; 7])).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!(detail.gpus[0].mig_layout_error.as_deref(), Some("GPU 0 is in use by rental 99"));
    assert_eq!((detail.gpus[0].state.as_str(), detail.gpus[0].mig_layout_pending.as_ref()), ("available", None));
    assert_eq!(free_slices(&services, "1g.10gb").await, 7);
    assert!(carve_commands(&services, host_id).await.is_empty());
    // A late failure for a layout no longer pending changes nothing.
    hosts::record_layout_failure(&services, &host, 0, "late").await.unwrap();
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!(detail.gpus[0].mig_layout_error.as_deref(), Some("GPU 0 is in use by rental 99"));

    // Asking for the layout the GPU has cancels a pending change (and clears the old failure).
    hosts::set_mig_layout(&services, &provider, host_id, 0, names(&["4g.40gb"])).await.unwrap();
    assert_eq!(free_slices(&services, "1g.10gb").await, 0);
    hosts::set_mig_layout(&services, &provider, host_id, 0, seven).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host_id).await.unwrap();
    assert_eq!((detail.gpus[0].mig_layout_pending.as_ref(), detail.gpus[0].mig_layout_error.as_ref()), (None, None));
    assert_eq!(free_slices(&services, "1g.10gb").await, 7);
    assert!(carve_commands(&services, host_id).await.is_empty());
}

backend_tests!(a_provider_carves_a_gpu_through_its_agent);
