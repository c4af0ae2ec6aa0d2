use cardpool_domain::{
    AppError,
    account::{Me, UserSummary},
};
use leptos::prelude::*;

/// The signed-in account, or `None` for a visitor.
#[server(prefix = "/rpc", endpoint = "get_me")]
pub async fn get_me() -> Result<Option<Me>, AppError> {
    crate::ssr::respond(async move {
        use cardpool_service::{accounts, auth};
        let req = crate::ssr::Request::current().await?;
        match auth::principal_from_session(&req.services, &req.session).await? {
            Some(principal) => accounts::get_me(&req.services, &principal).await.map(Some),
            None => Ok(None),
        }
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_up")]
pub async fn sign_up(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::respond(async move {
        use cardpool_domain::account::SignUpRequest;
        use cardpool_service::{accounts, auth};
        let req = crate::ssr::Request::current().await?;
        let me = accounts::sign_up(&req.services, &SignUpRequest { email, password }).await?;
        auth::start_session(&req.session, me.id, 0).await?;
        Ok(me)
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_in")]
pub async fn sign_in(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::respond(async move {
        use cardpool_domain::account::SignInRequest;
        use cardpool_service::{accounts, auth};
        let req = crate::ssr::Request::current().await?;
        let (me, epoch) = accounts::sign_in(&req.services, &SignInRequest { email, password }, req.client_ip.0).await?;
        auth::start_session(&req.session, me.id, epoch).await?;
        Ok(me)
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_out")]
pub async fn sign_out() -> Result<(), AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        cardpool_service::auth::end_session(&req.session).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "change_password")]
pub async fn change_password(current_password: String, new_password: String) -> Result<(), AppError> {
    crate::ssr::respond(async move {
        use cardpool_domain::account::ChangePasswordRequest;
        use cardpool_service::{accounts, auth};
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        let epoch = accounts::change_password(
            &req.services,
            &principal,
            &ChangePasswordRequest { current_password, new_password },
        )
        .await?;
        auth::refresh_session_epoch(&req.session, epoch).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "enable_provider")]
pub async fn enable_provider() -> Result<Me, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::accounts::enable_provider(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_users")]
pub async fn list_users() -> Result<Vec<UserSummary>, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::accounts::list_users(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "grant_admin")]
pub async fn grant_admin(user_id: i64) -> Result<UserSummary, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::accounts::grant_admin(&req.services, &principal, user_id).await
    })
    .await
}
