//! The native errors of the logical layer, named after the driver codes they stand for: an
//! invalid handle ([`VctxError::InvalidHandle`], code 400 in both vendors' drivers), a launch
//! failure ([`VctxError::LaunchFailed`], 719), a wait that timed out because vitamin could not bind
//! the awaited work ([`VctxError::Timeout`], the launch-timeout code, 702) and a wait that cannot
//! end because the runtime's dispatcher is gone ([`VctxError::RuntimeLost`], the unknown-error
//! code, 999). Each interposer maps them to its driver's codes. The last two are never produced
//! by the virtual context itself: the client runtime's bounded waits return them.
//!
//! A shim that knows the backend's precise asynchronous error (e.g. an illegal address, 700)
//! may return that code instead of 719; the message carries the backend's text.

use thiserror::Error;

use super::ids::{EventId, OpId, StreamId};

/// The handle named in an [`VctxError::InvalidHandle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    /// A logical stream.
    Stream(StreamId),
    /// A logical event.
    Event(EventId),
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handle::Stream(s) => write!(f, "{s}"),
            Handle::Event(e) => write!(f, "{e}"),
        }
    }
}

/// Why a virtual-context call failed. Misuse never panics; it returns the error the native API
/// would return (see the module table for the mapping).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VctxError {
    /// The stream or event does not exist in this virtual context: never created, already
    /// destroyed, or a default stream that cannot be destroyed. Check the handle's lifetime in the
    /// application (it may be used after the application destroyed it).
    #[error("invalid handle: {0} does not exist in this context (never created, or already destroyed)")]
    InvalidHandle(Handle),
    /// An op failed asynchronously on the device. Sticky: every later synchronization or query of
    /// the op's stream and of the device reports it, as the native APIs do after an asynchronous
    /// fault; the context must be torn down to recover.
    #[error(
        "{op}{} failed asynchronously: {message}; the context is unusable, restart the application",
        on_stream(.stream)
    )]
    LaunchFailed {
        /// The op that failed.
        op: OpId,
        /// The stream it was recorded on (`None` if the op was no longer live when it failed).
        stream: Option<StreamId>,
        /// The backend's description of the failure.
        message: String,
        /// The backend's native error code for it (what the native API reports at the next
        /// synchronization or query), `None` when the failure has none (then the generic
        /// launch-failure code is reported).
        code: Option<i32>,
    },
    /// The awaited work was never handed to the device: an op stayed ready but unbound (with
    /// nothing of this process in flight) or the dispatcher thread made no progress, for longer
    /// than the configured bound (`unbound_timeout_ms`). The work stays recorded; the call that
    /// waited returns this instead of waiting forever.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The runtime's dispatcher thread ended (it panicked, or was never able to run): recorded
    /// work can no longer reach the device. Restart the application (or run it in observe mode).
    #[error("the runtime cannot complete this call: {0}")]
    RuntimeLost(String),
}

fn on_stream(stream: &Option<StreamId>) -> String {
    stream.map(|s| format!(" on {s}")).unwrap_or_default()
}
