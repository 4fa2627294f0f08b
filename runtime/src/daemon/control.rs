//! Control messages on the Unix socket: length-prefixed JSON ([`super::transport`] frames them).
//!
//! A connection carries exactly one [`Request`] from the peer first (after the daemon has
//! checked the peer's credentials). `hello` opens a client session: the daemon answers
//! [`Reply::Welcome`] with the client's sealed memfd attached (`SCM_RIGHTS`), then the socket
//! stays open only as the session's life line (hang-up = the client left) and for `goodbye`.
//! `status` and `stop` get one reply and the daemon closes the connection.

use serde::{Deserialize, Serialize};
use vitamin_hal::Topology;

use crate::policy::ClientClass;

/// The first message of every connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Register as a client.
    Hello(Box<Hello>),
    /// Ask for a [`StatusReport`].
    Status {
        /// [`super::wire::PROTOCOL_VERSION`] of the asker.
        version: u32,
    },
    /// Ask the daemon to shut down.
    Stop {
        /// Protocol version of the asker.
        version: u32,
    },
    /// A registered client leaves (on its session socket, after its work drained).
    Goodbye,
}

/// A client's registration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// [`super::wire::PROTOCOL_VERSION`].
    pub version: u32,
    /// The client's pid as it sees it (the daemon uses the kernel's `SO_PEERCRED` pid; a
    /// mismatch is only logged, since pid namespaces translate it).
    pub pid: u32,
    /// Display name.
    pub name: String,
    /// Device index on the host.
    pub device: u32,
    /// The device's topology as the client's backend probed it. The first client of a device
    /// fixes it (unless the daemon was given one); later clients must report the same.
    pub topology: Topology,
    /// Scheduling class.
    pub class: ClientClass,
    /// Lanes (streams) per pool node the client created.
    pub lanes: u16,
    /// Re-registration after a daemon restart: leases the client still holds with their
    /// outstanding ops. The daemon adopts those that conflict with nobody.
    #[serde(default)]
    pub held: Vec<HeldLease>,
}

/// One lease a re-registering client holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLease {
    /// Node.
    pub node: u16,
    /// Outstanding ops on it: (op id, lane).
    pub ops: Vec<(u64, u16)>,
}

/// The daemon's answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Registered; the memfd comes with this message.
    Welcome(Box<Welcome>),
    /// Not accepted, and why (wrong uid, version, topology mismatch, limits).
    Refused {
        /// What happened and what to do.
        reason: String,
    },
    /// The status report.
    Status(Box<StatusReport>),
    /// The daemon is stopping.
    Stopping,
}

/// What a registered client needs to know.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Welcome {
    /// Protocol version.
    pub version: u32,
    /// The client's id (its lease holder id).
    pub client: u32,
    /// Pool nodes of its device.
    pub nodes: u16,
    /// Lanes accepted.
    pub lanes: u16,
    /// Most ready ops at once.
    pub max_ready: u32,
    /// Most outstanding ops at once.
    pub max_outstanding: u32,
    /// The policy the daemon runs.
    pub policy: String,
    /// Held leases adopted at re-registration (nodes); the others must drain.
    pub adopted: Vec<u16>,
    /// Whether a cross-process concurrency service was found serving the devices (checked by
    /// `vitamin daemon`; without one, clients' kernels time-slice).
    pub concurrency: Option<bool>,
}

/// `vitamin daemon status --json`: schema `vitamin.daemon.status.v1`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusReport {
    /// `vitamin.daemon.status.v1`.
    pub schema: String,
    /// Daemon pid.
    pub pid: u32,
    /// Policy name.
    pub policy: String,
    /// Seconds since start.
    pub uptime_s: f64,
    /// Socket path.
    pub socket: String,
    /// The cross-process concurrency check (from `vitamin daemon`), as a sentence.
    pub concurrency: String,
    /// Clients.
    pub clients: Vec<ClientStatus>,
    /// Devices.
    pub devices: Vec<DeviceStatus>,
    /// Counters.
    pub counters: Counters,
}

/// One client in a [`StatusReport`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientStatus {
    /// Client id.
    pub id: u32,
    /// Kernel-reported pid.
    pub pid: u32,
    /// Kernel-reported uid.
    pub uid: u32,
    /// Name from hello.
    pub name: String,
    /// Command line from `/proc/<pid>/cmdline`.
    pub command: String,
    /// `batch` or `latency (tpot N ms)`.
    pub class: String,
    /// Device index.
    pub device: u32,
    /// Ready ops waiting for a binding.
    pub ready: u32,
    /// Ops bound or continued, not completed.
    pub outstanding: u32,
    /// Leased/draining/reserved nodes: `#id (units) state`.
    pub leases: Vec<String>,
    /// Units held.
    pub units: usize,
    /// Ops bound to it since it registered.
    pub bound: u64,
    /// Ops bound per second over the last status interval.
    pub bound_per_s: f64,
    /// Ready ops it sent with a size floor (cooperative, cluster and graph launches, and ops a
    /// smaller node refused), since it registered.
    #[serde(default)]
    pub floored: u64,
    /// Of those, ops only the whole device runs unchanged.
    #[serde(default)]
    pub whole_device: u64,
    /// The policy's standing node for it, `#id (units) state` (TPOT-First's reservation for a
    /// latency-critical client), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<String>,
    /// The policy's size floor for its standing node, units (0: none).
    #[serde(default)]
    pub floor_units: usize,
    /// How long its oldest ready op has waited for a binding, ms (0: nothing ready).
    #[serde(default)]
    pub oldest_ready_ms: f64,
    /// The largest size floor among its ready ops, units (0: none has one): with
    /// `oldest_ready_ms`, a client waiting for a node wide enough for a cluster launch.
    #[serde(default)]
    pub ready_floor: usize,
    /// Unit sets that refused its cluster launches (each `0-7,120-131` style; the daemon proposes
    /// no node within one for its cluster launches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_refused: Vec<String>,
    /// Up-ring depth (records waiting for the daemon).
    pub up_depth: u32,
    /// Down-ring depth (bindings waiting for the client).
    pub down_depth: u32,
    /// Departing: hung up, its work draining.
    pub departing: bool,
}

/// One device in a [`StatusReport`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Device index.
    pub device: u32,
    /// Device name.
    pub name: String,
    /// Units.
    pub units: usize,
    /// Units in active (leased, draining, reserved) nodes.
    pub units_in_use: usize,
    /// Pool nodes.
    pub nodes: usize,
    /// Active nodes: `#id (units) state holder`.
    pub active: Vec<String>,
}

/// Daemon-wide counters (also the Prometheus metrics).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Ops bound.
    pub bound: u64,
    /// Ops refused (can never run).
    pub refused_ops: u64,
    /// Records that failed validation (each disconnected its client).
    pub refused_records: u64,
    /// Completions processed.
    pub completions: u64,
    /// Of those, bound ops returned not run: their node refused the launch (sent again as a new
    /// ready record).
    #[serde(default)]
    pub not_run: u64,
    /// Continued ops registered.
    pub continued: u64,
    /// Fresh ops clients launched first on a lease of theirs (counted in `continued` too).
    #[serde(default)]
    pub launched: u64,
    /// Of those, ops launched on a node no longer theirs (outside every lease's count).
    #[serde(default)]
    pub launched_stray: u64,
    /// Ops continued behind a stray, on a lane of a node no longer the client's (counted in
    /// `continued`; outside every lease's count, like the stray they follow).
    #[serde(default)]
    pub continued_stray: u64,
    /// Clients registered since start.
    pub clients_registered: u64,
    /// Clients disconnected for misbehaving.
    pub clients_disconnected: u64,
    /// Connections refused (credentials, version, topology).
    pub connections_refused: u64,
    /// Wake-ups sent to clients (down ring, empty -> non-empty with the client asleep).
    pub wakeups_sent: u64,
    /// Times the decision loop went to sleep.
    pub loop_sleeps: u64,
    /// Decision-loop turns.
    pub loop_turns: u64,
    /// Bindings deferred because a client's down ring was full.
    pub deferred_ring_full: u64,
    /// Last time from a client's hang-up to its leases being freed, ns.
    pub last_hangup_to_free_ns: Option<u64>,
    /// Daemon CPU time (user + system) since start, ns.
    pub cpu_ns: u64,
}
