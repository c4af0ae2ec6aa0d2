use cardpool_domain::{
    AppError,
    telemetry::{Alert, DeliveredEnergy, FleetOverview, TelemetryScope, TelemetryView},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::{alerts, telemetry};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "load_telemetry", output = JsonOut)]
pub async fn load_telemetry(scope: TelemetryScope) -> Result<TelemetryView, AppError> {
    crate::ssr::signed_in(async |req, caller| telemetry::view(&req.services, &caller, scope).await).await
}

#[server(prefix = "/rpc", endpoint = "load_fleet", output = JsonOut)]
pub async fn load_fleet() -> Result<FleetOverview, AppError> {
    crate::ssr::signed_in(async |req, caller| telemetry::fleet(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "load_my_hosts", output = JsonOut)]
pub async fn load_my_hosts() -> Result<FleetOverview, AppError> {
    crate::ssr::signed_in(async |req, caller| telemetry::my_hosts(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "list_alerts", output = JsonOut)]
pub async fn list_alerts() -> Result<Vec<Alert>, AppError> {
    crate::ssr::signed_in(async |req, caller| alerts::list_alerts(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "acknowledge_alert", output = JsonOut)]
pub async fn acknowledge_alert(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| alerts::acknowledge(&req.services, &caller, id).await).await
}

/// Energy delivered per rental on the caller's hosts.
#[server(prefix = "/rpc", endpoint = "provider_energy", output = JsonOut)]
pub async fn provider_energy() -> Result<Vec<DeliveredEnergy>, AppError> {
    crate::ssr::signed_in(async |req, caller| telemetry::provider_energy(&req.services, &caller).await).await
}
