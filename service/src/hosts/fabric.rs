//! A host's network fabric as its provider declares it (see `cardpool_domain::fabric`), held
//! against the links its agent reports. Offers carry it and filter on it; gangs book hosts of
//! one fabric, and reach each other at the hosts' fabric addresses.

use crate::{AppResult, Services, auth::Principal, db::DbResultExt, entities::hosts};
use cardpool_domain::fabric::{FabricView, HostFabric, Interconnect};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, IntoActiveModel};

/// Declares (or with `None` clears) the fabric of one of the caller's hosts.
pub async fn set_host_fabric(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    fabric: Option<&HostFabric>,
) -> AppResult<Option<FabricView>> {
    let fabric = fabric.map(HostFabric::checked).transpose()?;
    let host = super::owned_host(services, principal, host_id).await?;
    let txn = services.begin_write().await.context("starting fabric change")?;
    let mut row = host.into_active_model();
    row.fabric_id = Set(fabric.as_ref().map(|f| f.fabric_id.clone()));
    row.interconnect = Set(fabric.as_ref().map(|f| f.interconnect.as_str().to_owned()));
    row.fabric_gbps = Set(fabric.as_ref().map(|f| i32::try_from(f.gbps).unwrap_or(i32::MAX)));
    row.fabric_addr = Set(fabric.as_ref().and_then(|f| f.address.clone()));
    let host = row.update(&txn).await.context("saving fabric")?;
    let stock_change = crate::stock::refresh_stock(&txn, host_id).await?;
    txn.commit().await.context("committing fabric")?;
    stock_change.published(services);
    tracing::info!(host.id = host_id, fabric = ?host.fabric_id, "fabric declared");
    Ok(fabric_view(&host))
}

/// The host's declared fabric, checked against the links in its agent's last report.
pub fn fabric_view(host: &hosts::Model) -> Option<FabricView> {
    declared(host.fabric_id.as_deref(), host.interconnect.as_deref(), host.fabric_gbps)
        .map(|fabric| FabricView::of(HostFabric { address: host.fabric_addr.clone(), ..fabric }, &links(host)))
}

/// The declaration stored in a host's columns, if whole.
pub(crate) fn declared(fabric_id: Option<&str>, interconnect: Option<&str>, gbps: Option<i32>) -> Option<HostFabric> {
    Some(HostFabric {
        fabric_id: fabric_id?.to_owned(),
        interconnect: Interconnect::parse(interconnect?)?,
        gbps: u32::try_from(gbps?).ok()?,
        address: None,
    })
}

/// The physical links the host's agent last reported.
pub fn links(host: &hosts::Model) -> Vec<cardpool_protocol::NicInfo> {
    super::host_facts(host).map(|f| f.nics).unwrap_or_default()
}
