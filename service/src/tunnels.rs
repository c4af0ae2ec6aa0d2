//! SSH channels between the server's SSH gateway and rentals, carried over each host's agent
//! connection (see `cardpool_protocol::tunnel`): providers open no ports, and a renter's
//! shell, file copy or forwarded port reaches exactly one rental's sandbox.
//!
//! The agent gateway [`TunnelHub::connect`]s each agent connection that speaks protocol 1.3
//! (the newest connection of a host wins; a stale one closing late cannot unhook it) and
//! hands every channel message and data frame of the agent to [`TunnelHub::from_agent`] /
//! [`TunnelHub::from_agent_data`]. The SSH gateway opens a [`Channel`] per SSH channel; when
//! the agent's connection goes, so do its channels. In-process: with several replicas, the
//! SSH gateway of the replica holding the host's connection must serve it (as for logs).

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

struct Link {
    outbox: mpsc::UnboundedSender<ToAgent>,
    channels: HashMap<u64, Open>,
}

#[derive(Default)]
pub struct TunnelHub {
    links: Arc<AgentLinks<Link>>,
    ids: AtomicU64,
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
        self.links.with(host_id, |link, _| {
            let (channel, event) = match message {
                AgentMessage::ChannelOpened { channel } => (*channel, ChannelEvent::Opened),
                AgentMessage::ChannelRefused { channel, reason } => (*channel, ChannelEvent::Refused(reason.clone())),
                AgentMessage::ChannelEof { channel } => (*channel, ChannelEvent::Eof),
                AgentMessage::ChannelExit { channel, code, signal } => {
                    (*channel, ChannelEvent::Exit { code: *code, signal: signal.clone() })
                }
                AgentMessage::ChannelClosed { channel } => {
                    if let Some(open) = link.channels.remove(channel) {
                        let _ = open.events.send(ChannelEvent::Closed);
                    }
                    return;
                }
                AgentMessage::ChannelWindow { channel, bytes } => {
                    if let Some(open) = link.channels.get(channel) {
                        let room = CHANNEL_WINDOW.saturating_sub(open.credit.available_permits() as u64);
                        open.credit.add_permits((*bytes).min(room) as usize);
                    }
                    return;
                }
                _ => return,
            };
            if let Some(open) = link.channels.get(&channel) {
                let _ = open.events.send(event);
            }
        });
    }

    /// A binary data frame from the host's agent.
    pub fn from_agent_data(&self, host_id: i64, frame: &[u8]) {
        let Some((channel, stream, bytes)) = parse_data_frame(frame) else { return };
        self.links.with(host_id, |link, _| {
            if let Some(open) = link.channels.get(&channel) {
                let _ = open.events.send(ChannelEvent::Data(stream, bytes.to_vec()));
            }
        });
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
        let id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        let (events_tx, events) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(CHANNEL_WINDOW as usize));
        let opened = self.links.with(host_id, |link, generation| {
            if link.channels.len() >= MAX_CHANNELS {
                return Err(AppError::Unavailable(format!(
                    "the rental's host already carries {MAX_CHANNELS} channels"
                )));
            }
            let open = ServerMessage::OpenChannel { channel: id, rental_id, target, terminal, env };
            link.outbox.send(ToAgent::Message(open)).map_err(|_| AppError::Unavailable("the host just went".into()))?;
            link.channels.insert(id, Open { events: events_tx, credit: credit.clone() });
            Ok(generation)
        });
        let generation = opened.ok_or_else(|| {
            AppError::Unavailable("the rental's host is not connected just now (or its agent predates SSH)".into())
        })??;
        Ok(Channel { id, events, credit, links: self.links.clone(), host_id, generation })
    }
}

/// One SSH channel's end on the server. Dropping it closes the channel at the agent.
pub struct Channel {
    pub id: u64,
    pub events: mpsc::UnboundedReceiver<ChannelEvent>,
    credit: Arc<Semaphore>,
    links: Arc<AgentLinks<Link>>,
    host_id: i64,
    generation: u64,
}

impl Channel {
    /// Sends `frame` on the connection this channel was opened on, if it is still there.
    fn to_agent(&self, frame: ToAgent) -> bool {
        self.links.with_generation(self.host_id, self.generation, |l| l.outbox.send(frame).is_ok()).unwrap_or(false)
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
        self.links.with_generation(self.host_id, self.generation, |link| {
            if link.channels.remove(&id).is_some() {
                let _ = link.outbox.send(ToAgent::Message(ServerMessage::ChannelClose { channel: id }));
            }
        });
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
