use cardpool_domain::{
    AppError,
    account::{Me, UserSummary},
};
use leptos::prelude::*;

/// The signed-in account, or `None` for a visitor.
#[server(prefix = "/rpc", endpoint = "get_me")]
pub async fn get_me() -> Result<Option<Me>, AppError> {
    crate::ssr::anyone(|req| async move {
        use cardpool_service::{accounts, auth};
        match auth::principal_from_session(&req.services, &req.session).await? {
            Some(principal) => accounts::get_me(&req.services, &principal).await.map(Some),
            None => Ok(None),
        }
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_up")]
pub async fn sign_up(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::anyone(|req| async move {
        use cardpool_domain::account::SignUpRequest;
        cardpool_service::accounts::sign_up(&req.services, &req.session, &SignUpRequest { email, password }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_in")]
pub async fn sign_in(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::anyone(|req| async move {
        use cardpool_domain::account::SignInRequest;
        let request = SignInRequest { email, password };
        cardpool_service::accounts::sign_in(&req.services, &req.session, &request, req.client_ip.0).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_out")]
pub async fn sign_out() -> Result<(), AppError> {
    crate::ssr::anyone(|req| async move { cardpool_service::auth::end_session(&req.session).await }).await
}

#[server(prefix = "/rpc", endpoint = "change_password")]
pub async fn change_password(current_password: String, new_password: String) -> Result<(), AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        use cardpool_domain::account::ChangePasswordRequest;
        let request = ChangePasswordRequest { current_password, new_password };
        cardpool_service::accounts::change_password(&req.services, &req.session, &principal, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "enable_provider")]
pub async fn enable_provider() -> Result<Me, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::accounts::enable_provider(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_users")]
pub async fn list_users() -> Result<Vec<UserSummary>, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::accounts::list_users(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "grant_admin")]
pub async fn grant_admin(user_id: i64) -> Result<UserSummary, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::accounts::grant_admin(&req.services, &principal, user_id).await
    })
    .await
}
