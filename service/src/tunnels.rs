//! SSH channels between the server's SSH gateway and rentals, carried over each host's agent
//! connection (see `cardpool_protocol::tunnel`): providers open no ports, and a renter's
//! shell, file copy or forwarded port reaches exactly one rental's sandbox.
//!
//! The agent gateway [`TunnelHub::connect`]s each agent connection that speaks protocol 1.3
//! (the newest connection of a host wins; a stale one closing late cannot unhook it) and
//! hands every channel message and data frame of the agent to [`TunnelHub::from_agent`] /
//! [`TunnelHub::from_agent_data`]. The SSH gateway opens a [`Channel`] per SSH channel; when
//! the agent's connection goes, so do its channels.
//!
//! With several replicas, the SSH gateway a renter reached may not hold the host's agent
//! connection. Its channel is then remote ([`TunnelHub::open_remote`]): what it sends the agent
//! goes out through an outbox the bus carries to the holding replica, which registers the
//! channel as relayed ([`TunnelHub::relay`]) and hands the agent's answers for it back to the
//! bus instead of to an SSH client; they arrive at [`TunnelHub::from_remote`]. Channel ids
//! start at a random point per process, so two replicas' channels on one agent never meet.

use crate::{
    AppError, AppResult,
    agent_links::{AgentLinks, Hooked},
};
use cardpool_protocol::{
    AgentMessage, ChannelTarget, ServerMessage, Terminal,
    tunnel::{CHANNEL_WINDOW, MAX_CHANNELS, Stream, data_frame, parse_data_frame},
};
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};
use tokio::sync::{Semaphore, mpsc};

/// What the agent gateway sends the agent for the SSH gateway.
#[derive(Debug)]
pub enum ToAgent {
    Message(ServerMessage),
    /// A binary data frame.
    Data(Vec<u8>),
}

/// What the agent says on a channel another replica's SSH gateway opened, relayed back to it.
#[derive(Debug)]
pub enum FromAgent {
    Message(AgentMessage),
    /// A binary data frame.
    Data(Vec<u8>),
}

/// What happens on a channel, as the agent tells it.
#[derive(Debug, PartialEq, Eq)]
pub enum ChannelEvent {
    Opened,
    Refused(String),
    Data(Stream, Vec<u8>),
    Eof,
    Exit {
        code: Option<i32>,
        signal: Option<String>,
    },
    /// The agent ended the channel (or its connection went).
    Closed,
}

struct Open {
    events: mpsc::UnboundedSender<ChannelEvent>,
    /// What the agent's window still allows the gateway to send it.
    credit: Arc<Semaphore>,
}

/// A channel that is gone (closed, or its agent connection replaced or ended) wakes whoever
/// waits for its window: their sends fail instead of waiting forever.
impl Drop for Open {
    fn drop(&mut self) {
        self.credit.close();
    }
}

/// A channel on an agent connection held here.
enum Held {
    /// This replica's SSH gateway serves it.
    Here(Open),
    /// Another replica's does: what the agent says on it goes back there.
    Relayed(mpsc::UnboundedSender<FromAgent>),
}

struct Link {
    outbox: mpsc::UnboundedSender<ToAgent>,
    channels: HashMap<u64, Held>,
}

pub struct TunnelHub {
    links: Arc<AgentLinks<Link>>,
    ids: AtomicU64,
    /// This replica's channels on agents connected to other replicas.
    remote: Arc<std::sync::Mutex<HashMap<u64, Open>>>,
}

impl Default for TunnelHub {
    fn default() -> Self {
        // A random start (below 2^62, so ids never wrap) keeps replicas' ids apart.
        let start = rand::random::<u64>() >> 2;
        TunnelHub { links: Arc::default(), ids: AtomicU64::new(start), remote: Arc::default() }
    }
}

/// Hands one agent channel message to the channel it is for: its events, its window.
/// Returns whether the channel is over.
fn deliver(open: &Open, message: &AgentMessage) -> bool {
    let event = match message {
        AgentMessage::ChannelOpened { .. } => ChannelEvent::Opened,
        AgentMessage::ChannelRefused { reason, .. } => ChannelEvent::Refused(reason.clone()),
        AgentMessage::ChannelEof { .. } => ChannelEvent::Eof,
        AgentMessage::ChannelExit { code, signal, .. } => ChannelEvent::Exit { code: *code, signal: signal.clone() },
        AgentMessage::ChannelClosed { .. } => {
            let _ = open.events.send(ChannelEvent::Closed);
            return true;
        }
        AgentMessage::ChannelWindow { bytes, .. } => {
            let room = CHANNEL_WINDOW.saturating_sub(open.credit.available_permits() as u64);
            open.credit.add_permits((*bytes).min(room) as usize);
            return false;
        }
        _ => return false,
    };
    let _ = open.events.send(event);
    false
}

fn channel_of(message: &AgentMessage) -> Option<u64> {
    match message {
        AgentMessage::ChannelOpened { channel }
        | AgentMessage::ChannelRefused { channel, .. }
        | AgentMessage::ChannelEof { channel }
        | AgentMessage::ChannelExit { channel, .. }
        | AgentMessage::ChannelClosed { channel }
        | AgentMessage::ChannelWindow { channel, .. } => Some(*channel),
        _ => None,
    }
}

/// An agent connection's side of the hub. Dropped with the connection, it unhooks it (and
/// ends its channels), unless a newer connection of the host has taken over.
pub struct Connected {
    pub frames: mpsc::UnboundedReceiver<ToAgent>,
    _hooked: Hooked<Link>,
}

impl TunnelHub {
    /// Hooks up a host's new agent connection (replacing, and so closing the channels of,
    /// any older one).
    pub fn connect(&self, host_id: i64) -> Connected {
        let (outbox, frames) = mpsc::unbounded_channel();
        let hooked = self.links.connect(host_id, Link { outbox, channels: HashMap::new() });
        Connected { frames, _hooked: hooked }
    }

    /// A channel message from the host's agent.
    pub fn from_agent(&self, host_id: i64, message: &AgentMessage) {
        let Some(channel) = channel_of(message) else { return };
        self.links.with(host_id, |link, _| {
            let over = match link.channels.get(&channel) {
                Some(Held::Here(open)) => deliver(open, message),
                Some(Held::Relayed(back)) => {
                    let _ = back.send(FromAgent::Message(message.clone()));
                    matches!(message, AgentMessage::ChannelClosed { .. })
                }
                None => false,
            };
            if over {
                link.channels.remove(&channel);
            }
        });
    }

    /// A binary data frame from the host's agent.
    pub fn from_agent_data(&self, host_id: i64, frame: &[u8]) {
        let Some((channel, stream, bytes)) = parse_data_frame(frame) else { return };
        self.links.with(host_id, |link, _| match link.channels.get(&channel) {
            Some(Held::Here(open)) => {
                let _ = open.events.send(ChannelEvent::Data(stream, bytes.to_vec()));
            }
            Some(Held::Relayed(back)) => {
                let _ = back.send(FromAgent::Data(frame.to_vec()));
            }
            None => {}
        });
    }

    /// What another replica's SSH gateway sends the agent of `host_id`, connected here, on a
    /// channel it opened: an `OpenChannel` registers the channel as relayed, its answers going
    /// to `back`; anything else must be for a channel relayed so. False when the host is not
    /// connected here (any more).
    pub fn relay(&self, host_id: i64, frame: ToAgent, back: &mpsc::UnboundedSender<FromAgent>) -> bool {
        self.links
            .with(host_id, |link, _| {
                let channel = match &frame {
                    ToAgent::Message(ServerMessage::OpenChannel { channel, .. }) => {
                        if link.channels.len() >= MAX_CHANNELS || link.channels.contains_key(channel) {
                            let _ = back.send(FromAgent::Message(AgentMessage::ChannelRefused {
                                channel: *channel,
                                reason: format!("the rental's host already carries {MAX_CHANNELS} channels"),
                            }));
                            return true;
                        }
                        link.channels.insert(*channel, Held::Relayed(back.clone()));
                        *channel
                    }
                    ToAgent::Message(message) => match message {
                        ServerMessage::ChannelWindow { channel, .. }
                        | ServerMessage::ChannelEof { channel }
                        | ServerMessage::ChannelResize { channel, .. }
                        | ServerMessage::ChannelClose { channel } => *channel,
                        _ => return true,
                    },
                    ToAgent::Data(bytes) => match parse_data_frame(bytes) {
                        Some((channel, _, _)) => channel,
                        None => return true,
                    },
                };
                if !matches!(link.channels.get(&channel), Some(Held::Relayed(_))) {
                    return true;
                }
                if matches!(frame, ToAgent::Message(ServerMessage::ChannelClose { .. })) {
                    link.channels.remove(&channel);
                }
                link.outbox.send(frame).is_ok()
            })
            .unwrap_or(false)
    }

    /// What the agent said on one of this replica's remote channels (see [`TunnelHub::open_remote`]).
    pub fn from_remote(&self, from: FromAgent) {
        let mut remote = self.remote.lock().unwrap_or_else(|p| p.into_inner());
        match from {
            FromAgent::Message(message) => {
                let Some(channel) = channel_of(&message) else { return };
                if remote.get(&channel).is_some_and(|open| deliver(open, &message)) {
                    remote.remove(&channel);
                }
            }
            FromAgent::Data(frame) => {
                let Some((channel, stream, bytes)) = parse_data_frame(&frame) else { return };
                if let Some(open) = remote.get(&channel) {
                    let _ = open.events.send(ChannelEvent::Data(stream, bytes.to_vec()));
                }
            }
        }
    }

    /// Opens a channel on an agent connected to another replica: `outbox` takes what goes to
    /// the agent (the bus carries it there), answers come through [`TunnelHub::from_remote`].
    pub fn open_remote(
        &self,
        outbox: mpsc::UnboundedSender<ToAgent>,
        rental_id: i64,
        target: ChannelTarget,
        terminal: Option<Terminal>,
        env: Vec<(String, String)>,
    ) -> AppResult<Channel> {
        let (id, open, events) = self.new_channel();
        let credit = open.credit.clone();
        let request = ServerMessage::OpenChannel { channel: id, rental_id, target, terminal, env };
        outbox.send(ToAgent::Message(request)).map_err(|_| AppError::Unavailable("the bus is down".into()))?;
        self.remote.lock().unwrap_or_else(|p| p.into_inner()).insert(id, open);
        Ok(Channel { id, events, credit, route: Route::Remote { outbox, remote: self.remote.clone() } })
    }

    /// A new channel's id, its hub side, and its events.
    fn new_channel(&self) -> (u64, Open, mpsc::UnboundedReceiver<ChannelEvent>) {
        let id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        let (events_tx, events) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(CHANNEL_WINDOW as usize));
        (id, Open { events: events_tx, credit }, events)
    }

    /// Whether the host's agent is connected here.
    pub fn is_connected(&self, host_id: i64) -> bool {
        self.links.with(host_id, |_, _| ()).is_some()
    }

    /// Asks the host's agent to open a channel into the rental; the answer comes as the first
    /// event ([`ChannelEvent::Opened`] or [`ChannelEvent::Refused`]). The caller has
    /// authorized the rental.
    pub fn open(
        &self,
        host_id: i64,
        rental_id: i64,
        target: ChannelTarget,
        terminal: Option<Terminal>,
        env: Vec<(String, String)>,
    ) -> AppResult<Channel> {
        let (id, open, events) = self.new_channel();
        let credit = open.credit.clone();
        let opened = self.links.with(host_id, |link, generation| {
            if link.channels.len() >= MAX_CHANNELS {
                return Err(AppError::Unavailable(format!(
                    "the rental's host already carries {MAX_CHANNELS} channels"
                )));
            }
            let request = ServerMessage::OpenChannel { channel: id, rental_id, target, terminal, env };
            link.outbox
                .send(ToAgent::Message(request))
                .map_err(|_| AppError::Unavailable("the host just went".into()))?;
            link.channels.insert(id, Held::Here(open));
            Ok(generation)
        });
        let generation = opened.ok_or_else(|| {
            AppError::Unavailable("the rental's host is not connected just now (or its agent predates SSH)".into())
        })??;
        Ok(Channel { id, events, credit, route: Route::Here { links: self.links.clone(), host_id, generation } })
    }
}

/// Opens a channel into rental `rental_id` on its host's agent, wherever it is connected: here,
/// or on another replica (over the bus). The caller has authorized the rental.
pub async fn open_channel(
    services: &crate::Services,
    host_id: i64,
    rental_id: i64,
    target: ChannelTarget,
    terminal: Option<Terminal>,
    env: Vec<(String, String)>,
) -> AppResult<Channel> {
    if services.tunnels.is_connected(host_id) || !services.bus.is_shared() {
        return services.tunnels.open(host_id, rental_id, target, terminal, env);
    }
    if !crate::hosts::is_connected_anywhere(services, host_id).await? {
        return Err(AppError::Unavailable("the rental's host is not connected just now".into()));
    }
    let outbox = crate::bus::channel_outbox(services, host_id);
    services.tunnels.open_remote(outbox, rental_id, target, terminal, env)
}

/// One SSH channel's end on the server. Dropping it closes the channel at the agent.
pub struct Channel {
    pub id: u64,
    pub events: mpsc::UnboundedReceiver<ChannelEvent>,
    credit: Arc<Semaphore>,
    route: Route,
}

/// How a channel reaches its agent.
enum Route {
    /// The connection (of this generation) held here.
    Here { links: Arc<AgentLinks<Link>>, host_id: i64, generation: u64 },
    /// Over the bus to the replica holding the connection.
    Remote { outbox: mpsc::UnboundedSender<ToAgent>, remote: Arc<std::sync::Mutex<HashMap<u64, Open>>> },
}

impl Channel {
    /// Sends `frame` on the connection this channel was opened on, if it is still there.
    fn to_agent(&self, frame: ToAgent) -> bool {
        match &self.route {
            Route::Here { links, host_id, generation } => {
                links.with_generation(*host_id, *generation, |l| l.outbox.send(frame).is_ok()).unwrap_or(false)
            }
            Route::Remote { outbox, .. } => outbox.send(frame).is_ok(),
        }
    }

    fn say(&self, message: ServerMessage) -> bool {
        self.to_agent(ToAgent::Message(message))
    }

    /// Sends the client's bytes, waiting while the agent's window is full. False when the
    /// channel is gone.
    pub async fn send(&self, bytes: &[u8]) -> bool {
        for piece in bytes.chunks(cardpool_protocol::tunnel::CHANNEL_CHUNK) {
            let Ok(permits) = self.credit.acquire_many(piece.len() as u32).await else { return false };
            permits.forget();
            if !self.to_agent(ToAgent::Data(data_frame(self.id, Stream::Main, piece))) {
                return false;
            }
        }
        true
    }

    /// `bytes` of the agent's data were handed to the client.
    pub fn consumed(&self, bytes: u64) {
        self.say(ServerMessage::ChannelWindow { channel: self.id, bytes });
    }

    pub fn eof(&self) {
        self.say(ServerMessage::ChannelEof { channel: self.id });
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.say(ServerMessage::ChannelResize { channel: self.id, cols, rows });
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let id = self.id;
        let close = || ToAgent::Message(ServerMessage::ChannelClose { channel: id });
        match &self.route {
            Route::Here { links, host_id, generation } => {
                links.with_generation(*host_id, *generation, |link| {
                    if link.channels.remove(&id).is_some() {
                        let _ = link.outbox.send(close());
                    }
                });
            }
            Route::Remote { outbox, remote } => {
                if remote.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).is_some() {
                    let _ = outbox.send(close());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn channels_follow_their_connection_and_respect_the_window() {
        let hub = TunnelHub::default();
        assert!(hub.open(1, 9, ChannelTarget::Shell, None, vec![]).is_err(), "no agent, no channel");
        let mut agent = hub.connect(1);
        let mut channel = hub.open(1, 9, ChannelTarget::Sftp, None, vec![]).unwrap();
        assert!(matches!(agent.frames.recv().await, Some(ToAgent::Message(ServerMessage::OpenChannel { .. }))));
        hub.from_agent(1, &AgentMessage::ChannelOpened { channel: channel.id });
        assert_eq!(channel.events.recv().await, Some(ChannelEvent::Opened));
        hub.from_agent_data(1, &data_frame(channel.id, Stream::Stderr, b"hi"));
        assert_eq!(channel.events.recv().await, Some(ChannelEvent::Data(Stream::Stderr, b"hi".to_vec())));

        // The window: a full window's worth goes, one byte more waits for the agent.
        assert!(channel.send(&vec![0u8; CHANNEL_WINDOW as usize]).await);
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(100), channel.send(b"x")).await;
        assert!(blocked.is_err(), "sent past the agent's window");
        hub.from_agent(1, &AgentMessage::ChannelWindow { channel: channel.id, bytes: 1 });
        assert!(channel.send(b"x").await);

        // A newer connection of the host takes over; the old one's channels end with it.
        let stale = agent;
        let _newer = hub.connect(1);
        drop(stale);
        assert!(hub.open(1, 9, ChannelTarget::Shell, None, vec![]).is_ok(), "the newer connection stays hooked up");
        while let Ok(event) = channel.events.try_recv() {
            assert_ne!(event, ChannelEvent::Opened);
        }
        assert!(!channel.send(b"y").await, "a channel of a replaced connection is gone");
    }
}
