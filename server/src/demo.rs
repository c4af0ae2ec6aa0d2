//! Demo data for `cardpool serve --demo`: a few accounts, one per role, seeded only into an
//! empty database so a newcomer can sign in straight away.

use cardpool_domain::account::SignUpRequest;
use cardpool_service::{AppResult, Services, accounts, auth::Credential, auth::Principal};

/// The password of every demo account (printed at start-up; demo databases only).
pub const DEMO_PASSWORD: &str = "cardpool-demo";

/// Demo accounts and their roles.
pub const DEMO_ACCOUNTS: [(&str, &str); 3] = [
    ("renter@demo.cardpool.dev", "renter"),
    ("provider@demo.cardpool.dev", "renter + provider"),
    ("admin@demo.cardpool.dev", "renter + admin"),
];

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
