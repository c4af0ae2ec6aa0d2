//! Network fabrics: which hosts can reach each other, over what and how fast.
//!
//! A provider declares each host's fabric: an id shared by the hosts of one cluster or subnet
//! (`pdx-ib-1`), the interconnect and its speed. Renters see it on offers and filter on it;
//! multi-node gangs book hosts of one fabric. The agent reports the host's physical links, and
//! a declaration is *checked* when an up link of that interconnect at least that fast is among
//! them ([`FabricView::checked`]); a declaration the agent cannot confirm is shown as declared.

use crate::AppError;
pub use cardpool_protocol::NicInfo;
use serde::{Deserialize, Serialize};

/// How a fabric's hosts are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Interconnect {
    Infiniband,
    /// RDMA over Converged Ethernet.
    Roce,
    Ethernet,
}

impl Interconnect {
    pub fn as_str(self) -> &'static str {
        match self {
            Interconnect::Infiniband => "infiniband",
            Interconnect::Roce => "roce",
            Interconnect::Ethernet => "ethernet",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [Interconnect::Infiniband, Interconnect::Roce, Interconnect::Ethernet].into_iter().find(|i| i.as_str() == raw)
    }

    /// The name people know it by.
    pub fn label(self) -> &'static str {
        match self {
            Interconnect::Infiniband => "InfiniBand",
            Interconnect::Roce => "RoCE",
            Interconnect::Ethernet => "Ethernet",
        }
    }
}

/// The longest fabric id.
pub const MAX_FABRIC_ID_LEN: usize = 64;
/// The fastest link a declaration may claim, Gb/s (an 8-port 800G host).
pub const MAX_FABRIC_GBPS: u32 = 6_400;

/// A provider's declaration of a host's fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostFabric {
    /// Shared by the hosts that reach each other over it: letters (stored lowercase), digits,
    /// `.`, `_`, `-`.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]+$"))]
    pub fabric_id: String,
    pub interconnect: Interconnect,
    /// The host's link speed on it, Gb/s.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 6400))]
    pub gbps: u32,
    /// The host's IP address on the fabric, where gang members on the fabric's other hosts
    /// reach it; a host without one is not offered to gangs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 45))]
    pub address: Option<String>,
}

impl HostFabric {
    /// The declaration as stored (id trimmed and lowercased), or why not.
    pub fn checked(&self) -> Result<HostFabric, AppError> {
        let mut fields = crate::FieldErrors::new();
        let id = self.fabric_id.trim().to_lowercase();
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-');
        if id.is_empty() || id.len() > MAX_FABRIC_ID_LEN || !id.chars().all(allowed) {
            fields.insert(
                "fabric_id".into(),
                format!("1 to {MAX_FABRIC_ID_LEN} letters, digits, '.', '_' or '-', e.g. pdx-ib-1"),
            );
        }
        if self.gbps == 0 || self.gbps > MAX_FABRIC_GBPS {
            fields.insert("gbps".into(), format!("between 1 and {MAX_FABRIC_GBPS} Gb/s"));
        }
        let address = self.address.as_deref().map(str::trim).filter(|a| !a.is_empty());
        let address = match address.map(|a| a.parse::<std::net::IpAddr>()) {
            None => None,
            Some(Ok(ip)) if !ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast() => Some(ip.to_string()),
            Some(_) => {
                fields.insert("address".into(), "the host's IP address on the fabric, e.g. 10.8.0.11".into());
                None
            }
        };
        if fields.is_empty() {
            Ok(HostFabric { fabric_id: id, address, ..self.clone() })
        } else {
            Err(AppError::invalid_fields(fields))
        }
    }
}

/// Sets or clears a host's fabric (`PUT /api/v1/hosts/{id}/fabric`; `null` clears it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetHostFabricRequest {
    pub fabric: Option<HostFabric>,
}

/// A host's fabric as renters and its provider see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FabricView {
    pub fabric_id: String,
    pub interconnect: Interconnect,
    pub gbps: u32,
    /// Where gang members reach the host on the fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `true` when the agent reports an up link of this interconnect at least this fast;
    /// `false` when it reports its links and none is; `None` when it reports none (an agent
    /// older than protocol 1.6, or a machine whose kernel shows no links).
    pub checked: Option<bool>,
}

impl FabricView {
    /// The declaration held against the links the agent reported.
    pub fn of(declared: HostFabric, links: &[NicInfo]) -> FabricView {
        let checked = (!links.is_empty()).then(|| {
            links.iter().any(|l| {
                l.up && l.link == declared.interconnect.as_str()
                    && l.speed_mbps.is_some_and(|m| u64::from(m) >= u64::from(declared.gbps) * 1000)
            })
        });
        FabricView {
            fabric_id: declared.fabric_id,
            interconnect: declared.interconnect,
            gbps: declared.gbps,
            address: declared.address,
            checked,
        }
    }

    /// "InfiniBand 400 Gb/s".
    pub fn summary(&self) -> String {
        format!("{} {} Gb/s", self.interconnect.label(), self.gbps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ib(gbps: u32) -> HostFabric {
        HostFabric { fabric_id: "pdx-ib-1".into(), interconnect: Interconnect::Infiniband, gbps, address: None }
    }

    #[test]
    fn declarations_are_checked_against_the_links() {
        let link = |link: &str, mbps: Option<u32>, up: bool| NicInfo {
            name: "x".into(),
            link: link.into(),
            speed_mbps: mbps,
            up,
        };
        let links = [link("ethernet", Some(25_000), true), link("infiniband", Some(400_000), true)];
        assert_eq!(FabricView::of(ib(400), &links).checked, Some(true));
        assert_eq!(FabricView::of(ib(800), &links).checked, Some(false), "slower than declared");
        assert_eq!(FabricView::of(ib(400), &[link("infiniband", Some(400_000), false)]).checked, Some(false), "down");
        assert_eq!(
            FabricView::of(ib(400), &[link("roce", Some(400_000), true)]).checked,
            Some(false),
            "not InfiniBand"
        );
        assert_eq!(FabricView::of(ib(400), &[]).checked, None, "nothing reported: not known");
        assert_eq!(FabricView::of(ib(400), &links).summary(), "InfiniBand 400 Gb/s");
    }

    #[test]
    fn declarations_are_validated() {
        let stored = HostFabric { fabric_id: "  PDX-IB-1 ".into(), ..ib(400) }.checked().unwrap();
        assert_eq!(stored.fabric_id, "pdx-ib-1");
        assert!(
            HostFabric { fabric_id: "no spaces".into(), ..ib(400) }.checked().unwrap_err().field("fabric_id").is_some()
        );
        assert!(HostFabric { fabric_id: String::new(), ..ib(400) }.checked().is_err());
        assert!(ib(0).checked().unwrap_err().field("gbps").is_some());
        assert!(ib(MAX_FABRIC_GBPS + 1).checked().is_err());
        let at = |a: &str| HostFabric { address: Some(a.into()), ..ib(400) }.checked();
        assert_eq!(at(" 10.8.0.11 ").unwrap().address.as_deref(), Some("10.8.0.11"));
        assert_eq!(at("fd00::0011").unwrap().address.as_deref(), Some("fd00::11"));
        assert_eq!(at("").unwrap().address, None, "empty: no address");
        for bad in ["127.0.0.1", "0.0.0.0", "224.0.0.1", "gpu-node-1", "10.8.0.300"] {
            assert!(at(bad).unwrap_err().field("address").is_some(), "{bad}");
        }
    }
}
