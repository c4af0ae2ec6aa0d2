//! What the provider agent reports about its host, in the shape the server will store.
//!
//! Shared by `cardpool-agent` and the server so both sides agree at compile time. The wire
//! format is JSON; every payload carries the [`ProtocolVersion`] it was written with, and a
//! reader accepts any minor version of its own major (new optional fields only) and refuses
//! other majors with a clear message.

use serde::{Deserialize, Serialize};

pub mod decode;
pub mod mig;
pub mod tunnel;
pub use mig::MigProfile;
pub use tunnel::{ChannelTarget, Terminal};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion { major: 1, minor: 8 };

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolVersion {
    pub major: u16,
    pub minor: u16,
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl ProtocolVersion {
    /// Whether a peer speaking `other` can be understood by this build.
    pub fn check_peer(&self, other: ProtocolVersion) -> Result<(), String> {
        if self.major == other.major {
            Ok(())
        } else {
            Err(format!(
                "protocol version {other} is not supported (this side speaks {self}); upgrade the older of agent and server"
            ))
        }
    }
}

/// Facts about the machine, beside its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub cpu_model: String,
    pub cpu_cores: u32,
    pub ram_bytes: u64,
    pub disk_bytes: u64,
    pub os: String,
    pub agent_version: String,
    /// Public location label chosen by the provider (e.g. "Frankfurt, DE").
    pub location: Option<String>,
    /// The machine's physical network links (since 1.6; none from older agents), so the
    /// server can check the fabric its provider declares.
    #[serde(default)]
    pub nics: Vec<NicInfo>,
}

/// One physical network link of the host: an InfiniBand or RoCE port, or an Ethernet NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NicInfo {
    /// The device and port (`mlx5_0/1`) or interface (`eth0`).
    pub name: String,
    /// `infiniband`, `roce` or `ethernet`.
    pub link: String,
    /// The link's speed, Mb/s, where the kernel says.
    pub speed_mbps: Option<u32>,
    /// Up (an active port, an interface with carrier).
    pub up: bool,
}

/// One physical GPU (or the parent of its MIG instances).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Index as the driver enumerates it (what `CUDA_VISIBLE_DEVICES` uses).
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: u64,
    pub driver_version: String,
    /// CUDA version the driver supports, e.g. "12.4".
    pub cuda_version: String,
    pub power_limit_milliwatts: Option<u32>,
    /// `Some(true)` when MIG is enabled; `None` when the GPU does not support MIG.
    pub mig_enabled: Option<bool>,
    /// UUIDs of GPUs this one reaches over an active NVLink.
    pub nvlink_peers: Vec<String>,
    /// The MIG instances carved out of this GPU now (empty unless MIG is enabled and a layout
    /// exists). Added in 1.5.
    #[serde(default)]
    pub mig_instances: Vec<MigInstance>,
    /// The MIG profiles the agent can carve this GPU into, reported only where it can apply a
    /// layout itself ([`ServerMessage::ApplyMigLayout`]: MIG on, NVML, root). Empty otherwise:
    /// the provider makes the layout with `nvidia-smi mig` and the agent lists it. Added in 1.8.
    #[serde(default)]
    pub mig_profiles: Vec<MigProfile>,
}

/// One MIG device: a GPU instance with one compute instance, which CUDA sees as a GPU of its
/// own. This is what a slice rental hands to the workload.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// `MIG-…`, the name `CUDA_VISIBLE_DEVICES` takes for it.
    pub uuid: String,
    /// NVIDIA's profile name, e.g. `1g.10gb`, `3g.40gb`, `7g.80gb`.
    pub profile: String,
    /// Compute slices out of the GPU's seven (the `3` of `3g.40gb`).
    pub compute_slices: u32,
    pub memory_bytes: u64,
    /// The GPU instance id and compute instance id, which name its `/dev/nvidia-caps` nodes;
    /// `None` where the driver does not say.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

impl MigInstance {
    /// The memory size a profile name promises, in GB (`3g.40gb` → 40).
    pub fn profile_memory_gb(profile: &str) -> Option<u64> {
        let (_, memory) = profile.split_once('.')?;
        memory.strip_suffix("gb")?.parse().ok()
    }
}

/// Everything the agent reports as its inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub protocol: ProtocolVersion,
    pub host: HostFacts,
    pub gpus: Vec<GpuInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_reasons_fold_into_nvml_bits() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(throttle_mask(&[]), 0);
        assert_eq!(throttle_mask(&names(&["idle"])), 0x1);
        assert_eq!(throttle_mask(&names(&["thermal slowdown (hardware)", "power brake"])), 0x40 | 0x80);
        assert_eq!(throttle_mask(&names(&["something new", "power cap"])), 0x4, "unknown names are skipped");
        let bits: Vec<u64> = THROTTLE_REASONS.iter().map(|(bit, _)| *bit).collect();
        assert!(bits.iter().all(|b| b.is_power_of_two()) && bits.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn same_major_is_accepted_other_majors_refused_with_a_reason() {
        assert!(PROTOCOL_VERSION.check_peer(ProtocolVersion { major: 1, minor: 9 }).is_ok());
        let err = PROTOCOL_VERSION.check_peer(ProtocolVersion { major: 2, minor: 0 }).unwrap_err();
        assert!(err.contains("2.0") && err.contains(&PROTOCOL_VERSION.to_string()), "{err}");
    }

    #[test]
    fn inventory_round_trips_through_json() {
        let inventory = Inventory {
            protocol: PROTOCOL_VERSION,
            host: HostFacts {
                hostname: "gpu-01".into(),
                cpu_model: "EPYC".into(),
                cpu_cores: 64,
                ram_bytes: 1 << 40,
                disk_bytes: 1 << 42,
                os: "Debian 12".into(),
                agent_version: "0.1.0".into(),
                location: Some("Frankfurt, DE".into()),
                nics: vec![NicInfo {
                    name: "mlx5_0/1".into(),
                    link: "infiniband".into(),
                    speed_mbps: Some(400_000),
                    up: true,
                }],
            },
            gpus: vec![],
        };
        let json = serde_json::to_string(&inventory).unwrap();
        assert_eq!(serde_json::from_str::<Inventory>(&json).unwrap(), inventory);
    }

    #[test]
    fn a_gpu_from_an_older_agent_has_no_mig_instances() {
        let gpu = r#"{"index":0,"uuid":"GPU-1","name":"NVIDIA H100","pci_bus_id":"0:18","memory_total_bytes":1,
            "driver_version":"550","cuda_version":"12.4","power_limit_milliwatts":null,"mig_enabled":false,"nvlink_peers":[]}"#;
        let gpu: GpuInfo = serde_json::from_str(gpu).unwrap();
        assert!(gpu.mig_instances.is_empty());
        assert_eq!(MigInstance::profile_memory_gb("3g.40gb"), Some(40));
        assert_eq!(MigInstance::profile_memory_gb("whole"), None);
    }
}

/// What the agent sends over its WebSocket (`/agent/v1/connect`), one JSON text frame each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// First frame of every connection. `host_id` is the id the agent was enrolled as; the
    /// server refuses a hello whose id is not the credential's host.
    Hello { protocol: ProtocolVersion, agent_version: String, host_id: i64 },
    /// On connect and whenever it changes.
    Inventory(Inventory),
    /// Every `heartbeat_interval_secs`. `rentals` lists the rentals whose workloads the agent
    /// is running, so the server can detach any it no longer knows as live.
    Heartbeat {
        sequence: u64,
        #[serde(default)]
        rentals: Vec<i64>,
    },
    /// What happened to a rental's workload; sent on every change and again whenever the
    /// server repeats a command (the agent's answers are idempotent).
    RentalStatus { rental_id: i64, status: WorkloadStatus },
    /// The host's self-test, on connect and whenever its outcome changes.
    SelfTest(SelfTestReport),
    /// GPU samples not yet acknowledged, oldest first (since 1.1). `stream` identifies the
    /// agent process (its start time, ms) and grows with every restart; `sequence` numbers
    /// grow by one per frame within a stream. The server stores each (stream, sequence) once
    /// and answers with [`ServerMessage::TelemetryAck`]; the agent drops what is acknowledged
    /// and replays the rest after a reconnect. `dropped` counts frames the agent's bounded
    /// buffer had to discard (oldest first) since it started.
    Telemetry { stream: u64, frames: Vec<TelemetryFrame>, dropped: u64 },
    /// The answer to [`ServerMessage::ReadLogs`] with the same `request_id` (since 1.2).
    Logs { request_id: u64, chunk: Result<LogChunk, String> },
    /// The channel is open inside the rental (since 1.3; see [`tunnel`]).
    ChannelOpened { channel: u64 },
    /// The channel could not be opened (no such running rental, no shell on this host, ...).
    ChannelRefused { channel: u64, reason: String },
    /// `bytes` more of the server's data were handed on: the server may send that much more.
    ChannelWindow { channel: u64, bytes: u64 },
    /// Nothing more comes from the rental on this channel.
    ChannelEof { channel: u64 },
    /// The process ended: its exit status, or the signal that killed it.
    ChannelExit { channel: u64, code: Option<i32>, signal: Option<String> },
    /// The channel is gone on the agent's side.
    ChannelClosed { channel: u64 },
    /// [`ServerMessage::ApplyMigLayout`] could not be carried out (the GPU is busy, NVML said
    /// no, the placement does not fit); an inventory with what the GPU holds now follows
    /// (since 1.8).
    MigLayoutFailed { gpu_index: u32, reason: String },
}

/// A piece of a rental's workload log (stdout and stderr), by byte offset in everything the
/// workload has written. The agent keeps the last [`LOG_RING_BYTES`] of it; a reader that asks
/// for older bytes gets the oldest kept and learns how many it `skipped`. Reading on from `end`
/// never misses nor repeats a byte, across reconnects of either side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogChunk {
    /// Offset of the first byte of `data`.
    pub offset: u64,
    /// Offset just after `data`: where to read on from.
    pub end: u64,
    /// Bytes before `offset` that were asked for but are no longer kept.
    pub skipped: u64,
    /// The bytes, as UTF-8 (invalid sequences replaced). Whole lines, unless one line alone
    /// is longer than a chunk.
    pub data: String,
    /// Whether the workload is still running (more may come).
    pub running: bool,
}

/// How much of each rental's log an agent keeps.
pub const LOG_RING_BYTES: u64 = 8 << 20;
/// The most one chunk carries.
pub const LOG_CHUNK_BYTES: u32 = 256 << 10;

/// Every GPU of the host at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelemetryFrame {
    pub sequence: u64,
    /// Unix time of the sample, milliseconds.
    pub at_ms: i64,
    pub gpus: Vec<GpuSample>,
}

/// One GPU's readings; `None` where the source cannot tell (a GPU off the bus reads all
/// `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    /// Percent of time a kernel was running.
    pub utilization_pct: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_c: Option<u32>,
    /// Temperature at which the GPU slows itself down.
    pub slowdown_temperature_c: Option<u32>,
    pub power_milliwatts: Option<u32>,
    pub power_limit_milliwatts: Option<u32>,
    /// Energy the GPU used since the driver loaded, millijoules (NVML's total energy counter).
    #[serde(default)]
    pub energy_millijoules: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    pub fan_pct: Option<u32>,
    /// Volatile ECC error counts since the driver loaded.
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// XID error codes seen since the previous sample.
    #[serde(default)]
    pub xid_errors: Vec<u64>,
    /// Active throttle reasons, by name (see [`THROTTLE_REASONS`]).
    #[serde(default)]
    pub throttle_reasons: Vec<String>,
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
}

/// The clock throttle reasons an agent reports, by name, with NVML's bit for each (the bits
/// DCGM's `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` reports as one mask).
pub const THROTTLE_REASONS: [(u64, &str); 8] = [
    (0x1, "idle"),
    (0x2, "application clocks"),
    (0x4, "power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "thermal slowdown (software)"),
    (0x40, "thermal slowdown (hardware)"),
    (0x80, "power brake"),
];

/// NVML's bitmask of the throttle reasons named in `names` (unknown names count for nothing).
pub fn throttle_mask(names: &[String]) -> u64 {
    THROTTLE_REASONS.iter().filter(|(_, name)| names.iter().any(|n| n == name)).fold(0, |mask, (bit, _)| mask | bit)
}

/// A process using a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: String,
    pub memory_used_bytes: Option<u64>,
}

/// One check of `cardpool-agent self-test`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelfTestCheck {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// Whether a host can rent out its GPUs right now, check by check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelfTestReport {
    /// The GPU source that was checked ("NVML, driver ...", "simulated ...").
    pub source: String,
    pub checks: Vec<SelfTestCheck>,
}

impl SelfTestReport {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// What the server sends back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The hello was accepted.
    Welcome { host_id: i64, heartbeat_interval_secs: u64 },
    /// The connection is refused or ended for good (unsupported protocol, revoked host,
    /// another connection of the host took over); the server closes the socket after it.
    Refused { reason: String },
    /// One message was not accepted (malformed, too long a string, data the server refuses);
    /// the connection goes on (since 1.4; older agents ignore it).
    Error { message: String },
    /// Give these GPUs to this workload and start it. Repeated until the agent reports the
    /// workload ready (or failed); an agent already running it just reports its status again.
    Attach(AttachSpec),
    /// A spot rental is being preempted: tell the workload (SIGTERM plus a notice file) and
    /// stop it when `grace_secs` have passed since the notice was first given.
    PreemptNotice { rental_id: i64, grace_secs: u64 },
    /// Stop the workload and take its GPUs back. Answered with `RentalStatus::Detached` even
    /// when the agent has nothing running for that rental.
    Detach { rental_id: i64 },
    /// Every telemetry frame of `stream` up to `sequence` is stored (since 1.1).
    TelemetryAck { stream: u64, sequence: u64 },
    /// Read the rental's log from `offset` (`None`: its last `max_bytes`); answered with
    /// [`AgentMessage::Logs`] (since 1.2; older agents ignore it).
    ReadLogs { request_id: u64, rental_id: i64, offset: Option<u64>, max_bytes: u32 },
    /// Open a channel into the rental's sandbox (since 1.3; see [`tunnel`]): the server has
    /// checked that the caller may enter this rental. `env` holds the client's `LANG`/`LC_*`.
    OpenChannel {
        channel: u64,
        rental_id: i64,
        target: ChannelTarget,
        terminal: Option<Terminal>,
        #[serde(default)]
        env: Vec<(String, String)>,
    },
    /// `bytes` more of the agent's data were handed on to the SSH client.
    ChannelWindow { channel: u64, bytes: u64 },
    /// Carve GPU `gpu_index` into MIG instances of these profiles, replacing its layout; the
    /// provider chose it and nothing is rented on the GPU. Repeated until the agent's inventory
    /// shows the layout or it answers [`AgentMessage::MigLayoutFailed`]; an agent whose GPU
    /// already has it sends its inventory again (since 1.8; older agents ignore it).
    ApplyMigLayout { gpu_index: u32, profiles: Vec<String> },
    /// The client sent everything (stdin closes).
    ChannelEof { channel: u64 },
    /// The client's terminal changed size.
    ChannelResize { channel: u64, cols: u16, rows: u16 },
    /// The client is gone: end the channel and whatever runs on it.
    ChannelClose { channel: u64 },
}

/// Everything the agent needs to run a renter's workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachSpec {
    pub rental_id: i64,
    /// Device indexes (what `CUDA_VISIBLE_DEVICES` takes), sorted.
    pub gpu_indexes: Vec<u32>,
    /// The same GPUs by UUID (what `NVIDIA_VISIBLE_DEVICES` and Docker's `--gpus` take).
    pub gpu_uuids: Vec<String>,
    /// A shell command (process runtime) ...
    pub command: Option<String>,
    /// ... or a container image (container runtime).
    pub image: Option<String>,
    /// `NAME=value` pairs.
    pub env: Vec<String>,
    pub ssh_public_key: Option<String>,
    /// The share of GPUs held, in sevenths of a GPU: 7 a whole GPU, a MIG slice its compute
    /// slices (since 1.6; absent, every index is a whole GPU). The host's CPU, memory and
    /// processes are shared out by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_sevenths: Option<u32>,
    /// A gang member's link to the gang's rendezvous (since 1.7): its rank, and where rank 0
    /// listens. Every member's network lets it reach that address and port; rank 0's agent
    /// forwards connections to it there into rank 0's sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangLink>,
}

/// Where a gang's members meet: rank 0's host's address on the fabric, and the port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangLink {
    pub rank: u32,
    pub master_addr: String,
    pub master_port: u16,
    /// Every member host's fabric address: rank 0's agent takes rendezvous connections from
    /// these only.
    #[serde(default)]
    pub peers: Vec<String>,
}

impl AttachSpec {
    /// The share of GPUs held, in sevenths of a GPU.
    pub fn sevenths(&self) -> u32 {
        self.share_sevenths.unwrap_or(self.gpu_indexes.len() as u32 * 7)
    }
}

/// A workload's state as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum WorkloadStatus {
    /// The GPUs are being attached and the workload started.
    Provisioning,
    /// The workload is up: billing starts.
    Ready,
    /// The workload ended on its own or after a notice/detach; `code` is its exit status
    /// (`None` when killed by a signal).
    Exited { code: Option<i32> },
    /// It could not be started (bad image, missing runtime, ...).
    Failed { reason: String },
    /// Nothing of this rental runs on the host any more (answer to `Detach`).
    Detached,
}
