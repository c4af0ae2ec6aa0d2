//! Demo data for `cardpool serve --demo`: accounts for every role, seeded only into an empty
//! database, and simulated hosts whose agents run in-process, so a newcomer sees a live
//! marketplace straight away.

use cardpool_agent::{connection, gpu::simulated::SimulatedSource, runtime::WorkloadMode, state};
use cardpool_domain::account::SignUpRequest;
use cardpool_service::{AppResult, Services, accounts, auth::Credential, auth::Principal, hosts};
use std::{path::Path, time::Duration};

/// The password of every demo account (printed at start-up; demo databases only).
pub const DEMO_PASSWORD: &str = "cardpool-demo";

/// Demo accounts and their roles.
pub const DEMO_ACCOUNTS: [(&str, &str); 4] = [
    ("renter@demo.cardpool.dev", "renter"),
    ("provider@demo.cardpool.dev", "renter + provider"),
    ("provider2@demo.cardpool.dev", "renter + provider"),
    ("admin@demo.cardpool.dev", "renter + admin"),
];

/// Simulated hosts: (provider, hostname, GPUs, location, on-demand $/GPU-h in micro-dollars).
/// The Amsterdam host's H100s are cut into MIG instances and sold as slices; the two Frankfurt
/// H100 hosts share an InfiniBand fabric ([`DEMO_FABRIC`]), so renters can book gangs on them.
pub const DEMO_HOSTS: [(&str, &str, &str, &str, i64); 6] = [
    ("provider@demo.cardpool.dev", "fra-h100-01", "8xH100-80GB", "Frankfurt, DE", 2_490_000),
    ("provider@demo.cardpool.dev", "fra-h100-02", "8xH100-80GB", "Frankfurt, DE", 2_590_000),
    ("provider@demo.cardpool.dev", "fra-l40s-01", "4xL40S-48GB", "Frankfurt, DE", 790_000),
    ("provider2@demo.cardpool.dev", "pdx-a100-01", "4xA100-80GB", "Oregon, US", 1_290_000),
    ("provider2@demo.cardpool.dev", "waw-4090-01", "2xRTX4090-24GB", "Warsaw, PL", 390_000),
    (
        "provider2@demo.cardpool.dev",
        "ams-h100-mig",
        "2xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2",
        "Amsterdam, NL",
        2_490_000,
    ),
];

/// The demo's fabric: its id, and each host on it with its address there. (The demo's agents
/// all run in this process on one machine, so rank 0's rendezvous port cannot really open at
/// those addresses: a gang's log says so. Real hosts on a real fabric meet there.)
pub const DEMO_FABRIC: (&str, [(&str, &str); 2]) =
    ("fra-ib-1", [("fra-h100-01", "10.0.8.1"), ("fra-h100-02", "10.0.8.2")]);

/// Starts one in-process agent per demo host, dialling `server_url`. Each host's credential
/// is kept under `state_root/<hostname>` so a restart reconnects the same hosts; a host whose
/// credential this database does not know (a fresh database) is enrolled again.
pub async fn start_agents(services: &Services, server_url: &str, state_root: &Path) -> AppResult<()> {
    for (provider, hostname, spec, location, on_demand) in DEMO_HOSTS {
        let dir = state_root.join(hostname);
        let known: Option<state::AgentState> = match state::load(&dir) {
            Ok(saved) if hosts::authenticate_host(services, &saved.credential).await.is_ok() => Some(saved),
            _ => None,
        };
        let newly_enrolled = known.is_none();
        let saved = match known {
            Some(saved) => saved,
            None => {
                let principal = accounts::principal_for_email(services, provider).await?;
                let token = hosts::create_enrollment_token(services, &principal, Some(location), server_url).await?;
                let enrolled = hosts::enroll_host(services, &token.token, hostname).await?;
                let saved = state::AgentState {
                    server: server_url.to_owned(),
                    host_id: enrolled.host_id,
                    credential: enrolled.credential,
                };
                if let Err(err) = state::save(&dir, &saved) {
                    tracing::warn!(%err, "demo agent state not saved; the host will be enrolled again next start");
                }
                saved
            }
        };
        let saved = state::AgentState { server: server_url.to_owned(), ..saved };
        if newly_enrolled {
            tokio::spawn(price_and_list(services.clone(), provider, hostname, saved.host_id, on_demand));
        }
        let rentals_dir = dir.join("rentals");
        tokio::spawn(async move {
            let source = match SimulatedSource::new(spec, hostname, vec![]) {
                Ok(source) => source,
                Err(err) => return tracing::error!(%err, "demo host spec"),
            };
            if let Err(err) = connection::run(
                &saved,
                &source,
                Some(location.to_owned()),
                rentals_dir,
                WorkloadMode::Simulate,
                Duration::from_secs(1),
            )
            .await
            {
                tracing::warn!(host = hostname, %err, "demo agent stopped");
            }
        });
    }
    Ok(())
}

/// Seeds the demo accounts if there are no accounts yet. Returns whether it seeded.
pub async fn seed(services: &Services) -> AppResult<bool> {
    if accounts::count_users(services).await? > 0 {
        return Ok(false);
    }
    for (email, _) in DEMO_ACCOUNTS {
        let me =
            accounts::create_account(services, &SignUpRequest { email: email.into(), password: DEMO_PASSWORD.into() })
                .await?;
        let principal = Principal { user_id: me.id, email: me.email, roles: me.roles, credential: Credential::Session };
        if email.starts_with("provider") {
            accounts::enable_provider(services, &principal).await?;
        }
        if email.starts_with("admin") {
            accounts::create_admin(services, email, None).await?;
        }
    }
    seed_money(services).await?;
    Ok(true)
}

/// Last week's money, so wallets and earnings pages have history: a welcome credit for the
/// renter and a few finished rentals paid to both providers, all through the real ledger.
async fn seed_money(services: &Services) -> AppResult<()> {
    use cardpool_service::ledger::{self, Book, Entry, split_fee};
    let renter = accounts::principal_for_email(services, "renter@demo.cardpool.dev").await?.user_id;
    let provider = accounts::principal_for_email(services, "provider@demo.cardpool.dev").await?.user_id;
    let provider2 = accounts::principal_for_email(services, "provider2@demo.cardpool.dev").await?.user_id;
    let days_ago = |d: i64| chrono::Utc::now() - chrono::Duration::days(d);
    let txn = services.begin_write().await.map_err(|_| cardpool_service::AppError::Internal)?;
    let mut welcome = Entry::new("credit", "demo:welcome", "Welcome credit").transfer(
        Book::PromotionalCredit,
        Book::Wallet(renter),
        500_000_000,
    );
    welcome.reason = Some("demo data".into());
    welcome.at = days_ago(7);
    ledger::post(&txn, welcome).await?;
    // (provider, description, GPU-hours × price, days ago)
    let rentals = [
        (provider, "On-demand 8× H100 80GB on fra-h100-01, 6 h", 48 * 2_490_000, 6),
        (provider2, "On-demand 4× A100 80GB on pdx-a100-01, 10 h", 40 * 1_290_000, 5),
        (provider, "Spot 2× L40S 48GB on fra-l40s-01, 12 h", 24 * 420_000, 3),
    ];
    for (i, (to, description, amount, ago)) in rentals.into_iter().enumerate() {
        let (share, fee) = split_fee(amount, services.settings.payments.platform_fee_bps);
        let mut entry = Entry::new("usage", format!("demo:rental:{i}"), description)
            .leg(Book::Wallet(renter), -amount)
            .leg(Book::Earnings(to), share)
            .leg(Book::PlatformFees, fee);
        entry.at = days_ago(ago);
        ledger::post(&txn, entry).await?;
    }
    txn.commit().await.map_err(|_| cardpool_service::AppError::Internal)
}

/// Prices a new demo host (reserved 20 % off, spot from 40 %) once its agent has reported its
/// GPUs, and lists it, so the demo market has offers. GPUs with MIG instances are sold as
/// slices, each profile at its share of the GPU's price (compute slices out of seven, to the
/// cent).
async fn price_and_list(
    services: Services,
    provider: &'static str,
    hostname: &'static str,
    host_id: i64,
    on_demand: i64,
) {
    let Ok(principal) = accounts::principal_for_email(&services, provider).await else { return };
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let Ok(detail) = hosts::get_host(&services, &principal, host_id).await else { return };
        if detail.gpus.is_empty() {
            continue;
        }
        if let Err(err) = sell_and_price(&services, &principal, &detail, on_demand).await {
            tracing::warn!(%err, host_id, "could not price the demo host");
        }
        let (fabric_id, members) = DEMO_FABRIC;
        if let Some((_, address)) = members.iter().find(|(name, _)| *name == hostname) {
            let fabric = cardpool_domain::fabric::HostFabric {
                fabric_id: fabric_id.into(),
                interconnect: cardpool_domain::fabric::Interconnect::Infiniband,
                gbps: 400,
                address: Some((*address).into()),
            };
            if let Err(err) = hosts::set_host_fabric(&services, &principal, host_id, Some(&fabric)).await {
                tracing::warn!(%err, host_id, "could not declare the demo host's fabric");
            }
        }
        return;
    }
}

async fn sell_and_price(
    services: &Services,
    principal: &Principal,
    detail: &cardpool_domain::host::HostDetail,
    on_demand: i64,
) -> AppResult<()> {
    use cardpool_domain::{host::GpuSale, offers::slice_unit};
    let host_id = detail.host.id;
    let mut units = std::collections::BTreeMap::new();
    for gpu in &detail.gpus {
        if gpu.mig_instances.is_empty() {
            units.insert(gpu.model.clone(), on_demand);
            continue;
        }
        hosts::set_gpu_sale(services, principal, host_id, gpu.index, GpuSale::Mig).await?;
        for slice in &gpu.mig_instances {
            let share = on_demand * i64::from(slice.compute_slices.clamp(1, 7)) / 7;
            units.insert(slice_unit(&gpu.model, &slice.profile), share / 10_000 * 10_000);
        }
    }
    for (gpu_model, on_demand) in units {
        let price = cardpool_domain::host::GpuModelPrice {
            gpu_model,
            on_demand_micros: on_demand,
            reserved_micros: on_demand / 5 * 4,
            spot_min_bid_micros: on_demand / 5 * 2,
        };
        hosts::update_host_pricing(services, principal, host_id, &price).await?;
    }
    hosts::set_host_listed(services, principal, host_id, true).await
}
