//! # The hierarchical physical-context pool and its lease state machine
//!
//! A [`Pool`] is the bounded set of pre-created physical contexts (pCtxs) of one device and the
//! state that decides which of them may be used together. It is plain data: `&mut self`
//! transitions, no locking, no backend calls. The dispatcher owns it; realizing nodes as green
//! contexts or CU-masked streams is the backends' job, and [`Realized`] only maps each node id to
//! the backend partition created for it at start-up.
//!
//! ## The hierarchy ([`Hierarchy`], built once by [`Pool::build`])
//! - **Leaves**: the topology's leaves in topology order (the one start-up split).
//! - **Tree nodes**: a recursive binary split of the leaf list. A node covers leaves `[lo, hi)`;
//!   if `hi - lo > 1` it has children `[lo, mid)` and `[mid, hi)` with
//!   `mid = lo + ceil((hi - lo) / 2)`. The root covers every leaf (the whole device). Leaf counts
//!   that are not a power of two and leaves of unequal size need no special case.
//! - **Remainders**: every non-root tree node `n` links to the node whose units are the device
//!   minus `n`'s. When that unit set is already a tree node (the root's two children complement
//!   each other) the link points there; otherwise a [`NodeKind::Remainder`] node is created, and
//!   it links back to `n`. The root has no remainder.
//! - Ids are dense: tree nodes first in depth-first pre-order (root = `#0`), then remainder nodes
//!   in the order of the tree node they complement.
//!
//! Node counts: with `n >= 2` leaves there are `2n - 1` tree nodes and `2n - 4` remainder nodes,
//! `4n - 5` in all (one node for a single leaf). **H200** (16 leaves: 15 x 8 SMs + 12):
//! 16 leaves + 15 internal + 28 remainders = **59 nodes**. **MI300X** (19 leaves of 16 CUs):
//! 19 + 18 + 34 = **71 nodes**.
//!
//! ## States ([`NodeState`]) and transitions
//! ```text
//!            lease                close_gate (outstanding > 0)
//!   Idle ------------> Leased -------------------------------> Draining
//!    ^  \                |  ^ begin_submit / complete            |  complete (last op)
//!    |   \ reserve       |  release (outstanding == 0)           v
//!    |    v              v                                     Idle, or Reserved when a pending
//!    |   Reserved --lease by its holder--> Leased                     reservation now fits
//!    +-- unreserve
//! ```
//! `close_gate` on a node with nothing outstanding makes it idle at once. Every transition
//! validates first and returns a [`PoolError`] for an illegal move, leaving the pool unchanged.
//!
//! ## Invariants (checked by the property tests after every step)
//! 1. **Active nodes are disjoint.** Leased, draining and reserved nodes ("active") never share
//!    a unit, whoever holds them: two nodes conflict iff their unit sets intersect.
//! 2. **Reservations are exclusive.** A reserved node's units are leased to nobody else; only
//!    its reservation's holder may lease it.
//! 3. **A draining node admits nothing** (no submit, no lease) and always has outstanding work.
//! 4. **Pending reservations make progress.** A pending reservation's target
//!    ([`Pool::reclaim_for`]) is claimed: no new lease or reservation may overlap it, and it
//!    becomes `Reserved` in the same step in which its last overlapping active node goes idle.
//!    Pending targets are pairwise disjoint and overlap only draining nodes.
//! 5. Hence every node returns to idle once all work has completed and leases and reservations
//!    are given back.
//!
//! ## Eligibility without pairwise scans
//! The pool keeps the union of active units and the union of claimed units, each one
//! [`UnitSet`](vitamin_hal::UnitSet), maintained incrementally (active nodes are disjoint, so
//! removing one node's units removes nobody else's). Testing whether an idle candidate may be leased is therefore two bitset
//! intersection tests (a few word operations), independent of how many nodes are active.
//! [`Pool::eligible`] scans the nodes once in ascending size order with that O(1) test.
//!
//! ## Layouts ([`PoolLayout`], the `pool` key)
//! The default, `hierarchical`, creates every tree node's partition at start-up and finds conflicts
//! with the unions above; its remainder nodes are created at their first use unless the
//! `remainders` key says `start-up` (a green context costs about 1.7 MiB of host RSS and 5 MiB of
//! device memory, docs/results/pool-cost.md; only complement leases use remainders). Two contrasts of the paper's overhead experiment exist for measuring
//! what each part buys: `flat` keeps the same nodes but finds conflicts by scanning the active
//! nodes and pending targets pairwise ([`Conflicts::Pairwise`]; the answers are the same, the
//! property test checks both against one model), and `on-demand` creates each node's partition
//! the first time it is used, on the dispatch path ([`NodePartition`]), and keeps it. A daemon's
//! lease state always uses the unions; the key sets the process's own pool.
//!
//! ## Reclamation decision
//! [`Pool::reclaim_for`] closes the gates of **every** leased node overlapping the target,
//! including those of the reservation's own holder: invariant 1 holds for all holders alike, so
//! the target cannot become reserved while any of its units is leased. The holder's work already
//! submitted there simply finishes (the dispatcher can order later work after it with backend
//! event waits). A target overlapping a node that is already reserved is refused: unreserve it
//! first (a reservation holds no work, so there is nothing to drain).

mod error;
mod hierarchy;
mod on_demand;
mod realized;
mod state;

use serde::Serialize;

/// How a process builds and realizes its pool (the `pool` key of the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolLayout {
    /// Every node created at start-up; conflicts by unit unions ([`Conflicts::Unions`]).
    #[default]
    Hierarchical,
    /// Every node created at start-up; conflicts by pairwise scans ([`Conflicts::Pairwise`]).
    Flat,
    /// Each node created at its first use, on the dispatch path, then kept ([`NodePartition`]).
    OnDemand,
}

impl PoolLayout {
    /// `hierarchical`, `flat` or `on-demand` (case-insensitive; `on_demand` too); `None` for
    /// anything else.
    pub fn parse(v: &str) -> Option<PoolLayout> {
        Some(match v.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "hierarchical" => PoolLayout::Hierarchical,
            "flat" => PoolLayout::Flat,
            "on-demand" | "ondemand" => PoolLayout::OnDemand,
            _ => return None,
        })
    }

    /// The configuration value.
    pub fn name(self) -> &'static str {
        match self {
            PoolLayout::Hierarchical => "hierarchical",
            PoolLayout::Flat => "flat",
            PoolLayout::OnDemand => "on-demand",
        }
    }
}

pub use error::PoolError;
pub use hierarchy::{Hierarchy, Node, NodeId, NodeKind};
pub use on_demand::{CreationReport, Creations, Factory, NodePartition};
pub use realized::Realized;
pub use state::{Conflicts, HolderId, Lease, NodeState, Pool, Reservation, Transition};
