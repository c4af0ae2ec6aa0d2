//! The Stripe adapter: the few calls Cardpool makes, through async-stripe.
//!
//! Every POST carries an idempotency key derived from our own row id (`top-up-17`,
//! `payout-4`), and is retried with that same key on network errors, 429 and 5xx, so a retry
//! can never create a second charge or transfer. Stripe's error bodies become clear
//! [`AppError`]s: a decline is `PaymentRequired`, any other refusal `Conflict`, and Stripe being
//! unreachable or overloaded after the retries `Unavailable`.
//!
//! The same client talks to api.stripe.com or, without keys, to the project's local
//! Stripe-compatible server (`cardpool-stripe-local`) via `api_base`.

use crate::{AppError, AppResult};
use std::{collections::HashMap, time::Duration};
use stripe::{ClientBuilder, IdempotencyKey, RequestStrategy, StripeError, StripeRequest};
use stripe_checkout::checkout_session::{
    CreateCheckoutSession, CreateCheckoutSessionLineItems, CreateCheckoutSessionLineItemsPriceData, ProductData,
};
use stripe_connect::{
    account::{CreateAccount, CreateAccountType, RetrieveAccount},
    account_link::{CreateAccountLink, CreateAccountLinkType},
    transfer::{CreateTransfer, ListTransfer},
};
use stripe_types::Currency;

/// How Cardpool reaches Stripe. Secrets never appear in `Debug` output.
#[derive(Clone, Default)]
pub struct StripeSettings {
    pub secret_key: String,
    pub webhook_secret: String,
    /// `None` for api.stripe.com; the local server's address (with trailing slash) otherwise.
    pub api_base: Option<String>,
}

impl std::fmt::Debug for StripeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeSettings")
            .field("secret_key", &"<redacted>")
            .field("webhook_secret", &"<redacted>")
            .field("api_base", &self.api_base)
            .finish()
    }
}

/// Attempts per POST, all with the same idempotency key.
const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// A created Checkout session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutSession {
    pub id: String,
    pub url: String,
}

/// What Stripe says about a Connect account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectAccountStatus {
    pub details_submitted: bool,
    pub payouts_enabled: bool,
}

pub struct StripeGateway {
    client: stripe::Client,
    webhook_secret: String,
}

impl StripeGateway {
    pub fn new(settings: &StripeSettings) -> AppResult<Self> {
        let mut builder = ClientBuilder::new(settings.secret_key.clone()).timeout(Duration::from_secs(20));
        if let Some(base) = &settings.api_base {
            let base = if base.ends_with('/') { base.clone() } else { format!("{base}/") };
            builder = builder.url(base);
        }
        let client = builder.build().map_err(|err| {
            tracing::error!(error = %err, "building the Stripe client");
            AppError::Internal
        })?;
        Ok(StripeGateway { client, webhook_secret: settings.webhook_secret.clone() })
    }

    pub fn webhook_secret(&self) -> &str {
        &self.webhook_secret
    }

    /// Opens a Checkout session for a wallet top-up of `amount_cents`.
    pub async fn create_checkout_session(
        &self,
        top_up_id: i64,
        amount_cents: i64,
        email: &str,
        success_url: &str,
        cancel_url: &str,
    ) -> AppResult<CheckoutSession> {
        let product = ProductData::new("Cardpool wallet top-up");
        let mut price = CreateCheckoutSessionLineItemsPriceData::new(Currency::USD);
        price.product_data = Some(product);
        price.unit_amount = Some(amount_cents);
        let mut item = CreateCheckoutSessionLineItems::new();
        item.price_data = Some(price);
        item.quantity = Some(1);
        let metadata = HashMap::from([("top_up_id".to_owned(), top_up_id.to_string())]);
        let request = CreateCheckoutSession::new()
            .mode(stripe_shared::CheckoutSessionMode::Payment)
            .client_reference_id(top_up_id.to_string())
            .customer_email(email)
            .line_items(vec![item])
            .metadata(metadata)
            .success_url(success_url)
            .cancel_url(cancel_url);
        let session = self.post(&request, &format!("top-up-{top_up_id}")).await?;
        let url = session.url.ok_or_else(|| {
            tracing::error!(session = %session.id, "Stripe returned a Checkout session without a URL");
            AppError::Internal
        })?;
        Ok(CheckoutSession { id: session.id.to_string(), url })
    }

    /// Creates the Express account a provider is paid through.
    pub async fn create_connect_account(&self, user_id: i64, email: &str) -> AppResult<String> {
        let request = CreateAccount::new()
            .type_(CreateAccountType::Express)
            .email(email)
            .metadata(HashMap::from([("cardpool_user_id".to_owned(), user_id.to_string())]));
        let account = self.post(&request, &format!("connect-account-{user_id}")).await?;
        Ok(account.id.to_string())
    }

    /// A fresh, single-use onboarding link for `account`.
    pub async fn create_onboarding_link(
        &self,
        account: &str,
        refresh_url: &str,
        return_url: &str,
    ) -> AppResult<String> {
        let request = CreateAccountLink::new(account, CreateAccountLinkType::AccountOnboarding)
            .refresh_url(refresh_url)
            .return_url(return_url);
        // Links are single-use and short-lived: one per account per second is what we want.
        let key = format!("account-link-{account}-{}", chrono::Utc::now().timestamp());
        Ok(self.post(&request, &key).await?.url)
    }

    pub async fn retrieve_connect_account(&self, account: &str) -> AppResult<ConnectAccountStatus> {
        let request = RetrieveAccount::new(account);
        let account = self.get(&request).await?;
        Ok(ConnectAccountStatus {
            details_submitted: account.details_submitted.unwrap_or(false),
            payouts_enabled: account.payouts_enabled.unwrap_or(false),
        })
    }

    /// Transfers `amount_cents` to a provider's Connect account for payout `payout_id`.
    pub async fn create_transfer(&self, payout_id: i64, amount_cents: i64, destination: &str) -> AppResult<String> {
        let request = CreateTransfer::new(Currency::USD, destination)
            .amount(amount_cents)
            .transfer_group(format!("payout-{payout_id}"))
            .metadata(HashMap::from([("payout_id".to_owned(), payout_id.to_string())]));
        Ok(self.post(&request, &format!("payout-{payout_id}")).await?.id.to_string())
    }

    /// The transfer made for payout `payout_id`, if Stripe has one (looked up by its transfer
    /// group, which outlives the 24 hours Stripe keeps idempotency keys).
    pub async fn find_transfer(&self, payout_id: i64) -> AppResult<Option<String>> {
        let request = ListTransfer::new().transfer_group(format!("payout-{payout_id}")).limit(1);
        Ok(self.get(&request).await?.data.into_iter().next().map(|t| t.id.to_string()))
    }

    async fn post<R>(&self, request: &R, key: &str) -> AppResult<R::Output>
    where
        R: StripeRequest,
        R::Output: miniserde::Deserialize,
    {
        let key = IdempotencyKey::new(key).map_err(|err| {
            tracing::error!(error = ?err, "invalid idempotency key");
            AppError::Internal
        })?;
        self.send(request, RequestStrategy::Idempotent(key)).await
    }

    async fn get<R>(&self, request: &R) -> AppResult<R::Output>
    where
        R: StripeRequest,
        R::Output: miniserde::Deserialize,
    {
        self.send(request, RequestStrategy::Once).await
    }

    async fn send<R>(&self, request: &R, strategy: RequestStrategy) -> AppResult<R::Output>
    where
        R: StripeRequest,
        R::Output: miniserde::Deserialize,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match request.customize().request_strategy(strategy.clone()).send(&self.client).await {
                Ok(output) => return Ok(output),
                Err(err) => {
                    let failure = classify(&err);
                    if matches!(failure, Failure::Transient) && attempt < ATTEMPTS {
                        tracing::warn!(error = %short(&err), attempt, "Stripe request failed; retrying with the same key");
                        tokio::time::sleep(backoff).await;
                        backoff *= 2;
                        attempt += 1;
                        continue;
                    }
                    return Err(failure.into_app_error(&err));
                }
            }
        }
    }
}

enum Failure {
    /// Network trouble, 429 or 5xx: worth retrying with the same key.
    Transient,
    Declined(String),
    Refused(String),
    Broken,
}

impl Failure {
    fn into_app_error(self, err: &StripeError) -> AppError {
        match self {
            Failure::Transient => {
                tracing::error!(error = %short(err), "Stripe is unavailable");
                AppError::Unavailable("Stripe is not answering right now; please try again in a minute".into())
            }
            Failure::Declined(message) => AppError::PaymentRequired(format!("payment declined: {message}")),
            Failure::Refused(message) => AppError::Conflict(format!("Stripe refused the request: {message}")),
            Failure::Broken => {
                tracing::error!(error = %short(err), "unexpected answer from Stripe");
                AppError::Internal
            }
        }
    }
}

fn classify(err: &StripeError) -> Failure {
    match err {
        StripeError::ClientError(_) | StripeError::Timeout => Failure::Transient,
        StripeError::Stripe(api, status) => {
            let message = api.message.clone().unwrap_or_else(|| "no reason given".into());
            match status {
                409 | 429 | 500..=599 => Failure::Transient,
                402 => Failure::Declined(message),
                _ => Failure::Refused(message),
            }
        }
        StripeError::JSONDeserialize(_) | StripeError::ConfigError(_) => Failure::Broken,
    }
}

/// A one-line description of a Stripe error without its (possibly long) debug dump.
fn short(err: &StripeError) -> String {
    match err {
        StripeError::Stripe(api, status) => format!(
            "HTTP {status} {}: {}",
            api.code.as_ref().map(|c| c.as_str().to_owned()).unwrap_or_default(),
            api.message.clone().unwrap_or_default()
        ),
        other => other.to_string(),
    }
}
