//! The SSH gateway: `ssh -p 2222 r<rental id>@<cardpool>` reaches a shell inside the rental.
//!
//! A thin adapter, as the HTTP one is: russh speaks SSH, `cardpool_service::ssh_access`
//! decides who may log into which rental (public keys only: the rental's booking key or one of
//! its renter's account keys), and `cardpool_service::tunnels` carries every channel over the
//! host agent's existing outbound connection, so providers behind NAT open no port. Sessions
//! (shell or command, with or without a terminal), the `sftp` subsystem (which `scp` uses too)
//! and local port forwarding (`ssh -L`) are relayed; nothing is served from the server itself.
//!
//! Bounded: connections in all and per source address, auth attempts per source address
//! (the sign-in limiter's per-IP budget), channels per connection, and every channel's bytes
//! by the agent's and the client's windows. A session ends with its rental.

use crate::config::Config;
use cardpool_protocol::{ChannelTarget, Terminal, tunnel::Stream};
use cardpool_service::{
    Services,
    ssh_access::{self, SshEndpoint, SshTarget},
    tunnels::ChannelEvent,
};
use russh::{
    Channel, ChannelId, ChannelMsg, MethodKind, MethodSet,
    keys::{HashAlg, PrivateKey, ssh_key},
    server::{self, Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey},
};
use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::net::TcpListener;

/// Connections the gateway holds at once, and from one address.
const MAX_CONNECTIONS: usize = 1024;
const MAX_CONNECTIONS_PER_SOURCE: usize = 32;
/// Channels one connection may have open.
const MAX_CHANNELS_PER_CONNECTION: usize = 16;
/// The longest command an `exec` may carry.
const MAX_COMMAND: usize = 64 << 10;
/// How often a session checks that its rental still runs.
const RENTAL_CHECK: Duration = Duration::from_secs(5);

/// The gateway's host key: read from `path`, or made (Ed25519) and kept there on first start,
/// so clients' `known_hosts` stay valid across restarts. Replicas sharing one key file may start
/// together: the new key is written whole to a file of this process's own and linked into place,
/// which only one of them wins; the others read the winner's.
pub fn load_or_create_host_key(path: &Path) -> anyhow::Result<PrivateKey> {
    use anyhow::Context;
    let read = || -> anyhow::Result<PrivateKey> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        PrivateKey::from_openssh(&text).with_context(|| format!("{} is not an OpenSSH private key", path.display()))
    };
    if path.exists() {
        return read();
    }
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut seed);
    let key = PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&seed));
    let text = key.to_openssh(ssh_key::LineEnding::LF).context("encoding the host key")?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut draft = path.as_os_str().to_owned();
    // Random, not the process id: replicas in containers are all process 1.
    draft.push(format!(".{:016x}.new", rand::RngCore::next_u64(&mut rand::rng())));
    let draft = std::path::PathBuf::from(draft);
    let written = (|| {
        use std::{io::Write, os::unix::fs::OpenOptionsExt};
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&draft)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::hard_link(&draft, path)
    })();
    let _ = std::fs::remove_file(&draft);
    match written {
        Ok(()) => {
            tracing::info!(path = %path.display(), "generated the SSH gateway's host key");
            Ok(key)
        }
        // Another replica made it first.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => read(),
        Err(err) => Err(err).with_context(|| format!("creating {}", path.display())),
    }
}

/// What renters are told to connect to: the configured public host and port, else the public
/// URL's host and the port the gateway listens on.
pub fn endpoint(config: &Config, listening: SocketAddr, key: &PrivateKey) -> SshEndpoint {
    let from_url = config
        .public_url
        .as_deref()
        .and_then(|url| url.split_once("://").map(|(_, rest)| rest))
        .map(|rest| rest.split(['/', ':']).next().unwrap_or_default().to_owned())
        .filter(|host| !host.is_empty());
    let host = config.ssh_public_host.clone().or(from_url).unwrap_or_else(|| {
        if listening.ip().is_unspecified() { "127.0.0.1".to_owned() } else { listening.ip().to_string() }
    });
    SshEndpoint {
        host,
        port: config.ssh_public_port.unwrap_or(listening.port()),
        host_key_fingerprint: key.public_key().fingerprint(HashAlg::Sha256).to_string(),
    }
}

/// Serves SSH on `listener` until the process ends.
pub async fn serve(services: Services, key: PrivateKey, listener: TcpListener) {
    let config = Arc::new(server::Config {
        keys: vec![key],
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_secs(1),
        auth_rejection_time_initial: Some(Duration::ZERO),
        max_auth_attempts: 6,
        inactivity_timeout: Some(Duration::from_secs(3600)),
        keepalive_interval: Some(Duration::from_secs(30)),
        keepalive_max: 4,
        nodelay: true,
        ..Default::default()
    });
    let open: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    loop {
        let Ok((socket, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(slot) = ConnectionSlot::take(&open, peer.ip()) else {
            tracing::info!(%peer, "ssh connection refused: too many connections");
            continue;
        };
        let handler =
            Connection { services: services.clone(), peer: peer.ip(), target: None, channels: Arc::default() };
        let config = config.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match server::run_stream(config, socket, handler).await {
                Ok(session) => {
                    if let Err(err) = session.await {
                        tracing::debug!(%peer, error = %err, "ssh session ended");
                    }
                }
                Err(err) => tracing::debug!(%peer, error = %err, "ssh handshake failed"),
            }
        });
    }
}

/// One counted connection; the count goes down when it is dropped.
struct ConnectionSlot {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ConnectionSlot {
    fn take(open: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<ConnectionSlot> {
        let mut counts = open.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = counts.values().sum();
        let mine = counts.entry(ip).or_default();
        if total >= MAX_CONNECTIONS || *mine >= MAX_CONNECTIONS_PER_SOURCE {
            return None;
        }
        *mine += 1;
        Some(ConnectionSlot { open: open.clone(), ip })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// One client connection.
struct Connection {
    services: Services,
    peer: IpAddr,
    /// The rental this connection logged into.
    target: Option<SshTarget>,
    /// Its channels now open (each task holds a [`ChannelSlot`]).
    channels: Arc<AtomicUsize>,
}

/// One open channel of a connection, counted until its task ends.
struct ChannelSlot(Arc<AtomicUsize>);

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Connection {
    /// The logged-in rental, if another channel fits.
    fn admit_channel(&mut self) -> Option<(SshTarget, ChannelSlot)> {
        let target = self.target?;
        if self.channels.fetch_add(1, Ordering::Relaxed) >= MAX_CHANNELS_PER_CONNECTION {
            self.channels.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some((target, ChannelSlot(self.channels.clone())))
    }
}

impl server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(&mut self, user: &str, _offer: PublicKeyOffer<'_>) -> Result<Auth, Self::Error> {
        // Every key tried counts against the source, as every sign-in does.
        if let Err(refused) = self.services.sign_in_limiter.admit_source(self.peer).await {
            tracing::info!(peer = %self.peer, ssh.user = user, %refused, "ssh login throttled");
            return Ok(Auth::reject());
        }
        Ok(Auth::Accept)
    }

    async fn auth_publickey(&mut self, user: &str, key: VerifiedPublicKey<'_>) -> Result<Auth, Self::Error> {
        let Ok(blob) = key.public_key.to_bytes() else { return Ok(Auth::reject()) };
        match ssh_access::authorize_login(&self.services, user, &blob).await {
            Ok(target) => {
                tracing::info!(peer = %self.peer, rental.id = target.rental_id, "ssh login");
                self.target = Some(target);
                Ok(Auth::Accept)
            }
            Err(_) => Ok(Auth::reject()),
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some((target, slot)) = self.admit_channel() else { return Ok(()) };
        reply.accept().await;
        let (services, handle) = (self.services.clone(), session.handle());
        tokio::spawn(async move {
            let _slot = slot;
            relay_session(services, target, channel, handle).await;
        });
        Ok(())
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let port = u16::try_from(port_to_connect).ok().filter(|p| *p > 0);
        if port.is_none() || host_to_connect.is_empty() || host_to_connect.len() > 255 {
            return Ok(());
        }
        let (Some((target, slot)), Some(port)) = (self.admit_channel(), port) else { return Ok(()) };
        let what = ChannelTarget::Tcp { host: host_to_connect.to_owned(), port };
        let (services, handle) = (self.services.clone(), session.handle());
        tokio::spawn(async move {
            let _slot = slot;
            let opened = open_tunnel(&services, target, what, None, vec![]).await;
            match opened {
                Ok(tunnel) => {
                    reply.accept().await;
                    relay(&services, target, channel, tunnel, handle).await;
                }
                Err(reason) => {
                    tracing::info!(rental.id = target.rental_id, %reason, "port forward refused");
                    reply.reject(russh::ChannelOpenFailure::ConnectFailed).await;
                }
            }
        });
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _cols: u32,
        _rows: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        _value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn shell_request(&mut self, channel: ChannelId, session: &mut Session) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if data.len() > MAX_COMMAND { session.channel_failure(channel) } else { session.channel_success(channel) }
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "sftp" { session.channel_success(channel) } else { session.channel_failure(channel) }
    }
}

/// A terminal dimension from the client; 0 (unknown, as when its stdin is no terminal) is
/// the usual 80x24.
fn size(n: u32, default: u16) -> u16 {
    if n == 0 { default } else { u16::try_from(n.min(1000)).unwrap_or(default) }
}

/// Asks the rental's agent for a channel and waits for its answer.
async fn open_tunnel(
    services: &Services,
    target: SshTarget,
    what: ChannelTarget,
    terminal: Option<Terminal>,
    env: Vec<(String, String)>,
) -> Result<cardpool_service::tunnels::Channel, String> {
    let mut tunnel =
        cardpool_service::tunnels::open_channel(services, target.host_id, target.rental_id, what, terminal, env)
            .await
            .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(30), tunnel.events.recv()).await {
        Ok(Some(ChannelEvent::Opened)) => Ok(tunnel),
        Ok(Some(ChannelEvent::Refused(reason))) => Err(reason),
        Ok(_) => Err("the rental's host went away".into()),
        Err(_) => Err("the rental's host did not answer in time".into()),
    }
}

/// A session channel: collects the terminal and environment the client asks for, then runs
/// the shell, command or SFTP server it asks for inside the rental.
async fn relay_session(services: Services, target: SshTarget, mut channel: Channel<Msg>, handle: server::Handle) {
    let (mut terminal, mut env) = (None, Vec::new());
    let what = loop {
        match channel.wait().await {
            Some(ChannelMsg::RequestPty { term, col_width, row_height, .. }) => {
                let (cols, rows) = (size(col_width, 80), size(row_height, 24));
                terminal = Some(Terminal { term: term.chars().take(64).collect(), cols, rows });
            }
            Some(ChannelMsg::SetEnv { variable_name, variable_value, .. }) if env.len() < 16 => {
                env.push((variable_name, variable_value));
            }
            Some(ChannelMsg::RequestShell { .. }) => break ChannelTarget::Shell,
            Some(ChannelMsg::Exec { command, .. }) if command.len() <= MAX_COMMAND => {
                break ChannelTarget::Exec { command: String::from_utf8_lossy(&command).into_owned() };
            }
            Some(ChannelMsg::RequestSubsystem { name, .. }) if name == "sftp" => break ChannelTarget::Sftp,
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => return,
            Some(_) => {}
        }
    };
    match open_tunnel(&services, target, what, terminal, env).await {
        Ok(tunnel) => relay(&services, target, channel, tunnel, handle).await,
        Err(reason) => {
            let _ = channel.extended_data(1, format!("cardpool: {reason}\r\n").as_bytes()).await;
            let _ = channel.exit_status(1).await;
            let _ = channel.eof().await;
            let _ = channel.close().await;
        }
    }
}

/// Moves bytes both ways until either side ends the channel or the rental ends.
async fn relay(
    services: &Services,
    target: SshTarget,
    channel: Channel<Msg>,
    mut tunnel: cardpool_service::tunnels::Channel,
    handle: server::Handle,
) {
    let id = channel.id();
    let (mut from_client, to_client) = channel.split();
    let mut check = tokio::time::interval(RENTAL_CHECK);
    check.tick().await;
    loop {
        tokio::select! {
            message = from_client.wait() => match message {
                Some(ChannelMsg::Data { data }) => {
                    if !tunnel.send(&data).await {
                        break;
                    }
                }
                Some(ChannelMsg::Eof) => tunnel.eof(),
                Some(ChannelMsg::WindowChange { col_width, row_height, .. }) => {
                    tunnel.resize(size(col_width, 80), size(row_height, 24));
                }
                Some(ChannelMsg::Close) | None => return,
                Some(_) => {}
            },
            event = tunnel.events.recv() => match event {
                Some(ChannelEvent::Data(stream, bytes)) => {
                    let n = bytes.len() as u64;
                    let sent = match stream {
                        Stream::Main => to_client.data_bytes(bytes).await,
                        Stream::Stderr => to_client.extended_data_bytes(1, bytes).await,
                    };
                    if sent.is_err() {
                        return;
                    }
                    tunnel.consumed(n);
                }
                Some(ChannelEvent::Eof) => {
                    let _ = to_client.eof().await;
                }
                Some(ChannelEvent::Exit { code: Some(code), .. }) => {
                    let _ = to_client.exit_status(code as u32).await;
                }
                Some(ChannelEvent::Exit { code: None, signal }) => {
                    let name = russh::Sig::Custom(signal.unwrap_or_else(|| "KILL".into()));
                    let _ = handle.exit_signal_request(id, name, false, String::new(), String::new()).await;
                }
                Some(ChannelEvent::Closed) | None => break,
                Some(ChannelEvent::Opened | ChannelEvent::Refused(_)) => {}
            },
            _ = check.tick() => {
                if !ssh_access::still_running(services, target.rental_id).await.unwrap_or(true) {
                    let _ = to_client.extended_data_bytes(1, &b"\r\ncardpool: the rental has ended\r\n"[..]).await;
                    break;
                }
            }
        }
    }
    let _ = to_client.close().await;
}

#[cfg(test)]
mod tests {
    use super::load_or_create_host_key;

    #[test]
    fn replicas_starting_together_share_one_host_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/host-key");
        let keys: Vec<_> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..8).map(|_| scope.spawn(|| load_or_create_host_key(&path).unwrap())).collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(keys.windows(2).all(|pair| pair[0] == pair[1]), "every replica uses the one key that was kept");
        assert_eq!(load_or_create_host_key(&path).unwrap(), keys[0]);
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no drafts are left beside the key");
    }
}
