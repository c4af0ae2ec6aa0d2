use cardpool_domain::{
    AppError,
    payments::{Adjustment, Earnings, LedgerEntry, OnboardingLink, Payout, Receipt, TopUp, TopUpCreated, Wallet},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::{payments, payouts};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "get_wallet", output = JsonOut)]
pub async fn get_wallet() -> Result<Wallet, AppError> {
    crate::ssr::signed_in(async |req, caller| payments::get_wallet(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "get_top_up", output = JsonOut)]
pub async fn get_top_up(id: i64) -> Result<TopUp, AppError> {
    crate::ssr::signed_in(async |req, caller| payments::get_top_up(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "create_top_up", output = JsonOut)]
pub async fn create_top_up(amount: String) -> Result<TopUpCreated, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        payments::create_top_up(&req.services, &caller, &cardpool_domain::payments::CreateTopUpRequest { amount }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_transactions", output = JsonOut)]
pub async fn list_transactions() -> Result<Vec<LedgerEntry>, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        payments::list_transactions(&req.services, &caller, &Default::default()).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "get_receipt", output = JsonOut)]
pub async fn get_receipt(id: i64) -> Result<Receipt, AppError> {
    crate::ssr::signed_in(async |req, caller| payments::get_receipt(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "get_earnings", output = JsonOut)]
pub async fn get_earnings() -> Result<Earnings, AppError> {
    crate::ssr::signed_in(async |req, caller| payouts::get_earnings(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "list_earnings_entries", output = JsonOut)]
pub async fn list_earnings_entries() -> Result<Vec<LedgerEntry>, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        payouts::list_earnings_entries(&req.services, &caller, &Default::default()).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "create_onboarding_link", output = JsonOut)]
pub async fn create_onboarding_link() -> Result<OnboardingLink, AppError> {
    crate::ssr::signed_in(async |req, caller| payouts::create_onboarding_link(&req.services, &caller).await).await
}

/// An empty amount pays out everything available.
#[server(prefix = "/rpc", endpoint = "request_payout", output = JsonOut)]
pub async fn request_payout(amount: String) -> Result<Payout, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let request = cardpool_domain::payments::RequestPayoutRequest { amount: Some(amount) };
        payouts::request_payout(&req.services, &caller, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "admin_credit", output = JsonOut)]
pub async fn admin_credit(email: String, amount: String, kind: String, reason: String) -> Result<Adjustment, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::payments::{AdjustmentKind, AdminCreditRequest};
        let kind = match kind.as_str() {
            "refund" => AdjustmentKind::Refund,
            "credit" => AdjustmentKind::Credit,
            _ => return Err(AppError::invalid_field("kind", "choose credit or refund")),
        };
        let request = AdminCreditRequest { email, amount, kind, reason };
        payments::admin_adjust(&req.services, &caller, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_admin_credits", output = JsonOut)]
pub async fn list_admin_credits() -> Result<Vec<Adjustment>, AppError> {
    crate::ssr::signed_in(async |req, caller| payments::list_adjustments(&req.services, &caller).await).await
}
