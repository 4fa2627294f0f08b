//! The decision loop's state: per device an [`ArbiterState`] (the pool's lease state, the
//! policy and what it reads: the same state and steps the in-process dispatcher uses), per
//! client its rings, ledger and leases. No sockets and no threads here ([`super::server`] drives
//! it), so it is tested directly.
//!
//! ## One turn ([`Decider::turn`])
//! 1. **Intake**, per client, at most `batch` records (so a flooding client cannot starve the
//!    others): each is validated by the client's [`Ledger`]; ready ops join the device queue,
//!    completions and continuations update the pool, hints go to the policy's Prepare
//!    ([`ArbiterState::prepare`]). A failure disconnects the client
//!    ([`TurnOutcome::disconnect`]) and frees its leases.
//! 2. **Round**, per device, with the arbiter's steps: release idle leases (lingering ones
//!    kept), maintenance ([`ArbiterState::maintain`]), then Pick/Select over the ready ops of
//!    every client ([`ArbiterState::propose`]), then graph launches oldest first. A proposal is
//!    admitted ([`ArbiterState::admit`]) only if the node is eligible for the client and at
//!    least the op's minimum size, and only while the client's down ring has room; a client
//!    whose down ring is full (stalled) is simply skipped.
//! 3. **Publish**: each client's lease view (when it changed), then its bindings (tagged with
//!    the view's epoch), then one wake-up if it sleeps.
//!
//! ## Cross-client policies
//! The shipped policies run unchanged: each client is one lease holder, so Throughput-Oriented's
//! age-aware round robin across holders is round robin across processes, Static gives each
//! client a fixed cut in registration order (re-cut when clients come or go), Exclusive
//! time-slices the whole device, Chaos picks random nodes, and TPOT-First sees the clients' classes and deadlines. The policies see a
//! launch as a [`KernelLaunch`] built from the record (kernel name `#<hash>`, grid, block,
//! shared memory, cooperative/cluster attributes, no arguments): profiles are keyed by that name.
//!
//! ## Lease accounting of continued ops
//! A client may submit an op itself on a lane where it has an op outstanding (lane
//! continuation) and reports it with a `Continued` record *before* that predecessor's
//! completion (one ring, one producer: order is kept). The node is then leased or draining by
//! that client. If it is draining, [`Pool::begin_submit`] refuses, so the op is counted in
//! `late[node]` and the next completion on that node consumes it first: the pool's count reaches
//! zero only after every op physically there completed.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Instant;

use rustc_hash::FxHashMap as HashMap;
use vitamin_hal::{Dim3, FunctionKind, FunctionRef, GraphLaunch, KernelArgs, KernelLaunch, LaunchAttributes, Topology};

use super::control::{ClientStatus, Counters, DeviceStatus, Hello, StatusReport, Welcome};
use super::ring::{Consumer, Layout, Producer, SharedRegion};
use super::transport::PeerCred;
use super::wire::{
    self, DownKind, DownRecord, LeaseState, Ledger, Limits, Up, WireError, DOWN_WORDS, FLAG_CLUSTER, FLAG_COOPERATIVE,
    FLAG_GRAPH, PROTOCOL_VERSION, UP_WORDS,
};
use crate::arbiter::state::{ArbiterState, Proposal};
use crate::dispatch::{Span, Timeline};
use crate::policy::{
    AnyPolicy, ClientClass, ClientInfo, Completion, Hint, Policy, PolicyKind, ReadyGraphView, ReadyOpView,
};
use crate::pool::{HolderId, NodeId, NodeState, Pool};
use crate::profile::Profiles;
use crate::vctx::OpId;

/// Tuning of the decision loop.
#[derive(Debug, Clone)]
pub struct DecideConfig {
    /// Policy.
    pub policy: PolicyKind,
    /// Seed (Chaos).
    pub seed: u64,
    /// Up ring slots per client.
    pub up_capacity: u32,
    /// Down ring slots per client.
    pub down_capacity: u32,
    /// Most ready ops per client.
    pub max_ready: u32,
    /// Most outstanding ops per client.
    pub max_outstanding: u32,
    /// Most clients.
    pub max_clients: usize,
    /// Most lanes per node a client may declare.
    pub max_lanes: u16,
    /// Records read per client per turn.
    pub batch: u32,
    /// A fixed topology for device 0 (otherwise the first client's report fixes it).
    pub topology: Option<Topology>,
    /// A departing client (hung up, still alive) keeps its leases at most this long, ns.
    pub drain_grace_ns: u64,
    /// A client that leaves bindings in its down ring untaken this long is stalled: it is
    /// disconnected and its leases freed, ns. (Ops it never took were never submitted; leases
    /// only steer placement, so freeing them cannot change any output.)
    pub stall_timeout_ns: u64,
    /// Whether a cross-process concurrency service serves the devices (checked by the CLI; passed to clients).
    pub concurrency: Option<bool>,
    /// Most spans (the latest) the binding timeline keeps per device (0: no timeline). See
    /// [`Decider::timeline`].
    pub timeline_spans: usize,
    /// How long a lease with nothing outstanding stays its client's while no other client waits,
    /// ns (0: released at the next round). See `release_idle_leases`.
    pub lease_linger_ns: u64,
    /// The profiles the policy sizes launches by, on every device (`vitamin daemon --profiles`);
    /// `None`: the wave model.
    pub profiles: Option<Profiles>,
}

/// Default [`DecideConfig::lease_linger_ns`]: 1 ms, longer than the host-side gap between a
/// synchronize and the next launch in the operator benchmark (about 85 us through the daemon:
/// docs/results/daemon-overhead-h200.md), short against another client's wait.
pub const DEFAULT_LEASE_LINGER_NS: u64 = 1_000_000;

impl Default for DecideConfig {
    fn default() -> Self {
        DecideConfig {
            policy: PolicyKind::Throughput,
            seed: 0,
            up_capacity: 1024,
            down_capacity: 1024,
            max_ready: 4096,
            max_outstanding: 4096,
            max_clients: 64,
            max_lanes: 16,
            batch: 256,
            topology: None,
            drain_grace_ns: 10_000_000_000,
            stall_timeout_ns: 5_000_000_000,
            concurrency: None,
            timeline_spans: 0,
            lease_linger_ns: DEFAULT_LEASE_LINGER_NS,
            profiles: None,
        }
    }
}

struct ReadyEntry {
    client: u32,
    op: u64,
    kernel: KernelLaunch,
    graph: Option<GraphLaunch>,
    min_units: usize,
    ready_since_ns: u64,
    deadline_ns: Option<u64>,
    seq: u64,
}

struct Device {
    index: u32,
    topology: Topology,
    /// The lease state, the policy and what it reads (one arbiter per device).
    arb: ArbiterState<AnyPolicy>,
    late: Vec<u32>,
    ready: Vec<ReadyEntry>,
    seq: u64,
    names: HashMap<u64, std::sync::Arc<str>>,
    /// Per node: since when its lease has had nothing outstanding (0: not idle, or no lease).
    idle_since: Vec<u64>,
    /// The latest completed ops, for the binding timeline (at most `timeline_spans`), and how
    /// many older ones were let go.
    spans: std::collections::VecDeque<Span>,
    spans_dropped: u64,
}

/// An op in flight, for policy feedback and the timeline.
struct Inflight {
    kernel: Option<KernelLaunch>,
    node: u16,
    lane: u16,
    /// Continued or launched first by the client on its lease (else bound here; `kernel` is
    /// `None` for graphs).
    continued: bool,
    /// Launched first on a node that was no longer the client's: outside every lease's count.
    stray: bool,
    submitted_ns: u64,
    /// A CUDA graph launch.
    graph: bool,
}

impl Inflight {
    /// An op the client submitted itself (continued or launched first).
    fn local(node: u16, lane: u16, stray: bool, submitted_ns: u64, graph: bool) -> Self {
        Inflight { kernel: None, node, lane, continued: true, stray, submitted_ns, graph }
    }
}

struct Client {
    id: u32,
    holder: HolderId,
    device: usize,
    cred: PeerCred,
    name: String,
    command: String,
    class: ClientClass,
    lanes: u16,
    region: SharedRegion,
    up: Consumer,
    down: Producer,
    ledger: Ledger,
    inflight: HashMap<u64, Inflight>,
    pending_down: Vec<DownRecord>,
    view: Vec<u32>,
    bound: u64,
    bound_mark: (u64, u64),
    bound_per_s: f64,
    /// Ready records with a size floor, and those whose floor is the whole device.
    floored: (u64, u64),
    departing_since: Option<u64>,
    /// The client's down-ring head when last seen moving (or the ring empty), and when.
    down_head: (u32, u64),
    /// Since when the client has had an op outstanding without a break ([`crate::policy::Policy::on_idle`]
    /// when it ends with nothing of it ready).
    busy_since: Option<u64>,
    /// The guard word last published in the client's region (`SharedRegion::set_guard`).
    guard: u64,
    /// Per (node, lane) of this client: when its last op there completed (an op's run starts at
    /// its submission or then, whichever is later: [`crate::policy::Policy::on_graph_time`]).
    lane_done: HashMap<(u16, u16), u64>,
}

/// What a turn did.
#[derive(Debug, Default)]
pub struct TurnOutcome {
    /// Records consumed, ops bound, completions processed.
    pub progress: usize,
    /// Clients disconnected this turn, with the reason (the server closes their sockets).
    pub disconnect: Vec<(u32, String)>,
    /// Clients removed this turn (departed and drained).
    pub removed: Vec<u32>,
}

/// The daemon's decision state. See the module documentation.
pub struct Decider {
    cfg: DecideConfig,
    devices: Vec<Device>,
    clients: BTreeMap<u32, Client>,
    next_id: u32,
    counters: Counters,
    buf_up: [u64; UP_WORDS],
    started: Instant,
    /// Daemon-wide notices published in every client's region.
    notice: u64,
    /// A lease lingered at the last round (the loop then sleeps at most until it may end).
    lingering: bool,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider").field("clients", &self.clients.len()).field("devices", &self.devices.len()).finish()
    }
}

fn revalidate(t: &Topology) -> Result<Topology, String> {
    Topology::new(vitamin_hal::TopologySpec {
        vendor: t.vendor().to_owned(),
        device_name: t.device_name().to_owned(),
        unit_name: t.unit_name().to_owned(),
        unit_count: t.unit_count(),
        leaves: t.leaves().to_vec(),
        domains: t.domains().to_vec(),
        min_partition_size: t.min_partition_size(),
        alignment: t.alignment(),
        capabilities: t.capabilities().clone(),
    })
    .map_err(|e| format!("the reported topology is invalid: {e}"))
}

impl Decider {
    /// An empty decider.
    pub fn new(cfg: DecideConfig) -> Result<Decider, String> {
        let mut d = Decider {
            devices: Vec::new(),
            clients: BTreeMap::new(),
            next_id: 1,
            counters: Counters::default(),
            buf_up: [0; UP_WORDS],
            started: Instant::now(),
            notice: 0,
            lingering: false,
            cfg,
        };
        if let Some(t) = d.cfg.topology.clone() {
            d.device_for(0, &revalidate(&t)?)?;
        }
        Ok(d)
    }

    /// Policy name.
    pub fn policy_name(&self) -> &'static str {
        self.cfg.policy.name()
    }

    fn device_for(&mut self, index: u32, top: &Topology) -> Result<usize, String> {
        if let Some(i) = self.devices.iter().position(|d| d.index == index) {
            let d = &self.devices[i];
            if &d.topology != top {
                return Err(format!(
                    "device {index} is registered as {} with {} leaves; this client reports {} with {} leaves",
                    d.topology.device_name(),
                    d.topology.leaves().len(),
                    top.device_name(),
                    top.leaves().len()
                ));
            }
            return Ok(i);
        }
        let pool = Pool::build(top);
        if pool.nodes().len() > wire_max_nodes() {
            return Err(format!("{} pool nodes exceed the protocol's {}", pool.nodes().len(), wire_max_nodes()));
        }
        let n = pool.nodes().len();
        self.devices.push(Device {
            index,
            topology: top.clone(),
            arb: ArbiterState::new(
                pool,
                self.cfg.policy.build(self.cfg.seed ^ u64::from(index)),
                self.cfg.profiles.clone().unwrap_or_else(|| Profiles::new(top.device_name())),
                usize::from(self.cfg.max_lanes),
            ),
            late: vec![0; n],
            ready: Vec::new(),
            seq: 0,
            names: HashMap::default(),
            spans: std::collections::VecDeque::new(),
            spans_dropped: 0,
            idle_since: vec![0; n],
        });
        Ok(self.devices.len() - 1)
    }

    /// The binding timeline of device `di` (its index in registration order; `None`: no such
    /// device): every op of every client from its binding (or, continued by a client, its
    /// submission) to its completion as the client reported it, on its node and lane: the latest
    /// [`DecideConfig::timeline_spans`] of them, and how many older ones were let go. Times are
    /// the host's monotonic clock, which the clients share.
    pub fn timeline(&self, di: usize) -> Option<(Timeline, u64)> {
        let dev = self.devices.get(di)?;
        let node_labels = dev
            .arb
            .pool
            .nodes()
            .iter()
            .map(|n| format!("device {} node {}: {}", dev.index, n.id, n.units.display(dev.topology.unit_name())))
            .collect();
        Some((Timeline { spans: dev.spans.iter().cloned().collect(), node_labels }, dev.spans_dropped))
    }

    /// Devices seen so far.
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Whether a drained lease lingered at the last turn: the loop then wakes by the time the
    /// linger may end ([`DecideConfig::lease_linger_ns`]).
    pub fn lingering(&self) -> bool {
        self.lingering
    }

    /// How long a drained lease lingers, ns.
    pub fn lease_linger_ns(&self) -> u64 {
        self.cfg.lease_linger_ns
    }

    /// Registers a client: validates its hello, sets up its device, creates and seals its
    /// region, adopts the leases it reports holding. Returns the welcome and the memfd to pass.
    pub fn register(&mut self, hello: &Hello, cred: PeerCred, command: String) -> Result<(Welcome, OwnedFd), String> {
        if hello.version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {} but this daemon speaks {PROTOCOL_VERSION}: use matching vitamin builds",
                hello.version
            ));
        }
        if self.clients.len() >= self.cfg.max_clients {
            return Err(format!("the daemon serves its maximum of {} clients", self.cfg.max_clients));
        }
        if hello.lanes == 0 || hello.lanes > self.cfg.max_lanes {
            return Err(format!("{} lanes per node (1..={})", hello.lanes, self.cfg.max_lanes));
        }
        if hello.name.len() > 256 || hello.held.len() > 4096 {
            return Err("hello too large".into());
        }
        if let ClientClass::LatencyCritical { tpot_target_ns: 0 } = hello.class {
            return Err("a latency-critical client needs a TPOT target above zero".into());
        }
        let top = revalidate(&hello.topology)?;
        let di = self.device_for(hello.device, &top)?;
        let dev = &mut self.devices[di];
        let nodes = dev.arb.pool.nodes().len();
        let units = dev.topology.unit_count();
        let layout = Layout::new(nodes, self.cfg.up_capacity, UP_WORDS, self.cfg.down_capacity, DOWN_WORDS)
            .map_err(|e| e.to_string())?;
        let (region, fd) = SharedRegion::create(layout, PROTOCOL_VERSION).map_err(|e| e.to_string())?;
        region.set_notice(self.notice);
        let id = self.next_id;
        self.next_id += 1;
        let holder = HolderId(id);
        let limits = Limits {
            nodes: nodes as u16,
            lanes: hello.lanes,
            units: units as u16,
            max_ready: self.cfg.max_ready,
            max_outstanding: self.cfg.max_outstanding,
        };
        let mut ledger = Ledger::new(limits);
        let mut adopted = Vec::new();
        for h in &hello.held {
            let node = NodeId(h.node);
            let ok = usize::from(h.node) < nodes
                && dev.arb.pool.is_eligible(node, holder)
                && matches!(dev.arb.pool.state(node), NodeState::Idle)
                && h.ops.iter().all(|&(_, lane)| lane < hello.lanes)
                && h.ops.len() <= self.cfg.max_outstanding as usize;
            if !ok || h.ops.is_empty() || dev.arb.pool.lease(node, holder).is_err() {
                continue;
            }
            for &(op, lane) in &h.ops {
                if ledger.adopt(op, h.node, lane).is_ok() && dev.arb.begin_submit(node, holder).is_ok() {
                    continue;
                }
            }
            adopted.push(h.node);
        }
        dev.arb.add_client(ClientInfo { holder, name: hello.name.clone(), class: hello.class, deadline_ns: None });
        restatic(dev, &self.cfg);
        let view = vec![0; nodes];
        self.clients.insert(
            id,
            Client {
                id,
                holder,
                device: di,
                cred,
                name: hello.name.clone(),
                command,
                class: hello.class,
                lanes: hello.lanes,
                region,
                up: Consumer::new(),
                down: Producer::new(),
                ledger,
                inflight: HashMap::default(),
                pending_down: Vec::new(),
                view,
                bound: 0,
                bound_mark: (0, super::now_ns()),
                bound_per_s: 0.0,
                floored: (0, 0),
                departing_since: None,
                down_head: (0, super::now_ns()),
                busy_since: None,
                guard: 0,
                lane_done: HashMap::default(),
            },
        );
        self.counters.clients_registered += 1;
        self.publish_views(di);
        let welcome = Welcome {
            version: PROTOCOL_VERSION,
            client: id,
            nodes: nodes as u16,
            lanes: hello.lanes,
            max_ready: self.cfg.max_ready,
            max_outstanding: self.cfg.max_outstanding,
            policy: self.cfg.policy.name().into(),
            adopted,
            concurrency: self.cfg.concurrency,
        };
        Ok((welcome, fd))
    }

    /// Registered client ids.
    pub fn client_ids(&self) -> Vec<u32> {
        self.clients.keys().copied().collect()
    }

    /// Publishes daemon-wide notices (a bit set, [`super::NOTICE_CONCURRENCY_FAULT`], ...) to
    /// every client, now and at registration.
    pub fn set_notice(&mut self, bits: u64) {
        self.notice = bits;
        for c in self.clients.values() {
            c.region.set_notice(bits);
        }
    }

    /// The notices published.
    pub fn notice(&self) -> u64 {
        self.notice
    }

    /// Whether ready ops wait for a binding on any device (a policy declined them or their
    /// nodes were leased: the loop must decide again soon, not at the next record).
    pub fn has_ready(&self) -> bool {
        self.devices.iter().any(|d| !d.ready.is_empty())
    }

    /// Whether a client is registered.
    pub fn has_client(&self, id: u32) -> bool {
        self.clients.contains_key(&id)
    }

    /// Units a client holds (leased, draining or reserved nodes).
    pub fn units_held(&self, id: u32) -> usize {
        let Some(c) = self.clients.get(&id) else { return 0 };
        let pool = &self.devices[c.device].arb.pool;
        pool.active_nodes()
            .iter()
            .filter(|&&n| holder_of(pool.state(n)) == Some(c.holder))
            .map(|&n| pool.node(n).size())
            .sum()
    }

    /// A client hung up. `exited`: its process is gone (its submissions died with it), so its
    /// leases are freed now; otherwise it departs: no new bindings, leases freed when its
    /// outstanding ops completed or after the grace period.
    pub fn client_gone(&mut self, id: u32, exited: bool) {
        if exited {
            self.remove(id);
            return;
        }
        if let Some(c) = self.clients.get_mut(&id) {
            c.departing_since.get_or_insert(super::now_ns());
            let di = c.device;
            self.devices[di].ready.retain(|e| e.client != id);
        }
    }

    /// Removes a client and frees everything it holds: leases (outstanding counts dropped),
    /// reservations, pending reclamations, ready ops.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(c) = self.clients.remove(&id) else { return false };
        if c.region.state() == 0 {
            c.region.set_state(wire::Disconnect::Shutdown as u64);
        }
        let dev = &mut self.devices[c.device];
        dev.ready.retain(|e| e.client != id);
        dev.arb.remove_client(c.holder);
        restatic(dev, &self.cfg);
        let pending: Vec<NodeId> =
            dev.arb.pool.pending().iter().filter(|(_, r)| r.holder == c.holder).map(|(t, _)| *t).collect();
        for t in pending {
            let _ = dev.arb.pool.unreserve(t);
        }
        let mine: Vec<NodeId> = dev
            .arb
            .pool
            .active_nodes()
            .iter()
            .copied()
            .filter(|&n| holder_of(dev.arb.pool.state(n)) == Some(c.holder))
            .collect();
        for n in mine {
            dev.late[n.index()] = 0;
            match *dev.arb.pool.state(n) {
                NodeState::Leased { outstanding, .. } => {
                    for _ in 0..outstanding {
                        let _ = dev.arb.complete(n);
                    }
                    let _ = dev.arb.pool.release(n, c.holder);
                }
                NodeState::Draining { outstanding, .. } => {
                    for _ in 0..outstanding {
                        let _ = dev.arb.complete(n);
                    }
                }
                NodeState::Reserved { .. } => {
                    let _ = dev.arb.pool.unreserve(n);
                }
                NodeState::Idle => {}
            }
            for b in &mut dev.arb.lane_busy_until[n.index()] {
                *b = 0;
            }
        }
        let di = c.device;
        drop(c);
        self.publish_views(di);
        true
    }

    /// Disconnects a misbehaving client: records the reason in its region, then removes it.
    fn disconnect(&mut self, id: u32, code: wire::Disconnect, why: String, out: &mut TurnOutcome) {
        if let Some(c) = self.clients.get(&id) {
            c.region.set_state(code as u64);
            tracing::warn!(client = id, pid = c.cred.pid, reason = %why, "disconnecting client");
        }
        self.counters.clients_disconnected += 1;
        self.remove(id);
        out.disconnect.push((id, why));
    }

    /// One turn: intake, rounds, publish. See the module documentation.
    pub fn turn(&mut self) -> TurnOutcome {
        let mut out = TurnOutcome::default();
        let now = super::now_ns();
        self.counters.loop_turns += 1;
        let ids: Vec<u32> = self.clients.keys().copied().collect();
        for id in ids {
            match self.intake(id, now) {
                Ok(n) => out.progress += n,
                Err((code, why)) => {
                    self.counters.refused_records += 1;
                    self.disconnect(id, code, why, &mut out);
                }
            }
        }
        self.check_stalls(now, &mut out);
        self.lingering = false;
        for di in 0..self.devices.len() {
            out.progress += self.round(di, now, &mut out);
        }
        // Departed clients whose work drained, or whose grace passed.
        let done: Vec<u32> = self
            .clients
            .values()
            .filter(|c| {
                c.departing_since
                    .is_some_and(|t| c.ledger.outstanding() == 0 || now.saturating_sub(t) > self.cfg.drain_grace_ns)
            })
            .map(|c| c.id)
            .collect();
        for id in done {
            self.remove(id);
            out.removed.push(id);
        }
        for di in 0..self.devices.len() {
            self.publish_views(di);
        }
        self.flush_down();
        for c in self.clients.values_mut() {
            c.region.set_heartbeat(now);
        }
        out
    }

    /// Disconnects clients whose down ring is non-empty and whose head has not moved for the
    /// stall timeout.
    fn check_stalls(&mut self, now: u64, out: &mut TurnOutcome) {
        let mut stalled = Vec::new();
        for c in self.clients.values_mut() {
            let ring = c.region.down();
            let used = c.down.free(&ring).map(|f| ring.capacity() - f).unwrap_or(0);
            let head = ring.ctl().head.0.load(std::sync::atomic::Ordering::Relaxed);
            if used == 0 || head != c.down_head.0 {
                c.down_head = (head, now);
            } else if now.saturating_sub(c.down_head.1) > self.cfg.stall_timeout_ns {
                stalled.push((c.id, used));
            }
        }
        for (id, used) in stalled {
            let why = format!("{used} bindings untaken for {} ms: stalled", self.cfg.stall_timeout_ns / 1_000_000);
            self.disconnect(id, wire::Disconnect::Stalled, why, out);
        }
    }

    fn intake(&mut self, id: u32, now: u64) -> Result<usize, (wire::Disconnect, String)> {
        let Some(c) = self.clients.get_mut(&id) else { return Ok(0) };
        let dev = &mut self.devices[c.device];
        let mut records: Vec<[u64; UP_WORDS]> = Vec::new();
        let ring = c.region.up();
        c.up.drain(&ring, self.cfg.batch, &mut self.buf_up, |w| {
            let mut r = [0u64; UP_WORDS];
            r.copy_from_slice(w);
            records.push(r);
        })
        .map_err(|e| (wire::Disconnect::Corrupt, e.to_string()))?;
        let n = records.len();
        for w in &records {
            let up = c.ledger.accept(w).map_err(|e| {
                let code = match e {
                    WireError::TooManyReady(_) | WireError::TooManyOutstanding(_) => wire::Disconnect::Flood,
                    _ => wire::Disconnect::Protocol,
                };
                (code, e.to_string())
            })?;
            apply(dev, c, up, now, &mut self.counters, self.cfg.timeline_spans)
                .map_err(|e| (wire::Disconnect::Protocol, e))?;
        }
        Ok(n)
    }

    fn round(&mut self, di: usize, now: u64, _out: &mut TurnOutcome) -> usize {
        let dev = &mut self.devices[di];
        self.lingering |= release_idle_leases(dev, now, self.cfg.lease_linger_ns);
        dev.arb.maintain(now);
        if dev.ready.is_empty() {
            return 0;
        }
        // Room in each client's down ring this round (a stalled client gets none).
        let mut room: HashMap<u32, u32> = HashMap::default();
        let mut corrupt = Vec::new();
        for c in self.clients.values_mut().filter(|c| c.device == di) {
            let ring = c.region.down();
            match c.down.free(&ring) {
                Ok(f) => {
                    room.insert(c.id, f.saturating_sub(c.pending_down.len() as u32));
                }
                Err(e) => corrupt.push((c.id, e.to_string())),
            }
        }
        for (id, why) in corrupt {
            self.counters.refused_records += 1;
            self.disconnect(id, wire::Disconnect::Corrupt, why, _out);
        }
        let dev = &mut self.devices[di];
        let clients = &mut self.clients;
        let blocked = |room: &HashMap<u32, u32>, c: u32| room.get(&c).copied().unwrap_or(0) == 0;
        let mut tried = vec![false; dev.ready.len()];
        for (i, e) in dev.ready.iter().enumerate() {
            if blocked(&room, e.client) {
                tried[i] = true;
                self.counters.deferred_ring_full += 1;
            }
        }
        let mut bound_idx: Vec<usize> = Vec::new();
        let mut eligible = Vec::new();
        {
            let views = kernel_views(&dev.ready, &tried);
            dev.arb.begin_round(&views.iter().map(|v| v.1).collect::<Vec<_>>(), now);
        }
        loop {
            let (idx, node) = match dev.arb.propose(&kernel_views(&dev.ready, &tried), now, |_, _| {}, &mut eligible) {
                Proposal::Done | Proposal::Invalid => break,
                Proposal::Skip(idx) => {
                    tried[idx] = true;
                    continue;
                }
                Proposal::Bind(idx, node) => (idx, node),
            };
            tried[idx] = true;
            if bind_at(dev, clients, idx, node, now, &mut room, &mut self.counters) {
                bound_idx.push(idx);
            }
        }
        // Graph launches after the kernels, oldest first.
        let mut graphs: Vec<usize> =
            (0..dev.ready.len()).filter(|&i| dev.ready[i].graph.is_some() && !tried[i]).collect();
        graphs.sort_by_key(|&i| dev.ready[i].seq);
        for idx in graphs {
            if blocked(&room, dev.ready[idx].client) {
                continue;
            }
            let e = &dev.ready[idx];
            let view = ReadyGraphView {
                client: HolderId(e.client),
                op: OpId(e.op),
                graph: e.graph.as_ref().expect("filtered to graphs"),
                ready_since_ns: e.ready_since_ns,
                seq: e.seq,
                deadline_ns: e.deadline_ns,
                min_units: e.min_units,
            };
            let node = dev.arb.propose_graph(&view, now, |_| true, &mut eligible);
            if let Some(node) = node {
                if bind_at(dev, clients, idx, node, now, &mut room, &mut self.counters) {
                    bound_idx.push(idx);
                }
            }
        }
        bound_idx.sort_unstable();
        let n = bound_idx.len();
        for idx in bound_idx.into_iter().rev() {
            dev.ready.swap_remove(idx);
        }
        dev.ready.sort_by_key(|e| e.seq);
        n
    }

    /// Rewrites the lease view of every client of device `di` whose leases changed, and the
    /// guard word of each whose guard changed: since when a latency-critical client of the
    /// device has been busy (the earliest such busy period), when the policy guards latency
    /// clients ([`crate::policy::Policy::guards_latency_clients`]); 0 otherwise. A departing
    /// client guards nothing. The latency client's own region carries it too; its dispatcher
    /// holds nothing for it.
    fn publish_views(&mut self, di: usize) {
        let dev = &self.devices[di];
        let pool = &dev.arb.pool;
        let guard = if dev.arb.policy.guards_latency_clients() {
            self.clients
                .values()
                .filter(|c| c.device == di && c.departing_since.is_none())
                .filter(|c| matches!(c.class, ClientClass::LatencyCritical { .. }))
                .filter_map(|c| c.busy_since)
                .min()
                .map_or(0, |t| t.max(1))
        } else {
            0
        };
        let mut states = Vec::new();
        for c in self.clients.values_mut().filter(|c| c.device == di) {
            if c.guard != guard {
                c.region.set_guard(guard);
                c.guard = guard;
            }
            states.clear();
            states.resize(pool.nodes().len(), LeaseState::None as u32);
            for &n in pool.active_nodes() {
                let s = match *pool.state(n) {
                    NodeState::Leased { holder, .. } if holder == c.holder => LeaseState::Open,
                    NodeState::Draining { holder, .. } if holder == c.holder => LeaseState::Draining,
                    NodeState::Reserved { purpose } if purpose.holder == c.holder => LeaseState::Reserved,
                    NodeState::Idle => continue,
                    _ => LeaseState::Foreign,
                };
                states[n.index()] = s as u32;
            }
            if states != c.view {
                c.region.view().publish(&states);
                c.view.clone_from(&states);
            }
        }
    }

    /// Stages every pending binding (with the current view epoch) and publishes each down ring.
    fn flush_down(&mut self) {
        for c in self.clients.values_mut() {
            if c.pending_down.is_empty() {
                continue;
            }
            let ring = c.region.down();
            let mut seen = Vec::new();
            let epoch = c.region.view().read(&mut seen).unwrap_or(0);
            for mut d in c.pending_down.drain(..) {
                d.epoch = epoch;
                // Room was reserved when the op was bound; a full ring here means the client
                // scribbled its head: the record is dropped and the next turn's check
                // disconnects it.
                let _ = c.down.stage(&ring, &d.to_words());
            }
            if c.down.publish(&ring) {
                self.counters.wakeups_sent += 1;
            }
        }
    }

    /// Prepares to sleep: announces it on every client's up ring. Returns the futex words and
    /// the values to wait on, or `None` if a ring received records meanwhile (do not sleep).
    /// Call [`Decider::end_sleep`] after waking.
    pub fn begin_sleep(&mut self) -> Option<Vec<(*const super::sync::AtomicU32, u32)>> {
        let mut words = Vec::with_capacity(self.clients.len());
        let mut ready = false;
        for c in self.clients.values_mut() {
            let ring = c.region.up();
            match c.up.begin_sleep(&ring) {
                Ok(Some(seq)) => words.push((ring.wake_word() as *const _, seq)),
                // Records arrived, or a corrupted index (the next turn disconnects it).
                Ok(None) | Err(_) => ready = true,
            }
        }
        if ready {
            self.end_sleep();
            return None;
        }
        self.counters.loop_sleeps += 1;
        Some(words)
    }

    /// Withdraws the sleep announcements.
    pub fn end_sleep(&mut self) {
        for c in self.clients.values_mut() {
            let ring = c.region.up();
            c.up.end_sleep(&ring);
        }
    }

    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Sets the loop thread's CPU time (the server measures it).
    pub fn set_cpu_ns(&mut self, ns: u64) {
        self.counters.cpu_ns = ns;
    }

    /// Records a hang-up-to-free latency.
    pub fn note_free_latency(&mut self, ns: u64) {
        self.counters.last_hangup_to_free_ns = Some(ns);
    }

    /// Counts a refused connection.
    pub fn note_refused_connection(&mut self) {
        self.counters.connections_refused += 1;
    }

    /// A status report (clients, leases, units in use, rates).
    pub fn status(&mut self, socket: &str, concurrency: &str) -> StatusReport {
        let now = super::now_ns();
        let mut clients = Vec::new();
        for c in self.clients.values_mut() {
            let (b0, t0) = c.bound_mark;
            let dt = now.saturating_sub(t0);
            if dt >= 500_000_000 {
                c.bound_per_s = (c.bound - b0) as f64 / (dt as f64 / 1e9);
                c.bound_mark = (c.bound, now);
            }
            let arb = &self.devices[c.device].arb;
            let pool = &arb.pool;
            let (standing, floor_units) = arb.policy.standing(c.holder);
            let standing = standing.map(|n| format!("{n} ({} units) {}", pool.node(n).size(), pool.state(n).name()));
            let (mut oldest_ready_ns, mut ready_floor) = (None::<u64>, 0);
            for e in self.devices[c.device].ready.iter().filter(|e| e.client == c.id) {
                oldest_ready_ns = Some(oldest_ready_ns.map_or(e.ready_since_ns, |t| t.min(e.ready_since_ns)));
                ready_floor = ready_floor.max(e.min_units);
            }
            let mut leases = Vec::new();
            let mut units = 0;
            for &n in pool.active_nodes() {
                if holder_of(pool.state(n)) == Some(c.holder) {
                    leases.push(format!("{n} ({} units) {}", pool.node(n).size(), pool.state(n).name()));
                    units += pool.node(n).size();
                }
            }
            clients.push(ClientStatus {
                id: c.id,
                pid: c.cred.pid,
                uid: c.cred.uid,
                name: c.name.clone(),
                command: c.command.clone(),
                class: match c.class {
                    ClientClass::BestEffort => "batch".into(),
                    ClientClass::LatencyCritical { tpot_target_ns } => {
                        format!("latency (tpot {:.1} ms)", tpot_target_ns as f64 / 1e6)
                    }
                },
                device: self.devices[c.device].index,
                ready: c.ledger.ready(),
                outstanding: c.ledger.outstanding(),
                leases,
                units,
                bound: c.bound,
                bound_per_s: c.bound_per_s,
                floored: c.floored.0,
                whole_device: c.floored.1,
                standing,
                floor_units,
                oldest_ready_ms: oldest_ready_ns.map_or(0.0, |t| now.saturating_sub(t) as f64 / 1e6),
                ready_floor,
                cluster_refused: arb.cluster_refused(c.holder).iter().map(|u| u.to_string()).collect(),
                up_depth: c.region.up().depth_hint(),
                down_depth: c.region.down().depth_hint(),
                departing: c.departing_since.is_some(),
            });
        }
        let devices = self
            .devices
            .iter()
            .map(|d| DeviceStatus {
                device: d.index,
                name: d.topology.device_name().to_owned(),
                units: d.topology.unit_count(),
                units_in_use: d.arb.pool.active_units().len(),
                nodes: d.arb.pool.nodes().len(),
                active: d
                    .arb
                    .pool
                    .active_nodes()
                    .iter()
                    .map(|&n| {
                        let who = holder_of(d.arb.pool.state(n)).map_or(String::new(), |h| format!(" client {}", h.0));
                        format!("{n} ({} units) {}{who}", d.arb.pool.node(n).size(), d.arb.pool.state(n).name())
                    })
                    .collect(),
            })
            .collect();
        StatusReport {
            schema: "vitamin.daemon.status.v1".into(),
            pid: std::process::id(),
            policy: self.cfg.policy.name().into(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            socket: socket.into(),
            concurrency: concurrency.into(),
            clients,
            devices,
            counters: self.counters.clone(),
        }
    }

    /// Checks the pool invariant that matters across clients: active nodes are pairwise
    /// disjoint and each belongs to a registered client (for tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        for d in &self.devices {
            let act = d.arb.pool.active_nodes();
            for (i, &a) in act.iter().enumerate() {
                for &b in &act[i + 1..] {
                    if d.arb.pool.node(a).units.intersects(&d.arb.pool.node(b).units) {
                        return Err(format!("active nodes {a} and {b} overlap"));
                    }
                }
                if let Some(h) = holder_of(d.arb.pool.state(a)) {
                    if !self.clients.contains_key(&h.0) {
                        return Err(format!("node {a} is held by unknown client {}", h.0));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Static remembers each client's cut from the client count it first saw; across processes that
/// come and go the device is re-cut whenever the set of clients changes (a fresh policy). Work
/// already leased on the old cut finishes there; the new cut applies as those leases drain.
fn restatic(dev: &mut Device, cfg: &DecideConfig) {
    if cfg.policy == PolicyKind::Static {
        dev.arb.replace_policy(cfg.policy.build(cfg.seed ^ u64::from(dev.index)));
    }
}

fn wire_max_nodes() -> usize {
    super::ring::MAX_NODES
}

fn holder_of(s: &NodeState) -> Option<HolderId> {
    match *s {
        NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } => Some(holder),
        NodeState::Reserved { purpose } => Some(purpose.holder),
        NodeState::Idle => None,
    }
}

fn kernel_views<'a>(ready: &'a [ReadyEntry], tried: &[bool]) -> Vec<(usize, ReadyOpView<'a>)> {
    ready
        .iter()
        .enumerate()
        .filter(|(i, e)| !tried[*i] && e.graph.is_none())
        .map(|(i, e)| {
            (
                i,
                ReadyOpView {
                    client: HolderId(e.client),
                    op: OpId(e.op),
                    kernel: &e.kernel,
                    ready_since_ns: e.ready_since_ns,
                    seq: e.seq,
                    deadline_ns: e.deadline_ns,
                    min_units: e.min_units,
                },
            )
        })
        .collect()
}

/// Releases leases with nothing outstanding. A lease lingers for `linger_ns` after its work
/// drained while no op waits at the daemon, so that a client's next launch after a synchronize
/// can go out on it at once (launch-first) instead of waiting for a round trip. Any op waiting
/// ends every linger at once: another client's, and the holder's own too (its client sent it up
/// rather than launch it there, so the lease only blocks the wider nodes that overlap it: a lone
/// client's wide ops were otherwise planned on the widest node beside its own idle lease,
/// docs/results/daemon-overhead-h200.md, run 3). Returns whether a lease still lingers.
fn release_idle_leases(dev: &mut Device, now: u64, linger_ns: u64) -> bool {
    let waiting = !dev.ready.is_empty();
    for &n in dev.arb.pool.active_nodes() {
        if !matches!(dev.arb.pool.state(n), NodeState::Leased { outstanding: 0, .. }) {
            dev.idle_since[n.index()] = 0;
        }
    }
    let mut lingering = false;
    let idle_since = &mut dev.idle_since;
    dev.arb.release_idle(|n| {
        let since = &mut idle_since[n.index()];
        if *since == 0 {
            *since = now.max(1);
        }
        let release = waiting || now.saturating_sub(*since) >= linger_ns;
        if release {
            *since = 0;
        } else {
            lingering = true;
        }
        release
    });
    lingering
}

fn synthetic_kernel(dev: &mut Device, r: &wire::ReadyRecord) -> KernelLaunch {
    let name = dev.names.entry(r.kernel).or_insert_with(|| format!("#{:016x}", r.kernel).into()).clone();
    let cluster = (r.flags & FLAG_CLUSTER != 0).then_some(Dim3::new(1, 1, 1));
    KernelLaunch::new(
        FunctionRef::new(0, FunctionKind::Kernel, name),
        Dim3::new(r.grid[0], r.grid[1], r.grid[2]),
        Dim3::new(r.block[0], r.block[1], r.block[2]),
        r.smem,
        KernelArgs::from_layout(Vec::new(), Vec::new()).expect("empty arguments are valid"),
        LaunchAttributes::new(r.flags & FLAG_COOPERATIVE != 0, cluster, None, Vec::new()),
    )
    .with_resident_per_unit(u32::from(r.resident_per_unit))
}

/// Applies one validated record to the device and client state.
fn apply(
    dev: &mut Device,
    c: &mut Client,
    up: Up,
    now: u64,
    counters: &mut Counters,
    timeline_spans: usize,
) -> Result<(), String> {
    match up {
        Up::Ready(r) => {
            if c.departing_since.is_some() {
                c.ledger.refuse(r.op);
                return Ok(());
            }
            let kernel = synthetic_kernel(dev, &r);
            let graph = (r.flags & FLAG_GRAPH != 0).then(|| GraphLaunch::new(0, format!("#{:016x}", r.kernel)));
            dev.seq += 1;
            if r.min_units > 0 {
                c.floored.0 += 1;
                if usize::from(r.min_units) >= dev.topology.unit_count() {
                    c.floored.1 += 1;
                }
            }
            if let Some(d) = r.deadline_ns {
                if let Some(info) = dev.arb.client_mut(c.holder) {
                    info.deadline_ns = Some(info.deadline_ns.map_or(d, |x| x.min(d)));
                }
            }
            dev.ready.push(ReadyEntry {
                client: c.id,
                op: r.op,
                kernel,
                graph,
                min_units: usize::from(r.min_units),
                ready_since_ns: r.ready_since_ns.min(now),
                deadline_ns: r.deadline_ns,
                seq: dev.seq,
            });
        }
        Up::Completion { op, node, completed_ns, not_run } => {
            let n = NodeId(node);
            let inflight = c.inflight.remove(&op);
            if inflight.as_ref().is_some_and(|i| i.stray) {
                // Launched on a node that was no longer its own: never counted on a lease.
            } else if dev.late[n.index()] > 0 {
                dev.late[n.index()] -= 1;
            } else {
                dev.arb.complete(n).map_err(|e| format!("completion of op {op}: {e}"))?;
            }
            counters.completions += 1;
            if not_run {
                // The node refused the launch (it comes again as a new ready record): no run time
                // to learn from, no span; a cluster launch tells the policy which node cannot
                // place that client's cluster shapes.
                counters.not_run += 1;
                if let Some(k) = inflight.as_ref().and_then(|i| i.kernel.as_ref()) {
                    if k.attributes().cluster().is_some() {
                        dev.arb.note_cluster_refused(c.holder, n);
                    }
                }
            } else if let Some(inf) = inflight {
                debug_assert_eq!(inf.node, node);
                let done = completed_ns.min(now);
                let lane_done = c.lane_done.entry((inf.node, inf.lane)).or_insert(0);
                let started = inf.submitted_ns.max(*lane_done);
                *lane_done = done;
                // A graph with a later one queued behind it on its lane (a burst of replays, or
                // completions seen late together) is no measure of one step: left out.
                let queued = || {
                    c.inflight.values().any(|o| {
                        o.graph && (o.node, o.lane) == (inf.node, inf.lane) && o.submitted_ns >= inf.submitted_ns
                    })
                };
                if inf.graph && !queued() {
                    dev.arb.on_graph_time(c.holder, n, started, done, now);
                }
                if timeline_spans > 0 {
                    record_span(dev, c, op, &inf, done, timeline_spans);
                }
                if let Some(k) = &inf.kernel {
                    let done = Completion {
                        client: c.holder,
                        kernel: k,
                        node: n,
                        submitted_ns: inf.submitted_ns,
                        completed_ns: completed_ns.min(now),
                    };
                    dev.arb.on_complete(&done, now);
                }
            }
            if c.ledger.outstanding() == 0 {
                if let Some(info) = dev.arb.client_mut(c.holder) {
                    info.deadline_ns = None;
                }
                if c.ledger.ready() == 0 {
                    if let Some(since) = c.busy_since.take() {
                        dev.arb.on_idle(c.holder, since, now);
                    }
                }
            }
        }
        Up::Hint(h) => {
            let hint = Hint {
                client: c.holder,
                op: None,
                demand_units: (h.demand_units > 0).then_some(usize::from(h.demand_units)),
                ready_at_ns: (h.ready_at_ns > 0).then_some(h.ready_at_ns),
                deadline_ns: h.deadline_ns,
            };
            if let Some(d) = h.deadline_ns {
                if let Some(info) = dev.arb.client_mut(c.holder) {
                    info.deadline_ns = Some(d);
                }
            }
            dev.arb.prepare(&[hint], now);
        }
        Up::Continued { op, node, lane, submitted_ns, graph } => {
            let n = NodeId(node);
            let mut stray = false;
            match *dev.arb.pool.state(n) {
                NodeState::Leased { holder, .. } if holder == c.holder => {
                    dev.arb.begin_submit(n, c.holder).map_err(|e| format!("continued op {op}: {e}"))?;
                }
                NodeState::Draining { holder, .. } if holder == c.holder => dev.late[n.index()] += 1,
                // Behind a stray launch (a `Launched` op on a node that was no longer the client's
                // lease when the daemon read it) the client continues on that lane as on any other:
                // its view showed the node open. Such an op is a stray too. Only a continuation
                // behind no outstanding op of the client on that lane is a protocol violation.
                _ if c.inflight.values().any(|i| i.node == node && i.lane == lane) => {
                    stray = true;
                    counters.continued_stray += 1;
                }
                s => return Err(format!("op {op} continued on node {n}, which is {} and not this client's", s.name())),
            }
            counters.continued += 1;
            c.busy_since.get_or_insert(submitted_ns.min(now));
            c.inflight.insert(op, Inflight::local(node, lane, stray, submitted_ns.min(now), graph));
        }
        Up::Launched { op, node, lane, submitted_ns, graph } => {
            // The client saw the node as its own and open; the daemon may have closed, released or
            // even re-leased it since. Placement never changes an output, so the op is accepted
            // in every case: on its lease (gate open), counted late (draining), on the node leased
            // again to it (released and still free, or reserved for it again), or else as a stray
            // outside every lease.
            let n = NodeId(node);
            let mut stray = false;
            let state = *dev.arb.pool.state(n);
            match state {
                NodeState::Leased { holder, .. } if holder == c.holder => {
                    dev.arb.begin_submit(n, c.holder).map_err(|e| format!("launched op {op}: {e}"))?;
                }
                NodeState::Draining { holder, .. } if holder == c.holder => dev.late[n.index()] += 1,
                // Released since (idle), or back to this client's own standing reservation: leased
                // to it again.
                NodeState::Idle | NodeState::Reserved { .. } if dev.arb.pool.lease(n, c.holder).is_ok() => {
                    dev.arb.begin_submit(n, c.holder).map_err(|e| format!("launched op {op}: {e}"))?;
                }
                _ => {
                    stray = true;
                    counters.launched_stray += 1;
                }
            }
            counters.launched += 1;
            counters.continued += 1;
            c.busy_since.get_or_insert(submitted_ns.min(now));
            dev.idle_since[n.index()] = 0;
            c.inflight.insert(op, Inflight::local(node, lane, stray, submitted_ns.min(now), graph));
        }
    }
    Ok(())
}

/// Keeps the span of op `op` of client `c`, completed at `end_ns`, in the device's timeline; at
/// `max` spans the oldest is let go (and counted), so the timeline ends where the run ended.
fn record_span(dev: &mut Device, c: &Client, op: u64, inf: &Inflight, end_ns: u64, max: usize) {
    if dev.spans.len() >= max {
        dev.spans.pop_front();
        dev.spans_dropped += 1;
    }
    let name = match (&inf.kernel, inf.continued, inf.graph) {
        (Some(k), _, _) => k.function().name().to_owned(),
        (None, true, true) => "graph (continued)".to_owned(),
        (None, true, false) => "continued".to_owned(),
        (None, false, _) => "graph".to_owned(),
    };
    dev.spans.push_back(Span {
        name,
        client: format!("{} (client {})", c.name, c.id),
        holder: c.id,
        op,
        node: inf.node,
        lane: u32::from(inf.lane),
        submitted_ns: inf.submitted_ns,
        start_ns: inf.submitted_ns,
        end_ns: end_ns.max(inf.submitted_ns),
        continued: inf.continued,
    });
}

/// Validates and applies a policy's proposal for ready entry `idx`: eligible for the client,
/// large enough, room in its down ring, lease and submission accounted. Returns whether bound.
fn bind_at(
    dev: &mut Device,
    clients: &mut BTreeMap<u32, Client>,
    idx: usize,
    node: NodeId,
    now: u64,
    room: &mut HashMap<u32, u32>,
    counters: &mut Counters,
) -> bool {
    let e = &dev.ready[idx];
    let Some(c) = clients.get_mut(&e.client) else { return false };
    if room.get(&c.id).copied().unwrap_or(0) == 0 || dev.arb.admit(node, c.holder, e.min_units).is_err() {
        return false;
    }
    // The client's least-loaded lane on the node.
    let lane = (0..c.lanes).min_by_key(|&l| c.ledger.on_lane(node.0, l)).unwrap_or(0);
    if !c.ledger.bind(e.op, node.0, lane) {
        let _ = dev.arb.complete(node);
        return false;
    }
    dev.arb.note_submitted(node, usize::from(lane), e.graph.is_none().then_some(&e.kernel), now);
    c.busy_since.get_or_insert(now);
    c.inflight.insert(
        e.op,
        Inflight {
            kernel: e.graph.is_none().then(|| e.kernel.clone()),
            node: node.0,
            lane,
            continued: false,
            stray: false,
            submitted_ns: now,
            graph: e.graph.is_some(),
        },
    );
    c.pending_down.push(DownRecord {
        kind: DownKind::Binding as u8,
        node: node.0,
        op: e.op,
        lane,
        time_ns: now,
        ..DownRecord::default()
    });
    if let Some(r) = room.get_mut(&c.id) {
        *r -= 1;
    }
    c.bound += 1;
    counters.bound += 1;
    true
}
