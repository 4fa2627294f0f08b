//! # The arbiter boundary: who decides, apart from who submits
//!
//! The dispatcher is two things (DESIGN.md, "Decide vs. submit"): the **executor**, in the client
//! process, which takes ready ops from the vCtx, continues lanes, submits the unchanged
//! descriptor on a local physical context and satisfies tokens (it owns every native handle,
//! argument and pointer); and the **arbiter**, which owns the lease state and runs the policy.
//! This module is the arbiter's side: plain-data records and one object-safe trait.
//!
//! - Up: a [`ReadyRecord`] per ready op (client, op, launch key, flags, ready since, deadline and
//!   class, lookahead hint) and a [`Completion`] per finished binding.
//! - Down: a [`Binding`] per decision (op, node, lane).
//! - Beside: a [`LeaseView`] per client, readable without a round trip (which nodes it holds,
//!   which are draining), so continuation on a held lease stays local.
//!
//! Every record is `Copy`, `#[repr(C)]` and fixed-size: no pointers, handles or argument bytes
//! cross the boundary, and the same records fit a shared-memory ring (the daemon). Kernel names
//! are interned as a 64-bit hash ([`LaunchKey::name_hash`]); the name stays with the client.
//!
//! The decisions themselves are made once, by [`ArbiterState`] (the pool's lease state, the
//! policy and what it reads, with the steps of a round: maintenance, Pick/Select proposals,
//! admission under a lease, completions, idle leases, lease views). Its drivers:
//! - the in-process dispatcher (`crate::dispatch`), executor and arbiter on one thread: it hands
//!   the policy the ops' own descriptors and reads the lease state directly (the lease view
//!   without a round trip), so no record is built on the in-process launch path;
//! - the daemon (`crate::daemon`), one state per device over every client's ready records; its
//!   wire records (`crate::daemon::wire`) are these records in ring form, with two more kinds
//!   for work a client submitted itself under its lease (continued and launched-first ops);
//! - [`InProcess`], the record interface of this module ([`Arbiter`]) over one state: the
//!   reference the record-level tests drive (`runtime/tests/arbiter_in_process.rs`).
//!
//! Policies are written once against the arbiter's state ([`crate::policy::SchedState`], the
//! read-only view of an [`ArbiterState`]) and serve every driver. Clients are lease holders: a
//! state serves any number of them (in the daemon, one per process).

mod in_process;
pub mod state;

pub use in_process::InProcess;
pub use state::ArbiterState;

use vitamin_hal::{Dim3, KernelLaunch};

use crate::pool::NodeId;

/// A client of the arbiter (one virtual context). First-class: an arbiter serves many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct ClientId(pub u32);

/// The launch configuration a policy schedules by: the kernel (its name as a hash), grid, block,
/// dynamic shared memory and the occupancy the interposer learnt for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct LaunchKey {
    /// FNV-1a hash of the kernel's name ([`name_hash`]); the name stays client-side.
    pub name_hash: u64,
    /// Grid in blocks.
    pub grid: [u32; 3],
    /// Block in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
    /// Blocks one unit holds at once ([`KernelLaunch::resident_per_unit`]; 0: unknown).
    pub resident_per_unit: u32,
}

/// The 64-bit FNV-1a hash of a kernel name (stable across processes and builds).
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl LaunchKey {
    /// The key of a kernel launch.
    pub fn of(k: &KernelLaunch) -> LaunchKey {
        let d = |d: Dim3| [d.x, d.y, d.z];
        LaunchKey {
            name_hash: name_hash(k.function().name()),
            grid: d(k.grid()),
            block: d(k.block()),
            shared_mem_bytes: k.shared_mem_bytes(),
            resident_per_unit: k.resident_per_unit().unwrap_or(0),
        }
    }
    /// The key of a graph launch (no launch configuration of its own).
    pub fn graph() -> LaunchKey {
        LaunchKey { name_hash: 0, grid: [0; 3], block: [0; 3], shared_mem_bytes: 0, resident_per_unit: 0 }
    }
}

/// What kind of op a ready record stands for, and its placement constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct OpFlags {
    /// All blocks must be co-resident.
    pub cooperative: bool,
    /// A cluster launch.
    pub cluster: bool,
    /// A graph launch (bound as a whole to one node).
    pub graph: bool,
}

/// The scheduling class of a client's op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Class {
    /// Latency-critical, with this per-token target (ns); 0: best effort.
    pub tpot_target_ns: u64,
    /// The deadline of the client's next step (absolute ns); 0: none.
    pub deadline_ns: u64,
}

/// One ready op, up to the arbiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct ReadyRecord {
    /// Whose op.
    pub client: ClientId,
    /// The op id within the client.
    pub op: u64,
    /// Its launch configuration (zero for a graph launch).
    pub key: LaunchKey,
    /// Its kind and constraints.
    pub flags: OpFlags,
    /// The fewest units a node must have to run it unchanged (cooperative and cluster launches;
    /// the executor knows the occupancy); 0: any node. An op that not even the whole device runs
    /// is the executor's to fail, never the arbiter's to hold.
    pub min_units: u32,
    /// Ready since (ns, the executor's clock).
    pub ready_since_ns: u64,
    /// Deadline and class.
    pub class: Class,
    /// Lookahead: units an op the client expects next would want (0: no hint).
    pub lookahead_units: u32,
}

/// One decision, down to the executor: submit `op` of `client` on `lane` of `node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Binding {
    /// Whose op.
    pub client: ClientId,
    /// The op.
    pub op: u64,
    /// The pool node.
    pub node: NodeId,
    /// The lane of that node.
    pub lane: u32,
}

/// One finished binding, up to the arbiter: the op completed (or its submission was refused:
/// the lease accounting is returned either way, and a refused op is sent again as ready).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Completion {
    /// Whose op.
    pub client: ClientId,
    /// The op.
    pub op: u64,
    /// Where it ran.
    pub node: NodeId,
    /// Submitted at (ns).
    pub submitted_ns: u64,
    /// Completed at (ns).
    pub completed_ns: u64,
}

/// Most nodes a [`NodeSet`] holds.
pub const MAX_NODES: usize = 512;

/// A fixed-size set of pool nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct NodeSet([u64; MAX_NODES / 64]);

impl NodeSet {
    /// Adds `n` (ignored beyond [`MAX_NODES`]).
    pub fn insert(&mut self, n: NodeId) {
        let i = n.0 as usize;
        if i < MAX_NODES {
            self.0[i / 64] |= 1 << (i % 64);
        }
    }
    /// Whether `n` is in the set.
    pub fn contains(&self, n: NodeId) -> bool {
        let i = n.0 as usize;
        i < MAX_NODES && self.0[i / 64] & (1 << (i % 64)) != 0
    }
    /// How many nodes.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// What a client holds, readable without a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct LeaseView {
    /// Nodes the client leases with their gate open: continuation there stays local.
    pub held: NodeSet,
    /// Nodes the client leased whose gate is closed (finishing their outstanding work).
    pub draining: NodeSet,
}

/// Why an arbiter could not take a record or answer.
#[derive(Debug, thiserror::Error)]
pub enum ArbiterError {
    /// The client was never registered here.
    #[error("client {0:?} is not registered")]
    UnknownClient(ClientId),
    /// The arbiter cannot be reached or refused the session (the daemon: not running, gone,
    /// refused, or it disconnected this client); the executor then decides alone.
    #[error("arbiter unavailable: {0}")]
    Unavailable(String),
    /// The up ring stayed full for the arbiter's wait: nothing was lost, send again later.
    #[error("the arbiter is not taking records now (up ring full)")]
    Busy,
}

/// The arbiter: owns the lease state and runs the policy over plain records. Two
/// implementations: [`InProcess`] and the daemon's ([`crate::daemon::arbiter::DaemonArbiter`],
/// one session per client over the socket and shared-memory rings).
pub trait Arbiter: Send {
    /// Registers a client with its class.
    fn register(&mut self, class: Class) -> Result<ClientId, ArbiterError>;
    /// Ready ops, up.
    fn ready(&mut self, records: &[ReadyRecord]) -> Result<(), ArbiterError>;
    /// Finished bindings, up.
    fn completed(&mut self, completions: &[Completion]) -> Result<(), ArbiterError>;
    /// Runs the policy at `now_ns` (in-process; the daemon decides on its own clock and this
    /// collects what it decided) and appends its decisions to `out`.
    fn bindings(&mut self, now_ns: u64, out: &mut Vec<Binding>) -> Result<(), ArbiterError>;
    /// What `client` holds now.
    fn lease_view(&self, client: ClientId) -> Result<LeaseView, ArbiterError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_plain_fixed_size_data() {
        fn plain<T: Copy + Send + Sync + 'static>() -> usize {
            std::mem::size_of::<T>()
        }
        assert_eq!(plain::<LaunchKey>(), 40);
        assert!(plain::<ReadyRecord>() <= 128, "a ready record fits two cache lines");
        assert!(plain::<Binding>() <= 32 && plain::<Completion>() <= 40);
        assert_eq!(plain::<LeaseView>(), 128);
        // The trait is object-safe: a daemon-backed arbiter can stand in at run time.
        let _: Option<Box<dyn Arbiter>> = None;
    }

    #[test]
    fn names_hash_stably_and_sets_hold_what_was_added() {
        assert_eq!(name_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(name_hash("a"), 0xaf63_dc4c_8601_ec8c, "the published FNV-1a value");
        assert_ne!(name_hash("gemm"), name_hash("gemv"));
        let mut s = NodeSet::default();
        assert!(s.is_empty());
        for n in [0, 63, 64, 511, 512] {
            s.insert(NodeId(n));
        }
        assert!(s.contains(NodeId(63)) && s.contains(NodeId(511)) && !s.contains(NodeId(512)));
        assert_eq!(s.len(), 4);
    }
}
