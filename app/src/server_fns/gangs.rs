use cardpool_domain::{
    AppError,
    gangs::{Gang, GangForm, GangList},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::rentals;
use leptos::prelude::*;

/// Books a gang from the gang form (its inputs are named `form[field]`); field problems come
/// back per field.
#[server(prefix = "/rpc", endpoint = "book_gang", output = JsonOut)]
pub async fn book_gang(form: GangForm) -> Result<Gang, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::book_gang(&req.services, &caller, &form.parse()?).await).await
}

#[server(prefix = "/rpc", endpoint = "list_gangs", output = JsonOut)]
pub async fn list_gangs() -> Result<GangList, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::list_gangs(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "get_gang", output = JsonOut)]
pub async fn get_gang(id: i64) -> Result<Gang, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::get_gang(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "stop_gang", output = JsonOut)]
pub async fn stop_gang(id: i64) -> Result<Gang, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::stop_gang(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "replace_gang_member", output = JsonOut)]
pub async fn replace_gang_member(id: i64, rank: u32) -> Result<Gang, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::replace_member(&req.services, &caller, id, rank).await).await
}
