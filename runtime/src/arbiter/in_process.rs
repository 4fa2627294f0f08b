//! The in-process arbiter: the pool's lease state and a policy, deciding over plain records.
//!
//! Each round ([`Arbiter::bindings`]) takes the steps of [`ArbiterState`], as the dispatcher's
//! binding phase and the daemon's rounds do: the policy's maintenance and lookahead preparations
//! are validated and applied to the pool; the policy picks ready kernels and selects nodes among
//! those eligible for the op's client (holding at least the record's `min_units`), and every
//! graph launch gets a node from [`Policy::select_graph`]. A proposal is admitted (eligible, gate
//! open), the lease opened or reused and the op counted outstanding; the lane is the node's
//! least-loaded one. A completion returns the count; leases left with nothing outstanding are
//! released at the next round.
//!
//! A policy reads kernels as descriptors ([`ReadyOpView::kernel`]): the arbiter gives it a probe
//! built from the record (the interned name when the client told it, [`InProcess::intern`], the
//! shape, no arguments), which is all a policy or a profile looks at.

use std::collections::HashMap;
use std::sync::Arc;

use vitamin_hal::{Dim3, FunctionKind, FunctionRef, GraphLaunch, KernelArgs, KernelLaunch, LaunchAttributes, Topology};

use super::state::{ArbiterState, Proposal};
use super::{Arbiter, ArbiterError, Binding, Class, ClientId, Completion, LeaseView, ReadyRecord};
use crate::policy::{self, ClientClass, ClientInfo, Hint, Policy, ReadyGraphView, ReadyOpView};
use crate::pool::{HolderId, NodeId, Pool};
use crate::profile::Profiles;
use crate::vctx::OpId;

/// A ready record with the probe a policy reads.
#[derive(Debug)]
struct Ready {
    record: ReadyRecord,
    kernel: Arc<KernelLaunch>,
    graph: Option<GraphLaunch>,
    seq: u64,
}

/// Where a bound op sits (node, lane) and its kernel probe (`None`: a graph launch).
type Bound = (NodeId, u32, Option<Arc<KernelLaunch>>);

/// The in-process arbiter over `P`.
#[derive(Debug)]
pub struct InProcess<P: Policy> {
    state: ArbiterState<P>,
    names: HashMap<u64, Arc<str>>,
    ready: Vec<Ready>,
    lane_load: Vec<Vec<u32>>,
    /// Where each bound, unfinished op sits, with its kernel probe (`None`: a graph launch).
    bound: HashMap<(ClientId, u64), Bound>,
    /// Per client with ops bound: how many, and since when it has had one without a break
    /// ([`Policy::on_idle`] when that ends with nothing of it ready).
    busy: HashMap<ClientId, (usize, u64)>,
    /// Per (client, node, lane): when its last op there completed ([`Policy::on_graph_time`]).
    lane_done: HashMap<(ClientId, NodeId, u32), u64>,
    seq: u64,
    /// Proposals the pool refused (counted, never applied).
    pub rejected: u64,
    /// Ready records no node could run (dropped: the executor must fail such ops).
    pub unplaceable: u64,
}

impl<P: Policy> InProcess<P> {
    /// An arbiter for `topology`'s pool, `lanes_per_node` lanes per node.
    pub fn new(topology: &Topology, policy: P, profiles: Profiles, lanes_per_node: usize) -> Self {
        let pool = Pool::build(topology);
        let n = pool.nodes().len();
        let lanes = lanes_per_node.max(1);
        InProcess {
            state: ArbiterState::new(pool, policy, profiles, lanes),
            names: HashMap::new(),
            ready: Vec::new(),
            lane_load: vec![vec![0; lanes]; n],
            bound: HashMap::new(),
            busy: HashMap::new(),
            lane_done: HashMap::new(),
            seq: 0,
            rejected: 0,
            unplaceable: 0,
        }
    }

    /// Tells the arbiter the name behind a launch key's hash (in-process the name is at hand;
    /// profiles are looked up by it).
    pub fn intern(&mut self, name: &str) {
        self.names.entry(super::name_hash(name)).or_insert_with(|| Arc::from(name));
    }

    /// The pool, read-only.
    pub fn pool(&self) -> &Pool {
        self.state.pool()
    }

    fn holder(client: ClientId) -> HolderId {
        HolderId(client.0)
    }

    fn probe(&self, r: &ReadyRecord) -> Arc<KernelLaunch> {
        let name: Arc<str> = self
            .names
            .get(&r.key.name_hash)
            .cloned()
            .unwrap_or_else(|| Arc::from(format!("#{:016x}", r.key.name_hash)));
        let d = |a: [u32; 3]| Dim3::new(a[0], a[1], a[2]);
        let cluster = r.flags.cluster.then(|| Dim3::x(1));
        Arc::new(
            KernelLaunch::new(
                FunctionRef::new(0, FunctionKind::Function, name),
                d(r.key.grid),
                d(r.key.block),
                r.key.shared_mem_bytes,
                KernelArgs::empty(),
                LaunchAttributes::new(r.flags.cooperative, cluster, None, Vec::new()),
            )
            .with_resident_per_unit(r.key.resident_per_unit),
        )
    }

    /// Admits a proposal: `Some(lane)` when `node` is leased to the op's client and the op
    /// counted outstanding there.
    fn admit(&mut self, idx: usize, node: NodeId, now_ns: u64) -> Option<u32> {
        let r = self.ready[idx].record;
        if self.state.admit(node, Self::holder(r.client), r.min_units as usize).is_err() {
            self.rejected += 1;
            return None;
        }
        let loads = &mut self.lane_load[node.index()];
        let lane = (0..loads.len()).min_by_key(|&l| (loads[l], l)).unwrap_or(0);
        loads[lane] += 1;
        let probe = self.ready[idx].graph.is_none().then(|| self.ready[idx].kernel.clone());
        self.state.note_submitted(node, lane, probe.as_deref(), now_ns);
        self.bound.insert((r.client, r.op), (node, lane as u32, probe));
        self.busy.entry(r.client).or_insert((0, now_ns)).0 += 1;
        Some(lane as u32)
    }
}

fn views<'a>(ready: &'a [Ready], tried: &[bool]) -> Vec<(usize, ReadyOpView<'a>)> {
    ready
        .iter()
        .enumerate()
        .filter(|(i, e)| !tried[*i] && e.graph.is_none())
        .map(|(i, e)| {
            let deadline = (e.record.class.deadline_ns != 0).then_some(e.record.class.deadline_ns);
            let view = ReadyOpView {
                client: HolderId(e.record.client.0),
                op: OpId(e.record.op),
                kernel: &e.kernel,
                ready_since_ns: e.record.ready_since_ns,
                seq: e.seq,
                deadline_ns: deadline,
                min_units: e.record.min_units as usize,
            };
            (i, view)
        })
        .collect()
}

impl<P: Policy> Arbiter for InProcess<P> {
    fn register(&mut self, class: Class) -> Result<ClientId, ArbiterError> {
        let id = ClientId(self.state.clients().len() as u32);
        let class = match class.tpot_target_ns {
            0 => ClientClass::BestEffort,
            t => ClientClass::LatencyCritical { tpot_target_ns: t },
        };
        self.state.add_client(ClientInfo {
            holder: Self::holder(id),
            name: format!("client {}", id.0),
            class,
            deadline_ns: None,
        });
        Ok(id)
    }

    fn ready(&mut self, records: &[ReadyRecord]) -> Result<(), ArbiterError> {
        let largest = self.state.pool().node(self.state.pool().root()).size();
        for r in records {
            // No node runs it unchanged: the executor fails it (as the dispatcher's intake does);
            // kept, it would count as a waiting client for ever.
            if r.min_units as usize > largest {
                self.unplaceable += 1;
                continue;
            }
            let graph = r.flags.graph.then(|| GraphLaunch::new(0, format!("graph of client {}", r.client.0)));
            self.seq += 1;
            let ready = Ready { record: *r, kernel: self.probe(r), graph, seq: self.seq };
            if let Some(c) = self.state.client_mut(Self::holder(r.client)) {
                c.deadline_ns = (r.class.deadline_ns != 0).then_some(r.class.deadline_ns);
            }
            self.ready.push(ready);
        }
        Ok(())
    }

    fn completed(&mut self, completions: &[Completion]) -> Result<(), ArbiterError> {
        for c in completions {
            let Some((node, lane, probe)) = self.bound.remove(&(c.client, c.op)) else { continue };
            if let Some(l) = self.lane_load.get_mut(node.index()).and_then(|l| l.get_mut(lane as usize)) {
                *l = l.saturating_sub(1);
                if *l == 0 {
                    self.state.note_lane_drained(node, lane as usize, c.completed_ns);
                }
            }
            let _ = self.state.complete(node);
            let lane_done = self.lane_done.entry((c.client, node, lane)).or_insert(0);
            let started = c.submitted_ns.max(*lane_done);
            *lane_done = c.completed_ns;
            // A graph with a later one of its client queued behind it on its lane (a burst of
            // replays) is no measure of one step: left out.
            let queued = || {
                self.bound
                    .iter()
                    .any(|(&(cl, op), b)| cl == c.client && op > c.op && b.0 == node && b.1 == lane && b.2.is_none())
            };
            if probe.is_none() && !queued() {
                self.state.on_graph_time(Self::holder(c.client), node, started, c.completed_ns, c.completed_ns);
            }
            if let Some(kernel) = probe {
                let done = policy::Completion {
                    client: Self::holder(c.client),
                    kernel: &kernel,
                    node,
                    submitted_ns: c.submitted_ns,
                    completed_ns: c.completed_ns,
                };
                self.state.on_complete(&done, c.completed_ns);
            }
            if let Some(b) = self.busy.get_mut(&c.client) {
                b.0 -= 1;
                if b.0 == 0 && !self.ready.iter().any(|e| e.record.client == c.client) {
                    let since = b.1;
                    self.busy.remove(&c.client);
                    self.state.on_idle(Self::holder(c.client), since, c.completed_ns);
                }
            }
        }
        Ok(())
    }

    fn bindings(&mut self, now_ns: u64, out: &mut Vec<Binding>) -> Result<(), ArbiterError> {
        self.state.release_idle(|_| true);
        self.rejected += self.state.maintain(now_ns).rejected;
        let hints: Vec<Hint> = self
            .ready
            .iter()
            .filter(|e| e.record.lookahead_units != 0)
            .map(|e| Hint {
                client: Self::holder(e.record.client),
                op: None,
                demand_units: Some(e.record.lookahead_units as usize),
                ready_at_ns: None,
                deadline_ns: (e.record.class.deadline_ns != 0).then_some(e.record.class.deadline_ns),
            })
            .collect();
        self.rejected += self.state.prepare(&hints, now_ns).rejected;
        let mut tried = vec![false; self.ready.len()];
        let mut done = Vec::new();
        let mut eligible = Vec::new();
        {
            let v = views(&self.ready, &tried);
            self.state.begin_round(&v.iter().map(|x| x.1).collect::<Vec<_>>(), now_ns);
        }
        loop {
            let proposal = self.state.propose(&views(&self.ready, &tried), now_ns, |_, _| {}, &mut eligible);
            let (idx, node) = match proposal {
                Proposal::Done => break,
                Proposal::Invalid => {
                    self.rejected += 1;
                    break;
                }
                Proposal::Skip(idx) => {
                    tried[idx] = true;
                    continue;
                }
                Proposal::Bind(idx, node) => (idx, node),
            };
            tried[idx] = true;
            let r = self.ready[idx].record;
            if let Some(lane) = self.admit(idx, node, now_ns) {
                out.push(Binding { client: r.client, op: r.op, node, lane });
                done.push(idx);
            }
        }
        // Graph launches, oldest first, after the round's kernels.
        for idx in 0..self.ready.len() {
            let Some(graph) = &self.ready[idx].graph else { continue };
            let r = self.ready[idx].record;
            let view = ReadyGraphView {
                client: Self::holder(r.client),
                op: OpId(r.op),
                graph,
                ready_since_ns: r.ready_since_ns,
                seq: self.ready[idx].seq,
                deadline_ns: (r.class.deadline_ns != 0).then_some(r.class.deadline_ns),
                min_units: r.min_units as usize,
            };
            let Some(node) = self.state.propose_graph(&view, now_ns, |_| true, &mut eligible) else { continue };
            if let Some(lane) = self.admit(idx, node, now_ns) {
                out.push(Binding { client: r.client, op: r.op, node, lane });
                done.push(idx);
            }
        }
        done.sort_unstable();
        for idx in done.into_iter().rev() {
            self.ready.remove(idx);
        }
        Ok(())
    }

    fn lease_view(&self, client: ClientId) -> Result<LeaseView, ArbiterError> {
        Ok(self.state.lease_view(Self::holder(client)))
    }
}
