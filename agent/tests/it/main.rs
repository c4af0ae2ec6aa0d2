//! The agent's integration tests: one binary (see `server/tests/it`).

mod sandbox;
mod supervisor;
