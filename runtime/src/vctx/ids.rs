//! Handles of the logical state: virtual contexts, ops (tokens), streams, events, stream kinds.

use std::fmt;

/// Identifies one virtual context (one process and device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VctxId(pub u32);

/// Identifies one recorded op and therefore its completion token.
///
/// Unique within one [`VirtualContext`](super::VirtualContext) and strictly increasing in
/// recording order (the first op is `OpId(1)`). An id that was never issued, or whose op has
/// retired, counts as satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// Identifies one logical stream of a virtual context. [`StreamId::LEGACY`] always exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

impl StreamId {
    /// The legacy default stream (the null stream of the legacy API variants).
    pub const LEGACY: StreamId = StreamId(0);
}

/// Identifies one logical event of a virtual context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u32);

/// How a logical stream synchronizes with the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// The legacy default stream: each action on it first waits for all streams that
    /// [synchronize with it](StreamKind::syncs_with_legacy), and those streams then wait for it.
    LegacyDefault,
    /// The per-thread default stream of host thread `thread` (the drivers' per-thread stream
    /// handle): ordered like a blocking stream with respect to the legacy stream,
    /// unordered with respect to every other stream.
    PerThreadDefault {
        /// The host thread's key (chosen by the caller, e.g. the OS thread id).
        thread: u64,
    },
    /// A stream created with default flags: synchronizes with the legacy default stream.
    Blocking,
    /// A stream created with the non-blocking flag: exempt from the
    /// legacy default stream's implicit synchronization.
    NonBlocking,
}

impl StreamKind {
    /// Whether ops on this stream take part in the legacy default stream's implicit
    /// synchronization as a *blocking* stream (blocking and per-thread default streams).
    pub fn syncs_with_legacy(&self) -> bool {
        matches!(self, StreamKind::Blocking | StreamKind::PerThreadDefault { .. })
    }
}

impl fmt::Display for VctxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vctx{}", self.0)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op{}", self.0)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == StreamId::LEGACY {
            write!(f, "stream0 (legacy default)")
        } else {
            write!(f, "stream{}", self.0)
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event{}", self.0)
    }
}

impl fmt::Display for StreamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamKind::LegacyDefault => write!(f, "legacy default"),
            StreamKind::PerThreadDefault { thread } => write!(f, "per-thread default (thread {thread})"),
            StreamKind::Blocking => write!(f, "blocking"),
            StreamKind::NonBlocking => write!(f, "non-blocking"),
        }
    }
}

/// A cheap hasher for the dense, sequential integer ids used as table keys (multiplicative
/// hashing: sequential keys spread over all buckets). Not for untrusted keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `HashMap` keyed by sequential ids.
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
