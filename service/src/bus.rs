//! The bus: what one server replica tells the others, so that every replica acts as if it held
//! every agent connection and every dashboard.
//!
//! One binary needs none of it: [`Bus::in_process`] sends nothing, and each change is acted on
//! where it happens (the host's wake-up, the stock's version, the alert memory). With several
//! replicas (`nats_url` set) the same changes also go out over NATS ([`Bus::connect`]), and
//! [`listen`] acts on the other replicas' ones:
//!
//! - notes (core NATS, `cardpool.<cluster>.notes.<replica>`): wake a host's connection, kick a
//!   host's stale connection, forget a host's remembered alerts, the offer stock changed;
//! - telemetry frames (`cardpool.<cluster>.telemetry.<replica>.<host>`), kept for five minutes
//!   in the JetStream stream `CARDPOOL_<cluster>_TELEMETRY`, so a replica that starts shows the
//!   recent minutes of every host at once, and live frames of hosts connected anywhere.
//!
//! - log reads (NATS request/reply on `cardpool.<cluster>.logs.<host>`) and SSH channels
//!   (`cardpool.<cluster>.tunnel.up.<host>.<replica>` to the agent, `...tunnel.down.<replica>`
//!   back): the replica holding a host's agent connection serves the others for it while the
//!   connection lasts ([`serve_host`]).
//!
//! A cluster is the replicas of one database: `<cluster>` is the PostgreSQL database's name, so
//! two deployments (or two test databases) sharing one NATS never hear each other.
//!
//! Everything here may be lost or arrive twice: what must be exact lives in the database (which
//! connection owns a host, rentals, money). If NATS is down, an agent's connection still picks
//! up its rentals' changes at its next heartbeat, and dashboards show hosts connected to their
//! own replica. Publishing never waits on NATS: a bounded outbox is drained by one task, and
//! what does not fit is dropped and counted.

use crate::tunnels::{FromAgent, ToAgent};
use crate::{AppError, AppResult, Services};
use cardpool_protocol::{LogChunk, TelemetryFrame};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};
use tokio::sync::mpsc;

/// Notes and frames waiting to be published; past this, new ones are dropped (and counted).
const OUTBOX: usize = 65_536;
/// How long the telemetry stream keeps frames (a new replica's first paints reach this far).
const TELEMETRY_KEPT: Duration = Duration::from_secs(300);

/// A change another replica may have to act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "snake_case")]
pub enum Note {
    /// The host's rentals changed: its connection sends their commands now.
    Wake { host_id: i64 },
    /// The host connected to the sender: a connection of it elsewhere that no longer owns the
    /// host (see `hosts::connect_host`) ends.
    Kick { host_id: i64 },
    /// The host's alerts changed outside its telemetry (an admin acknowledged one): the
    /// replica holding its connection reloads them.
    AlertsChanged { host_id: i64 },
    /// The offer stock changed: copies of pages rendered from it are out of date.
    StockChanged,
}

enum Outgoing {
    Note(Note),
    Telemetry { host_id: i64, payload: Vec<u8> },
}

/// This replica's end of the bus.
pub struct Bus {
    replica: String,
    /// Subjects' prefix: `cardpool.<cluster>`.
    prefix: String,
    stream: String,
    nats: Option<Nats>,
    /// Notes and frames dropped because the outbox was full (NATS slow or away for long).
    pub dropped: AtomicU64,
}

struct Nats {
    client: async_nats::Client,
    outbox: mpsc::Sender<Outgoing>,
}

impl Default for Bus {
    fn default() -> Self {
        Bus::in_process()
    }
}

impl Bus {
    /// The one-binary bus: nothing leaves the process.
    pub fn in_process() -> Self {
        Bus::named(new_replica_id(), "local", None)
    }

    fn named(replica: String, cluster: &str, nats: Option<Nats>) -> Self {
        let cluster: String =
            cluster.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(64).collect();
        Bus {
            replica,
            prefix: format!("cardpool.{cluster}"),
            stream: telemetry_stream(&cluster),
            nats,
            dropped: AtomicU64::new(0),
        }
    }

    /// A bus over the NATS server at `url` for the replicas of `cluster` (their database's
    /// name). The connection is made (and remade) in the background, so a replica starts while
    /// NATS is away; only a malformed URL is an error.
    pub async fn connect(url: &str, cluster: &str) -> AppResult<Self> {
        let replica = new_replica_id();
        let client = async_nats::ConnectOptions::new()
            .name(format!("cardpool-{replica}"))
            .retry_on_initial_connect()
            .connect(url)
            .await
            .map_err(|err| AppError::invalid_field("nats_url", format!("cannot use NATS at {url}: {err}")))?;
        let (outbox, queued) = mpsc::channel(OUTBOX);
        let bus = Bus::named(replica, cluster, Some(Nats { client: client.clone(), outbox }));
        tokio::spawn(publish(client, format!("{}.notes.{}", bus.prefix, bus.replica), bus.telemetry_subject(), queued));
        Ok(bus)
    }

    /// This replica's name on the bus (random per process).
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether other replicas hear this one.
    pub fn is_shared(&self) -> bool {
        self.nats.is_some()
    }

    /// `/readyz`: `Err` says why the bus cannot carry notes now.
    pub fn readiness(&self) -> Result<(), String> {
        match &self.nats {
            Some(nats) if nats.client.connection_state() != async_nats::connection::State::Connected => {
                Err("NATS unreachable".into())
            }
            _ => Ok(()),
        }
    }

    /// Tells the other replicas (none in one binary).
    pub fn tell(&self, note: Note) {
        self.queue(Outgoing::Note(note));
    }

    /// Shares frames that just arrived from a host connected here.
    pub fn share_telemetry(&self, host_id: i64, frames: &[&TelemetryFrame]) {
        if self.nats.is_some() && !frames.is_empty() {
            match serde_json::to_vec(frames) {
                Ok(payload) => self.queue(Outgoing::Telemetry { host_id, payload }),
                Err(err) => tracing::warn!(error = %err, "telemetry frames not shared"),
            }
        }
    }

    fn logs_subject(&self, host_id: i64) -> String {
        format!("{}.logs.{host_id}", self.prefix)
    }

    /// Where this replica's frames go: `<prefix>.telemetry.<replica>` and then the host's id.
    fn telemetry_subject(&self) -> String {
        format!("{}.telemetry.{}", self.prefix, self.replica)
    }

    fn queue(&self, outgoing: Outgoing) {
        if let Some(nats) = &self.nats
            && nats.outbox.try_send(outgoing).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The JetStream stream that keeps `cluster`'s recent telemetry.
pub fn telemetry_stream(cluster: &str) -> String {
    format!("CARDPOOL_{cluster}_TELEMETRY")
}

/// The name of the cluster a replica over `db` belongs to: its PostgreSQL database's name.
pub fn cluster_name(db: &sea_orm::DatabaseConnection) -> String {
    match db.get_database_backend() {
        sea_orm::DbBackend::Postgres => {
            db.get_postgres_connection_pool().connect_options().get_database().unwrap_or("postgres").to_owned()
        }
        _ => "local".to_owned(),
    }
}

fn new_replica_id() -> String {
    let mut bytes = [0u8; 6];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    hex::encode(bytes)
}

/// Drains the outbox into NATS, in order. A failed publish is logged and dropped: the client
/// itself buffers across reconnects, so a failure here means NATS is gone for a while.
async fn publish(client: async_nats::Client, notes: String, telemetry: String, mut queued: mpsc::Receiver<Outgoing>) {
    while let Some(outgoing) = queued.recv().await {
        let result = match outgoing {
            Outgoing::Note(note) => match serde_json::to_vec(&note) {
                Ok(json) => client.publish(notes.clone(), json.into()).await,
                Err(_) => continue,
            },
            Outgoing::Telemetry { host_id, payload } => {
                client.publish(format!("{telemetry}.{host_id}"), payload.into()).await
            }
        };
        if let Err(err) = result {
            tracing::debug!(error = %err, "bus message not published");
        }
    }
}

/// Acts on the other replicas' notes and frames for as long as the process runs (nothing to do
/// in one binary).
pub fn listen(services: &Services) {
    let Some(nats) = &services.bus.nats else {
        return;
    };
    resubscribing("bus notes", services, nats, |c, s| async move { follow_notes(&c, &s).await });
    resubscribing("remote SSH channels", services, nats, |c, s| async move { follow_channels(&c, &s).await });
    resubscribing("shared telemetry", services, nats, |c, s| async move { follow_telemetry(&c, &s).await });
}

/// Runs `follow` for as long as the process runs, starting it again a second after it ends
/// (NATS restarted, a subscription dropped).
fn resubscribing<F, Following>(what: &'static str, services: &Services, nats: &Nats, follow: F)
where
    F: Fn(async_nats::Client, Services) -> Following + Send + 'static,
    Following: Future<Output = Result<(), String>> + Send,
{
    let (client, services) = (nats.client.clone(), services.clone());
    tokio::spawn(async move {
        loop {
            if let Err(err) = follow(client.clone(), services.clone()).await {
                tracing::warn!(error = %err, "{what} interrupted; resubscribing");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

/// The other replicas' notes, acted on here.
async fn follow_notes(client: &async_nats::Client, services: &Services) -> Result<(), String> {
    let subject = format!("{}.notes.*", services.bus.prefix);
    let mut notes = client.subscribe(subject).await.map_err(|e| e.to_string())?;
    while let Some(message) = notes.next().await {
        let Some(sender) = message.subject.rsplit('.').next() else { continue };
        if sender == services.bus.replica {
            continue;
        }
        match serde_json::from_slice::<Note>(&message.payload) {
            Ok(note) => act_on(services, note).await,
            Err(err) => tracing::debug!(error = %err, "unreadable bus note ignored"),
        }
    }
    Err("the notes subscription ended".into())
}

/// What a note from another replica asks of this one.
async fn act_on(services: &Services, note: Note) {
    match note {
        Note::Wake { host_id } => {
            services.telemetry.rentals_changed(host_id);
            services.signals.notify(host_id);
        }
        Note::Kick { host_id } => {
            // Only a connection that no longer owns its host ends: the note may be late, and the
            // agent may be back here already.
            if let Some(connection) = services.connections.with(host_id, |_, generation| generation)
                && !crate::hosts::owns_connection(services, host_id, &connection_id(services, connection))
                    .await
                    .unwrap_or(true)
            {
                services.connections.disconnect(host_id, connection);
            }
        }
        Note::AlertsChanged { host_id } => services.telemetry.alerts.forget(host_id),
        Note::StockChanged => services.stock_version.bump(),
    }
}

/// The id of this replica's connection `generation`, as stored in `hosts.connection_id`.
pub fn connection_id(services: &Services, generation: u64) -> String {
    format!("{}:{generation}", services.bus.replica)
}

/// Frames shared by other replicas, from the stream's oldest kept one (the last five minutes)
/// on, into this replica's hub. Without JetStream, live frames only (core NATS).
async fn follow_telemetry(client: &async_nats::Client, services: &Services) -> Result<(), String> {
    let bus = &services.bus;
    let all = format!("{}.telemetry.>", bus.prefix);
    let jetstream = async_nats::jetstream::new(client.clone());
    let stream = jetstream
        .get_or_create_stream(async_nats::jetstream::stream::Config {
            name: bus.stream.clone(),
            subjects: vec![all.clone()],
            max_age: TELEMETRY_KEPT,
            max_messages: 2_000_000,
            max_bytes: 256 * 1024 * 1024,
            storage: async_nats::jetstream::stream::StorageType::Memory,
            discard: async_nats::jetstream::stream::DiscardPolicy::Old,
            ..Default::default()
        })
        .await;
    let mut frames: std::pin::Pin<Box<dyn futures_util::Stream<Item = (String, Vec<u8>)> + Send>> = match stream {
        Ok(stream) => {
            let consumer = stream
                .create_consumer(async_nats::jetstream::consumer::push::OrderedConfig {
                    deliver_subject: client.new_inbox(),
                    filter_subject: all.clone(),
                    deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            let messages = consumer.messages().await.map_err(|e| e.to_string())?;
            Box::pin(messages.filter_map(|m| async move {
                let m = m.ok()?;
                Some((m.subject.to_string(), m.payload.to_vec()))
            }))
        }
        Err(err) => {
            tracing::warn!(error = %err, "no JetStream for telemetry: live frames only, no recent minutes");
            let subscription = client.subscribe(all).await.map_err(|e| e.to_string())?;
            Box::pin(subscription.map(|m| (m.subject.to_string(), m.payload.to_vec())))
        }
    };
    while let Some((subject, payload)) = frames.next().await {
        // `cardpool.<cluster>.telemetry.<replica>.<host>`
        let mut parts = subject.split('.').skip(3);
        let (Some(sender), Some(host)) = (parts.next(), parts.next()) else { continue };
        let Ok(host_id) = host.parse::<i64>() else { continue };
        if sender == services.bus.replica {
            continue;
        }
        match serde_json::from_slice::<Vec<TelemetryFrame>>(&payload) {
            Ok(frames) => services.telemetry.arrived_from_peer(host_id, &frames),
            Err(err) => tracing::debug!(error = %err, "unreadable shared frames ignored"),
        }
    }
    Err("the telemetry subscription ended".into())
}

/// A read of a rental's workload log, asked of the replica holding its host's connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogRead {
    pub rental_id: i64,
    pub offset: Option<u64>,
    pub max_bytes: u32,
}

/// How the holding replica answered a [`LogRead`].
#[derive(Debug, Serialize, Deserialize)]
enum LogAnswer {
    Chunk(LogChunk),
    /// The agent has no such log (why).
    NoLog(String),
    /// The agent could not be asked (why).
    Unavailable(String),
}

/// Reads a log through the replica holding the host's agent connection: `Unavailable` when no
/// replica holds it (or there is no bus), else what its agent answered.
pub async fn read_logs(services: &Services, host_id: i64, read: &LogRead) -> AppResult<Result<LogChunk, String>> {
    let offline = || AppError::Unavailable(crate::logs::OFFLINE.into());
    let Some(nats) = &services.bus.nats else { return Err(offline()) };
    let payload = serde_json::to_vec(read).map_err(|_| AppError::Internal)?;
    let request = async_nats::Request::new()
        .payload(payload.into())
        .timeout(Some(crate::logs::ANSWER_WITHIN + Duration::from_secs(1)));
    let reply = match nats.client.send_request(services.bus.logs_subject(host_id), request).await {
        Ok(reply) => reply,
        Err(err) if err.kind() == async_nats::RequestErrorKind::NoResponders => return Err(offline()),
        Err(err) => {
            tracing::debug!(error = %err, host_id, "log read over the bus failed");
            return Err(AppError::Unavailable("the host's agent did not answer in time".into()));
        }
    };
    match serde_json::from_slice::<LogAnswer>(&reply.payload) {
        Ok(LogAnswer::Chunk(chunk)) => Ok(Ok(chunk)),
        Ok(LogAnswer::NoLog(why)) => Ok(Err(why)),
        Ok(LogAnswer::Unavailable(why)) => Err(AppError::Unavailable(why)),
        Err(_) => Err(AppError::Internal),
    }
}

/// While this lives, this replica answers the other replicas' log reads and carries their SSH
/// channels for a host whose agent is connected here (nothing to do in one process).
pub struct ServingHost(Vec<tokio::task::JoinHandle<()>>);

impl Drop for ServingHost {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Starts serving the other replicas for `host_id`, connected here: their log reads (see
/// [`read_logs`]) and their SSH channels (see [`channel_outbox`]).
pub fn serve_host(services: &Services, host_id: i64) -> ServingHost {
    let Some(nats) = &services.bus.nats else { return ServingHost(Vec::new()) };
    let logs = tokio::spawn(serve_log_reads(nats.client.clone(), services.clone(), host_id));
    let channels = tokio::spawn(relay_channels(nats.client.clone(), services.clone(), host_id));
    ServingHost(vec![logs, channels])
}

async fn serve_log_reads(client: async_nats::Client, services: Services, host_id: i64) {
    let mut reads = match client.subscribe(services.bus.logs_subject(host_id)).await {
        Ok(reads) => reads,
        Err(err) => {
            tracing::warn!(error = %err, host_id, "cannot answer other replicas' log reads");
            return;
        }
    };
    while let Some(message) = reads.next().await {
        let (Some(reply), Ok(read)) = (message.reply, serde_json::from_slice::<LogRead>(&message.payload)) else {
            continue;
        };
        // Each read waits for the agent, whose answer comes through the connection's own loop:
        // answered on a task of its own, never in this one.
        let (client, services) = (client.clone(), services.clone());
        tokio::spawn(async move {
            let answer = match services.logs.read(host_id, read.rental_id, read.offset, read.max_bytes).await {
                Some(Ok(Ok(chunk))) => LogAnswer::Chunk(chunk),
                Some(Ok(Err(why))) => LogAnswer::NoLog(why),
                Some(Err(err)) => LogAnswer::Unavailable(err.to_string()),
                None => LogAnswer::Unavailable(crate::logs::OFFLINE.into()),
            };
            if let Ok(payload) = serde_json::to_vec(&answer) {
                let _ = client.publish(reply, payload.into()).await;
            }
        });
    }
}

/// Channel frames on the wire between replicas: a JSON message, or a binary data frame as the
/// agent protocol has it, after a tag byte.
trait Wire: Sized + Send + 'static {
    fn to_wire(self) -> Vec<u8>;
    fn from_wire(payload: &[u8]) -> Option<Self>;
}

const JSON_FRAME: u8 = 0;
const DATA_FRAME: u8 = 1;

fn tagged(tag: u8, body: &[u8]) -> Vec<u8> {
    [&[tag][..], body].concat()
}

impl Wire for ToAgent {
    fn to_wire(self) -> Vec<u8> {
        match self {
            ToAgent::Message(message) => tagged(JSON_FRAME, &serde_json::to_vec(&message).unwrap_or_default()),
            ToAgent::Data(data) => tagged(DATA_FRAME, &data),
        }
    }

    fn from_wire(payload: &[u8]) -> Option<Self> {
        match payload.split_first()? {
            (&JSON_FRAME, json) => serde_json::from_slice(json).ok().map(ToAgent::Message),
            (&DATA_FRAME, data) => Some(ToAgent::Data(data.to_vec())),
            _ => None,
        }
    }
}

impl Wire for FromAgent {
    fn to_wire(self) -> Vec<u8> {
        match self {
            FromAgent::Message(message) => tagged(JSON_FRAME, &serde_json::to_vec(&message).unwrap_or_default()),
            FromAgent::Data(data) => tagged(DATA_FRAME, &data),
        }
    }

    fn from_wire(payload: &[u8]) -> Option<Self> {
        match payload.split_first()? {
            (&JSON_FRAME, json) => serde_json::from_slice(json).ok().map(FromAgent::Message),
            (&DATA_FRAME, data) => Some(FromAgent::Data(data.to_vec())),
            _ => None,
        }
    }
}

/// A task publishing what `frames` yields to `subject`, in order, until the sender goes.
fn pump<T: Wire>(client: async_nats::Client, subject: String, mut frames: mpsc::UnboundedReceiver<T>) {
    tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if client.publish(subject.clone(), frame.to_wire().into()).await.is_err() {
                break;
            }
        }
    });
}

/// Other replicas' SSH channels on `host_id`, connected here: what they send goes to the
/// agent, what the agent answers on those channels goes back to the replica that opened them.
async fn relay_channels(client: async_nats::Client, services: Services, host_id: i64) {
    let subject = format!("{}.tunnel.up.{host_id}.*", services.bus.prefix);
    let mut frames = match client.subscribe(subject).await {
        Ok(frames) => frames,
        Err(err) => {
            tracing::warn!(error = %err, host_id, "cannot carry other replicas' SSH channels");
            return;
        }
    };
    let mut back_to: std::collections::HashMap<String, mpsc::UnboundedSender<FromAgent>> = Default::default();
    while let Some(message) = frames.next().await {
        let Some(origin) = message.subject.rsplit('.').next().map(str::to_owned) else { continue };
        let Some(frame) = ToAgent::from_wire(&message.payload) else { continue };
        let back = back_to.entry(origin.clone()).or_insert_with(|| {
            let (back, answers) = mpsc::unbounded_channel::<FromAgent>();
            pump(client.clone(), format!("{}.tunnel.down.{origin}", services.bus.prefix), answers);
            back
        });
        services.tunnels.relay(host_id, frame, back);
    }
}

/// Where a channel on `host_id`, connected to another replica, sends what goes to the agent:
/// published in order to the replicas serving the host (see [`serve_host`]).
pub fn channel_outbox(services: &Services, host_id: i64) -> mpsc::UnboundedSender<ToAgent> {
    let (outbox, frames) = mpsc::unbounded_channel::<ToAgent>();
    if let Some(nats) = &services.bus.nats {
        let subject = format!("{}.tunnel.up.{host_id}.{}", services.bus.prefix, services.bus.replica);
        pump(nats.client.clone(), subject, frames);
    }
    outbox
}

/// This replica's end of the channels it opened on agents connected elsewhere.
async fn follow_channels(client: &async_nats::Client, services: &Services) -> Result<(), String> {
    let subject = format!("{}.tunnel.down.{}", services.bus.prefix, services.bus.replica);
    let mut answers = client.subscribe(subject).await.map_err(|e| e.to_string())?;
    while let Some(message) = answers.next().await {
        if let Some(from) = FromAgent::from_wire(&message.payload) {
            services.tunnels.from_remote(from);
        }
    }
    Err("the channel subscription ended".into())
}
