//! Fabrics at the service level, on both backends: a provider declares a host's fabric, the
//! agent's reported links check it, renters see it on offers and filter by fabric and
//! interconnect; bad declarations change nothing, and only the host's provider may declare.

use cardpool_domain::{
    fabric::{HostFabric, Interconnect},
    offers::OfferQuery,
};
use cardpool_protocol::{GpuInfo, Inventory, NicInfo, PROTOCOL_VERSION};
use cardpool_service::{
    Settings, backend_tests,
    entities::hosts as host_rows,
    hosts, offers,
    testing::{self, Backend},
};
use sea_orm::EntityTrait;

fn ib(fabric_id: &str, gbps: u32) -> HostFabric {
    HostFabric { fabric_id: fabric_id.into(), interconnect: Interconnect::Infiniband, gbps, address: None }
}

async fn fabrics_are_declared_checked_and_searched(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let a = testing::host(&services, &provider, "a").gpus(2).await;
    let b = testing::host(&services, &provider, "b").gpus(2).await;
    let c = testing::host(&services, &provider, "c").gpus(2).await;

    // Nothing declared: offers carry no fabric, and a fabric filter finds nothing.
    let all = offers::list_offers(&services, &OfferQuery::default()).await.unwrap();
    assert_eq!(all.total, 3);
    assert!(all.offers.iter().all(|o| o.fabric.is_none()));

    // a and b share an InfiniBand fabric (ids are stored lowercased); c is on Ethernet.
    let view = hosts::set_host_fabric(&services, &provider, a, Some(&ib(" PDX-IB-1 ", 400))).await.unwrap().unwrap();
    assert_eq!((view.fabric_id.as_str(), view.checked), ("pdx-ib-1", None), "the agent reported no links yet");
    hosts::set_host_fabric(&services, &provider, b, Some(&ib("pdx-ib-1", 400))).await.unwrap();
    let ethernet =
        HostFabric { fabric_id: "pdx-eth".into(), interconnect: Interconnect::Ethernet, gbps: 100, address: None };
    hosts::set_host_fabric(&services, &provider, c, Some(&ethernet)).await.unwrap();

    // Host a's agent reports a 400G InfiniBand port, b's only a 200G one.
    let report = |name: &str, gbps: u32| Inventory {
        protocol: PROTOCOL_VERSION,
        host: cardpool_protocol::HostFacts {
            nics: vec![
                NicInfo { name: "mlx5_0/1".into(), link: "infiniband".into(), speed_mbps: Some(gbps * 1000), up: true },
                NicInfo { name: "eth0".into(), link: "ethernet".into(), speed_mbps: Some(25_000), up: true },
            ],
            ..testing::host_facts(name)
        },
        gpus: (0..2)
            .map(|i| GpuInfo {
                index: i,
                uuid: format!("GPU-{name}-{i}"),
                name: testing::TEST_GPU_MODEL.into(),
                pci_bus_id: format!("00000000:{i:02X}:00.0"),
                memory_total_bytes: 80 << 30,
                driver_version: "550".into(),
                cuda_version: "12.4".into(),
                power_limit_milliwatts: None,
                mig_enabled: None,
                mig_instances: vec![],
                nvlink_peers: vec![],
                mig_profiles: vec![],
            })
            .collect(),
    };
    for (id, name, gbps) in [(a, "a", 400), (b, "b", 200)] {
        let row = host_rows::Entity::find_by_id(id).one(&services.db).await.unwrap().unwrap();
        hosts::record_inventory(&services, &row, &report(name, gbps)).await.unwrap();
    }
    let detail = hosts::get_host(&services, &provider, a).await.unwrap();
    assert_eq!(detail.fabric.as_ref().and_then(|f| f.checked), Some(true));
    assert_eq!(detail.links.len(), 2);
    assert_eq!(hosts::get_host(&services, &provider, b).await.unwrap().fabric.unwrap().checked, Some(false));

    // Renters filter by fabric and by interconnect; each offer says what was checked.
    let on = |fabric: &str| OfferQuery { fabric: Some(fabric.into()), ..OfferQuery::default() };
    let mut found = offers::list_offers(&services, &on("PDX-IB-1")).await.unwrap().offers;
    found.sort_by_key(|o| o.host_id);
    assert_eq!(found.iter().map(|o| o.host_id).collect::<Vec<_>>(), [a, b]);
    assert_eq!(found.iter().map(|o| o.fabric.as_ref().unwrap().checked).collect::<Vec<_>>(), [Some(true), Some(false)]);
    let by_link = OfferQuery { interconnect: Some(Interconnect::Ethernet), ..OfferQuery::default() };
    assert_eq!(offers::list_offers(&services, &by_link).await.unwrap().offers[0].host_id, c);
    assert_eq!(offers::list_offers(&services, &on("nowhere")).await.unwrap().total, 0);
    let long = on(&"x".repeat(65));
    assert!(offers::list_offers(&services, &long).await.unwrap_err().field("fabric").is_some());

    // Bad declarations and strangers change nothing; clearing takes the host off the fabric.
    assert!(hosts::set_host_fabric(&services, &provider, a, Some(&ib("has space", 400))).await.is_err());
    assert!(hosts::set_host_fabric(&services, &provider, a, Some(&ib("pdx-ib-1", 0))).await.is_err());
    let stranger = testing::provider(&services, "stranger@example.com").await;
    assert!(hosts::set_host_fabric(&services, &stranger, a, None).await.is_err());
    assert_eq!(hosts::get_host(&services, &provider, a).await.unwrap().fabric.unwrap().fabric_id, "pdx-ib-1");
    assert_eq!(hosts::set_host_fabric(&services, &provider, a, None).await.unwrap(), None);
    assert_eq!(offers::list_offers(&services, &on("pdx-ib-1")).await.unwrap().offers.len(), 1);
}

backend_tests!(fabrics_are_declared_checked_and_searched);
