//! Telemetry at the service level, on both backends: frames are stored exactly once whatever
//! the replays and restarts, rollups and energy add up, nobody sees GPUs they are not entitled
//! to, and alerts follow the conditions (idle rentals are told or stopped).

use cardpool_domain::{
    AppError,
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState, Workload},
    telemetry::{AlertKind, TelemetryScope},
};
use cardpool_protocol::{GpuSample, ServerMessage, TelemetryFrame, WorkloadStatus};
use cardpool_service::{
    Services, Settings, alerts,
    auth::Principal,
    backend_tests,
    entities::{gpu_rollups, rental_energy, telemetry_cursors},
    rentals, telemetry,
    testing::{self, Backend},
};
use sea_orm::EntityTrait;
use std::sync::atomic::Ordering;

/// A whole minute ten hours ago, ms (samples may not be dated in the future).
fn t0() -> i64 {
    static MINUTE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *MINUTE.get_or_init(|| (chrono::Utc::now().timestamp_millis() / 60_000 - 600) * 60_000)
}

fn frame(sequence: u64, at_ms: i64, gpus: u32, util: u32, power_mw: u32) -> TelemetryFrame {
    TelemetryFrame {
        sequence,
        at_ms,
        gpus: (0..gpus)
            .map(|index| GpuSample {
                index,
                uuid: format!("GPU-{index}"),
                utilization_pct: Some(util),
                memory_used_bytes: Some(1 << 30),
                memory_total_bytes: Some(80 << 30),
                temperature_c: Some(50),
                slowdown_temperature_c: Some(87),
                power_milliwatts: Some(power_mw),
                ecc_uncorrected: Some(0),
                ..GpuSample::default()
            })
            .collect(),
    }
}

/// Frames `from..=to`, one a second from t0().
fn frames(from: u64, to: u64, gpus: u32, util: u32, power_mw: u32) -> Vec<TelemetryFrame> {
    (from..=to).map(|s| frame(s, t0() + (s as i64 - 1) * 1000, gpus, util, power_mw)).collect()
}

async fn stored_samples(services: &Services, host_id: i64, gpu: i32) -> i64 {
    gpu_rollups::Entity::find()
        .all(&services.db)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.host_id == host_id && r.gpu_index == gpu)
        .map(|r| i64::from(r.samples))
        .sum()
}

backend_tests!(
    replays_duplicates_and_restarts_store_each_frame_once,
    agents_sending_at_once_are_stored_together_exactly_once,
    a_host_stored_by_another_replica_meanwhile_is_not_stored_twice,
    energy_counts_only_while_the_rental_runs,
    grants_show_each_viewer_only_their_gpus,
    alerts_follow_conditions_and_idle_rentals_are_told_or_stopped,
);

async fn replays_duplicates_and_restarts_store_each_frame_once(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let host = testing::host(&services, &provider, "h").gpus(2).await;
    let stream = 1_000;

    let ack = telemetry::ingest(&services, host, stream, &frames(1, 90, 2, 40, 100_000), 0).await.unwrap();
    assert_eq!(ack, Some(ServerMessage::TelemetryAck { stream, sequence: 90 }));
    // The ack was lost: the agent replays 61..=90 with 91..=150 after it (busier from 91 on).
    telemetry::ingest(&services, host, stream, &frames(61, 150, 2, 70, 100_000), 0).await.unwrap();
    // The very same message twice.
    for _ in 0..2 {
        let ack = telemetry::ingest(&services, host, stream, &frames(140, 150, 2, 40, 100_000), 0).await.unwrap();
        assert_eq!(ack, Some(ServerMessage::TelemetryAck { stream, sequence: 150 }), "duplicates are acknowledged");
    }
    assert_eq!(stored_samples(&services, host, 0).await, 150);
    assert_eq!(stored_samples(&services, host, 1).await, 150);
    let rollups = gpu_rollups::Entity::find().all(&services.db).await.unwrap();
    let first_minute: Vec<_> =
        rollups.iter().filter(|r| r.gpu_index == 0 && r.minute.timestamp_millis() == t0()).collect();
    assert_eq!(first_minute.len(), 1);
    assert_eq!(first_minute[0].samples, 60, "one minute holds 60 one-second frames");
    assert_eq!(first_minute[0].util_sum, 60 * 40);
    assert_eq!(first_minute[0].energy_mj, 60 * 100_000, "100 W for 60 s is 6 kJ");
    let minute = first_minute[0];
    assert_eq!((minute.util_min, minute.util_max), (40, 40));
    assert_eq!((minute.memory_used_sum, minute.memory_used_max), (60 << 30, 1 << 30));
    assert_eq!((minute.temperature_sum, minute.temperature_max), (60 * 50, 50));
    assert_eq!((minute.power_sum_mw, minute.power_max_mw), (60 * 100_000, 100_000));
    // The second minute was written by both flushes: the second added to the first's sums and
    // widened its range; the replayed 61..=90 (at 70 %) were not counted again.
    let second_minute: Vec<_> =
        rollups.iter().filter(|r| r.gpu_index == 1 && r.minute.timestamp_millis() == t0() + 60_000).collect();
    assert_eq!(second_minute.len(), 1);
    let minute = second_minute[0];
    assert_eq!((minute.samples, minute.util_sum), (60, 30 * 40 + 30 * 70));
    assert_eq!((minute.util_min, minute.util_max), (40, 70));

    // The agent restarts: a new, larger stream starts over at 1; an older stream's late frame is ignored.
    let later: Vec<TelemetryFrame> =
        (1..=10).map(|s| frame(s, t0() + 200_000 + (s as i64) * 1000, 2, 10, 50_000)).collect();
    telemetry::ingest(&services, host, stream + 1, &later, 3).await.unwrap();
    telemetry::ingest(&services, host, stream, &frames(151, 151, 2, 40, 100_000), 0).await.unwrap();
    assert_eq!(stored_samples(&services, host, 0).await, 160);
    let cursor = telemetry_cursors::Entity::find_by_id(host).one(&services.db).await.unwrap().unwrap();
    assert_eq!((cursor.stream, cursor.sequence, cursor.frames, cursor.dropped), (1_001, 10, 160, 3));

    // Malformed batches are refused and change nothing.
    let mut backwards = frames(11, 12, 2, 10, 50_000);
    backwards.reverse();
    let err = telemetry::ingest(&services, host, stream + 1, &backwards, 0).await.unwrap_err();
    assert!(matches!(err, AppError::Validation { .. }), "{err:?}");
    let too_wide = vec![frame(11, t0() + 300_000, 65, 10, 1)];
    assert!(telemetry::ingest(&services, host, stream + 1, &too_wide, 0).await.is_err());
    assert_eq!(stored_samples(&services, host, 0).await, 160);
    assert_eq!(telemetry::ingest(&services, host, stream + 1, &[], 0).await.unwrap(), None);

    // A sample dated a day ahead of the server's clock counts as taken now.
    let now = chrono::Utc::now();
    let ahead = now.timestamp_millis() + 24 * 3600 * 1000;
    telemetry::ingest(&services, host, stream + 1, &[frame(11, ahead, 2, 10, 1)], 0).await.unwrap();
    let newest = gpu_rollups::Entity::find().all(&services.db).await.unwrap().into_iter().map(|r| r.minute).max();
    assert!(newest.is_some_and(|m| m <= now + chrono::Duration::seconds(5)), "{newest:?} is in the future");
    assert_eq!(stored_samples(&services, host, 0).await, 161);

    // Retention (30 days by default): a minute from 40 days ago goes, the rest stays.
    let old = chrono::Utc::now().timestamp_millis() - 40 * 24 * 3600 * 1000;
    telemetry::ingest(&services, host, stream + 2, &[frame(1, old, 2, 10, 1)], 0).await.unwrap();
    assert_eq!(stored_samples(&services, host, 0).await, 162);
    assert_eq!(telemetry::apply_retention(&services).await.unwrap(), 2, "one old minute of two GPUs");
    assert_eq!(stored_samples(&services, host, 0).await, 161);
}

/// Many agents sending at once: their messages share transactions (group commit), yet every
/// frame is stored once, each host's cursor moves in order, and a message that arrives twice at
/// the same moment (an agent reconnecting while its old connection still sends) counts once.
async fn agents_sending_at_once_are_stored_together_exactly_once(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let mut hosts = Vec::new();
    for i in 0..30 {
        hosts.push(testing::host(&services, &provider, &format!("h{i}")).gpus(2).await);
    }
    let mut messages = 0;
    for round in 0..3u64 {
        let mut sending = tokio::task::JoinSet::new();
        for (i, host) in hosts.iter().copied().enumerate() {
            let copies = if i == 0 { 2 } else { 1 };
            for _ in 0..copies {
                let services = services.clone();
                let batch = frames(round * 10 + 1, round * 10 + 10, 2, 30 + i as u32, 150_000);
                sending.spawn(async move { telemetry::ingest(&services, host, 7, &batch, round).await });
                messages += 1;
            }
        }
        for ack in sending.join_all().await {
            assert_eq!(ack.unwrap(), Some(ServerMessage::TelemetryAck { stream: 7, sequence: round * 10 + 10 }));
        }
    }
    for (i, host) in hosts.iter().copied().enumerate() {
        assert_eq!(stored_samples(&services, host, 0).await, 30, "host {i}, GPU 0");
        assert_eq!(stored_samples(&services, host, 1).await, 30, "host {i}, GPU 1");
        let cursor = telemetry_cursors::Entity::find_by_id(host).one(&services.db).await.unwrap().unwrap();
        assert_eq!((cursor.stream, cursor.sequence, cursor.frames, cursor.dropped), (7, 30, 30, 2), "host {i}");
    }
    let first_minute = gpu_rollups::Entity::find().all(&services.db).await.unwrap();
    let host5: Vec<_> = first_minute.iter().filter(|r| r.host_id == hosts[5] && r.gpu_index == 1).collect();
    assert_eq!(host5.len(), 1, "30 seconds from a whole minute are one rollup row");
    assert_eq!(host5[0].util_sum, 30 * 35);
    assert_eq!(host5[0].energy_mj, 30 * 150_000);
    let hub = &services.telemetry;
    assert_eq!(hub.frames_duplicate.load(Ordering::Relaxed), 30, "host 0's second copy of each round");
    assert_eq!(hub.samples_stored.load(Ordering::Relaxed), 30 * 30 * 2);
    let commits = hub.commits.load(Ordering::Relaxed);
    assert!(commits * 2 <= messages, "{messages} messages took {commits} transactions");
}

/// Two replicas over one database: A has accepted frames of a host but not yet written them
/// when the agent, moved to B, has B store them and more. A's flush leaves the host out (its
/// messages are not acknowledged), A takes nothing more from that connection, and a new
/// connection to A goes on from the database's cursor: every frame is stored once.
async fn a_host_stored_by_another_replica_meanwhile_is_not_stored_twice(backend: Backend) {
    // A writes only when told to (another host's `ingest` writes A's whole open batch).
    let mut settings = Settings::default();
    settings.telemetry.flush_interval = std::time::Duration::from_secs(600);
    let (_db, a) = testing::services(backend, settings.clone()).await;
    let b = Services::new(a.db.clone(), settings).await.unwrap();
    let provider = testing::provider(&a, "p@example.com").await;
    let host = testing::host(&a, &provider, "h").gpus(2).await;
    let other = testing::host(&a, &provider, "other").gpus(1).await;
    let flush_a = async |sequence: u64| {
        telemetry::ingest(&a, other, 1, &frames(sequence, sequence, 1, 10, 1_000), 0).await.unwrap();
    };

    // A accepts 1..=10 (shown, not yet written); before its flush, B stores 1..=20.
    let waiting = telemetry::accept(&a, host, "a-1", 5, frames(1, 10, 2, 40, 100_000), 0).await.unwrap().unwrap();
    let ack = telemetry::ingest(&b, host, 5, &frames(1, 20, 2, 40, 100_000), 0).await.unwrap();
    assert_eq!(ack, Some(ServerMessage::TelemetryAck { stream: 5, sequence: 20 }));
    flush_a(1).await;
    assert_eq!(waiting.stored().await.unwrap_err(), AppError::Internal, "A's copy is not acknowledged");
    assert_eq!(stored_samples(&a, host, 0).await, 20, "1..=20 once");
    let refused = telemetry::accept(&a, host, "a-1", 5, frames(11, 12, 2, 40, 100_000), 0).await;
    assert!(matches!(refused, Err(AppError::Internal)), "the connection whose frames were refused ends");

    // The agent comes back to A on a new connection and sends 15..=25 (B's ack of 20 was lost).
    let again = telemetry::accept(&a, host, "a-2", 5, frames(15, 25, 2, 40, 100_000), 0).await.unwrap().unwrap();
    flush_a(2).await;
    assert_eq!(again.stored().await.unwrap(), ServerMessage::TelemetryAck { stream: 5, sequence: 25 });
    assert_eq!(stored_samples(&a, host, 0).await, 25);
    let cursor = telemetry_cursors::Entity::find_by_id(host).one(&a.db).await.unwrap().unwrap();
    assert_eq!((cursor.sequence, cursor.frames), (25, 25), "every frame stored once");
}

async fn booked(services: &Services, renter: &Principal, host: i64, gpus: u32, stop_when_idle: bool) -> i64 {
    let request = BookOfferRequest {
        host_id: host,
        gpu_model: testing::TEST_GPU_MODEL.into(),
        gpu_count: gpus,
        kind: RentalKind::OnDemand,
        workload: Workload { command: Some("python train.py".into()), ..Workload::default() },
        bid_micros: None,
        starts_at: None,
        hours: None,
        stop_when_idle,
        limits: Default::default(),
    };
    rentals::book_offer(services, renter, &request).await.unwrap().id
}

pub(crate) async fn run(services: &Services, host: i64, rental: i64) {
    for status in [WorkloadStatus::Provisioning, WorkloadStatus::Ready] {
        rentals::record_workload_status(services, host, rental, &status).await.unwrap();
    }
}

/// Frames stamped now, one a second up to now.
pub(crate) fn now_frames(from: u64, count: u64, gpus: u32, util: u32, power_mw: u32) -> Vec<TelemetryFrame> {
    let now = chrono::Utc::now().timestamp_millis();
    (0..count).map(|i| frame(from + i, now - (count - 1 - i) as i64 * 1000, gpus, util, power_mw)).collect()
}

async fn energy_counts_only_while_the_rental_runs(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let renter = testing::renter(&services, "r@example.com").dollars(100).await;
    let host = testing::host(&services, &provider, "h").gpus(4).await;
    // Before the rental runs: no energy for anyone.
    telemetry::ingest(&services, host, 1, &now_frames(1, 5, 4, 90, 300_000), 0).await.unwrap();
    let rental = booked(&services, &renter, host, 2, false).await;
    let indexes = rentals::get_rental(&services, &renter, rental).await.unwrap().rental.gpu_indexes;
    run(&services, host, rental).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    telemetry::ingest(&services, host, 1, &now_frames(6, 1, 4, 90, 300_000), 0).await.unwrap();
    let energy = rental_energy::Entity::find().all(&services.db).await.unwrap();
    let mut gpus: Vec<i32> = energy.iter().map(|e| e.gpu_index).collect();
    gpus.sort_unstable();
    assert_eq!(gpus, indexes.iter().map(|i| *i as i32).collect::<Vec<_>>(), "only the rental's GPUs");
    for e in &energy {
        assert_eq!(e.rental_id, rental);
        // One frame at 300 W standing for the time since the previous frame (over a second).
        assert!((300_000..=1_500_000).contains(&e.energy_mj), "{}", e.energy_mj);
        assert_eq!(e.energy_mj, energy[0].energy_mj, "the same power for the same time");
    }
    let view = telemetry::view(&services, &renter, TelemetryScope::Rental(rental)).await.unwrap();
    assert_eq!(view.energy.len(), 2);
    let shown = telemetry::provider_energy(&services, &provider).await.unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!((shown[0].rental_id, shown[0].hostname.as_str()), (rental, "h"));
    assert_eq!(shown[0].energy_mj, energy.iter().map(|e| e.energy_mj).sum::<i64>());
}

async fn grants_show_each_viewer_only_their_gpus(backend: Backend) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let other_provider = testing::provider(&services, "q@example.com").await;
    let renter = testing::renter(&services, "r@example.com").dollars(100).await;
    let stranger = testing::renter(&services, "s@example.com").dollars(100).await;
    let mut admin = testing::renter(&services, "a@example.com").await;
    admin.roles.admin = true;
    let host = testing::host(&services, &provider, "h").gpus(4).await;
    let other_host = testing::host(&services, &other_provider, "o").gpus(2).await;
    let rental = booked(&services, &renter, host, 2, false).await;
    run(&services, host, rental).await;
    let mine = rentals::get_rental(&services, &renter, rental).await.unwrap().rental.gpu_indexes;
    telemetry::ingest(&services, host, 1, &now_frames(1, 3, 4, 50, 200_000), 0).await.unwrap();
    telemetry::ingest(&services, other_host, 1, &now_frames(1, 3, 2, 50, 200_000), 0).await.unwrap();

    let mut feed = services.telemetry.subscribe();
    telemetry::ingest(&services, host, 1, &now_frames(4, 1, 4, 50, 200_000), 0).await.unwrap();
    let published = feed.recv().await.unwrap();
    let grant = telemetry::grant(&services, &renter, TelemetryScope::Rental(rental)).await.unwrap();
    assert!(grant.live);
    let seen: cardpool_domain::telemetry::LiveEvent = serde_json::from_str(&grant.admit(&published).unwrap()).unwrap();
    let cardpool_domain::telemetry::LiveEvent::Sample(sample) = seen else { panic!("a sample") };
    assert_eq!(sample.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), mine, "the renter sees their GPUs only");
    let view = telemetry::view(&services, &renter, TelemetryScope::Rental(rental)).await.unwrap();
    assert!(view.samples.iter().all(|s| s.host_id == host && s.gpus.iter().all(|g| mine.contains(&g.index))));
    assert!(!view.samples.is_empty());

    // Nobody else gets at the rental or the hosts.
    for who in [&stranger, &other_provider] {
        let err = telemetry::grant(&services, who, TelemetryScope::Rental(rental)).await.unwrap_err();
        assert!(matches!(err, AppError::NotFound(_)), "{err:?}");
    }
    for who in [&renter, &stranger, &other_provider] {
        let err = telemetry::grant(&services, who, TelemetryScope::Host(host)).await.unwrap_err();
        assert!(matches!(err, AppError::NotFound(_)), "{err:?}");
        let err = telemetry::grant(&services, who, TelemetryScope::Fleet).await.unwrap_err();
        assert!(matches!(err, AppError::Forbidden(_)), "{err:?}");
    }
    let theirs = telemetry::grant(&services, &other_provider, TelemetryScope::Mine).await.unwrap();
    assert!(theirs.admit(&published).is_none(), "another provider's Mine excludes this host");
    let owner = telemetry::grant(&services, &provider, TelemetryScope::Host(host)).await.unwrap();
    assert_eq!(owner.admit(&published).as_deref(), Some(published.json.as_str()), "the provider sees every GPU");
    let fleet = telemetry::grant(&services, &admin, TelemetryScope::Fleet).await.unwrap();
    assert!(fleet.admit(&published).is_some());

    // The rental ends: no live feed, and nothing after its end.
    rentals::stop_rental(&services, &renter, rental).await.unwrap();
    rentals::record_workload_status(&services, host, rental, &WorkloadStatus::Detached).await.unwrap();
    let ended = telemetry::grant(&services, &renter, TelemetryScope::Rental(rental)).await.unwrap();
    assert!(!ended.live);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    telemetry::ingest(&services, host, 1, &now_frames(5, 1, 4, 50, 200_000), 0).await.unwrap();
    let after = feed.recv().await.unwrap();
    assert!(ended.admit(&after).is_none(), "the next renter's seconds are not the last one's");
}

async fn alerts_follow_conditions_and_idle_rentals_are_told_or_stopped(backend: Backend) {
    let settings = Settings {
        telemetry: telemetry::TelemetrySettings { idle_minutes: 1, ..Default::default() },
        ..Settings::default()
    };
    let (_db, services) = testing::services(backend, settings).await;
    let provider = testing::provider(&services, "p@example.com").await;
    let renter = testing::renter(&services, "r@example.com").dollars(100).await;
    let mut admin = testing::renter(&services, "a@example.com").await;
    admin.roles.admin = true;
    let host = testing::host(&services, &provider, "h").gpus(4).islands(2).await;

    // GPU 0 overheats, GPU 1 raises XID 79, GPU 2 has an uncorrectable ECC error.
    let mut hot = now_frames(1, 1, 4, 50, 200_000);
    hot[0].gpus[0].temperature_c = Some(93);
    hot[0].gpus[1].xid_errors = vec![79];
    hot[0].gpus[2].ecc_uncorrected = Some(2);
    telemetry::ingest(&services, host, 1, &hot, 0).await.unwrap();
    telemetry::ingest(&services, host, 1, &now_frames(2, 1, 4, 50, 200_000), 0).await.unwrap();
    // The newest frame has no XID; the last one seen is still known (DCGM's XID gauge).
    assert_eq!(services.telemetry.last_xid(host, 1), Some(79));
    assert_eq!(services.telemetry.last_xid(host, 0), None);
    let listed = alerts::list_alerts(&services, &admin).await.unwrap();
    let kind_of = |k: AlertKind| listed.iter().filter(|a| a.kind == k).collect::<Vec<_>>();
    assert_eq!(kind_of(AlertKind::OverTemperature).len(), 1);
    assert!(kind_of(AlertKind::OverTemperature)[0].resolved_at.is_some(), "cooled down: resolved");
    assert!(kind_of(AlertKind::UncorrectableEcc)[0].resolved_at.is_some(), "counter back to 0: resolved");
    let xid = kind_of(AlertKind::XidError);
    assert_eq!(xid.len(), 1);
    assert!(xid[0].resolved_at.is_none(), "an XID stays until acknowledged");
    assert!(xid[0].message.contains("79"));
    assert_eq!(alerts::list_alerts(&services, &provider).await.unwrap().len(), 3, "the provider sees their own");
    assert!(alerts::list_alerts(&services, &renter).await.unwrap().is_empty());
    let err = alerts::acknowledge(&services, &provider, xid[0].id).await.unwrap_err();
    assert!(matches!(err, AppError::Forbidden(_)));
    alerts::acknowledge(&services, &admin, xid[0].id).await.unwrap();
    let again = alerts::list_alerts(&services, &admin).await.unwrap();
    assert!(again.iter().all(|a| a.resolved_at.is_some()));

    // Two rentals sit idle for over a minute: one is told, the other (opted in) stopped.
    let told = booked(&services, &renter, host, 2, false).await;
    let stopped = booked(&services, &renter, host, 2, true).await;
    run(&services, host, told).await;
    run(&services, host, stopped).await;
    let now = chrono::Utc::now().timestamp_millis();
    let idle: Vec<TelemetryFrame> =
        (0..4).map(|i| frame(10 + i, now - 90_000 + i as i64 * 30_000, 4, 1, 60_000)).collect();
    telemetry::ingest(&services, host, 1, &idle, 0).await.unwrap();
    let told_now = rentals::get_rental(&services, &renter, told).await.unwrap().rental;
    assert_eq!(told_now.state, RentalState::Running);
    assert!(told_now.notice.unwrap_or_default().contains("idle"), "the renter is told");
    let stopped_now = rentals::get_rental(&services, &renter, stopped).await.unwrap().rental;
    assert_eq!(stopped_now.state, RentalState::Stopping, "opted in: stopped");
    let idle_alerts = alerts::list_alerts(&services, &admin).await.unwrap();
    assert_eq!(idle_alerts.iter().filter(|a| a.kind == AlertKind::GpuIdle && a.resolved_at.is_none()).count(), 4);
    // Busy again: the told rental's idle alerts resolve.
    telemetry::ingest(&services, host, 1, &now_frames(20, 1, 4, 80, 600_000), 0).await.unwrap();
    let after = alerts::list_alerts(&services, &admin).await.unwrap();
    assert!(after.iter().filter(|a| a.kind == AlertKind::GpuIdle).all(|a| a.resolved_at.is_some()));
}
