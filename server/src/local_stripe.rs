//! Starting the bundled local test-mode Stripe (`cardpool-stripe-local`) beside the server,
//! for the demo, development and tests: fresh random keys each start, webhooks aimed at this
//! server's `/stripe/webhook`.

use cardpool_service::stripe::StripeSettings;
use cardpool_stripe_local::{Config, LocalStripe, Running};
use rand::RngCore;
use std::net::SocketAddr;

/// Starts a local Stripe on `addr` (port 0: any) that delivers webhooks to `cardpool_url`,
/// and returns it with the settings Cardpool's Stripe client needs to use it.
pub async fn start(cardpool_url: &str, addr: SocketAddr) -> std::io::Result<(Running, StripeSettings)> {
    start_with(Some(cardpool_url), addr).await
}

/// Like [`start`]; with no Cardpool URL, events are only logged, never delivered (tests
/// deliver them themselves).
pub async fn start_with(cardpool_url: Option<&str>, addr: SocketAddr) -> std::io::Result<(Running, StripeSettings)> {
    let random = || {
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        hex(&bytes)
    };
    let config = Config {
        secret_key: format!("sk_test_local_{}", random()),
        webhook_secret: format!("whsec_local_{}", random()),
        webhook_url: cardpool_url.map(|url| format!("{}/stripe/webhook", url.trim_end_matches('/'))),
    };
    let running = LocalStripe::spawn(config.clone(), addr).await?;
    let settings = StripeSettings {
        secret_key: config.secret_key,
        webhook_secret: config.webhook_secret,
        api_base: Some(running.url.clone()),
    };
    Ok((running, settings))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
