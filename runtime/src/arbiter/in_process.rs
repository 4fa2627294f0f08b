//! The in-process arbiter: the pool's lease state and a policy, deciding over plain records.
//!
//! Each round ([`Arbiter::bindings`]): the policy's maintenance and lookahead preparations are
//! validated and applied to the pool; then, as in the dispatcher's binding phase, the policy
//! picks ready kernels and selects nodes among those eligible for the op's client (holding at
//! least the record's `min_units`), and every graph launch gets a node from
//! [`Policy::select_graph`]. A proposal is validated (eligible, gate open), the lease opened or
//! reused and the op counted outstanding; the lane is the node's least-loaded one. A completion
//! returns the count; leases left with nothing outstanding are released at the next round.
//!
//! A policy reads kernels as descriptors ([`ReadyOpView::kernel`]): the arbiter gives it a probe
//! built from the record (the interned name when the client told it, [`InProcess::intern`], the
//! shape, no arguments), which is all a policy or a profile looks at.

use std::collections::HashMap;
use std::sync::Arc;

use vitamin_hal::{Dim3, FunctionKind, FunctionRef, GraphLaunch, KernelArgs, KernelLaunch, LaunchAttributes, Topology};

use super::{Arbiter, Binding, Class, ClientId, Completion, LeaseView, ReadyRecord};
use crate::policy::{
    self, ClientClass, ClientInfo, Hint, Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState,
};
use crate::pool::{HolderId, NodeId, NodeState, Pool};
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
    pool: Pool,
    policy: P,
    profiles: Profiles,
    clients: Vec<ClientInfo>,
    names: HashMap<u64, Arc<str>>,
    ready: Vec<Ready>,
    lane_load: Vec<Vec<u32>>,
    lane_busy_until: Vec<Vec<u64>>,
    /// Where each bound, unfinished op sits, with its kernel probe (`None`: a graph launch).
    bound: HashMap<(ClientId, u64), Bound>,
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
            pool,
            policy,
            profiles,
            clients: Vec::new(),
            names: HashMap::new(),
            ready: Vec::new(),
            lane_load: vec![vec![0; lanes]; n],
            lane_busy_until: vec![vec![0; lanes]; n],
            bound: HashMap::new(),
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
        &self.pool
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
        Arc::new(KernelLaunch::new(
            FunctionRef::new(0, FunctionKind::Function, name),
            d(r.key.grid),
            d(r.key.block),
            r.key.shared_mem_bytes,
            KernelArgs::empty(),
            LaunchAttributes::new(r.flags.cooperative, cluster, None, Vec::new()),
        ))
    }

    fn apply(&mut self, plan: Vec<Preparation>) {
        for p in plan {
            let applied = match p {
                Preparation::Reserve(n, r) => self.pool.reserve(n, r),
                Preparation::Reclaim(n, r) => self.pool.reclaim_for(n, r).map(|_| ()),
                Preparation::Unreserve(n) => self.pool.unreserve(n),
            };
            if applied.is_err() {
                self.rejected += 1;
            }
        }
    }

    fn release_idle_leases(&mut self) {
        let idle: Vec<(NodeId, HolderId)> = self
            .pool
            .active_nodes()
            .iter()
            .filter_map(|&id| match *self.pool.state(id) {
                NodeState::Leased { holder, outstanding: 0 } => Some((id, holder)),
                _ => None,
            })
            .collect();
        for (id, holder) in idle {
            let _ = self.pool.release(id, holder);
        }
    }

    /// Validates and applies a proposal: `Some(lane)` when `node` is leased to the op's client
    /// and the op counted outstanding there.
    fn admit(&mut self, idx: usize, node: NodeId) -> Option<u32> {
        let r = self.ready[idx].record;
        let holder = Self::holder(r.client);
        let fits = node.index() < self.pool.nodes().len()
            && self.pool.is_eligible(node, holder)
            && self.pool.node(node).size() >= r.min_units as usize;
        let leased = fits
            && (matches!(self.pool.state(node), NodeState::Leased { holder: h, .. } if *h == holder)
                || self.pool.lease(node, holder).is_ok());
        if !leased || self.pool.begin_submit(node, holder).is_err() {
            self.rejected += 1;
            return None;
        }
        let loads = &mut self.lane_load[node.index()];
        let lane = (0..loads.len()).min_by_key(|&l| (loads[l], l)).unwrap_or(0);
        loads[lane] += 1;
        let probe = self.ready[idx].graph.is_none().then(|| self.ready[idx].kernel.clone());
        self.bound.insert((r.client, r.op), (node, lane as u32, probe));
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

macro_rules! state {
    ($s:ident, $now:expr) => {
        SchedState {
            pool: &$s.pool,
            now_ns: $now,
            profiles: &$s.profiles,
            clients: &$s.clients,
            lane_busy_until: &$s.lane_busy_until,
        }
    };
}

impl<P: Policy> Arbiter for InProcess<P> {
    fn register(&mut self, class: Class) -> ClientId {
        let id = ClientId(self.clients.len() as u32);
        let class = match class.tpot_target_ns {
            0 => ClientClass::BestEffort,
            t => ClientClass::LatencyCritical { tpot_target_ns: t },
        };
        self.clients.push(ClientInfo {
            holder: Self::holder(id),
            name: format!("client {}", id.0),
            class,
            deadline_ns: None,
        });
        id
    }

    fn ready(&mut self, records: &[ReadyRecord]) {
        let largest = self.pool.node(self.pool.root()).size();
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
            if let Some(c) = self.clients.get_mut(r.client.0 as usize) {
                c.deadline_ns = (r.class.deadline_ns != 0).then_some(r.class.deadline_ns);
            }
            self.ready.push(ready);
        }
    }

    fn completed(&mut self, completions: &[Completion]) {
        for c in completions {
            let Some((node, lane, probe)) = self.bound.remove(&(c.client, c.op)) else { continue };
            if let Some(l) = self.lane_load.get_mut(node.index()).and_then(|l| l.get_mut(lane as usize)) {
                *l = l.saturating_sub(1);
            }
            let _ = self.pool.complete(node);
            if let Some(kernel) = probe {
                let done = policy::Completion {
                    client: Self::holder(c.client),
                    kernel: &kernel,
                    node,
                    submitted_ns: c.submitted_ns,
                    completed_ns: c.completed_ns,
                };
                let state = state!(self, c.completed_ns);
                self.policy.on_complete(&done, &state);
            }
        }
    }

    fn bindings(&mut self, now_ns: u64, out: &mut Vec<Binding>) {
        self.release_idle_leases();
        let mut plan = Vec::new();
        {
            let state = state!(self, now_ns);
            self.policy.maintain(&state, &mut plan);
        }
        for i in 0..self.ready.len() {
            let r = self.ready[i].record;
            if r.lookahead_units == 0 {
                continue;
            }
            let hint = Hint {
                client: Self::holder(r.client),
                op: None,
                demand_units: Some(r.lookahead_units as usize),
                ready_at_ns: None,
                deadline_ns: (r.class.deadline_ns != 0).then_some(r.class.deadline_ns),
            };
            let state = state!(self, now_ns);
            self.policy.prepare(&hint, &state, &mut plan);
        }
        self.apply(plan);
        let mut tried = vec![false; self.ready.len()];
        let mut done = Vec::new();
        let mut eligible = Vec::new();
        {
            let v = views(&self.ready, &tried);
            let state = state!(self, now_ns);
            self.policy.begin_round(&v.iter().map(|x| x.1).collect::<Vec<_>>(), &state);
        }
        loop {
            let (idx, node) = {
                let v = views(&self.ready, &tried);
                if v.is_empty() {
                    break;
                }
                let queue: Vec<ReadyOpView<'_>> = v.iter().map(|x| x.1).collect();
                let state = state!(self, now_ns);
                let Some(pick) = self.policy.pick(&queue, &state) else { break };
                let Some(&(idx, view)) = v.get(pick) else {
                    self.rejected += 1;
                    break;
                };
                self.pool.eligible(view.client, self.ready[idx].record.min_units as usize, &mut eligible);
                (idx, self.policy.select(&view, &eligible, &state))
            };
            tried[idx] = true;
            let Some(node) = node else { continue };
            let r = self.ready[idx].record;
            if let Some(lane) = self.admit(idx, node) {
                out.push(Binding { client: r.client, op: r.op, node, lane });
                done.push(idx);
            }
        }
        // Graph launches, oldest first, after the round's kernels.
        for idx in 0..self.ready.len() {
            let Some(graph) = &self.ready[idx].graph else { continue };
            let r = self.ready[idx].record;
            self.pool.eligible(Self::holder(r.client), r.min_units as usize, &mut eligible);
            let view = ReadyGraphView {
                client: Self::holder(r.client),
                op: OpId(r.op),
                graph,
                ready_since_ns: r.ready_since_ns,
                seq: self.ready[idx].seq,
                deadline_ns: (r.class.deadline_ns != 0).then_some(r.class.deadline_ns),
                min_units: r.min_units as usize,
            };
            let state = state!(self, now_ns);
            let Some(node) = self.policy.select_graph(&view, &eligible, &state) else { continue };
            if let Some(lane) = self.admit(idx, node) {
                out.push(Binding { client: r.client, op: r.op, node, lane });
                done.push(idx);
            }
        }
        done.sort_unstable();
        for idx in done.into_iter().rev() {
            self.ready.remove(idx);
        }
    }

    fn lease_view(&self, client: ClientId) -> LeaseView {
        let mut v = LeaseView::default();
        for lease in self.pool.leases().filter(|l| l.holder == Self::holder(client)) {
            if lease.open {
                v.held.insert(lease.node);
            } else {
                v.draining.insert(lease.node);
            }
        }
        v
    }
}
