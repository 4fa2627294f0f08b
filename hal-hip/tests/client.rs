//! `PoolBackend` of the HIP backend on the test double: no submission thread (declined with a
//! reason), the fence mode's census name, and a lane's raw stream being the CU-masked stream the
//! double created with the partition's mask.

mod support;

use vitamin_hal::{Backend, UnitSet};
use vitamin_hal_hip::HipBackend;
use vitamin_runtime::client::native::PoolBackend;

#[test]
fn pool_backend_on_the_double() {
    support::in_child("pool_backend_on_the_double", &[], || {
        let b = HipBackend::new().expect("the double's MI300X");
        let started = b.start_submit_thread(std::time::Duration::from_micros(5), None, || ());
        assert!(started.is_err(), "the HIP backend has no submission thread: {started:?}");
        assert_eq!(b.submission_counts(), None);
        b.flush_submissions(); // nothing to flush; must return at once
        assert_eq!(PoolBackend::fence_mode(&b), "event");
        let p = b.create_partition(&UnitSet::range(0, 16), 2).expect("a 16-CU partition");
        let lanes: Vec<u64> = (0..2).map(|l| HipBackend::raw_stream(&p, l).expect("a lane stream")).collect();
        assert_ne!(lanes[0], lanes[1]);
        assert_eq!(HipBackend::raw_stream(&p, 2), None, "no third lane");
        // The double logs each stream with its mask: both lanes have the partition's 16 bits.
        let log = support::log();
        let masked = log.lines().filter(|l| l.contains("stream-create") && l.contains("cus=16 ")).count();
        assert_eq!(masked, 2, "two 16-CU lane streams:\n{log}");
    });
}

#[test]
fn memory_fences_are_named_memory() {
    let config = support::config_file("client-fence-memory", "[advanced]\nfence = \"memory\"\n");
    support::in_child("memory_fences_are_named_memory", &[("VITAMIN_CONFIG", &config)], || {
        let b = HipBackend::new().expect("the double's MI300X");
        assert_eq!(PoolBackend::fence_mode(&b), "memory");
    });
}
