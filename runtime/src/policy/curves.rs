//! Per-launch scaling curves: the estimated time of one launch configuration at every distinct
//! pool size, computed once from the profiles and then looked up by an array index.
//!
//! Policies evaluate `T(m)` for many (op, node) pairs per decision; going through
//! [`Profiles::estimate_ns`] each time (string keys, fallback model) would dominate the
//! dispatcher's cost. A curve is keyed by the launch's function handle and shape with a fast
//! non-cryptographic hash (`rustc-hash`: keys are not attacker-controlled).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use vitamin_hal::{Dim3, KernelLaunch};

use crate::pool::Pool;
use crate::profile::Profiles;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct CurveKey {
    handle: u64,
    grid: Dim3,
    block: Dim3,
    smem: u32,
    /// The occupancy (0: unknown): the daemon's launches carry no handle, so two kernels of one
    /// shape differ only by it there.
    resident: u32,
}

impl CurveKey {
    fn of(k: &KernelLaunch) -> Self {
        CurveKey {
            handle: k.function().handle(),
            grid: k.grid(),
            block: k.block(),
            smem: k.shared_mem_bytes(),
            resident: k.resident_per_unit().unwrap_or(0),
        }
    }
}

/// One launch's estimated ns at each distinct pool size (ascending size), shared cheaply.
pub type Curve = Arc<[f64]>;

/// Cache of scaling curves over a pool's distinct node sizes.
#[derive(Debug, Default, Clone)]
pub struct Curves {
    sizes: Vec<usize>,
    index_of: Vec<u8>,
    /// Curve position of every pool node's size, by node id.
    node_index: Arc<[usize]>,
    curves: FxHashMap<CurveKey, Curve>,
}

impl Curves {
    fn ensure_sizes(&mut self, pool: &Pool) {
        if !self.sizes.is_empty() {
            return;
        }
        let mut sizes: Vec<usize> = pool.nodes().iter().map(|n| n.size()).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let max = sizes.last().copied().unwrap_or(0);
        self.index_of = vec![u8::MAX; max + 1];
        for (i, &s) in sizes.iter().enumerate() {
            self.index_of[s] = i as u8;
        }
        self.node_index = pool.nodes().iter().map(|n| usize::from(self.index_of[n.size()])).collect();
        self.sizes = sizes;
    }

    /// Curve position of every pool node's size, indexed by node id.
    pub fn node_index(&mut self, pool: &Pool) -> Arc<[usize]> {
        self.ensure_sizes(pool);
        self.node_index.clone()
    }

    /// The distinct node sizes of `pool`, ascending.
    pub fn sizes(&mut self, pool: &Pool) -> &[usize] {
        self.ensure_sizes(pool);
        &self.sizes
    }

    /// Estimated ns of `k` on every distinct size, ascending by size (index with [`Curves::index`]).
    pub fn curve(&mut self, k: &KernelLaunch, pool: &Pool, profiles: &Profiles) -> Curve {
        self.ensure_sizes(pool);
        let sizes = &self.sizes;
        self.curves
            .entry(CurveKey::of(k))
            .or_insert_with(|| sizes.iter().map(|&m| profiles.estimate_ns(k, m)).collect())
            .clone()
    }

    /// Position of size `m` in the curves, if `m` is a pool size.
    pub fn index(&self, m: usize) -> Option<usize> {
        self.index_of.get(m).copied().filter(|&i| i != u8::MAX).map(usize::from)
    }

    /// Estimated ns of `k` on `m` units (`m` should be a pool size; others are estimated directly).
    pub fn time(&mut self, k: &KernelLaunch, m: usize, pool: &Pool, profiles: &Profiles) -> f64 {
        self.ensure_sizes(pool);
        match self.index(m) {
            Some(i) => self.curve(k, pool, profiles)[i],
            None => profiles.estimate_ns(k, m),
        }
    }

    /// Normalized progress `P(m) = T(m_min) / T(m)`.
    pub fn progress(&mut self, k: &KernelLaunch, m: usize, pool: &Pool, profiles: &Profiles) -> f64 {
        self.ensure_sizes(pool);
        let m_min = self.sizes.first().copied().unwrap_or(1);
        self.time(k, m_min, pool, profiles) / self.time(k, m, pool, profiles).max(1e-9)
    }
}
