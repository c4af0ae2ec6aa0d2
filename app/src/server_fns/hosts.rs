use cardpool_domain::{
    AppError,
    host::{CreatedEnrollmentToken, GpuModelPrice, HostDetail, HostSummary},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::hosts;
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "create_enrollment_token", output = JsonOut)]
pub async fn create_enrollment_token(location: String) -> Result<CreatedEnrollmentToken, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let headers = leptos_axum::extract::<http::HeaderMap>().await.map_err(|_| AppError::Internal)?;
        let url = req.state.server_url(&headers);
        hosts::create_enrollment_token(&req.services, &caller, Some(&location), &url).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_hosts", output = JsonOut)]
pub async fn list_hosts() -> Result<Vec<HostSummary>, AppError> {
    crate::ssr::signed_in(async |req, caller| hosts::list_hosts(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "get_host", output = JsonOut)]
pub async fn get_host(id: i64) -> Result<HostDetail, AppError> {
    crate::ssr::signed_in(async |req, caller| hosts::get_host(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "revoke_host", output = JsonOut)]
pub async fn revoke_host(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| hosts::revoke_host(&req.services, &caller, id).await).await
}

/// Prices arrive as dollar strings from the form and are stored as integer micro-dollars.
#[server(prefix = "/rpc", endpoint = "update_host_pricing", output = JsonOut)]
pub async fn update_host_pricing(
    id: i64,
    gpu_model: String,
    on_demand: String,
    reserved: String,
    spot_min_bid: String,
) -> Result<GpuModelPrice, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::money::parse_dollars;
        let mut fields = cardpool_domain::FieldErrors::new();
        let mut dollars = |field: &str, raw: &str| {
            parse_dollars(raw).map_err(|m| fields.insert(field.to_owned(), m)).unwrap_or_default()
        };
        let price = GpuModelPrice {
            gpu_model,
            on_demand_micros: dollars("on_demand", &on_demand),
            reserved_micros: dollars("reserved", &reserved),
            spot_min_bid_micros: dollars("spot_min_bid", &spot_min_bid),
        };
        if !fields.is_empty() {
            return Err(AppError::invalid_fields(fields));
        }
        hosts::update_host_pricing(&req.services, &caller, id, &price).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "set_host_listed", output = JsonOut)]
pub async fn set_host_listed(id: i64, listed: bool) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| hosts::set_host_listed(&req.services, &caller, id, listed).await).await
}

/// How one GPU is sold: `whole`, or `mig` (as its MIG instances).
#[server(prefix = "/rpc", endpoint = "set_gpu_sale", output = JsonOut)]
pub async fn set_gpu_sale(id: i64, gpu_index: i32, sold_as: String) -> Result<(), AppError> {
    use cardpool_domain::host::GpuSale;
    let sold_as = match sold_as.as_str() {
        "whole" => GpuSale::Whole,
        "mig" => GpuSale::Mig,
        _ => return Err(AppError::invalid_field("sold_as", "whole or mig")),
    };
    crate::ssr::signed_in(async |req, caller| hosts::set_gpu_sale(&req.services, &caller, id, gpu_index, sold_as).await)
        .await
}

/// Asks the host's agent to carve one GPU into a MIG layout written as `3g.40gb*2+1g.10gb`.
#[server(prefix = "/rpc", endpoint = "set_mig_layout", output = JsonOut)]
pub async fn set_mig_layout(id: i64, gpu_index: i32, layout: String) -> Result<(), AppError> {
    let profiles =
        cardpool_domain::host::mig::parse_layout(&layout).map_err(|why| AppError::invalid_field("layout", why))?;
    crate::ssr::signed_in(async |req, caller| {
        hosts::set_mig_layout(&req.services, &caller, id, gpu_index, profiles).await
    })
    .await
}

/// Declares a host's fabric from the host page's form; an empty fabric id clears it.
#[server(prefix = "/rpc", endpoint = "set_host_fabric", output = JsonOut)]
pub async fn set_host_fabric(
    id: i64,
    fabric_id: String,
    interconnect: String,
    gbps: String,
    #[server(default)] address: String,
) -> Result<Option<cardpool_domain::fabric::FabricView>, AppError> {
    use cardpool_domain::fabric::{HostFabric, Interconnect};
    let fabric = if fabric_id.trim().is_empty() {
        None
    } else {
        let mut fields = cardpool_domain::FieldErrors::new();
        let interconnect = Interconnect::parse(&interconnect).unwrap_or_else(|| {
            fields.insert("interconnect".into(), "InfiniBand, RoCE or Ethernet".into());
            Interconnect::Ethernet
        });
        let gbps = gbps.trim().parse::<u32>().unwrap_or_else(|_| {
            fields.insert("gbps".into(), "a whole number of Gb/s, e.g. 400".into());
            0
        });
        if !fields.is_empty() {
            return Err(AppError::invalid_fields(fields));
        }
        Some(HostFabric { fabric_id, interconnect, gbps, address: Some(address) })
    };
    crate::ssr::signed_in(async |req, caller| hosts::set_host_fabric(&req.services, &caller, id, fabric.as_ref()).await)
        .await
}
