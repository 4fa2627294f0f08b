//! Under `cfg(loom)` the crate is built for the loom models without the daemon's sockets and
//! sessions ([`crate::daemon`] keeps only its ring): there is no daemon session, and the
//! dispatcher always decides in-process. The same names as [`super::remote`], uninhabited.

use std::time::Duration;

use super::{DispatchError, Dispatcher};
use crate::policy::Policy;
use crate::pool::NodeId;
use crate::vctx::OpId;
use vitamin_hal::Backend;

/// How often a client in safe mode tries to re-register.
pub const RECONNECT_EVERY: Duration = Duration::from_millis(200);
/// Default time in safe mode before the dispatcher binds in-process.
pub const DEFAULT_FALLBACK_AFTER: Duration = Duration::from_secs(5);

/// No daemon session exists in a loom build.
#[derive(Debug)]
pub enum Remote {}

impl Remote {
    /// Never: no session.
    pub fn safe_mode(&self) -> Option<&str> {
        match *self {}
    }
}

impl<B: Backend, P: Policy> Dispatcher<B, P> {
    /// The daemon session, when one decides: never in a loom build.
    pub fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }
    pub(super) fn remote_may_continue(&self, _: NodeId, _: vitamin_hal::LaneId) -> bool {
        false
    }
    pub(super) fn remote_policy_continues(
        &mut self,
        _: usize,
        _: OpId,
        _: &vitamin_hal::KernelLaunch,
        _: NodeId,
    ) -> bool {
        true
    }
    pub(super) fn remote_policy_continues_graph(&mut self, _: NodeId) -> bool {
        true
    }
    pub(super) fn remote_shares_whole_device(&self, _: &vitamin_hal::OpDesc) -> bool {
        false
    }
    pub(super) fn remote_guarded(&self) -> bool {
        false
    }
    pub(super) fn remote_continued(&mut self, _: usize, _: OpId, _: NodeId, _: vitamin_hal::LaneId, _: bool) -> bool {
        false
    }
    pub(super) fn remote_completed(&mut self, _: usize, _: OpId) {}
    pub(super) fn remote_hints(&mut self, _: &[crate::policy::Hint]) {}
    pub(super) fn remote_round(&mut self) -> Result<usize, DispatchError> {
        Ok(0)
    }
}
