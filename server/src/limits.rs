//! What one request may cost the server, decided on purpose per kind of route rather than left
//! to library defaults: how large a body may be, how long it may take to arrive, and which
//! address a request comes from when it passed through proxies we run.
//!
//! Bodies are read here, before any handler, up to the route's limit: a larger one is answered
//! `413` (whatever reads it later, a JSON extractor or a server function, would otherwise
//! answer its own way, a `500` for server functions), and one that trickles in slower than
//! [`BODY_READ_TIMEOUT`] is answered `408`. Slow headers are the listener's job
//! (`crate::listener`).

use crate::edges::ApiError;
use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use cardpool_domain::AppError;
use cardpool_service::auth::ClientIp;
use futures_util::StreamExt;
use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

/// JSON API requests and server functions: forms and small documents (an SSH key, a command).
pub const API_BODY_LIMIT: usize = 64 * 1024;
/// Stripe's webhook deliveries: one event object.
pub const WEBHOOK_BODY_LIMIT: usize = 512 * 1024;
/// Everything else (pages, files, the agent's upgrade, metrics) takes no body worth the name.
pub const OTHER_BODY_LIMIT: usize = 1024;
/// How much of a too-large streamed body is read and dropped before answering.
const DRAIN_LIMIT: usize = 1024 * 1024;
/// How long a body may take to arrive once its headers have.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The largest body `path` takes.
pub fn body_limit(path: &str) -> usize {
    if path == "/stripe/webhook" {
        WEBHOOK_BODY_LIMIT
    } else if path.starts_with("/api/") || path.starts_with("/rpc/") {
        API_BODY_LIMIT
    } else {
        OTHER_BODY_LIMIT
    }
}

fn too_large(limit: usize) -> Response {
    ApiError(AppError::TooLarge(format!("the request body is larger than this route takes ({} KiB)", limit / 1024)))
        .into_response()
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// Reads the request's body up to its route's limit, in time, before anything else does.
pub async fn limit_body(req: Request, next: Next) -> Response {
    let limit = body_limit(req.uri().path());
    let declared = declared_length(req.headers());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit);
    }
    let streamed = req.headers().contains_key(header::TRANSFER_ENCODING);
    if declared.unwrap_or(0) == 0 && !streamed {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut buffer = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| AppError::invalid_field("body", "the request body could not be read"))?;
            if buffer.len() + chunk.len() > limit {
                // Read (and drop) a little more, so that a client still sending a body of
                // modest size gets to read the answer instead of a reset connection.
                let mut drained = 0;
                while let Some(Ok(chunk)) = stream.next().await {
                    drained += chunk.len();
                    if drained > DRAIN_LIMIT {
                        break;
                    }
                }
                return Err(AppError::TooLarge(String::new()));
            }
            buffer.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Err(_) => ApiError(AppError::TimedOut).into_response(),
        Ok(Err(AppError::TooLarge(_))) => too_large(limit),
        Ok(Err(err)) => ApiError(err).into_response(),
        Ok(Ok(())) => next.run(Request::from_parts(parts, Body::from(buffer))).await,
    }
}

/// Which proxies' word on the client address is taken (`X-Forwarded-For`).
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Arc<[IpNet]>);

/// An address range such as `10.0.0.0/8` or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for IpNet {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, prefix) = text.trim().split_once('/').map_or((text.trim(), None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.parse().map_err(|_| format!("{text:?} is not an IP address or range"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse().ok().filter(|p| *p <= max).ok_or_else(|| format!("{text:?}: bad prefix length"))?,
        };
        Ok(IpNet { addr, prefix })
    }
}

impl IpNet {
    fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> Self {
        TrustedProxies(nets.into())
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(ip))
    }

    /// The client's address: the peer, unless the peer is a trusted proxy; then the right-most
    /// `X-Forwarded-For` hop that is not a trusted proxy (everything left of it the client
    /// wrote itself, so it is never believed).
    pub fn client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer?;
        if !self.trusts(peer) {
            return Some(peer);
        }
        let hops: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|hop| hop.trim().parse::<IpAddr>().ok())
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        hops.iter().rev().find(|hop| !self.trusts(**hop)).or(hops.first()).copied().or(Some(peer))
    }
}

/// Decides the client address once, for the throttles and logs.
pub async fn client_ip(State(proxies): State<TrustedProxies>, mut req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let client = proxies.client(peer, req.headers());
    req.extensions_mut().insert(ClientIp(client));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn forwarded(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn only_trusted_proxies_are_believed_and_only_right_to_left() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap(), "127.0.0.1".parse().unwrap()]);
        // Not through a proxy we run: the header is the client's own words.
        assert_eq!(proxies.client(Some(ip("203.0.113.9")), &forwarded("1.2.3.4")), Some(ip("203.0.113.9")));
        // Through our proxies: the right-most hop they did not add. A spoofed left-most entry
        // changes nothing.
        let spoofed = forwarded("6.6.6.6, 198.51.100.7, 10.1.2.3");
        assert_eq!(proxies.client(Some(ip("127.0.0.1")), &spoofed), Some(ip("198.51.100.7")));
        // Only proxies in the header: the left-most, which the first of them saw, is the client.
        assert_eq!(proxies.client(Some(ip("10.0.0.1")), &forwarded("10.0.0.2")), Some(ip("10.0.0.2")));
        // Garbage in the header: the peer.
        assert_eq!(proxies.client(Some(ip("10.0.0.1")), &forwarded("nonsense")), Some(ip("10.0.0.1")));
        // No proxies configured: always the peer.
        assert_eq!(TrustedProxies::default().client(Some(ip("10.0.0.1")), &spoofed), Some(ip("10.0.0.1")));
        assert!("10.0.0.0/33".parse::<IpNet>().is_err());
        assert!("::ffff:10.9.9.9".parse::<IpAddr>().is_ok_and(|a| proxies.trusts(a)));
    }

    #[test]
    fn each_route_has_its_limit() {
        assert_eq!(body_limit("/stripe/webhook"), WEBHOOK_BODY_LIMIT);
        assert_eq!(body_limit("/api/v1/rentals"), API_BODY_LIMIT);
        assert_eq!(body_limit("/rpc/sign_in"), API_BODY_LIMIT);
        assert_eq!(body_limit("/offers"), OTHER_BODY_LIMIT);
    }
}
