//! Host enrollment, credentials, inventory and liveness at the service level, on both backends.

use cardpool_domain::{AppError, host::HostStatus};
use cardpool_protocol::{GpuInfo, HostFacts, Inventory, MigInstance, PROTOCOL_VERSION, ProtocolVersion};
use cardpool_service::{
    Services, Settings, accounts,
    auth::{Credential, Principal},
    backend_tests, hosts,
    testing::{self, Backend},
};
use sea_orm::EntityTrait;
use std::time::Duration;

const SERVER: &str = "http://127.0.0.1:3000";

fn inventory(uuids: &[&str]) -> Inventory {
    Inventory {
        protocol: PROTOCOL_VERSION,
        host: HostFacts {
            hostname: "gpu-box-1".into(),
            cpu_model: "AMD EPYC 9654".into(),
            cpu_cores: 96,
            ram_bytes: 1 << 40,
            disk_bytes: 1 << 42,
            os: "Debian 12".into(),
            agent_version: "0.1.0".into(),
            location: None,
            nics: vec![],
        },
        gpus: uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| GpuInfo {
                index: i as u32,
                uuid: (*uuid).into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: format!("00000000:{i:02X}:00.0"),
                memory_total_bytes: 80 << 30,
                driver_version: "550.54.15".into(),
                cuda_version: "12.4".into(),
                power_limit_milliwatts: Some(700_000),
                mig_enabled: Some(false),
                mig_instances: vec![],
                nvlink_peers: vec![],
                mig_profiles: vec![],
            })
            .collect(),
    }
}

backend_tests!(
    enrollment_tokens_are_for_providers_single_use_and_hashed,
    a_host_speaks_only_with_its_own_credential,
    inventory_upserts_gpus_by_uuid,
    heartbeats_and_silence_drive_liveness_with_recorded_transitions,
    only_the_connection_that_owns_a_host_speaks_for_it,
    heartbeats_recorded_together_are_each_answered_for_their_host,
    hosts_are_visible_to_their_provider_and_admins_only,
    revoked_hosts_lose_their_credential,
);

async fn enrollment_tokens_are_for_providers_single_use_and_hashed(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let renter = testing::renter(&services, "renter@example.com").await;
    assert!(matches!(
        hosts::create_enrollment_token(&services, &renter, None, SERVER).await,
        Err(AppError::Forbidden(_))
    ));
    let provider = testing::provider(&services, "prov@example.com").await;
    let created = hosts::create_enrollment_token(&services, &provider, Some(" Frankfurt, DE "), SERVER).await.unwrap();
    assert_eq!(created.command, format!("cardpool-agent enroll --server {SERVER} --token {}", created.token));

    use cardpool_service::entities::enrollment_tokens;
    use sea_orm::EntityTrait;
    let row = enrollment_tokens::Entity::find().one(&services.db).await.unwrap().unwrap();
    assert_ne!(row.token_hash, created.token);
    assert_eq!(row.location.as_deref(), Some("Frankfurt, DE"));

    let enrolled = hosts::enroll_host(&services, &created.token, "gpu-box-1").await.unwrap();
    assert!(enrolled.credential.starts_with("cph_"));
    let replay = hosts::enroll_host(&services, &created.token, "gpu-box-2").await;
    assert_eq!(replay.unwrap_err(), AppError::Unauthorized, "a token works once");
    assert_eq!(hosts::enroll_host(&services, "cpe_made-up", "x").await.unwrap_err(), AppError::Unauthorized);
    let bad_name = hosts::create_enrollment_token(&services, &provider, Some(&"x".repeat(100)), SERVER).await;
    assert!(bad_name.unwrap_err().field("location").is_some());
}

async fn a_host_speaks_only_with_its_own_credential(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let a = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let b = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let host_a = hosts::enroll_host(&services, &a.token, "a").await.unwrap();
    let host_b = hosts::enroll_host(&services, &b.token, "b").await.unwrap();
    assert_eq!(hosts::authenticate_host(&services, &host_a.credential).await.unwrap().id, host_a.host_id);
    assert_eq!(hosts::authenticate_host(&services, &host_b.credential).await.unwrap().id, host_b.host_id);
    assert_eq!(hosts::authenticate_host(&services, "cph_forged").await.unwrap_err(), AppError::Unauthorized);
    assert_eq!(hosts::authenticate_host(&services, &a.token).await.unwrap_err(), AppError::Unauthorized);
}

async fn inventory_upserts_gpus_by_uuid(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();
    let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();

    // When each row was last written, by UUID.
    let written = || async {
        use cardpool_service::entities::gpus;
        let rows = gpus::Entity::find().all(&services.db).await.unwrap();
        rows.into_iter().map(|g| (g.uuid, g.updated_at)).collect::<std::collections::BTreeMap<_, _>>()
    };
    hosts::record_inventory(&services, &host, &inventory(&["GPU-a", "GPU-b"])).await.unwrap();
    let first = written().await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    hosts::record_inventory(&services, &host, &inventory(&["GPU-a", "GPU-b"])).await.unwrap();
    assert_eq!(written().await, first, "a report that is stored already writes no row");
    let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
    assert_eq!(detail.gpus.len(), 2, "re-reporting does not duplicate GPUs");
    assert_eq!(detail.host.gpu_summary, "2× NVIDIA H100 80GB HBM3");
    assert_eq!(detail.host.hostname, "box", "the enrolled name stays; reported facts are kept beside it");

    hosts::record_inventory(&services, &host, &inventory(&["GPU-a"])).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
    assert_eq!(detail.gpus.iter().map(|g| g.state.as_str()).collect::<Vec<_>>(), vec!["available", "missing"]);
    assert_eq!(detail.host.gpu_count, 1);
    let gone = written().await;
    assert_eq!(gone["GPU-a"], first["GPU-a"], "only the row that changed is written");
    assert!(gone["GPU-b"] > first["GPU-b"]);
    // A GPU back in the report is back on the market; so are new facts.
    let mut back = inventory(&["GPU-a", "GPU-b"]);
    back.host.agent_version = "0.2.0".into();
    hosts::record_inventory(&services, &host, &back).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
    assert_eq!(detail.gpus.iter().map(|g| g.state.as_str()).collect::<Vec<_>>(), vec!["available", "available"]);
    assert_eq!(detail.host.gpu_count, 2);
    assert_eq!(detail.host.agent_version.as_deref(), Some("0.2.0"));
    hosts::record_inventory(&services, &host, &inventory(&["GPU-a"])).await.unwrap();

    let mut mig = inventory(&["GPU-a"]);
    let slice = |n: u32| MigInstance {
        uuid: format!("MIG-{n}"),
        profile: "3g.40gb".into(),
        compute_slices: 3,
        memory_bytes: 40 << 30,
        gpu_instance_id: Some(n),
        compute_instance_id: Some(0),
    };
    mig.gpus[0].mig_enabled = Some(true);
    mig.gpus[0].mig_instances = vec![slice(1), slice(2)];
    hosts::record_inventory(&services, &host, &mig).await.unwrap();
    let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
    assert_eq!(detail.gpus[0].mig_enabled, Some(true));
    assert_eq!(detail.gpus[0].mig_instances, mig.gpus[0].mig_instances, "MIG instances are kept as reported");
    let carved = written().await;
    assert!(carved.contains_key("MIG-1") && carved.contains_key("MIG-2"), "each slice is a row of its own");
    hosts::record_inventory(&services, &host, &mig).await.unwrap();
    assert_eq!(written().await, carved, "slices stored already are not written again");
    mig.gpus[0].mig_instances = (1..=8).map(slice).collect();
    let refused = hosts::record_inventory(&services, &host, &mig).await.unwrap_err();
    assert!(refused.field("mig_instances").unwrap().contains("at most 7"));
    let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
    assert_eq!(detail.gpus[0].mig_instances.len(), 2, "a refused report changes nothing");

    let future = Inventory { protocol: ProtocolVersion { major: 2, minor: 0 }, ..inventory(&[]) };
    let refused = hosts::record_inventory(&services, &host, &future).await.unwrap_err();
    assert!(refused.field("protocol").unwrap().contains("not supported"));
}

async fn heartbeats_and_silence_drive_liveness_with_recorded_transitions(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();
    let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();
    let status = || async { hosts::get_host(&services, &provider, host.id).await.unwrap().host.status };
    assert_eq!(status().await, HostStatus::Offline, "enrolled but not yet connected");

    hosts::record_heartbeat(&services, &host).await.unwrap();
    hosts::record_heartbeat(&services, &host).await.unwrap();
    assert_eq!(status().await, HostStatus::Online);
    assert!(hosts::mark_silent_hosts_offline(&services, Duration::from_secs(20)).await.unwrap().is_empty());

    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(hosts::mark_silent_hosts_offline(&services, Duration::from_secs(1)).await.unwrap(), vec![host.id]);
    assert_eq!(status().await, HostStatus::Offline);
    hosts::record_heartbeat(&services, &host).await.unwrap();
    assert_eq!(status().await, HostStatus::Online, "back online on reconnect");

    let events = hosts::get_host(&services, &provider, host.id).await.unwrap().events;
    let trail: Vec<(HostStatus, &str)> = events.iter().rev().map(|e| (e.status, e.reason.as_str())).collect();
    assert_eq!(
        trail,
        vec![
            (HostStatus::Offline, "enrolled"),
            (HostStatus::Online, "agent connected"),
            (HostStatus::Offline, "missed heartbeats"),
            (HostStatus::Online, "agent connected"),
        ]
    );
}

/// The newest connection of a host owns it (on whichever replica): an older one's heartbeats
/// are refused (it should end) and its late disconnect leaves the owner in place.
async fn only_the_connection_that_owns_a_host_speaks_for_it(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();
    let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();
    let owner = || async {
        cardpool_service::entities::hosts::Entity::find_by_id(host.id)
            .one(&services.db)
            .await
            .unwrap()
            .unwrap()
            .connection_id
    };

    hosts::connect_host(&services, &host, "replica-b:1").await.unwrap();
    assert_eq!(hosts::get_host(&services, &provider, host.id).await.unwrap().host.status, HostStatus::Online);
    assert!(hosts::record_connection_heartbeat(&services, host.id, "replica-b:1").await.unwrap());
    hosts::connect_host(&services, &host, "replica-a:7").await.unwrap();
    assert_eq!(owner().await.as_deref(), Some("replica-a:7"));
    assert!(hosts::owns_connection(&services, host.id, "replica-a:7").await.unwrap());
    assert!(!hosts::owns_connection(&services, host.id, "replica-b:1").await.unwrap());

    let before = hosts::get_host(&services, &provider, host.id).await.unwrap().host.last_heartbeat_at;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!hosts::record_connection_heartbeat(&services, host.id, "replica-b:1").await.unwrap(), "superseded");
    let after = hosts::get_host(&services, &provider, host.id).await.unwrap().host.last_heartbeat_at;
    assert_eq!(before, after, "the stale connection's heartbeat changed nothing");
    hosts::disconnect_host(&services, host.id, "replica-b:1").await.unwrap();
    assert_eq!(owner().await.as_deref(), Some("replica-a:7"), "a stale disconnect leaves the owner");
    assert!(hosts::record_connection_heartbeat(&services, host.id, "replica-a:7").await.unwrap());
    hosts::disconnect_host(&services, host.id, "replica-a:7").await.unwrap();
    assert_eq!(owner().await, None);
    assert_eq!(
        hosts::get_host(&services, &provider, host.id).await.unwrap().host.status,
        HostStatus::Online,
        "a closed connection is not an offline host (the grace decides)"
    );
}

/// Heartbeats of many connections are recorded in one batch, yet each is answered for its own
/// host: counted ones get their host's commands (a stray workload is detached), an offline
/// host's owner brings it back online, a superseded connection is told it was taken over, a
/// revoked host that it was revoked. A host beating twice in the batch gets its answer twice.
async fn heartbeats_recorded_together_are_each_answered_for_their_host(backend: Backend) {
    use cardpool_protocol::ServerMessage;
    use cardpool_service::entities::hosts as host_rows;
    use hosts::HeartbeatAnswer;
    use sea_orm::{ActiveModelTrait, ActiveValue::Set, IntoActiveModel};

    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let mut enrolled_hosts = Vec::new();
    for (i, name) in ["live", "offline", "superseded", "revoked"].into_iter().enumerate() {
        let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
        let enrolled = hosts::enroll_host(&services, &token.token, name).await.unwrap();
        let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();
        hosts::connect_host(&services, &host, &format!("replica:{i}")).await.unwrap();
        enrolled_hosts.push(host);
    }
    let [live, offline, superseded, revoked] = [0, 1, 2, 3].map(|i| enrolled_hosts[i].id);
    let row = host_rows::Entity::find_by_id(offline).one(&services.db).await.unwrap().unwrap();
    let mut row = row.into_active_model();
    row.status = Set(HostStatus::Offline.as_str().into());
    row.update(&services.db).await.unwrap();
    hosts::connect_host(&services, &enrolled_hosts[2], "replica:9").await.unwrap();
    hosts::revoke_host(&services, &provider, revoked).await.unwrap();
    let before = hosts::get_host(&services, &provider, live).await.unwrap().host.last_heartbeat_at;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let beat = |host_id: i64, connection: &str, running: Vec<i64>| {
        let beat = hosts::Beat { host_id, connection: connection.into(), running, reconciles: true };
        hosts::heartbeat(&services, beat)
    };
    let (first, second, came_back, taken_over, cut_off) = tokio::join!(
        beat(live, "replica:0", vec![424_242]),
        beat(live, "replica:0", vec![424_242]),
        beat(offline, "replica:1", vec![]),
        beat(superseded, "replica:2", vec![]),
        beat(revoked, "replica:3", vec![]),
    );
    for answer in [first, second] {
        let Ok(HeartbeatAnswer::Commands(commands)) = answer else { panic!("{answer:?}") };
        assert_eq!(commands, [ServerMessage::Detach { rental_id: 424_242 }]);
    }
    assert!(hosts::get_host(&services, &provider, live).await.unwrap().host.last_heartbeat_at > before);
    assert!(matches!(came_back, Ok(HeartbeatAnswer::Commands(ref c)) if c.is_empty()), "{came_back:?}");
    assert_eq!(hosts::get_host(&services, &provider, offline).await.unwrap().host.status, HostStatus::Online);
    assert!(matches!(taken_over, Ok(HeartbeatAnswer::TakenOver)), "{taken_over:?}");
    assert!(matches!(cut_off, Ok(HeartbeatAnswer::Revoked)), "{cut_off:?}");
}

async fn hosts_are_visible_to_their_provider_and_admins_only(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let owner = testing::provider(&services, "owner@example.com").await;
    let other = testing::provider(&services, "other@example.com").await;
    let token = hosts::create_enrollment_token(&services, &owner, None, SERVER).await.unwrap();
    let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();

    assert_eq!(hosts::list_hosts(&services, &owner).await.unwrap().len(), 1);
    assert!(hosts::list_hosts(&services, &other).await.unwrap().is_empty());
    assert!(matches!(hosts::get_host(&services, &other, enrolled.host_id).await, Err(AppError::NotFound(_))));
    assert!(matches!(hosts::revoke_host(&services, &other, enrolled.host_id).await, Err(AppError::NotFound(_))));

    accounts::create_admin(&services, "admin@example.com", Some("admin password 1")).await.unwrap();
    let admin = account_roles(&services, "admin@example.com").await;
    assert_eq!(hosts::list_hosts(&services, &admin).await.unwrap().len(), 1);
    assert!(hosts::get_host(&services, &admin, enrolled.host_id).await.is_ok());
}

async fn account_roles(services: &Services, email: &str) -> Principal {
    let (me, _) = accounts::check_credentials(
        services,
        &cardpool_domain::account::SignInRequest { email: email.into(), password: "admin password 1".into() },
        None,
    )
    .await
    .unwrap();
    Principal { user_id: me.id, email: me.email, roles: me.roles, credential: Credential::Session }
}

async fn revoked_hosts_lose_their_credential(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
    let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();
    hosts::revoke_host(&services, &provider, enrolled.host_id).await.unwrap();
    assert_eq!(hosts::authenticate_host(&services, &enrolled.credential).await.unwrap_err(), AppError::Unauthorized);
    let detail = hosts::get_host(&services, &provider, enrolled.host_id).await.unwrap();
    assert_eq!(detail.host.status, HostStatus::Revoked);
    assert_eq!(detail.events[0].reason, "revoked by its provider");
}

mod pricing {
    use super::*;
    use cardpool_domain::host::GpuModelPrice;

    fn price(model: &str, on_demand: i64, reserved: i64, spot: i64) -> GpuModelPrice {
        GpuModelPrice {
            gpu_model: model.into(),
            on_demand_micros: on_demand,
            reserved_micros: reserved,
            spot_min_bid_micros: spot,
        }
    }

    backend_tests!(prices_are_validated_stored_as_integers_and_gate_listing);

    async fn prices_are_validated_stored_as_integers_and_gate_listing(backend: Backend) {
        let (_db, services) = testing::services(backend, Settings::default()).await;
        let provider = testing::provider(&services, "p@example.com").await;
        let stranger = testing::provider(&services, "s@example.com").await;
        let token = hosts::create_enrollment_token(&services, &provider, None, SERVER).await.unwrap();
        let enrolled = hosts::enroll_host(&services, &token.token, "box").await.unwrap();
        let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();

        let listing = hosts::set_host_listed(&services, &provider, host.id, true).await;
        assert!(matches!(listing, Err(AppError::Conflict(m)) if m.contains("not reported any GPUs")));
        hosts::record_inventory(&services, &host, &inventory(&["GPU-a", "GPU-b"])).await.unwrap();
        let unpriced = hosts::set_host_listed(&services, &provider, host.id, true).await;
        assert!(matches!(unpriced, Err(AppError::Conflict(m)) if m.contains("set prices for NVIDIA H100 80GB HBM3")));

        let model = "NVIDIA H100 80GB HBM3";
        let bad = hosts::update_host_pricing(&services, &provider, host.id, &price(model, 0, 3_000_000, 1))
            .await
            .unwrap_err();
        assert!(bad.field("on_demand").is_some());
        let inverted =
            hosts::update_host_pricing(&services, &provider, host.id, &price(model, 2_000_000, 3_000_000, 1)).await;
        assert!(inverted.unwrap_err().field("reserved").is_some());
        let unknown = hosts::update_host_pricing(&services, &provider, host.id, &price("NVIDIA B200", 2, 1, 1)).await;
        assert!(unknown.unwrap_err().field("gpu_model").is_some());
        let foreign = hosts::update_host_pricing(&services, &stranger, host.id, &price(model, 2, 1, 1)).await;
        assert!(matches!(foreign, Err(AppError::NotFound(_))));

        hosts::update_host_pricing(&services, &provider, host.id, &price(model, 2_490_000, 1_990_000, 800_000))
            .await
            .unwrap();
        hosts::update_host_pricing(&services, &provider, host.id, &price(model, 2_500_000, 2_000_000, 900_000))
            .await
            .unwrap();
        let detail = hosts::get_host(&services, &provider, host.id).await.unwrap();
        assert_eq!(
            detail.prices,
            vec![price(model, 2_500_000, 2_000_000, 900_000)],
            "one row per model, updated in place"
        );
        assert!(!detail.host.listed);

        // A host whose agent cannot isolate workloads stays off the market, with the reason.
        let check = |passed: bool, detail: &str| cardpool_protocol::SelfTestCheck {
            name: "isolation".into(),
            passed,
            detail: detail.into(),
        };
        let unsafe_host = cardpool_protocol::SelfTestReport {
            source: "NVML".into(),
            checks: vec![check(false, "commands cannot run sandboxed (bubblewrap is not installed)")],
        };
        let host = hosts::authenticate_host(&services, &enrolled.credential).await.unwrap();
        hosts::record_self_test(&services, &host, &unsafe_host).await.unwrap();
        let refused = hosts::set_host_listed(&services, &provider, host.id, true).await;
        assert!(
            matches!(&refused, Err(AppError::Conflict(m)) if m.contains("bubblewrap is not installed")),
            "{refused:?}"
        );
        assert!(!hosts::get_host(&services, &provider, host.id).await.unwrap().host.listed);
        let safe_host = cardpool_protocol::SelfTestReport { checks: vec![check(true, "sandboxed")], ..unsafe_host };
        hosts::record_self_test(&services, &host, &safe_host).await.unwrap();

        hosts::set_host_listed(&services, &provider, host.id, true).await.unwrap();
        assert!(hosts::get_host(&services, &provider, host.id).await.unwrap().host.listed);
        hosts::set_host_listed(&services, &provider, host.id, false).await.unwrap();
        assert!(!hosts::get_host(&services, &provider, host.id).await.unwrap().host.listed);
    }
}
