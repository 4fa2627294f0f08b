//! The fixed-size records of the rings and their validating decoders.
//!
//! ## Records
//! Both are `#[repr(C)]`, made of little-endian integers, and travel as 64-bit words: word `i`
//! holds bytes `8i..8i+8` of the struct on a little-endian host, so a C client could write the
//! struct itself. [`PROTOCOL_VERSION`] is checked at hello and in the region header; a change of
//! any record layout or meaning bumps it.
//!
//! [`UpRecord`] (client -> daemon, 72 bytes, [`UP_WORDS`] words):
//! ```text
//! off size field        Ready                 Completion      Hint              Continued
//!   0  1   kind         1                     2               3                 4
//!   1  1   flags        COOPERATIVE|CLUSTER|GRAPH NOT_RUN|0       0                 0 | GRAPH
//!   2  2   aux          min units             node            0                 node
//!   4  4   check        checksum of the record with check = 0
//!   8  8   op           op id (client's)      op id           anticipated op    op id
//!  16  8   kernel       kernel name hash      0               kernel name hash  0
//!  24 12   grid         grid x,y,z            0               grid              0
//!  36 12   block        block x,y,z           0               block             0
//!  48  4   smem         dynamic shared bytes  0               0                 0
//!  52  2   lane         0                     0               0                 lane
//!  54  2   count        blocks per unit       0               units wanted      0
//!  56  8   time_ns      ready since           completed at    expected ready at submitted at
//!  64  8   deadline_ns  deadline (0: none)    0               deadline          0
//! ```
//! A ready record's `count` is the launch's occupancy, the blocks of its function and shape one
//! unit holds at once, as the client's driver answered it (0: unknown); the policy's size model
//! counts waves with it. A completion flagged `NOT_RUN` returns a binding the client's node refused
//! (the launch cannot run unchanged there: a cluster shape that node does not place); the op comes
//! again as a new ready record (a cluster launch with the same floor: the daemon keeps it off that
//! node's units; any other with a higher one). `Launched` (kind 5) has `Continued`'s fields: a fresh op the client launched first on a node its
//! lease view showed as its own and open, with no op of its outstanding there. The lease view's
//! entries are [`LeaseState`] values (`Foreign`: active for another client).
//! [`DownRecord`] (daemon -> client, 32 bytes, [`DOWN_WORDS`] words):
//! ```text
//!   0  1   kind         1 Binding
//!   1  1   flags        0
//!   2  2   node         pool node (Binding)
//!   4  4   check        checksum
//!   8  8   op           op id
//!  16  2   lane         lane within the node (Binding)
//!  18  2   (zero)
//!  20  4   epoch        lease-view epoch that includes this binding's lease
//!  24  8   time_ns      bound at
//! ```
//! Times are `CLOCK_MONOTONIC` nanoseconds (one clock for every process of the host).
//!
//! ## Validation
//! [`decode_up`] checks one record alone (kind, flags, checksum: a torn or scribbled record
//! fails it, ranges against [`Limits`]); [`Ledger`] checks it against the client's history (a
//! ready op id must be new, a completion must name an outstanding op on the node it was bound
//! to, a continuation must follow an outstanding op on the same lane, bounded queues). Either
//! failure is a [`WireError`] value, never a panic: the daemon disconnects that client alone.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap as HashMap;

/// Protocol version: hello, region header and record layouts.
pub const PROTOCOL_VERSION: u32 = 6;
/// Words per [`UpRecord`].
pub const UP_WORDS: usize = 9;
/// Words per [`DownRecord`].
pub const DOWN_WORDS: usize = 4;

/// Ready-record flag: all blocks must be co-resident (a cooperative launch, or a kernel that spins
/// on peers: [`vitamin_hal::LaunchAttributes::needs_coresidency`]).
pub const FLAG_COOPERATIVE: u8 = 1;
/// Ready-record flag: a thread-block-cluster launch.
pub const FLAG_CLUSTER: u8 = 2;
/// Ready-record flag: a graph launch (bound as a whole to one node).
pub const FLAG_GRAPH: u8 = 4;
const KNOWN_FLAGS: u8 = FLAG_COOPERATIVE | FLAG_CLUSTER | FLAG_GRAPH;
/// Completion-record flag: the op did not run; the bound node refused it (see the module docs).
pub const FLAG_NOT_RUN: u8 = 1;

/// Up-record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum UpKind {
    /// An op ready to be bound.
    Ready = 1,
    /// A bound or continued op completed.
    Completion = 2,
    /// A lookahead hint: an op expected to become ready.
    Hint = 3,
    /// An op the client submitted itself on a lane of a node it holds (lane continuation).
    Continued = 4,
    /// A fresh op the client submitted itself on a node its lease view shows as its own and open
    /// (launch-first: no op of its needs to be outstanding there).
    Launched = 5,
}

/// Down-record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DownKind {
    /// Submit the op on (node, lane).
    Binding = 1,
}

/// The client -> daemon record. See the module documentation for each field per kind.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpRecord {
    /// [`UpKind`].
    pub kind: u8,
    /// `FLAG_*` (ready records).
    pub flags: u8,
    /// Ready/hint: minimum node size in units; completion/continued: node.
    pub aux: u16,
    /// Checksum ([`checksum`]) of the record with this field zero.
    pub check: u32,
    /// Op id.
    pub op: u64,
    /// Kernel name hash ([`kernel_hash`]).
    pub kernel: u64,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub smem: u32,
    /// Continued: lane.
    pub lane: u16,
    /// Ready: blocks one unit holds at once (0: unknown); hint: units wanted.
    pub count: u16,
    /// Ready since / completed at / expected ready at / submitted at, ns.
    pub time_ns: u64,
    /// Deadline, ns (0: none).
    pub deadline_ns: u64,
}

/// The daemon -> client record.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DownRecord {
    /// [`DownKind`].
    pub kind: u8,
    /// Zero.
    pub flags: u8,
    /// Node.
    pub node: u16,
    /// Checksum.
    pub check: u32,
    /// Op id.
    pub op: u64,
    /// Lane.
    pub lane: u16,
    /// Zero.
    pub reserved: u16,
    /// Lease-view epoch.
    pub epoch: u32,
    /// Bound at, ns.
    pub time_ns: u64,
}

const _: () = assert!(std::mem::size_of::<UpRecord>() == UP_WORDS * 8);
const _: () = assert!(std::mem::size_of::<DownRecord>() == DOWN_WORDS * 8);

/// FNV-1a 64 of a kernel name: the `kernel` field (names are the same in every process,
/// handles are not).
pub fn kernel_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Checksum of a record's words, with the `check` field (high half of word 0) taken as zero.
pub fn checksum(words: &[u64]) -> u32 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for (i, &w) in words.iter().enumerate() {
        let w = if i == 0 { w & 0xffff_ffff } else { w };
        h = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    (h ^ (h >> 32)) as u32
}

fn lo(w: u64) -> u32 {
    w as u32
}
fn hi(w: u64) -> u32 {
    (w >> 32) as u32
}
fn pair(a: u32, b: u32) -> u64 {
    u64::from(a) | u64::from(b) << 32
}

impl UpRecord {
    /// The record as ring words, with its checksum filled in.
    pub fn to_words(&self) -> [u64; UP_WORDS] {
        let mut w = [
            u64::from(self.kind) | u64::from(self.flags) << 8 | u64::from(self.aux) << 16,
            self.op,
            self.kernel,
            pair(self.grid[0], self.grid[1]),
            pair(self.grid[2], self.block[0]),
            pair(self.block[1], self.block[2]),
            u64::from(self.smem) | u64::from(self.lane) << 32 | u64::from(self.count) << 48,
            self.time_ns,
            self.deadline_ns,
        ];
        w[0] |= u64::from(checksum(&w)) << 32;
        w
    }
    /// The record in ring words, as written (no validation).
    pub fn from_words(w: &[u64; UP_WORDS]) -> UpRecord {
        UpRecord {
            kind: w[0] as u8,
            flags: (w[0] >> 8) as u8,
            aux: (w[0] >> 16) as u16,
            check: hi(w[0]),
            op: w[1],
            kernel: w[2],
            grid: [lo(w[3]), hi(w[3]), lo(w[4])],
            block: [hi(w[4]), lo(w[5]), hi(w[5])],
            smem: lo(w[6]),
            lane: (w[6] >> 32) as u16,
            count: (w[6] >> 48) as u16,
            time_ns: w[7],
            deadline_ns: w[8],
        }
    }
}

impl DownRecord {
    /// The record as ring words, with its checksum filled in.
    pub fn to_words(&self) -> [u64; DOWN_WORDS] {
        let mut w = [
            u64::from(self.kind) | u64::from(self.flags) << 8 | u64::from(self.node) << 16,
            self.op,
            u64::from(self.lane) | u64::from(self.reserved) << 16 | u64::from(self.epoch) << 32,
            self.time_ns,
        ];
        w[0] |= u64::from(checksum(&w)) << 32;
        w
    }
    /// The record in ring words, as written (no validation).
    pub fn from_words(w: &[u64; DOWN_WORDS]) -> DownRecord {
        DownRecord {
            kind: w[0] as u8,
            flags: (w[0] >> 8) as u8,
            node: (w[0] >> 16) as u16,
            check: hi(w[0]),
            op: w[1],
            lane: w[2] as u16,
            reserved: (w[2] >> 16) as u16,
            epoch: hi(w[2]),
            time_ns: w[3],
        }
    }
}

/// Why the daemon disconnected a client (stored in the region header before the socket is
/// closed, so the client can say why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Disconnect {
    /// A record failed validation.
    Protocol = 1,
    /// Too many ready or outstanding ops.
    Flood = 2,
    /// The daemon is shutting down.
    Shutdown = 3,
    /// A ring index was corrupted.
    Corrupt = 4,
    /// It left bindings untaken for longer than the stall timeout.
    Stalled = 5,
}

/// The per-node lease state in a client's lease view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum LeaseState {
    /// Not held by this client.
    None = 0,
    /// Leased to this client, gate open: it may continue on it locally.
    Open = 1,
    /// Its gate is closed: no new work; it is released when the client's work there completes.
    Draining = 2,
    /// Reserved for this client (an anticipated op).
    Reserved = 3,
    /// Active for another client (leased, draining or reserved): its units are not free. With
    /// this the client sees what is free without a round trip, and its policy can refuse to
    /// continue on a lease when a clearly wider free node would serve the op better.
    Foreign = 4,
}

impl LeaseState {
    /// Decodes a view entry.
    pub fn from_u32(v: u32) -> Result<LeaseState, WireError> {
        Ok(match v {
            0 => LeaseState::None,
            1 => LeaseState::Open,
            2 => LeaseState::Draining,
            3 => LeaseState::Reserved,
            4 => LeaseState::Foreign,
            v => return Err(WireError::BadLeaseState(v)),
        })
    }
}

/// What a client may name: checked on every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Pool nodes of the client's device.
    pub nodes: u16,
    /// Lanes per node.
    pub lanes: u16,
    /// Units of the device.
    pub units: u16,
    /// Most ops a client may have ready (not yet bound) at once.
    pub max_ready: u32,
    /// Most ops a client may have bound or continued and not completed.
    pub max_outstanding: u32,
}

/// A record that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Checksum mismatch: torn or scribbled.
    #[error("record checksum {got:#010x} != {want:#010x}: torn or corrupted record")]
    Checksum {
        /// In the record.
        got: u32,
        /// Computed.
        want: u32,
    },
    /// Unknown kind.
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    /// Flags unknown or not allowed for the kind.
    #[error("flags {flags:#x} not valid for a {kind:?} record")]
    BadFlags {
        /// Kind.
        kind: UpKind,
        /// Flags.
        flags: u8,
    },
    /// A node index out of range.
    #[error("node {node} out of range (the pool has {nodes})")]
    NodeRange {
        /// Node.
        node: u16,
        /// Nodes.
        nodes: u16,
    },
    /// A lane out of range.
    #[error("lane {lane} out of range ({lanes} lanes)")]
    LaneRange {
        /// Lane.
        lane: u16,
        /// Lanes.
        lanes: u16,
    },
    /// A unit count above the device's.
    #[error("{what} {got} exceeds the device's {units} units")]
    UnitRange {
        /// Field.
        what: &'static str,
        /// Value.
        got: u16,
        /// Device units.
        units: u16,
    },
    /// A zero grid or block extent.
    #[error("grid {grid:?} / block {block:?} has a zero extent")]
    EmptyLaunch {
        /// Grid.
        grid: [u32; 3],
        /// Block.
        block: [u32; 3],
    },
    /// Fields that must be zero for this kind are not.
    #[error("{kind:?} record has non-zero unused fields")]
    Unused {
        /// Kind.
        kind: UpKind,
    },
    /// A ready (or continued) op id that is already ready or outstanding.
    #[error("op {0} is already ready or outstanding")]
    DuplicateOp(u64),
    /// A completion of an op that is not outstanding.
    #[error("completion of op {0}, which is not outstanding")]
    UnknownOp(u64),
    /// A completion naming another node than the op's.
    #[error("op {op} completed on node {got} but was bound to node {want}")]
    WrongNode {
        /// Op.
        op: u64,
        /// Named.
        got: u16,
        /// Bound.
        want: u16,
    },
    /// A continuation on a lane where the client has nothing outstanding.
    #[error("op {op} continued on node {node} lane {lane}, where the client has no outstanding op")]
    NotContinuable {
        /// Op.
        op: u64,
        /// Node.
        node: u16,
        /// Lane.
        lane: u16,
    },
    /// Too many ready ops.
    #[error("more than {0} ready ops: flood")]
    TooManyReady(u32),
    /// Too many outstanding ops.
    #[error("more than {0} outstanding ops: flood")]
    TooManyOutstanding(u32),
    /// A lease-view entry with an unknown value.
    #[error("lease view entry {0} is not a lease state")]
    BadLeaseState(u32),
    /// A down record that failed client-side validation.
    #[error("bad down record: {0}")]
    BadDown(String),
}

/// A decoded ready op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyRecord {
    /// Op id.
    pub op: u64,
    /// `FLAG_*`.
    pub flags: u8,
    /// Smallest node (units) the launch runs on unchanged (0: any).
    pub min_units: u16,
    /// Kernel name hash.
    pub kernel: u64,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub smem: u32,
    /// Blocks one unit holds at once (0: unknown).
    pub resident_per_unit: u16,
    /// Ready since, ns.
    pub ready_since_ns: u64,
    /// Deadline, ns.
    pub deadline_ns: Option<u64>,
}

/// A decoded lookahead hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintRecord {
    /// The anticipated op.
    pub op: u64,
    /// Kernel name hash (0: unknown).
    pub kernel: u64,
    /// Grid (zeros: unknown).
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Units wanted (0: unknown).
    pub demand_units: u16,
    /// Expected ready at, ns (0: unknown).
    pub ready_at_ns: u64,
    /// Deadline, ns.
    pub deadline_ns: Option<u64>,
}

/// One up record, decoded and range-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Up {
    /// A ready op.
    Ready(ReadyRecord),
    /// A completion.
    Completion {
        /// Op.
        op: u64,
        /// Node it ran on.
        node: u16,
        /// Completed at, ns.
        completed_ns: u64,
        /// Flag `NOT_RUN`: the node refused the launch, which comes again as a new ready record.
        not_run: bool,
    },
    /// A lookahead hint.
    Hint(HintRecord),
    /// A locally continued op.
    Continued {
        /// Op.
        op: u64,
        /// Node.
        node: u16,
        /// Lane.
        lane: u16,
        /// Submitted at, ns.
        submitted_ns: u64,
        /// A CUDA graph launch (flag `GRAPH`): its run time is the policy's feedback.
        graph: bool,
    },
    /// A fresh op launched first on a node the client's view showed as its own and open.
    Launched {
        /// Op.
        op: u64,
        /// Node.
        node: u16,
        /// Lane.
        lane: u16,
        /// Submitted at, ns.
        submitted_ns: u64,
        /// A CUDA graph launch (flag `GRAPH`): its run time is the policy's feedback.
        graph: bool,
    },
}

impl Up {
    /// The record that decodes to this value (for clients and tests).
    pub fn encode(&self) -> UpRecord {
        match *self {
            Up::Ready(r) => UpRecord {
                kind: UpKind::Ready as u8,
                flags: r.flags,
                aux: r.min_units,
                op: r.op,
                kernel: r.kernel,
                grid: r.grid,
                block: r.block,
                smem: r.smem,
                count: r.resident_per_unit,
                time_ns: r.ready_since_ns,
                deadline_ns: r.deadline_ns.unwrap_or(0),
                ..UpRecord::default()
            },
            Up::Completion { op, node, completed_ns, not_run } => UpRecord {
                kind: UpKind::Completion as u8,
                flags: if not_run { FLAG_NOT_RUN } else { 0 },
                aux: node,
                op,
                time_ns: completed_ns,
                ..UpRecord::default()
            },
            Up::Hint(h) => UpRecord {
                kind: UpKind::Hint as u8,
                op: h.op,
                kernel: h.kernel,
                grid: h.grid,
                block: h.block,
                count: h.demand_units,
                time_ns: h.ready_at_ns,
                deadline_ns: h.deadline_ns.unwrap_or(0),
                ..UpRecord::default()
            },
            Up::Continued { op, node, lane, submitted_ns, graph } => UpRecord {
                kind: UpKind::Continued as u8,
                flags: if graph { FLAG_GRAPH } else { 0 },
                aux: node,
                op,
                lane,
                time_ns: submitted_ns,
                ..UpRecord::default()
            },
            Up::Launched { op, node, lane, submitted_ns, graph } => UpRecord {
                kind: UpKind::Launched as u8,
                flags: if graph { FLAG_GRAPH } else { 0 },
                aux: node,
                op,
                lane,
                time_ns: submitted_ns,
                ..UpRecord::default()
            },
        }
    }
}

fn node_ok(node: u16, lim: &Limits) -> Result<u16, WireError> {
    if node < lim.nodes {
        Ok(node)
    } else {
        Err(WireError::NodeRange { node, nodes: lim.nodes })
    }
}

/// Decodes and range-checks one up record alone (see the module docs).
pub fn decode_up(words: &[u64; UP_WORDS], lim: &Limits) -> Result<Up, WireError> {
    let r = UpRecord::from_words(words);
    let want = checksum(words);
    if r.check != want {
        return Err(WireError::Checksum { got: r.check, want });
    }
    let kind = match r.kind {
        1 => UpKind::Ready,
        2 => UpKind::Completion,
        3 => UpKind::Hint,
        4 => UpKind::Continued,
        5 => UpKind::Launched,
        k => return Err(WireError::UnknownKind(k)),
    };
    let flags_ok = match kind {
        UpKind::Ready => r.flags & !KNOWN_FLAGS == 0,
        UpKind::Continued | UpKind::Launched => r.flags & !FLAG_GRAPH == 0,
        UpKind::Completion => r.flags & !FLAG_NOT_RUN == 0,
        UpKind::Hint => r.flags == 0,
    };
    if !flags_ok {
        return Err(WireError::BadFlags { kind, flags: r.flags });
    }
    let unused = |zero: bool| if zero { Ok(()) } else { Err(WireError::Unused { kind }) };
    match kind {
        UpKind::Ready => {
            unused(r.lane == 0)?;
            if r.aux > lim.units {
                return Err(WireError::UnitRange { what: "min units", got: r.aux, units: lim.units });
            }
            if r.flags & FLAG_GRAPH == 0 && (r.grid.contains(&0) || r.block.contains(&0)) {
                return Err(WireError::EmptyLaunch { grid: r.grid, block: r.block });
            }
            Ok(Up::Ready(ReadyRecord {
                op: r.op,
                flags: r.flags,
                min_units: r.aux,
                kernel: r.kernel,
                grid: r.grid,
                block: r.block,
                smem: r.smem,
                resident_per_unit: r.count,
                ready_since_ns: r.time_ns,
                deadline_ns: (r.deadline_ns != 0).then_some(r.deadline_ns),
            }))
        }
        UpKind::Completion => {
            unused(
                r.kernel == 0
                    && r.grid == [0; 3]
                    && r.block == [0; 3]
                    && r.smem == 0
                    && r.lane == 0
                    && r.count == 0
                    && r.deadline_ns == 0,
            )?;
            Ok(Up::Completion {
                op: r.op,
                node: node_ok(r.aux, lim)?,
                completed_ns: r.time_ns,
                not_run: r.flags & FLAG_NOT_RUN != 0,
            })
        }
        UpKind::Hint => {
            unused(r.aux == 0 && r.smem == 0 && r.lane == 0)?;
            if r.count > lim.units {
                return Err(WireError::UnitRange { what: "demand", got: r.count, units: lim.units });
            }
            Ok(Up::Hint(HintRecord {
                op: r.op,
                kernel: r.kernel,
                grid: r.grid,
                block: r.block,
                demand_units: r.count,
                ready_at_ns: r.time_ns,
                deadline_ns: (r.deadline_ns != 0).then_some(r.deadline_ns),
            }))
        }
        UpKind::Continued | UpKind::Launched => {
            unused(
                r.kernel == 0
                    && r.grid == [0; 3]
                    && r.block == [0; 3]
                    && r.smem == 0
                    && r.count == 0
                    && r.deadline_ns == 0,
            )?;
            let node = node_ok(r.aux, lim)?;
            if r.lane >= lim.lanes {
                return Err(WireError::LaneRange { lane: r.lane, lanes: lim.lanes });
            }
            let graph = r.flags & FLAG_GRAPH != 0;
            Ok(if kind == UpKind::Continued {
                Up::Continued { op: r.op, node, lane: r.lane, submitted_ns: r.time_ns, graph }
            } else {
                Up::Launched { op: r.op, node, lane: r.lane, submitted_ns: r.time_ns, graph }
            })
        }
    }
}

/// Decodes and checks a down record on the client side (`nodes`, `lanes` from the welcome).
pub fn decode_down(words: &[u64; DOWN_WORDS], nodes: u16, lanes: u16) -> Result<DownRecord, WireError> {
    let r = DownRecord::from_words(words);
    let want = checksum(words);
    if r.check != want {
        return Err(WireError::Checksum { got: r.check, want });
    }
    match r.kind {
        1 if r.node < nodes && r.lane < lanes && r.flags == 0 && r.reserved == 0 => Ok(r),
        _ => Err(WireError::BadDown(format!("{r:?}"))),
    }
}

/// Where an op of a client stands, in the daemon's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    /// Ready, waiting for a binding.
    Ready,
    /// Bound or continued on (node, lane), not yet completed.
    Outstanding {
        /// Node.
        node: u16,
        /// Lane.
        lane: u16,
    },
}

/// The stateful half of validation: one client's ops as the daemon knows them.
#[derive(Debug, Clone)]
pub struct Ledger {
    limits: Limits,
    ops: HashMap<u64, OpState>,
    ready: u32,
    outstanding: u32,
    /// Outstanding ops per (node, lane).
    per_lane: HashMap<(u16, u16), u32>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(limits: Limits) -> Self {
        Ledger { limits, ops: HashMap::default(), ready: 0, outstanding: 0, per_lane: HashMap::default() }
    }
    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// Ready ops.
    pub fn ready(&self) -> u32 {
        self.ready
    }
    /// Outstanding ops.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }
    /// An op's state.
    pub fn state(&self, op: u64) -> Option<OpState> {
        self.ops.get(&op).copied()
    }
    /// Outstanding ops on (node, lane).
    pub fn on_lane(&self, node: u16, lane: u16) -> u32 {
        self.per_lane.get(&(node, lane)).copied().unwrap_or(0)
    }

    /// Decodes `words` and applies it to the ledger: the whole validating decoder.
    pub fn accept(&mut self, words: &[u64; UP_WORDS]) -> Result<Up, WireError> {
        let up = decode_up(words, &self.limits)?;
        match up {
            Up::Ready(r) => {
                if self.ready >= self.limits.max_ready {
                    return Err(WireError::TooManyReady(self.limits.max_ready));
                }
                match self.ops.entry(r.op) {
                    Entry::Occupied(_) => return Err(WireError::DuplicateOp(r.op)),
                    Entry::Vacant(v) => {
                        v.insert(OpState::Ready);
                    }
                }
                self.ready += 1;
            }
            Up::Completion { op, node, .. } => match self.ops.get(&op) {
                Some(&OpState::Outstanding { node: want, lane }) => {
                    if want != node {
                        return Err(WireError::WrongNode { op, got: node, want });
                    }
                    self.ops.remove(&op);
                    self.outstanding -= 1;
                    self.lane_sub(node, lane);
                }
                _ => return Err(WireError::UnknownOp(op)),
            },
            Up::Hint(_) => {}
            Up::Continued { op, node, lane, .. } | Up::Launched { op, node, lane, .. } => {
                if self.ops.contains_key(&op) {
                    return Err(WireError::DuplicateOp(op));
                }
                if matches!(up, Up::Continued { .. }) && self.on_lane(node, lane) == 0 {
                    return Err(WireError::NotContinuable { op, node, lane });
                }
                if self.outstanding >= self.limits.max_outstanding {
                    return Err(WireError::TooManyOutstanding(self.limits.max_outstanding));
                }
                self.ops.insert(op, OpState::Outstanding { node, lane });
                self.outstanding += 1;
                *self.per_lane.entry((node, lane)).or_insert(0) += 1;
            }
        }
        Ok(up)
    }

    /// The daemon bound ready op `op` to (node, lane). Returns false (and changes nothing) if
    /// the op is not ready, the place is out of range, or the outstanding limit is reached.
    pub fn bind(&mut self, op: u64, node: u16, lane: u16) -> bool {
        if node >= self.limits.nodes || lane >= self.limits.lanes || self.outstanding >= self.limits.max_outstanding {
            return false;
        }
        match self.ops.get_mut(&op) {
            Some(s @ OpState::Ready) => {
                *s = OpState::Outstanding { node, lane };
                self.ready -= 1;
                self.outstanding += 1;
                *self.per_lane.entry((node, lane)).or_insert(0) += 1;
                true
            }
            _ => false,
        }
    }

    /// The daemon dropped ready op `op` (its client is departing): forgets it.
    pub fn refuse(&mut self, op: u64) -> bool {
        if self.ops.get(&op) == Some(&OpState::Ready) {
            self.ops.remove(&op);
            self.ready -= 1;
            true
        } else {
            false
        }
    }

    /// Adopts an op that a re-registering client reports outstanding on (node, lane).
    pub fn adopt(&mut self, op: u64, node: u16, lane: u16) -> Result<(), WireError> {
        node_ok(node, &self.limits)?;
        if lane >= self.limits.lanes {
            return Err(WireError::LaneRange { lane, lanes: self.limits.lanes });
        }
        if self.ops.contains_key(&op) {
            return Err(WireError::DuplicateOp(op));
        }
        if self.outstanding >= self.limits.max_outstanding {
            return Err(WireError::TooManyOutstanding(self.limits.max_outstanding));
        }
        self.ops.insert(op, OpState::Outstanding { node, lane });
        self.outstanding += 1;
        *self.per_lane.entry((node, lane)).or_insert(0) += 1;
        Ok(())
    }

    fn lane_sub(&mut self, node: u16, lane: u16) {
        if let Entry::Occupied(mut e) = self.per_lane.entry((node, lane)) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const LIM: Limits = Limits { nodes: 59, lanes: 4, units: 132, max_ready: 64, max_outstanding: 64 };

    fn ready(op: u64) -> Up {
        Up::Ready(ReadyRecord {
            op,
            flags: 0,
            min_units: 0,
            kernel: kernel_hash("k"),
            grid: [8, 1, 1],
            block: [128, 1, 1],
            smem: 0,
            resident_per_unit: 6,
            ready_since_ns: 5,
            deadline_ns: None,
        })
    }

    #[test]
    fn records_round_trip_through_words() {
        for up in [
            ready(1),
            Up::Completion { op: 2, node: 58, completed_ns: 9, not_run: false },
            Up::Continued { op: 3, node: 0, lane: 3, submitted_ns: 1, graph: false },
            Up::Hint(HintRecord {
                op: 4,
                kernel: 1,
                grid: [1; 3],
                block: [1; 3],
                demand_units: 132,
                ready_at_ns: 7,
                deadline_ns: Some(8),
            }),
        ] {
            let w = up.encode().to_words();
            assert_eq!(decode_up(&w, &LIM), Ok(up));
        }
        let d = DownRecord { kind: 1, node: 58, op: 9, lane: 3, epoch: 7, time_ns: 11, ..Default::default() };
        assert_eq!(decode_down(&d.to_words(), 59, 4).map(|r| (r.node, r.op, r.lane, r.epoch)), Ok((58, 9, 3, 7)));
        assert!(decode_down(&d.to_words(), 58, 4).is_err(), "node out of range on the client side");
    }

    #[test]
    fn the_struct_bytes_are_the_words() {
        let r = ready(0x0102_0304).encode();
        let w = r.to_words();
        let r2 = UpRecord { check: (w[0] >> 32) as u32, ..r };
        // repr(C) little-endian layout == word packing: compare field offsets through the words.
        assert_eq!(UpRecord::from_words(&w), r2);
        assert_eq!(std::mem::offset_of!(UpRecord, op), 8);
        assert_eq!(std::mem::offset_of!(UpRecord, grid), 24);
        assert_eq!(std::mem::offset_of!(UpRecord, smem), 48);
        assert_eq!(std::mem::offset_of!(UpRecord, count), 54);
        assert_eq!(r.count, 6, "a ready record's occupancy travels in `count`");
        assert_eq!(std::mem::offset_of!(UpRecord, time_ns), 56);
        assert_eq!(std::mem::offset_of!(DownRecord, epoch), 20);
    }

    #[test]
    fn torn_and_out_of_range_records_are_errors() {
        let mut w = ready(1).encode().to_words();
        w[3] ^= 1 << 40;
        assert!(matches!(decode_up(&w, &LIM), Err(WireError::Checksum { .. })));
        let w = Up::Completion { op: 1, node: 59, completed_ns: 0, not_run: false }.encode().to_words();
        assert_eq!(decode_up(&w, &LIM), Err(WireError::NodeRange { node: 59, nodes: 59 }));
        let w = Up::Continued { op: 1, node: 1, lane: 4, submitted_ns: 0, graph: false }.encode().to_words();
        assert_eq!(decode_up(&w, &LIM), Err(WireError::LaneRange { lane: 4, lanes: 4 }));
        let mut r = ready(1).encode();
        r.flags = 8;
        assert!(matches!(decode_up(&r.to_words(), &LIM), Err(WireError::BadFlags { .. })));
        // A completion carries NOT_RUN and nothing else.
        let mut c = Up::Completion { op: 1, node: 3, completed_ns: 0, not_run: true }.encode();
        assert_eq!(c.flags, FLAG_NOT_RUN);
        assert_eq!(
            decode_up(&c.to_words(), &LIM),
            Ok(Up::Completion { op: 1, node: 3, completed_ns: 0, not_run: true })
        );
        c.flags = FLAG_NOT_RUN | 2;
        assert!(matches!(decode_up(&c.to_words(), &LIM), Err(WireError::BadFlags { .. })));
    }

    #[test]
    fn ledger_tracks_ops() {
        let mut l = Ledger::new(LIM);
        let w = |u: Up| u.encode().to_words();
        l.accept(&w(ready(1))).unwrap();
        assert_eq!(l.accept(&w(ready(1))), Err(WireError::DuplicateOp(1)));
        assert_eq!(
            l.accept(&w(Up::Completion { op: 1, node: 0, completed_ns: 0, not_run: false })),
            Err(WireError::UnknownOp(1))
        );
        assert!(l.bind(1, 5, 2));
        assert!(!l.bind(1, 5, 2), "binding twice");
        let cont = Up::Continued { op: 2, node: 5, lane: 1, submitted_ns: 0, graph: false };
        assert!(matches!(l.accept(&w(cont)), Err(WireError::NotContinuable { .. })));
        l.accept(&w(Up::Continued { op: 2, node: 5, lane: 2, submitted_ns: 0, graph: false })).unwrap();
        assert_eq!(
            l.accept(&w(Up::Completion { op: 1, node: 4, completed_ns: 0, not_run: false })),
            Err(WireError::WrongNode { op: 1, got: 4, want: 5 })
        );
        l.accept(&w(Up::Completion { op: 1, node: 5, completed_ns: 0, not_run: false })).unwrap();
        l.accept(&w(Up::Completion { op: 2, node: 5, completed_ns: 0, not_run: false })).unwrap();
        assert_eq!((l.ready(), l.outstanding(), l.on_lane(5, 2)), (0, 0, 0));
        for op in 0..64 {
            l.accept(&w(ready(100 + op))).unwrap();
        }
        assert_eq!(l.accept(&w(ready(1000))), Err(WireError::TooManyReady(64)));
    }
}
