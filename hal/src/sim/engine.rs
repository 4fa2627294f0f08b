//! The event-driven virtual-time engine behind the simulated device.
//!
//! Cost model (documented in `sim/mod.rs`): a kernel of `B` blocks on a partition of `m` units
//! with occupancy `r` blocks per unit needs `fixed + ceil(B / (min(m, sat)*r)) * block` ns of full-speed
//! work. While several kernels run, a unit shared by `c` of them gives each `1/c` of its speed; a
//! kernel's speed is the mean over its units. Copies, fills, host functions and markers do not use
//! units. Time advances from one completion to the next; the CPU effects of an op (kernel blocks,
//! copies, fills) are applied when it completes, so data dependencies follow completion order.

use std::collections::VecDeque;
use std::sync::Arc;

use super::kernels::SimKernel;
use super::memory::SimMemory;
use crate::backend::{Fence, LaneId};
use crate::op::{Endpoint, HostFunction, OpDesc};
use crate::unitset::{UnitSet, MAX_UNITS};

/// Host-to-device and device-to-host copy bandwidth, bytes per ns (50 GB/s).
pub const HOST_BW: f64 = 50.0;
/// Device-to-device copy and fill bandwidth, bytes per ns (2 TB/s).
pub const DEVICE_BW: f64 = 2_000.0;
/// Fixed cost of a copy or fill, ns.
pub const COPY_FIXED_NS: f64 = 1_000.0;
/// Cost of a host function, ns.
pub const HOST_FN_NS: f64 = 1_000.0;
/// Cost of a graph launch (simulated graphs are opaque), ns of full-speed work.
pub const GRAPH_NS: f64 = 20_000.0;

#[derive(Debug, Default)]
struct Lane {
    queue: VecDeque<(u64, Arc<OpDesc>)>,
    next_seq: u64,
    busy: bool,
}

#[derive(Debug)]
struct Partition {
    units: UnitSet,
    lanes: Vec<Lane>,
    completed: Vec<Fence>,
    failure: Option<String>,
}

#[derive(Debug)]
struct Running {
    part: usize,
    lane: LaneId,
    seq: u64,
    op: Arc<OpDesc>,
    remaining: f64,
    units: Option<UnitSet>,
    rate: f64,
}

/// All mutable state of one simulated device.
#[derive(Debug)]
pub struct Engine {
    now: f64,
    partitions: Vec<Partition>,
    running: Vec<Running>,
    unit_load: Vec<u16>,
    /// Units used by two or more running kernels.
    shared: UnitSet,
    pub(crate) kernels: Vec<SimKernel>,
    pub(crate) memory: SimMemory,
    host_calls: Vec<HostFunction>,
    /// Units that place no thread-block cluster ([`super::SimBackend::set_clusterless_units`]).
    pub(crate) clusterless: UnitSet,
    /// The reason and the device's units, while only the whole device runs kernel and graph
    /// launches ([`super::SimBackend::keep_on_whole_device`]).
    pub(crate) whole_device_only: Option<(String, UnitSet)>,
}

impl Engine {
    pub(crate) fn new(kernels: Vec<SimKernel>) -> Self {
        Engine {
            now: 0.0,
            partitions: Vec::new(),
            running: Vec::new(),
            unit_load: vec![0; MAX_UNITS],
            shared: UnitSet::EMPTY,
            kernels,
            memory: SimMemory::default(),
            host_calls: Vec::new(),
            clusterless: UnitSet::EMPTY,
            whole_device_only: None,
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.now as u64
    }

    pub(crate) fn add_partition(&mut self, units: UnitSet, lanes: usize) -> usize {
        self.partitions.push(Partition {
            units,
            lanes: (0..lanes).map(|_| Lane::default()).collect(),
            completed: Vec::new(),
            failure: None,
        });
        self.partitions.len() - 1
    }

    pub(crate) fn submit(&mut self, part: usize, lane: LaneId, op: Arc<OpDesc>) -> Fence {
        let l = &mut self.partitions[part].lanes[lane as usize];
        l.next_seq += 1;
        let seq = l.next_seq;
        l.queue.push_back((seq, op));
        self.start_lane(part, lane);
        self.update_rates();
        Fence { lane, seq }
    }

    pub(crate) fn take_completed(&mut self, part: usize, out: &mut Vec<Fence>) -> Result<usize, String> {
        let p = &mut self.partitions[part];
        if let Some(f) = p.failure.take() {
            return Err(f);
        }
        let n = p.completed.len();
        out.append(&mut p.completed);
        Ok(n)
    }

    pub(crate) fn partition_busy(&self, part: usize) -> bool {
        self.partitions[part].lanes.iter().any(|l| l.busy || !l.queue.is_empty())
    }

    /// Whether anything is queued or running anywhere.
    pub(crate) fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// Host functions whose ops completed; the caller runs them outside the engine lock.
    pub(crate) fn take_host_calls(&mut self) -> Vec<HostFunction> {
        std::mem::take(&mut self.host_calls)
    }

    /// Time of the next completion, if anything runs.
    pub(crate) fn next_completion(&self) -> Option<f64> {
        self.running.iter().map(|r| (self.now + r.remaining / r.rate).ceil()).min_by(f64::total_cmp)
    }

    /// Advances to the next completion (completing everything due then). Returns false if idle.
    pub(crate) fn step(&mut self) -> bool {
        let Some((i, t)) = self
            .running
            .iter()
            .enumerate()
            .map(|(i, r)| (i, (self.now + r.remaining / r.rate).ceil()))
            .min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            return false;
        };
        // The earliest op completes at `t` (rounded up to a whole ns, so virtual time stays
        // integral and equal durations give equal timestamps), whatever rounding says.
        self.running[i].remaining = 0.0;
        self.advance_to(t);
        true
    }

    /// Advances virtual time to `t`, completing everything due by then.
    pub(crate) fn advance_until(&mut self, t: f64) {
        while let Some(next) = self.next_completion() {
            if next > t {
                break;
            }
            self.advance_to(next);
        }
        if t > self.now {
            self.advance_to(t);
        }
    }

    fn advance_to(&mut self, t: f64) {
        let dt = (t - self.now).max(0.0);
        self.now = t.max(self.now);
        let mut i = 0;
        let mut freed: Vec<(usize, LaneId)> = Vec::new();
        while i < self.running.len() {
            let r = &mut self.running[i];
            r.remaining -= r.rate * dt;
            // Completion times come from the same floats; 1e-3 ns absorbs their rounding.
            if r.remaining <= 1e-3 {
                let r = self.running.swap_remove(i);
                freed.push((r.part, r.lane));
                self.complete(r);
            } else {
                i += 1;
            }
        }
        if !freed.is_empty() {
            for (part, lane) in freed {
                self.start_lane(part, lane);
            }
            self.update_rates();
        }
    }

    fn complete(&mut self, r: Running) {
        if let Some(units) = &r.units {
            for u in units {
                self.unit_load[u] -= 1;
                if self.unit_load[u] == 1 {
                    self.shared.remove(u);
                }
            }
        }
        let part_units = self.partitions[r.part].units;
        if let Err(e) = self.apply(&r.op, &part_units) {
            let p = &mut self.partitions[r.part];
            p.failure.get_or_insert(format!("{} on lane {}: {e}", r.op.label(), r.lane));
        }
        let p = &mut self.partitions[r.part];
        let lane = &mut p.lanes[r.lane as usize];
        lane.busy = false;
        p.completed.push(Fence { lane: r.lane, seq: r.seq });
    }

    /// The op's effect on memory (and host functions to run).
    fn apply(&mut self, op: &OpDesc, units: &UnitSet) -> Result<(), String> {
        match op {
            OpDesc::Kernel(k) => {
                let kernel = &self.kernels[k.function().handle() as usize];
                let Some(exec) = kernel.exec.clone() else { return Ok(()) };
                // Blocks run in a partition-dependent order (round-robin over the units, as waves
                // would): a fixed-structure kernel's result must not depend on it.
                let m = units.len().max(1) as u64;
                let blocks = k.blocks();
                for lane in 0..m {
                    let mut b = lane;
                    while b < blocks {
                        exec(k, b, &mut self.memory)?;
                        b += m;
                    }
                }
                Ok(())
            }
            OpDesc::Copy(c) => {
                let len = c.bytes() as usize;
                match (c.dst(), c.src()) {
                    (Endpoint::Device(d), Endpoint::Device(s)) => self.memory.copy_within(*d, *s, len),
                    (Endpoint::Device(d), Endpoint::Staged(bytes)) => self.memory.write(*d, &bytes[..len]),
                    // Host addresses are not dereferenced by the simulator: timing only.
                    _ => Ok(()),
                }
            }
            OpDesc::Fill(f) => {
                let elem = f.value().to_le_bytes();
                let pattern = &elem[..f.element_size() as usize];
                let bytes: Vec<u8> = pattern.iter().copied().cycle().take(pattern.len() * f.count() as usize).collect();
                self.memory.write(f.dst(), &bytes)
            }
            OpDesc::Host(h) => {
                self.host_calls.push(h.clone());
                Ok(())
            }
            OpDesc::Graph(_) | OpDesc::Marker(_) => Ok(()),
        }
    }

    fn work(&self, op: &OpDesc, units: &UnitSet) -> f64 {
        match op {
            OpDesc::Kernel(k) => {
                let kernel = &self.kernels[k.function().handle() as usize];
                let effective = kernel
                    .saturation_units
                    .map_or(units.len() as u64, |s| (units.len() as u64).min(u64::from(s.max(1))));
                let per_wave = effective * u64::from(kernel.resident_blocks_per_unit.max(1));
                let waves = k.blocks().div_ceil(per_wave.max(1));
                kernel.fixed_ns + waves as f64 * (kernel.block_ns)(k)
            }
            OpDesc::Copy(c) => {
                let bw = match (c.dst(), c.src()) {
                    (Endpoint::Device(_), Endpoint::Device(_)) => DEVICE_BW,
                    _ => HOST_BW,
                };
                COPY_FIXED_NS + c.bytes() as f64 / bw
            }
            OpDesc::Fill(f) => COPY_FIXED_NS + (f.count() * u64::from(f.element_size())) as f64 / DEVICE_BW,
            OpDesc::Host(_) => HOST_FN_NS,
            OpDesc::Graph(_) => GRAPH_NS,
            OpDesc::Marker(_) => 0.0,
        }
    }

    /// Starts the head of one lane if the lane is idle; zero-cost ops (markers) complete at once
    /// and let the next op of that lane start. Rates are the caller's to update.
    fn start_lane(&mut self, pi: usize, li: LaneId) {
        loop {
            let lane = &mut self.partitions[pi].lanes[li as usize];
            if lane.busy {
                return;
            }
            let Some((seq, op)) = lane.queue.pop_front() else { return };
            lane.busy = true;
            let units = self.partitions[pi].units;
            let uses = op.uses_units().then_some(units);
            if let Some(u) = &uses {
                for unit in u {
                    self.unit_load[unit] += 1;
                    if self.unit_load[unit] == 2 {
                        self.shared.insert(unit);
                    }
                }
            }
            let remaining = self.work(&op, &units);
            let r = Running { part: pi, lane: li, seq, op, remaining, units: uses, rate: 1.0 };
            if remaining > 0.0 {
                self.running.push(r);
                return;
            }
            self.complete(r);
        }
    }

    fn update_rates(&mut self) {
        for r in &mut self.running {
            r.rate = match &r.units {
                None => 1.0,
                // Fast path: no unit of this kernel is shared with another running kernel.
                Some(units) if units.is_disjoint(&self.shared) => 1.0,
                Some(units) => {
                    let n = units.len().max(1) as f64;
                    units.iter().map(|u| 1.0 / f64::from(self.unit_load[u].max(1))).sum::<f64>() / n
                }
            };
        }
    }
}
