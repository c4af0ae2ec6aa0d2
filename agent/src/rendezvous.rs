//! A gang's rendezvous: how members on other hosts reach rank 0's workload.
//!
//! Each sandbox has a network of its own (slirp4netns), so nothing listening inside rank 0's
//! sandbox is reachable from outside, and every sandbox's firewall refuses the provider's
//! addresses and LAN, the fabric included. A gang needs exactly one hole in both: every
//! member's firewall lets TCP through to rank 0's host's fabric address on the gang's port
//! ([`open`]), and rank 0's agent listens there and forwards each connection into rank 0's
//! sandbox, to its own `127.0.0.1` on that port ([`forward`]), from the gang's hosts only
//! and a bounded number at a time. `torchrun`'s TCP store (and anything like it) run by rank 0
//! on `MASTER_PORT` is then reached by every rank at `MASTER_ADDR:MASTER_PORT`, rank 0's own
//! clients included.

use crate::runtime::Runtime;
use cardpool_protocol::{AttachSpec, GangLink};
use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::{Arc, RwLock},
};
use tokio::{net::TcpListener, sync::Semaphore, task::JoinHandle};

/// Rendezvous connections forwarded at once (a 1,000-node job opens one per rank, and then some).
const MAX_CONNECTIONS: usize = 4096;

/// What a member's firewall lets through: rank 0's fabric address and port.
pub fn open(spec: &AttachSpec) -> Vec<(IpAddr, u16)> {
    spec.gang.as_ref().and_then(|g| Some((g.master_addr.parse().ok()?, g.master_port))).into_iter().collect()
}

/// The member hosts' addresses rank 0's rendezvous takes connections from: updated when the
/// server repeats the member's attach after a replacement joined the gang.
#[derive(Clone, Default)]
pub struct Peers(Arc<RwLock<Vec<IpAddr>>>);

impl Peers {
    /// From a member's attach (none for rentals outside a gang).
    pub fn of(spec: &AttachSpec) -> Option<Peers> {
        let peers = Peers::default();
        peers.update(spec);
        spec.gang.is_some().then_some(peers)
    }

    /// Takes the peers of a repeated attach.
    pub fn update(&self, spec: &AttachSpec) {
        if let Some(link) = &spec.gang {
            let addresses = link.peers.iter().filter_map(|p| p.parse().ok()).collect();
            *self.0.write().unwrap_or_else(|p| p.into_inner()) = addresses;
        }
    }

    fn admits(&self, ip: IpAddr) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).contains(&ip)
    }
}

/// On rank 0's host: listens on the fabric address at the gang's port and forwards each
/// connection from a member host into the sandbox. `None` for other ranks, and where the
/// sandbox shares the host's network (the workload then listens on the host itself). Ends
/// when the returned task is aborted (the workload ended). `say` reports a problem to the
/// renter (the workload's log).
pub fn forward(
    spec: &AttachSpec,
    peers: Option<Peers>,
    runtime: &Arc<dyn Runtime>,
    dir: PathBuf,
    say: impl Fn(String) + Send + 'static,
) -> Option<JoinHandle<()>> {
    let link = spec.gang.clone().filter(|g| g.rank == 0)?;
    let peers = peers?;
    let netns = runtime.network(&dir).ok()?;
    Some(tokio::spawn(async move {
        if let Err(err) = serve(&link, &peers, netns).await {
            say(format!("cardpool: the gang's rendezvous port could not be opened: {err}"));
        }
    }))
}

async fn serve(link: &GangLink, peers: &Peers, netns: PathBuf) -> Result<(), String> {
    let ip: IpAddr = link.master_addr.parse().map_err(|_| format!("{:?} is not an address", link.master_addr))?;
    let listener = TcpListener::bind(SocketAddr::new(ip, link.master_port))
        .await
        .map_err(|e| format!("{}:{}: {e}", link.master_addr, link.master_port))?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let port = link.master_port;
    loop {
        let Ok((mut outside, from)) = listener.accept().await else { continue };
        if !peers.admits(from.ip()) {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let netns = netns.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Ok(mut inside) = crate::tunnels::connect_inside(&netns, "127.0.0.1", port).await {
                let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
            }
        });
    }
}
