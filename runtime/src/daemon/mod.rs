//! # The coordination daemon: one arbiter for every process on a GPU host
//!
//! The daemon owns each device's pool lease state and runs one policy over the ready ops of all
//! its clients. Clients keep every handle, pointer and argument byte; only plain-data records
//! cross (see [`wire`]). Layers, bottom up:
//! - [`sync`] (private): `std` atomics and the kernel futex, or loom's models under `cfg(loom)`.
//! - [`ring`]: SPSC rings of fixed-size records in a sealed memfd, idle-only futex wake-ups, the
//!   lease view. The one module of this crate with `unsafe` (mapping shared memory).
//! - [`wire`]: the record layouts and the validating decoder ([`wire::Ledger`]).
//! - [`control`] + [`transport`]: the Unix socket (hello / welcome with the memfd, status, stop,
//!   goodbye), `SO_PEERCRED` checks, `SCM_RIGHTS`.
//! - [`decide`]: the decision loop's state (pools, policies, clients); no sockets, no threads.
//! - [`server`]: the daemon's threads (control, handshakes, decision loop) and
//!   [`metrics`] (Prometheus text on loopback).
//! - [`client`]: the client side of one session, which the executor drives
//!   ([`crate::dispatch::Remote`]); [`arbiter`]: the record-level [`crate::arbiter::Arbiter`]
//!   over such sessions, one per client (the second implementation beside the in-process one).
//!
//! ## Contract
//! - A client sees only its own memfd. Everything it writes there is validated before use; a
//!   bad record, a corrupted ring index or a flood disconnects that client alone and frees its
//!   leases. The daemon never panics on client input and its loop never blocks on one client:
//!   a full down ring only defers that client's bindings.
//! - A client whose process exits (socket hang-up, pid gone) loses its leases at once: its
//!   submissions died with it. One that hangs up but lives on keeps them until it reports its
//!   outstanding completions (or exits, or a grace period passes).
//! - Leases decide where work runs, never what it computes: a binding names a node and a lane
//!   for an op whose descriptor the client submits unchanged.
//! - Every wait (socket I/O, ring sleep, lease-view read) has a deadline.

#[cfg(not(loom))]
pub mod arbiter;
#[cfg(not(loom))]
pub mod client;
#[cfg(not(loom))]
pub mod control;
#[cfg(not(loom))]
pub mod decide;
#[cfg(not(loom))]
pub mod metrics;
pub mod ring;
#[cfg(not(loom))]
pub mod server;
mod sync;
#[cfg(not(loom))]
pub mod transport;
pub mod wire;

use std::path::PathBuf;

/// Errors of the daemon, its transport and its client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonError {
    /// No daemon listens at the socket.
    #[error("no vitamin daemon at {0}: {1} (start one with `vitamin daemon`)")]
    NotRunning(PathBuf, String),
    /// A daemon already listens there.
    #[error("a vitamin daemon is already running at {0} (stop it with `vitamin daemon stop`)")]
    AlreadyRunning(PathBuf),
    /// The daemon refused the connection.
    #[error("the daemon refused this client: {0}")]
    Refused(String),
    /// A malformed control message or an unexpected reply.
    #[error("control protocol error: {0}")]
    Protocol(String),
    /// A deadline passed.
    #[error("timed out waiting for the {0}")]
    Timeout(String),
    /// The peer closed the connection.
    #[error("the peer hung up")]
    HungUp,
    /// The daemon is gone (hang-up or stale heartbeat): the client runs in safe mode.
    #[error("the daemon is gone; running in safe mode on the leases already held")]
    DaemonGone,
    /// The daemon disconnected this client.
    #[error("disconnected by the daemon: {0}")]
    Disconnected(String),
    /// A ring or shared-region failure.
    #[error(transparent)]
    Ring(#[from] ring::RingError),
    /// A record failed validation.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    /// A system call failed.
    #[error("{0}")]
    Io(String),
    /// Invalid configuration or topology.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl DaemonError {
    #[cfg(not(loom))]
    fn os(call: &str, e: rustix::io::Errno) -> DaemonError {
        DaemonError::Io(format!("{call} failed: {e}"))
    }
}

/// Notice bit: the host's cross-process concurrency service reported a fault.
/// Work of every client it served may have failed; the service refuses new work until they exit.
pub const NOTICE_CONCURRENCY_FAULT: u64 = 1;
/// Notice bit: the concurrency service is gone: clients' kernels now time-slice.
pub const NOTICE_CONCURRENCY_GONE: u64 = 2;

/// The sentence of a notice bit set (empty: none).
pub fn notice_text(bits: u64) -> String {
    let mut parts = Vec::new();
    if bits & NOTICE_CONCURRENCY_FAULT != 0 {
        parts.push("the host's cross-process concurrency service reported a fault: work of every client it served may have failed");
    }
    if bits & NOTICE_CONCURRENCY_GONE != 0 {
        parts.push("the host's concurrency service is gone: clients' kernels time-slice");
    }
    parts.join("; ")
}

/// `CLOCK_MONOTONIC` in ns: the clock of every record (one clock for all processes of a host).
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
