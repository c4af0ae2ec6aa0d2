//! What a rental's own network may reach: the internet, and nothing of the provider's.
//!
//! slirp4netns gives each sandbox outbound NAT through the host's own network stack, so on its
//! own it would let a workload reach services on the host's other addresses, the provider's
//! LAN, and a cloud's metadata service (169.254.169.254, where instance credentials live).
//! Before the network comes up, the root wrapper loads [`rules`] into the sandbox's network
//! namespace with nftables: loopback (the rental's own) and DNS through slirp stay open;
//! private, link-local, shared and multicast ranges, and every address and subnet of the host,
//! are refused at once. Should loading them fail, the rental gets no network at all.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

/// slirp4netns's DNS forwarder, inside every sandbox.
const SLIRP_DNS: &str = "10.0.2.3";
/// Never reachable from a rental (RFC 1918, CGNAT, link-local, this-network, multicast and
/// reserved; the IPv6 equivalents).
const REFUSED_V4: [&str; 7] =
    ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/3"];
const REFUSED_V6: [&str; 3] = ["fc00::/7", "fe80::/10", "ff00::/8"];

/// nftables, if installed.
pub fn detect() -> Option<PathBuf> {
    ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"].into_iter().map(PathBuf::from).find(|p| p.exists())
}

/// The host's addresses and the networks they are on (`addr/prefix`), loopback aside.
pub fn host_networks() -> Vec<(IpAddr, u8)> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else { return vec![] };
    let mut networks = Vec::new();
    for interface in interfaces {
        let (Some(address), Some(mask)) = (interface.address, interface.netmask) else { continue };
        let found = match (
            address.as_sockaddr_in(),
            mask.as_sockaddr_in(),
            address.as_sockaddr_in6(),
            mask.as_sockaddr_in6(),
        ) {
            (Some(a), Some(m), _, _) => Some((IpAddr::V4(a.ip()), u32::from(m.ip()).count_ones() as u8)),
            (_, _, Some(a), Some(m)) => Some((IpAddr::V6(a.ip()), u128::from(m.ip()).count_ones() as u8)),
            _ => None,
        };
        if let Some((ip, prefix)) = found.filter(|(ip, _)| !ip.is_loopback()) {
            networks.push((ip, prefix));
        }
    }
    networks
}

/// The ruleset for one sandbox's network namespace, from the host as it is now.
pub fn rules(host: &[(IpAddr, u8)], open: &[(IpAddr, u16)]) -> String {
    let mut refuse: Vec<(bool, String)> = REFUSED_V4.iter().map(|n| (true, (*n).to_owned())).collect();
    refuse.extend(REFUSED_V6.iter().map(|n| (false, (*n).to_owned())));
    for (ip, prefix) in host {
        let full = if ip.is_ipv4() { 32 } else { 128 };
        refuse.push((ip.is_ipv4(), format!("{ip}/{full}")));
        if *prefix < full {
            refuse.push((ip.is_ipv4(), format!("{}/{prefix}", network(*ip, *prefix))));
        }
    }
    let mut text = String::from(
        "table inet cardpool {\n\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\t\toifname \"lo\" accept\n",
    );
    text.push_str(&format!("\t\tip daddr {SLIRP_DNS} meta l4proto {{ tcp, udp }} th dport 53 accept\n"));
    for (ip, port) in open {
        text.push_str(&format!("\t\t{} daddr {ip} tcp dport {port} accept\n", if ip.is_ipv4() { "ip" } else { "ip6" }));
    }
    // One rule per range: nftables refuses overlapping intervals within one set.
    for (v4, range) in refuse {
        text.push_str(&format!("\t\t{} daddr {range} reject\n", if v4 { "ip" } else { "ip6" }));
    }
    text.push_str("\t}\n}\n");
    text
}

/// `ip` with its host bits cleared.
fn network(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// Writes the ruleset for a sandbox into its rental directory (readable by root only).
pub fn write(dir: &Path, file: &str, open: &[(IpAddr, u16)]) -> Result<PathBuf, String> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let path = dir.join(file);
    let _ = std::fs::remove_file(&path);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    out.write_all(rules(&host_networks(), open).as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_addresses_and_networks_are_refused_dns_through_slirp_is_not() {
        let host = [("192.0.2.2".parse().unwrap(), 24), ("2001:db8::5".parse().unwrap(), 64)];
        let rules = rules(&host, &[("192.0.2.2".parse().unwrap(), 29500)]);
        for line in [
            "ip daddr 192.0.2.2/32 reject",
            "ip daddr 192.0.2.0/24 reject",
            "ip6 daddr 2001:db8::5/128 reject",
            "ip6 daddr 2001:db8::/64 reject",
            "ip daddr 169.254.0.0/16 reject",
            "ip daddr 10.0.0.0/8 reject",
        ] {
            assert!(rules.contains(line), "{line} missing:\n{rules}");
        }
        let rendezvous = rules.find("ip daddr 192.0.2.2 tcp dport 29500 accept").expect("a gang's rendezvous");
        assert!(rendezvous < rules.find("192.0.2.2/32 reject").unwrap(), "let through before the host is refused");
        let dns = rules.find("dport 53 accept").unwrap();
        assert!(dns < rules.find("10.0.0.0/8").unwrap(), "DNS is let through before 10/8 is refused");
        assert_eq!(network("10.1.2.3".parse().unwrap(), 0), "0.0.0.0".parse::<IpAddr>().unwrap());
    }
}
