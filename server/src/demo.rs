//! Demo data for `cardpool serve --demo`: accounts for every role, seeded only into an empty
//! database, and simulated hosts whose agents run in-process, so a newcomer sees a live
//! marketplace straight away.

use cardpool_agent::{connection, gpu::simulated::SimulatedSource, state};
use cardpool_domain::account::SignUpRequest;
use cardpool_service::{AppResult, Services, accounts, auth::Credential, auth::Principal, hosts};
use std::path::Path;

/// The password of every demo account (printed at start-up; demo databases only).
pub const DEMO_PASSWORD: &str = "cardpool-demo";

/// Demo accounts and their roles.
pub const DEMO_ACCOUNTS: [(&str, &str); 4] = [
    ("renter@demo.cardpool.dev", "renter"),
    ("provider@demo.cardpool.dev", "renter + provider"),
    ("provider2@demo.cardpool.dev", "renter + provider"),
    ("admin@demo.cardpool.dev", "renter + admin"),
];

/// Simulated hosts: (provider, hostname, GPUs, location).
pub const DEMO_HOSTS: [(&str, &str, &str, &str); 4] = [
    ("provider@demo.cardpool.dev", "fra-h100-01", "8xH100-80GB", "Frankfurt, DE"),
    ("provider@demo.cardpool.dev", "fra-l40s-01", "4xL40S-48GB", "Frankfurt, DE"),
    ("provider2@demo.cardpool.dev", "pdx-a100-01", "4xA100-80GB", "Oregon, US"),
    ("provider2@demo.cardpool.dev", "waw-4090-01", "2xRTX4090-24GB", "Warsaw, PL"),
];

/// Starts one in-process agent per demo host, dialling `server_url`. Each host's credential
/// is kept under `state_root/<hostname>` so a restart reconnects the same hosts; a host whose
/// credential this database does not know (a fresh database) is enrolled again.
pub async fn start_agents(services: &Services, server_url: &str, state_root: &Path) -> AppResult<()> {
    for (provider, hostname, spec, location) in DEMO_HOSTS {
        let dir = state_root.join(hostname);
        let known = match state::load(&dir) {
            Ok(saved) if hosts::authenticate_host(services, &saved.credential).await.is_ok() => Some(saved),
            _ => None,
        };
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
        tokio::spawn(async move {
            let source = match SimulatedSource::new(spec, hostname, vec![]) {
                Ok(source) => source,
                Err(err) => return tracing::error!(%err, "demo host spec"),
            };
            if let Err(err) = connection::run(&saved, &source, Some(location.to_owned())).await {
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
            accounts::sign_up(services, &SignUpRequest { email: email.into(), password: DEMO_PASSWORD.into() }).await?;
        let principal = Principal { user_id: me.id, email: me.email, roles: me.roles, credential: Credential::Session };
        if email.starts_with("provider") {
            accounts::enable_provider(services, &principal).await?;
        }
        if email.starts_with("admin") {
            accounts::create_admin(services, email, None).await?;
        }
    }
    Ok(true)
}
