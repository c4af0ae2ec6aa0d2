use cardpool_domain::{
    AppError,
    account::{Me, Viewer},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::{accounts, auth};
use leptos::prelude::*;

/// The signed-in account, or `None` for a visitor.
#[server(prefix = "/rpc", endpoint = "get_me", output = JsonOut)]
pub async fn get_me() -> Result<Option<Viewer>, AppError> {
    crate::ssr::anyone(async |req| match auth::principal_from_session(&req.services, &req.session).await? {
        Some(principal) => {
            let mut viewer: Viewer = accounts::get_me(&req.services, &principal).await?.into();
            viewer.unread_notifications = cardpool_service::notify::unread_count(&req.services, &principal).await?;
            Ok(Some(viewer))
        }
        None => Ok(None),
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_up", output = JsonOut)]
pub async fn sign_up(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::anyone(async |req| {
        use cardpool_domain::account::SignUpRequest;
        accounts::sign_up(&req.services, &req.session, &SignUpRequest { email, password }, req.client_ip.0).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "sign_in", output = JsonOut)]
pub async fn sign_in(email: String, password: String) -> Result<Me, AppError> {
    crate::ssr::anyone(async |req| {
        use cardpool_domain::account::SignInRequest;
        let request = SignInRequest { email, password };
        accounts::sign_in(&req.services, &req.session, &request, req.client_ip.0).await
    })
    .await
}

/// Posted by the navigation's plain HTML form (it needs no script, so the code for forms that
/// call server functions stays out of the bundle every page loads): ends the session, then
/// sends the browser to the home page, which it loads afresh as a visitor.
#[server(prefix = "/rpc", endpoint = "sign_out", output = JsonOut)]
pub async fn sign_out() -> Result<(), AppError> {
    crate::ssr::anyone(async |req| {
        auth::end_session(&req.session).await?;
        leptos_axum::redirect("/");
        Ok(())
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "change_password", output = JsonOut)]
pub async fn change_password(current_password: String, new_password: String) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::account::ChangePasswordRequest;
        let request = ChangePasswordRequest { current_password, new_password };
        accounts::change_password(&req.services, &req.session, &caller, &request).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "enable_provider", output = JsonOut)]
pub async fn enable_provider() -> Result<Me, AppError> {
    crate::ssr::signed_in(async |req, caller| accounts::enable_provider(&req.services, &caller).await).await
}
