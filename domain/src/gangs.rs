//! Multi-node gangs: one job on N GPUs of each of M hosts of one fabric (distributed training
//! with NCCL or Gloo across hosts).
//!
//! A gang is booked all or nothing: every member's GPUs are held in one transaction, or none
//! are. Each member is an ordinary rental on its host (held, attached, billed and stopped like
//! any), with a rank; rank 0 hosts the rendezvous. Members start together: a member whose
//! workload is up waits, unbilled, until every member is, and then all start billing at the
//! same instant. Each member's workload gets the environment PyTorch's `torchrun` and NCCL
//! expect ([`rendezvous_env`]). A member lost past the grace stops the whole gang, or, by the
//! renter's choice, the others keep their GPUs and wait for a replacement. A spot gang is
//! preempted as a whole: the notice one member gets, every member gets, with the same deadline.

use crate::{
    offers::RentalKind,
    rentals::{RentalState, Workload},
};
use serde::{Deserialize, Serialize};

/// The most hosts one gang spans.
pub const MAX_NODES: u32 = 128;
/// The most GPUs a gang takes on each host.
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// Where rank 0 listens for the others unless the renter says otherwise (`torchrun`'s own).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// What the gang does when a member is lost (its host gone past the grace, its workload
/// failed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnMemberLoss {
    /// Stop every member (a collective job cannot go on short of a rank).
    #[default]
    Stop,
    /// Keep the other members' GPUs (and their bills) and wait for the renter to book a
    /// replacement on the same fabric.
    Hold,
}

impl OnMemberLoss {
    pub fn as_str(self) -> &'static str {
        match self {
            OnMemberLoss::Stop => "stop",
            OnMemberLoss::Hold => "hold",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [OnMemberLoss::Stop, OnMemberLoss::Hold].into_iter().find(|p| p.as_str() == raw)
    }
}

/// Books a gang (`POST /api/v1/gangs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BookGangRequest {
    /// The GPU model every member gets, e.g. "NVIDIA H100 80GB HBM3".
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub gpu_model: String,
    /// Hosts (members), at least 2.
    #[cfg_attr(feature = "openapi", schema(minimum = 2, maximum = 128))]
    pub nodes: u32,
    /// GPUs on each host.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 16))]
    pub gpus_per_node: u32,
    /// On-demand (default), reserved, or spot (with `bid_micros`; preempted as a whole).
    #[serde(default)]
    pub kind: RentalKind,
    /// Spot only: the bid per GPU-hour, micro-dollars, the same on every member.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub bid_micros: Option<i64>,
    /// Only this fabric; otherwise the cheapest fabric with enough free hosts.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 64))]
    pub fabric_id: Option<String>,
    /// What every member runs (the same command on each host; `RANK` tells them apart).
    pub workload: Workload,
    /// Reserved only: the window, whole hours, starting in the future.
    #[serde(default)]
    pub starts_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    pub hours: Option<u32>,
    #[serde(default)]
    pub on_member_loss: OnMemberLoss,
    /// Rank 0's rendezvous port (default 29500).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1024, maximum = 65535))]
    pub master_port: Option<u16>,
}

/// The gang booking form as the browser sends it: every field a string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangForm {
    pub gpu_model: String,
    pub nodes: String,
    pub gpus_per_node: String,
    pub kind: String,
    /// Spot: the bid, dollars per GPU-hour.
    #[serde(default)]
    pub bid: String,
    /// Empty: any fabric.
    #[serde(default)]
    pub fabric_id: String,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub image: String,
    /// One `NAME=value` per line.
    #[serde(default)]
    pub env: String,
    #[serde(default)]
    pub ssh_public_key: String,
    /// Reservation start, `YYYY-MM-DDTHH:MM` in UTC.
    #[serde(default)]
    pub starts_at: String,
    #[serde(default)]
    pub hours: String,
    /// `stop` or `hold`.
    #[serde(default)]
    pub on_member_loss: String,
    /// Empty: 29500.
    #[serde(default)]
    pub master_port: String,
}

impl GangForm {
    /// The request, or every field's problem at once.
    pub fn parse(&self) -> Result<BookGangRequest, crate::AppError> {
        let mut fields = crate::FieldErrors::new();
        let text = |raw: &str| Some(raw.trim().to_owned()).filter(|v| !v.is_empty());
        let mut count = |name: &str, raw: &str, what: &str| {
            raw.trim().parse::<u32>().map_err(|_| fields.insert(name.into(), what.into())).unwrap_or(0)
        };
        let nodes = count("nodes", &self.nodes, "a whole number of hosts, at least 2");
        let gpus_per_node = count("gpus_per_node", &self.gpus_per_node, "a whole number of GPUs per host");
        let kind = RentalKind::parse(self.kind.trim()).unwrap_or_default();
        let bid_micros = crate::rentals::spot_bid(kind, &self.bid, &mut fields);
        let (starts_at, hours) = crate::rentals::reserved_window(kind, &self.starts_at, &self.hours, &mut fields);
        let on_member_loss = OnMemberLoss::parse(self.on_member_loss.trim()).unwrap_or_default();
        let master_port = match text(&self.master_port) {
            None => None,
            Some(raw) => raw
                .parse::<u16>()
                .map_err(|_| fields.insert("master_port".into(), "a port from 1024 to 65535".into()))
                .ok(),
        };
        if !fields.is_empty() {
            return Err(crate::AppError::invalid_fields(fields));
        }
        Ok(BookGangRequest {
            gpu_model: self.gpu_model.trim().to_owned(),
            nodes,
            gpus_per_node,
            kind,
            bid_micros,
            fabric_id: text(&self.fabric_id),
            workload: Workload {
                command: text(&self.command),
                image: text(&self.image),
                env: self.env.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect(),
                ssh_public_key: text(&self.ssh_public_key),
            },
            starts_at,
            hours,
            on_member_loss,
            master_port,
        })
    }
}

/// Books a replacement for a lost member of a gang that holds its others
/// (`POST /api/v1/gangs/{id}/replace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplaceMemberRequest {
    /// The lost member's rank (not 0: rank 0 hosts the rendezvous).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 127))]
    pub rank: u32,
}

/// Where a gang stands, from its members' states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GangState {
    /// Members are being attached, or are up and waiting for the rest (unbilled).
    Starting,
    /// Every member is running; billing runs for all.
    Running,
    /// A member was lost and the gang holds the others for a replacement.
    Degraded,
    /// Members are stopping.
    Stopping,
    /// Every member has ended.
    Ended,
}

impl GangState {
    /// The gang's state from its members' (the current member of each rank): a member lost
    /// (failed, interrupted, preempted) while others live makes it degraded; one that finished
    /// on its own does not.
    pub fn of(members: &[RentalState], started: bool) -> GangState {
        use RentalState as S;
        let live: Vec<RentalState> = members.iter().copied().filter(|s| !s.is_terminal()).collect();
        if live.is_empty() {
            GangState::Ended
        } else if live.iter().any(|s| matches!(s, S::Stopping | S::Preempting)) {
            GangState::Stopping
        } else if members.iter().any(|s| matches!(s, S::Failed | S::Interrupted | S::Preempted)) {
            GangState::Degraded
        } else if started && live.iter().all(|s| *s == S::Running) {
            GangState::Running
        } else {
            GangState::Starting
        }
    }

    /// What people read.
    pub fn label(self) -> &'static str {
        match self {
            GangState::Starting => "Starting",
            GangState::Running => "Running",
            GangState::Degraded => "Degraded",
            GangState::Stopping => "Stopping",
            GangState::Ended => "Ended",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GangState::Starting => "starting",
            GangState::Running => "running",
            GangState::Degraded => "degraded",
            GangState::Stopping => "stopping",
            GangState::Ended => "ended",
        }
    }
}

/// One member of a gang, as its page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GangMember {
    pub rank: u32,
    pub rental_id: i64,
    pub host_id: i64,
    pub host_label: String,
    /// The host's address on the fabric.
    pub address: String,
    pub state: RentalState,
    pub gpu_indexes: Vec<u32>,
    /// When its workload was up (it waited from there for the others).
    pub ready_at: Option<chrono::DateTime<chrono::Utc>>,
    pub billed_seconds: i64,
    pub charged_micros: i64,
}

/// One step of one member, on the gang's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GangEvent {
    pub rank: u32,
    pub rental_id: i64,
    pub state: RentalState,
    pub reason: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// A gang and its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Gang {
    pub id: i64,
    pub state: GangState,
    pub fabric_id: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub kind: RentalKind,
    pub on_member_loss: OnMemberLoss,
    pub master_addr: String,
    pub master_port: u16,
    /// When the last member was ready: every member's billing started here.
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// What the members cost so far, micro-dollars.
    pub charged_micros: i64,
    /// Every member, in rank order (a replacement after the member it replaced).
    pub members: Vec<GangMember>,
    /// The members' steps, oldest first (the latest 200): bookings, the start, losses,
    /// replacements, stops.
    pub timeline: Vec<GangEvent>,
}

/// A page of the caller's gangs, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GangList {
    pub gangs: Vec<Gang>,
}

/// The environment of the member of rank `rank` (one process per host, launching
/// `gpus_per_node` workers: `torchrun --nnodes=$NNODES --node_rank=$NODE_RANK
/// --nproc_per_node=$LOCAL_WORLD_SIZE --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT`
/// picks these up, and so does a script that reads them itself). `RANK` is the global rank of
/// the member's first worker; `WORLD_SIZE` counts every worker of the gang. The NCCL and Gloo
/// hints keep their traffic off the sandbox's loopback.
pub fn rendezvous_env(
    rank: u32,
    nodes: u32,
    gpus_per_node: u32,
    master_addr: &str,
    master_port: u16,
    gang_id: i64,
) -> Vec<String> {
    vec![
        format!("MASTER_ADDR={master_addr}"),
        format!("MASTER_PORT={master_port}"),
        format!("WORLD_SIZE={}", nodes * gpus_per_node),
        format!("RANK={}", rank * gpus_per_node),
        format!("NODE_RANK={rank}"),
        format!("NNODES={nodes}"),
        format!("LOCAL_WORLD_SIZE={gpus_per_node}"),
        format!("CARDPOOL_GANG_ID={gang_id}"),
        "NCCL_SOCKET_IFNAME=^lo".to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendezvous_environment_is_torchruns() {
        let env = rendezvous_env(1, 2, 8, "10.8.0.11", 29500, 7);
        for want in [
            "MASTER_ADDR=10.8.0.11",
            "MASTER_PORT=29500",
            "WORLD_SIZE=16",
            "RANK=8",
            "NODE_RANK=1",
            "LOCAL_WORLD_SIZE=8",
        ] {
            assert!(env.iter().any(|e| e == want), "{want} in {env:?}");
        }
    }

    #[test]
    fn the_form_parses_or_names_every_bad_field() {
        let form = GangForm {
            gpu_model: " NVIDIA H100 80GB HBM3 ".into(),
            nodes: "2".into(),
            gpus_per_node: "8".into(),
            kind: "on_demand".into(),
            command: "torchrun train.py".into(),
            env: "A=1\n\nB=2".into(),
            on_member_loss: "hold".into(),
            ..GangForm::default()
        };
        let request = form.parse().unwrap();
        assert_eq!((request.nodes, request.gpus_per_node, request.gpu_model.as_str()), (2, 8, "NVIDIA H100 80GB HBM3"));
        assert_eq!((request.on_member_loss, request.master_port, request.fabric_id), (OnMemberLoss::Hold, None, None));
        assert_eq!(request.workload.env, ["A=1", "B=2"]);
        assert_eq!(request.bid_micros, None);
        let spot = GangForm { kind: "spot".into(), bid: "2.50".into(), ..form.clone() };
        assert_eq!(spot.parse().unwrap().bid_micros, Some(2_500_000));
        let bad = GangForm {
            nodes: "two".into(),
            gpus_per_node: "".into(),
            master_port: "99999".into(),
            kind: "spot".into(),
            ..form
        };
        let err = bad.parse().unwrap_err();
        for field in ["nodes", "gpus_per_node", "master_port", "bid"] {
            assert!(err.field(field).is_some(), "{field}");
        }
    }

    #[test]
    fn a_gang_is_as_far_as_its_members() {
        use RentalState as S;
        assert_eq!(GangState::of(&[S::Running, S::Provisioning], false), GangState::Starting);
        assert_eq!(GangState::of(&[S::Running, S::Running], true), GangState::Running);
        assert_eq!(GangState::of(&[S::Running, S::Failed], true), GangState::Degraded);
        assert_eq!(GangState::of(&[S::Stopping, S::Failed], true), GangState::Stopping);
        assert_eq!(GangState::of(&[S::Ended, S::Failed], true), GangState::Ended);
        assert_eq!(GangState::of(&[S::Running, S::Ended], true), GangState::Running, "one finished first");
    }
}
