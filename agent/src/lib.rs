//! The Cardpool provider agent, as a library so the server's tests and demo can run real
//! agents in-process; the `cardpool-agent` binary is a thin command line over it.

pub mod connection;
pub mod devices;
pub mod enrollment;
pub mod firewall;
pub mod gpu;
pub mod host;
pub mod logs;
pub mod rendezvous;
pub mod runtime;
pub mod sandbox;
pub mod selftest;
pub mod shares;
pub mod state;
pub mod supervisor;
pub mod telemetry;
pub mod tunnels;
