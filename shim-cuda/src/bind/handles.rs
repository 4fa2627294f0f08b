//! CUDA's handle conventions for the client runtime's registry ([`vitamin_runtime::client::handles`],
//! re-exported here): the special stream values, event creation flags and memory types.
//!
//! `NULL` is the legacy default stream for the legacy API variants and the calling thread's
//! per-thread default stream for the `_ptsz`/`_ptds` variants; `CU_STREAM_LEGACY` (`0x1`) and
//! `CU_STREAM_PER_THREAD` (`0x2`) mean the same in every variant ([`classify_stream`]).
#![forbid(unsafe_code)]

use vitamin_runtime::EventId;

pub use vitamin_runtime::client::handles::*;

/// `CU_STREAM_LEGACY`.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: u32 = 0x1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: u32 = 0x2;
/// `CU_EVENT_INTERPROCESS`.
pub const CU_EVENT_INTERPROCESS: u32 = 0x4;
/// `CU_MEMORYTYPE_HOST`.
const CU_MEMORYTYPE_HOST: u32 = 1;

/// Classifies a stream argument of a hook whose variant is per-thread (`_ptsz`/`_ptds`) or not.
pub fn classify_stream(handle: usize, per_thread_variant: bool) -> StreamRef {
    match handle {
        0 if per_thread_variant => StreamRef::PerThread,
        0 | CU_STREAM_LEGACY => StreamRef::Legacy,
        CU_STREAM_PER_THREAD => StreamRef::PerThread,
        h => StreamRef::Handle(h),
    }
}

/// The entry of an event created with `flags` (`cuEventCreate`).
pub fn event_entry(id: EventId, flags: u32) -> EventEntry {
    EventEntry::new(id, flags & CU_EVENT_DISABLE_TIMING == 0, flags & CU_EVENT_INTERPROCESS != 0)
}

/// From `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`'s answer: `None` if the query failed.
pub fn memory_from_type(t: Option<u32>) -> Memory {
    match t {
        Some(CU_MEMORYTYPE_HOST) => Memory::Pinned,
        Some(_) => Memory::Device, // DEVICE, ARRAY, UNIFIED
        None => Memory::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_stream_handles() {
        assert_eq!(classify_stream(0, false), StreamRef::Legacy);
        assert_eq!(classify_stream(0, true), StreamRef::PerThread);
        for pt in [false, true] {
            assert_eq!(classify_stream(CU_STREAM_LEGACY, pt), StreamRef::Legacy);
            assert_eq!(classify_stream(CU_STREAM_PER_THREAD, pt), StreamRef::PerThread);
            assert_eq!(classify_stream(0x7f00_1000, pt), StreamRef::Handle(0x7f00_1000));
        }
    }

    #[test]
    fn event_flags() {
        let timing = event_entry(EventId(1), 0);
        assert!(timing.timing && timing.records_natively(0));
        let plain = event_entry(EventId(2), CU_EVENT_DISABLE_TIMING);
        assert!(!plain.records_natively(0));
        assert!(plain.records_natively(1), "CU_EVENT_RECORD_EXTERNAL");
        let ipc = event_entry(EventId(3), CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
        assert!(ipc.records_natively(0));
    }

    #[test]
    fn memory_types() {
        assert_eq!(memory_from_type(Some(1)), Memory::Pinned);
        assert_eq!(memory_from_type(Some(2)), Memory::Device);
        assert_eq!(memory_from_type(None), Memory::Unknown);
    }
}
