use cardpool_domain::{
    AppError,
    payments::{Adjustment, Earnings, LedgerEntry, OnboardingLink, Payout, Receipt, TopUp, TopUpCreated, Wallet},
};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "get_wallet")]
pub async fn get_wallet() -> Result<Wallet, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::get_wallet(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "get_top_up")]
pub async fn get_top_up(id: i64) -> Result<TopUp, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::get_top_up(&req.services, &principal, id).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "create_top_up")]
pub async fn create_top_up(amount: String) -> Result<TopUpCreated, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::create_top_up(
            &req.services,
            &principal,
            &cardpool_domain::payments::CreateTopUpRequest { amount },
        )
        .await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_transactions")]
pub async fn list_transactions() -> Result<Vec<LedgerEntry>, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::list_transactions(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "get_receipt")]
pub async fn get_receipt(id: i64) -> Result<Receipt, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::get_receipt(&req.services, &principal, id).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "get_earnings")]
pub async fn get_earnings() -> Result<Earnings, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payouts::get_earnings(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_earnings_entries")]
pub async fn list_earnings_entries() -> Result<Vec<LedgerEntry>, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payouts::list_earnings_entries(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "create_onboarding_link")]
pub async fn create_onboarding_link() -> Result<OnboardingLink, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payouts::create_onboarding_link(&req.services, &principal).await
    })
    .await
}

/// An empty amount pays out everything available.
#[server(prefix = "/rpc", endpoint = "request_payout")]
pub async fn request_payout(amount: String) -> Result<Payout, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        let request = cardpool_domain::payments::RequestPayoutRequest { amount: Some(amount) };
        cardpool_service::payouts::request_payout(&req.services, &principal, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "admin_credit")]
pub async fn admin_credit(email: String, amount: String, kind: String, reason: String) -> Result<Adjustment, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        use cardpool_domain::payments::{AdjustmentKind, AdminCreditRequest};
        let kind = match kind.as_str() {
            "refund" => AdjustmentKind::Refund,
            "credit" => AdjustmentKind::Credit,
            _ => return Err(AppError::invalid_field("kind", "choose credit or refund")),
        };
        let request = AdminCreditRequest { email, amount, kind, reason };
        cardpool_service::payments::admin_adjust(&req.services, &principal, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_admin_credits")]
pub async fn list_admin_credits() -> Result<Vec<Adjustment>, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::payments::list_adjustments(&req.services, &principal).await
    })
    .await
}
