//! [`PoolError`]: why a pool transition was refused. A refused transition changes nothing.

use thiserror::Error;
use vitamin_hal::HalError;

use super::hierarchy::NodeId;
use super::state::{HolderId, Reservation};

/// An illegal pool transition, or a failure to realize the pool on a backend.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PoolError {
    /// The node id is not in this pool.
    #[error("node {node} does not exist: this pool has {count} nodes (#0..#{last})", last = count.saturating_sub(1))]
    UnknownNode {
        /// The id asked for.
        node: NodeId,
        /// Nodes in the pool.
        count: usize,
    },
    /// The node shares units with an active (leased, draining or reserved) node.
    #[error(
        "node {node} overlaps node {blocker}, which is {blocker_state}: pick an eligible node, wait until {blocker} is \
         idle, or reclaim it with reclaim_for"
    )]
    Conflict {
        /// The node asked for.
        node: NodeId,
        /// An active node sharing units with it.
        blocker: NodeId,
        /// The blocker's state: `leased`, `draining` or `reserved`.
        blocker_state: &'static str,
    },
    /// The node shares units with the target of a pending reservation.
    #[error(
        "node {node} overlaps node {target}, which a pending reservation is reclaiming: pick a node disjoint from it, \
         or cancel that reservation with unreserve({target})"
    )]
    Claimed {
        /// The node asked for.
        node: NodeId,
        /// The pending reservation's target.
        target: NodeId,
    },
    /// The node is leased by another holder.
    #[error("node {node} is leased by {owner}, not {holder}: only its holder may submit to or release it")]
    HeldByOther {
        /// The node.
        node: NodeId,
        /// Who asked.
        holder: HolderId,
        /// Who holds the lease.
        owner: HolderId,
    },
    /// The node is reserved for another holder.
    #[error("node {node} is reserved for {} (tag {}), not {holder}: pick another eligible node", reservation.holder, reservation.tag)]
    ReservedForOther {
        /// The node.
        node: NodeId,
        /// Who asked.
        holder: HolderId,
        /// The reservation in force.
        reservation: Reservation,
    },
    /// The node is draining: its gate is closed.
    #[error(
        "node {node} is draining (gate closed): it admits no new work and no lease until its outstanding work \
         completes and it is idle again; submit elsewhere"
    )]
    GateClosed {
        /// The node.
        node: NodeId,
    },
    /// The transition needs a leased node.
    #[error("node {node} is {state}, not leased: lease it first")]
    NotLeased {
        /// The node.
        node: NodeId,
        /// Its state: `idle` or `reserved`.
        state: &'static str,
    },
    /// A release with work still outstanding.
    #[error(
        "node {node} still has {outstanding} outstanding op(s): wait for their completions before releasing, or close \
         its gate so it goes idle when they finish"
    )]
    WorkOutstanding {
        /// The node.
        node: NodeId,
        /// Ops submitted and not yet completed.
        outstanding: u32,
    },
    /// A completion for a node with nothing outstanding.
    #[error("node {node} has no outstanding op to complete: a completion was reported twice or for the wrong node")]
    NothingOutstanding {
        /// The node.
        node: NodeId,
    },
    /// The outstanding counter would overflow.
    #[error("node {node} already has u32::MAX outstanding ops: report completions before submitting more")]
    TooManyOutstanding {
        /// The node.
        node: NodeId,
    },
    /// The node is already reserved.
    #[error("node {node} is already reserved for {} (tag {}): unreserve it first", reservation.holder, reservation.tag)]
    AlreadyReserved {
        /// The node.
        node: NodeId,
        /// The reservation in force.
        reservation: Reservation,
    },
    /// The node already is the target of a pending reservation.
    #[error(
        "node {node} already has a pending reservation for {} (tag {}): unreserve it to cancel, or wait until it is \
         reserved",
        reservation.holder, reservation.tag
    )]
    AlreadyPending {
        /// The node.
        node: NodeId,
        /// The pending reservation.
        reservation: Reservation,
    },
    /// Nothing to unreserve.
    #[error("node {node} is {state} and has no pending reservation: there is nothing to unreserve")]
    NotReserved {
        /// The node.
        node: NodeId,
        /// Its state.
        state: &'static str,
    },
    /// The backend could not create a node's partition.
    #[error("creating the backend partition of pool node {node} failed: {source}")]
    Realize {
        /// The node.
        node: NodeId,
        /// The backend's error.
        #[source]
        source: HalError,
    },
    /// The backend created a partition over other units than asked for.
    #[error(
        "the backend realized pool node {node} over units {got} instead of {expected}: the backend is faulty; report it"
    )]
    RealizedWrongUnits {
        /// The node.
        node: NodeId,
        /// Units asked for (display form).
        expected: String,
        /// Units the partition reports (display form).
        got: String,
    },
}
