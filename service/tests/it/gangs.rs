//! Gangs at the service level, on both backends: booked all or nothing on hosts of one fabric
//! (also under a storm of gang and single bookings racing for the same GPUs), started behind a
//! barrier (billing starts for every member at once, when the last is ready), billed exactly
//! per member, told the rendezvous, and stopped as a whole when a member is lost (or held, as
//! the renter chose); spot gangs preempted as a whole.

use super::rentals::{MODEL, report, request, spot, wallet};
use cardpool_domain::{
    AppError,
    fabric::{HostFabric, Interconnect},
    gangs::{BookGangRequest, GangState, OnMemberLoss},
    offers::RentalKind,
    rentals::{RentalState, Workload},
};
use cardpool_protocol::{ServerMessage, WorkloadStatus};
use cardpool_service::{
    Services, Settings,
    auth::Principal,
    backend_tests,
    entities::{rental_gpus, rentals as rental_rows},
    hosts, rentals,
    testing::{self, Backend, TestDb},
};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter};

fn fabric(id: &str, address: &str) -> HostFabric {
    HostFabric {
        fabric_id: id.into(),
        interconnect: Interconnect::Infiniband,
        gbps: 400,
        address: Some(address.into()),
    }
}

/// Hosts of `gpus` GPUs each: three on fabric `pdx-ib` (10.8.0.1-3), one on `sea-ib`, one
/// with no fabric. Returns their ids in that order.
async fn fleet(backend: Backend, gpus: usize) -> (TestDb, Services, Principal, Vec<i64>) {
    let (db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let mut ids = Vec::new();
    for (i, (name, declared)) in [
        ("pdx-1", Some(fabric("pdx-ib", "10.8.0.1"))),
        ("pdx-2", Some(fabric("pdx-ib", "10.8.0.2"))),
        ("pdx-3", Some(fabric("pdx-ib", "10.8.0.3"))),
        ("sea-1", Some(fabric("sea-ib", "10.9.0.1"))),
        ("lone", None),
    ]
    .into_iter()
    .enumerate()
    {
        let id = testing::host(&services, &provider, name).gpus(gpus).await;
        hosts::set_host_fabric(&services, &provider, id, declared.as_ref()).await.unwrap();
        assert!(i == 4 || declared.is_some());
        ids.push(id);
    }
    (db, services, provider, ids)
}

fn gang(nodes: u32, gpus_per_node: u32) -> BookGangRequest {
    BookGangRequest {
        gpu_model: MODEL.into(),
        nodes,
        gpus_per_node,
        kind: RentalKind::OnDemand,
        bid_micros: None,
        fabric_id: None,
        workload: Workload { command: Some("torchrun train.py".into()), ..Workload::default() },
        starts_at: None,
        hours: None,
        on_member_loss: OnMemberLoss::Stop,
        master_port: None,
    }
}

async fn members(services: &Services, gang_id: i64) -> Vec<rental_rows::Model> {
    let mut rows =
        rental_rows::Entity::find().filter(rental_rows::Column::GangId.eq(gang_id)).all(&services.db).await.unwrap();
    rows.sort_by_key(|r| r.gang_rank);
    rows
}

async fn gangs_book_all_or_nothing_on_one_fabric(backend: Backend) {
    let (_db, services, provider, hosts) = fleet(backend, 8).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(1_000).await;

    // Bad requests change nothing.
    for (bad, field) in [
        (gang(1, 8), "nodes"),
        (gang(2, 0), "gpus_per_node"),
        (BookGangRequest { kind: RentalKind::Spot, ..gang(2, 8) }, "bid_micros"),
        (
            BookGangRequest {
                kind: RentalKind::Spot,
                bid_micros: Some(1_000_000),
                on_member_loss: OnMemberLoss::Hold,
                ..gang(2, 8)
            },
            "on_member_loss",
        ),
        (BookGangRequest { bid_micros: Some(1_000_000), ..gang(2, 8) }, "bid_micros"),
        (BookGangRequest { master_port: Some(80), ..gang(2, 8) }, "master_port"),
        (BookGangRequest { workload: Workload::default(), ..gang(2, 8) }, "workload"),
    ] {
        let err = rentals::book_gang(&services, &renter, &bad).await.unwrap_err();
        assert!(err.field(field).is_some(), "{field}: {err:?}");
    }
    // Four hosts of one fabric do not exist: refused, nothing held.
    let err = rentals::book_gang(&services, &renter, &gang(4, 8)).await.unwrap_err();
    assert!(matches!(&err, AppError::Conflict(m) if m.contains("no fabric has 4 hosts")), "{err:?}");
    assert!(rental_gpus::Entity::find().all(&services.db).await.unwrap().is_empty());

    // 2×8 on pdx-ib (three hosts there, sea-ib has one): ranks in price order (equal prices:
    // host order), each member an ordinary rental of 8 GPUs.
    let booked = rentals::book_gang(&services, &renter, &gang(2, 8)).await.unwrap();
    assert_eq!((booked.fabric_id.as_str(), booked.nodes, booked.gpus_per_node), ("pdx-ib", 2, 8));
    assert_eq!(booked.state, GangState::Starting);
    assert_eq!((booked.master_addr.as_str(), booked.master_port), ("10.8.0.1", 29500));
    let member_hosts: Vec<i64> = booked.members.iter().map(|m| m.host_id).collect();
    assert_eq!(member_hosts, [hosts[0], hosts[1]]);
    assert!(booked.members.iter().all(|m| m.gpu_indexes.len() == 8 && m.state == RentalState::Requested));

    // Each member's agent is told to attach with the rendezvous environment.
    for member in &booked.members {
        let commands = rentals::commands_for_host(&services, member.host_id, None).await.unwrap();
        let Some(ServerMessage::Attach(spec)) = commands.first() else { panic!("{commands:?}") };
        let rank = member.rank;
        for want in [
            "MASTER_ADDR=10.8.0.1".to_owned(),
            "MASTER_PORT=29500".to_owned(),
            "WORLD_SIZE=16".to_owned(),
            format!("RANK={}", rank * 8),
            format!("NODE_RANK={rank}"),
            "LOCAL_WORLD_SIZE=8".to_owned(),
        ] {
            assert!(spec.env.contains(&want), "{want} in {:?}", spec.env);
        }
        let link = spec.gang.as_ref().unwrap();
        assert_eq!((link.rank, link.master_addr.as_str(), link.master_port), (rank, "10.8.0.1", 29500));
    }

    // A fabric named, or one without enough free hosts: the third pdx host cannot make a pair.
    let on_sea = BookGangRequest { fabric_id: Some("SEA-IB".into()), ..gang(2, 8) };
    let err = rentals::book_gang(&services, &renter, &on_sea).await.unwrap_err();
    assert!(matches!(&err, AppError::Conflict(m) if m.contains("on fabric SEA-IB")), "{err:?}");
    let err = rentals::book_gang(&services, &renter, &gang(2, 8)).await.unwrap_err();
    assert!(matches!(err, AppError::Conflict(_)), "{err:?}");
    // 2×4: pdx-3 and sea-1 have 8 free each, but on two fabrics: refused, nothing held.
    let held_before = rental_gpus::Entity::find().all(&services.db).await.unwrap().len();
    let err = rentals::book_gang(&services, &renter, &gang(2, 4)).await.unwrap_err();
    assert!(matches!(err, AppError::Conflict(_)), "{err:?}");
    assert_eq!(rental_gpus::Entity::find().all(&services.db).await.unwrap().len(), held_before);
    // Nor can a provider rent a gang of its own hosts.
    let err = rentals::book_gang(&services, &provider, &gang(2, 1)).await.unwrap_err();
    assert!(matches!(err, AppError::Conflict(_)), "{err:?}");

    // Another renter cannot see the gang.
    let other = testing::renter(&services, "other@example.com").await;
    assert!(matches!(rentals::get_gang(&services, &other, booked.id).await, Err(AppError::NotFound(_))));
    assert_eq!(rentals::list_gangs(&services, &renter).await.unwrap().gangs.len(), 1);
    assert!(rentals::list_gangs(&services, &other).await.unwrap().gangs.is_empty());
}

async fn a_gang_costs_its_whole_upfront(backend: Backend) {
    let (_db, services, _provider, _hosts) = fleet(backend, 2).await;
    // An hour of 2×2 GPUs at $2.00 is $8.00: $7 is not enough, and nothing is held.
    let renter = testing::renter(&services, "renter@example.com").dollars(7).await;
    let err = rentals::book_gang(&services, &renter, &gang(2, 2)).await.unwrap_err();
    assert!(matches!(&err, AppError::PaymentRequired(m) if m.contains("$8.00")), "{err:?}");
    assert!(rental_gpus::Entity::find().all(&services.db).await.unwrap().is_empty());
    // A reservation prepays every member.
    let renter = testing::renter(&services, "rich@example.com").dollars(100).await;
    let before = wallet(&services, &renter).await;
    let reserved = BookGangRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(chrono::Utc::now() + chrono::Duration::hours(2)),
        hours: Some(3),
        ..gang(2, 2)
    };
    let booked = rentals::book_gang(&services, &renter, &reserved).await.unwrap();
    assert_eq!(booked.members.len(), 2);
    // 2 members × 2 GPUs × 3 h × $1.60.
    assert_eq!(before - wallet(&services, &renter).await, 2 * 2 * 3 * 1_600_000);
}

async fn members_start_together_and_bill_exactly(backend: Backend) {
    let (_db, services, _provider, _hosts) = fleet(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(1_000).await;
    let booked = rentals::book_gang(&services, &renter, &gang(3, 2)).await.unwrap();
    let ids: Vec<(i64, i64)> = booked.members.iter().map(|m| (m.host_id, m.rental_id)).collect();

    // Two of three up: they wait, unbilled (still provisioning).
    for &(host, rental) in &ids[..2] {
        report(&services, host, rental, WorkloadStatus::Provisioning).await;
        report(&services, host, rental, WorkloadStatus::Ready).await;
    }
    // Told again (an agent reconnecting), nothing changes.
    report(&services, ids[0].0, ids[0].1, WorkloadStatus::Ready).await;
    let waiting = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(waiting.state, GangState::Starting);
    assert!(waiting.started_at.is_none());
    assert!(waiting.members[..2].iter().all(|m| m.state == RentalState::Provisioning && m.ready_at.is_some()));
    assert!(members(&services, booked.id).await.iter().all(|m| m.running_since.is_none()));
    let detail = rentals::get_rental(&services, &renter, ids[0].1).await.unwrap();
    assert!(detail.events.iter().any(|e| e.reason.contains("waiting for the gang's other members")), "{detail:?}");

    // The last one up starts all three, at one instant.
    report(&services, ids[2].0, ids[2].1, WorkloadStatus::Ready).await;
    let running = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(running.state, GangState::Running);
    let rows = members(&services, booked.id).await;
    let since = rows[0].running_since.unwrap();
    assert!(rows.iter().all(|m| m.running_since == Some(since) && m.state == "running"));
    assert_eq!(running.started_at, Some(since));

    // Each member bills exactly its own seconds: back-date the gang start by 100 s.
    for row in rows {
        let mut update = row.into_active_model();
        update.running_since = Set(Some(since - chrono::Duration::seconds(100)));
        update.update(&services.db).await.unwrap();
    }
    let before = wallet(&services, &renter).await;
    let stopped = rentals::stop_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(stopped.state, GangState::Stopping);
    for &(host, rental) in &ids {
        report(&services, host, rental, WorkloadStatus::Detached).await;
    }
    let ended = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(ended.state, GangState::Ended);
    for member in &ended.members {
        // 100 s or 101 s (the stop came a moment after the back-dated start), 2 GPUs at $2.00/h.
        assert!((100..=101).contains(&member.billed_seconds), "{member:?}");
        assert_eq!(member.charged_micros, member.billed_seconds * 2 * 2_000_000 / 3600);
    }
    let charged: i64 = ended.members.iter().map(|m| m.charged_micros).sum();
    assert_eq!(before - wallet(&services, &renter).await, charged);
    assert_eq!(ended.charged_micros, charged);
}

async fn a_lost_member_stops_the_gang_or_holds_it(backend: Backend) {
    let (_db, services, _provider, _hosts) = fleet(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(1_000).await;
    let start = |request: BookGangRequest| {
        let (services, renter) = (services.clone(), renter.clone());
        async move {
            let booked = rentals::book_gang(&services, &renter, &request).await.unwrap();
            for m in &booked.members {
                report(&services, m.host_id, m.rental_id, WorkloadStatus::Ready).await;
            }
            booked
        }
    };
    // Stop (the default): rank 1's workload fails; the schedules stop ranks 0 and 2, saying why.
    let booked = start(gang(3, 1)).await;
    report(&services, booked.members[1].host_id, booked.members[1].rental_id, WorkloadStatus::Exited { code: Some(1) })
        .await;
    rentals::run_schedules(&services).await.unwrap();
    let after = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    let states: Vec<RentalState> = after.members.iter().map(|m| m.state).collect();
    assert_eq!(states, [RentalState::Stopping, RentalState::Failed, RentalState::Stopping]);
    assert_eq!(after.state, GangState::Stopping);
    let detail = rentals::get_rental(&services, &renter, booked.members[0].rental_id).await.unwrap();
    assert!(
        detail.events.iter().any(|e| e.reason.contains(&format!("gang #{}: its rank 1", booked.id))),
        "{:?}",
        detail.events
    );
    for m in [&booked.members[0], &booked.members[2]] {
        report(&services, m.host_id, m.rental_id, WorkloadStatus::Detached).await;
    }
    assert_eq!(rentals::get_gang(&services, &renter, booked.id).await.unwrap().state, GangState::Ended);

    // Hold: the others keep running, the gang is degraded; the renter books a replacement.
    let held = start(BookGangRequest { on_member_loss: OnMemberLoss::Hold, ..gang(2, 1) }).await;
    let (lost_host, lost_id) = (held.members[1].host_id, held.members[1].rental_id);
    report(&services, lost_host, lost_id, WorkloadStatus::Exited { code: None }).await;
    rentals::run_schedules(&services).await.unwrap();
    let after = rentals::get_gang(&services, &renter, held.id).await.unwrap();
    assert_eq!(after.state, GangState::Degraded);
    assert_eq!(after.members[0].state, RentalState::Running);
    let err = rentals::replace_member(&services, &renter, held.id, 0).await.unwrap_err();
    assert!(matches!(&err, AppError::Conflict(m) if m.contains("rank 0")), "{err:?}");
    let other = testing::renter(&services, "other@example.com").await;
    assert!(matches!(rentals::replace_member(&services, &other, held.id, 1).await, Err(AppError::NotFound(_))));
    let replaced = rentals::replace_member(&services, &renter, held.id, 1).await.unwrap();
    assert_eq!(replaced.members.len(), 3);
    let fresh = replaced.members.iter().find(|m| m.rank == 1 && m.state == RentalState::Requested).unwrap();
    assert_ne!(fresh.host_id, held.members[0].host_id, "never beside a live member");
    assert!(replaced.timeline.iter().any(|e| e.reason.contains(&format!("replacing rental #{lost_id}"))));
    assert!(replaced.timeline.iter().any(|e| e.rental_id == lost_id && e.state == RentalState::Failed));
    // Rank 0's agent is told the new member's address, for its rendezvous.
    let fresh_address = fresh.address.clone();
    let commands = rentals::commands_for_host(&services, held.members[0].host_id, None).await.unwrap();
    let link = commands
        .iter()
        .find_map(|c| match c {
            ServerMessage::Attach(spec) if spec.rental_id == held.members[0].rental_id => spec.gang.clone(),
            _ => None,
        })
        .expect("the running rank 0 is attached again with its peers");
    assert!(link.peers.contains(&fresh_address), "{link:?}");
    // The replacement bills from its own start, at once (the gang started long ago).
    report(&services, fresh.host_id, fresh.rental_id, WorkloadStatus::Ready).await;
    let healed = rentals::get_gang(&services, &renter, held.id).await.unwrap();
    assert_eq!(healed.state, GangState::Running);
    let err = rentals::replace_member(&services, &renter, held.id, 1).await.unwrap_err();
    assert!(matches!(&err, AppError::Conflict(m) if m.contains("not lost")), "{err:?}");
    rentals::stop_gang(&services, &renter, held.id).await.unwrap();

    // A member that finished on its own (exit 0) is not lost: the others go on.
    let done = start(gang(2, 1)).await;
    // Its rank 0 shares a host with the held gang's (still stopping): it gets the next port.
    assert_eq!(done.members[0].host_id, held.members[0].host_id);
    assert_eq!((held.master_port, done.master_port), (29500, 29501));
    report(&services, done.members[1].host_id, done.members[1].rental_id, WorkloadStatus::Exited { code: Some(0) })
        .await;
    rentals::run_schedules(&services).await.unwrap();
    let after = rentals::get_gang(&services, &renter, done.id).await.unwrap();
    assert_eq!(after.members[0].state, RentalState::Running);
    assert_eq!(after.members[1].state, RentalState::Ended, "a workload that finishes ends its rental");
    assert_eq!(after.state, GangState::Running);
}

/// Gang and single bookings race for the same GPUs: no GPU is held twice, and no gang ever
/// holds GPUs on fewer hosts than it has members.
async fn gang_storm_never_holds_a_partial_gang(backend: Backend) {
    let (_db, services, _provider, hosts) = fleet(backend, 4).await;
    let mut renters = Vec::new();
    for i in 0..4 {
        renters.push(testing::renter(&services, &format!("renter{i}@example.com")).dollars(1_000).await);
    }
    let mut tasks = Vec::new();
    for i in 0..24usize {
        let (services, renter) = (services.clone(), renters[i % renters.len()].clone());
        let host = hosts[i % 3];
        tasks.push(tokio::spawn(async move {
            if i % 3 == 0 {
                rentals::book_offer(&services, &renter, &request(host, 1)).await.map(|_| ())
            } else {
                rentals::book_gang(&services, &renter, &gang(2 + (i % 2) as u32, 1 + (i % 4) as u32)).await.map(|_| ())
            }
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => accepted += 1,
            Err(AppError::Conflict(_)) => {}
            Err(other) => panic!("unexpected failure: {other:?}"),
        }
    }
    assert!(accepted >= 1);
    let holds = rental_gpus::Entity::find().all(&services.db).await.unwrap();
    for (i, a) in holds.iter().enumerate() {
        assert!(holds[i + 1..].iter().all(|b| a.gpu_id != b.gpu_id), "GPU {} held twice", a.gpu_id);
    }
    let rows = rental_rows::Entity::find().filter(rental_rows::Column::GangId.is_not_null()).all(&services.db).await;
    let mut by_gang: std::collections::BTreeMap<i64, Vec<rental_rows::Model>> = Default::default();
    for row in rows.unwrap() {
        by_gang.entry(row.gang_id.unwrap()).or_default().push(row);
    }
    for (gang_id, members) in by_gang {
        let gang = cardpool_service::entities::gangs::Entity::find_by_id(gang_id).one(&services.db).await.unwrap();
        let gang = gang.unwrap();
        assert_eq!(members.len() as i32, gang.nodes, "gang {gang_id} is whole");
        let hosts: std::collections::BTreeSet<i64> = members.iter().map(|m| m.host_id).collect();
        assert_eq!(hosts.len(), members.len(), "one member per host");
        for member in &members {
            let held = holds.iter().filter(|h| h.rental_id == member.id).count() as i32;
            assert_eq!(held, gang.gpus_per_node, "member {} holds its GPUs", member.id);
        }
    }
}

/// A spot gang: booked at one bid on every member, placed only where the bid may book, and
/// preempted as a whole: on-demand demand on one member's host gives every member the same
/// notice and deadline, each bills exactly its seconds, and the on-demand booking gets the GPUs.
async fn a_spot_gang_is_preempted_as_a_whole(backend: Backend) {
    let (_db, services, _provider, hosts) = fleet(backend, 4).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(1_000).await;
    let spot_gang = |bid: i64| BookGangRequest { kind: RentalKind::Spot, bid_micros: Some(bid), ..gang(2, 2) };
    // Below the providers' minimum ($0.80) no host may be booked: refused, nothing held.
    let err = rentals::book_gang(&services, &renter, &spot_gang(500_000)).await.unwrap_err();
    assert!(matches!(&err, AppError::Conflict(m) if m.contains("at a bid of $0.50")), "{err:?}");
    // The wallet covers an hour of every member at the bid: 2 × 2 GPUs × $1.00 = $4.00.
    let poor = testing::renter(&services, "poor@example.com").dollars(3).await;
    let err = rentals::book_gang(&services, &poor, &spot_gang(1_000_000)).await.unwrap_err();
    assert!(matches!(&err, AppError::PaymentRequired(m) if m.contains("$4.00")), "{err:?}");
    assert!(rental_gpus::Entity::find().all(&services.db).await.unwrap().is_empty());

    let booked = rentals::book_gang(&services, &renter, &spot_gang(1_000_000)).await.unwrap();
    assert_eq!(booked.kind, RentalKind::Spot);
    for m in &booked.members {
        report(&services, m.host_id, m.rental_id, WorkloadStatus::Ready).await;
    }
    let running = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(running.state, GangState::Running);
    let rows = members(&services, booked.id).await;
    assert!(rows.iter().all(|m| m.bid_micros == Some(1_000_000) && m.kind == "spot"), "{rows:?}");
    // Back-date the start by 100 s for exact bills.
    let since = rows[0].running_since.unwrap() - chrono::Duration::seconds(100);
    for row in rows {
        let mut update = row.into_active_model();
        update.running_since = Set(Some(since));
        update.update(&services.db).await.unwrap();
    }

    // On-demand demand for rank 1's host: rank 1 is noticed at once, and the schedules give
    // rank 0 the same notice and deadline.
    let rank1_host = booked.members[1].host_id;
    assert!(hosts.contains(&rank1_host));
    let buyer = testing::renter(&services, "buyer@example.com").dollars(1_000).await;
    let demand = rentals::book_offer(&services, &buyer, &request(rank1_host, 4)).await.unwrap();
    let rows = members(&services, booked.id).await;
    assert_eq!((rows[0].state.as_str(), rows[1].state.as_str()), ("running", "preempting"));
    rentals::run_schedules(&services).await.unwrap();
    let rows = members(&services, booked.id).await;
    assert!(rows.iter().all(|m| m.state == "preempting" && m.notice.is_some()), "{rows:?}");
    let deadline = |rental_id: i64| {
        let services = services.clone();
        async move {
            rental_gpus::Entity::find()
                .filter(rental_gpus::Column::RentalId.eq(rental_id))
                .all(&services.db)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.ends_at)
                .min()
                .unwrap()
        }
    };
    let cut = deadline(rows[1].id).await;
    assert_eq!(deadline(rows[0].id).await, cut, "one deadline for the whole gang");
    let gang_now = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(gang_now.state, GangState::Stopping);
    assert!(
        gang_now.timeline.iter().any(|e| e.rank == 0 && e.reason.contains("preempted as a whole (its rank 1 was)")),
        "{:?}",
        gang_now.timeline
    );
    // Run again: nothing more happens (no second notice).
    let events = gang_now.timeline.len();
    rentals::run_schedules(&services).await.unwrap();
    assert_eq!(rentals::get_gang(&services, &renter, booked.id).await.unwrap().timeline.len(), events);

    // Both agents stop their workloads: both preempted, each billed exactly its seconds.
    let before = wallet(&services, &renter).await;
    for m in &booked.members {
        report(&services, m.host_id, m.rental_id, WorkloadStatus::Exited { code: Some(143) }).await;
    }
    let ended = rentals::get_gang(&services, &renter, booked.id).await.unwrap();
    assert_eq!(ended.state, GangState::Ended);
    assert!(ended.members.iter().all(|m| m.state == RentalState::Preempted), "{:?}", ended.members);
    for member in &ended.members {
        assert!((100..=101).contains(&member.billed_seconds), "{member:?}");
        // Billed at the clearing price (the minimum bid, $0.80, with GPUs to spare).
        assert_eq!(member.charged_micros, member.billed_seconds * 2 * 800_000 / 3600, "{member:?}");
    }
    let charged: i64 = ended.members.iter().map(|m| m.charged_micros).sum();
    assert_eq!(before - wallet(&services, &renter).await, charged);
    rentals::stop_rental(&services, &buyer, demand.id).await.unwrap();

    // A spot gang that loses a member otherwise (its workload failed) stops, as any gang.
    let second = rentals::book_gang(&services, &renter, &spot_gang(1_000_000)).await.unwrap();
    for m in &second.members {
        report(&services, m.host_id, m.rental_id, WorkloadStatus::Ready).await;
    }
    let failed = &second.members[1];
    report(&services, failed.host_id, failed.rental_id, WorkloadStatus::Exited { code: Some(1) }).await;
    rentals::run_schedules(&services).await.unwrap();
    let after = rentals::get_gang(&services, &renter, second.id).await.unwrap();
    assert_eq!(after.members[0].state, RentalState::Stopping, "{:?}", after.members);
}

/// An on-demand gang preempts spot rentals as a single booking would (GPUs that spot holds
/// count as free when the gang is placed), but only where free hosts are short.
async fn an_on_demand_gang_preempts_spot_only_when_short(backend: Backend) {
    let (_db, services, _provider, hosts) = fleet(backend, 1).await;
    let spotter = testing::renter(&services, "spotter@example.com").dollars(1_000).await;
    let on_pdx2 = rentals::book_offer(&services, &spotter, &spot(hosts[1], 1, 900_000)).await.unwrap();
    let renter = testing::renter(&services, "renter@example.com").dollars(1_000).await;
    // pdx-1 and pdx-3 are free: the spot rental on pdx-2 is left alone.
    let first = rentals::book_gang(&services, &renter, &gang(2, 1)).await.unwrap();
    assert_eq!(first.members.iter().map(|m| m.host_id).collect::<Vec<_>>(), [hosts[0], hosts[2]]);
    let state = |id: i64| {
        let (services, spotter) = (services.clone(), spotter.clone());
        async move { rentals::get_rental(&services, &spotter, id).await.unwrap().rental.state }
    };
    assert_eq!(state(on_pdx2.id).await, RentalState::Requested);
    rentals::stop_gang(&services, &renter, first.id).await.unwrap();
    for m in &first.members {
        report(&services, m.host_id, m.rental_id, WorkloadStatus::Detached).await;
    }
    // Spot on pdx-3 too: two free pdx hosts no longer exist, so the gang preempts one spot
    // rental (pdx-2's, in host order) and no more.
    let on_pdx3 = rentals::book_offer(&services, &spotter, &spot(hosts[2], 1, 900_000)).await.unwrap();
    let second = rentals::book_gang(&services, &renter, &gang(2, 1)).await.unwrap();
    assert_eq!(second.members.iter().map(|m| m.host_id).collect::<Vec<_>>(), [hosts[0], hosts[1]]);
    assert_eq!(state(on_pdx2.id).await, RentalState::Preempting);
    assert_eq!(state(on_pdx3.id).await, RentalState::Requested);
}

backend_tests!(
    a_spot_gang_is_preempted_as_a_whole,
    an_on_demand_gang_preempts_spot_only_when_short,
    gangs_book_all_or_nothing_on_one_fabric,
    a_gang_costs_its_whole_upfront,
    members_start_together_and_bill_exactly,
    a_lost_member_stops_the_gang_or_holds_it,
    gang_storm_never_holds_a_partial_gang,
);
