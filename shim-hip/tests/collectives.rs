//! RCCL's collectives on the HIP test double: tests/fake/collective_app.c runs a step loop with a
//! collective (by name: `ncclDevKernel_...`) on a communication stream between compute kernels.
//! In bind mode (Chaos, Throughput, Exclusive) the chain's values are those of native order; every
//! collective ran on the dispatcher's service partition (a lane over every CU, no lease), the
//! compute kernels on pool lanes; the dispatcher counts the collectives.

mod support;

use support::{built, built_program, execs, masked_streams, run_program};

#[test]
fn collectives_run_on_the_whole_device_without_a_lease() {
    let Some(b) = built() else { return };
    let Some(exe) = built_program(b, "collective_app") else { return };
    let lib = b.lib.to_str().unwrap();
    let slow = ("FAKE_HIP_DELAY_US", "2000");
    let native = run_program(b, &exe, "coll-native", false, &[], &[slow]);
    assert_eq!(native.line, "results=1");
    for policy in ["chaos", "throughput", "exclusive"] {
        let tag = format!("coll-{policy}");
        let env = [slow, ("VITAMIN_MODE", "bind"), ("VITAMIN_POLICY", policy), ("VITAMIN_HIP_LIBRARY", lib)];
        let r = run_program(b, &exe, &tag, true, &[], &env);
        assert_eq!(r.line, "results=1", "{tag}: the chain ran out of order\n{}", r.stderr);
        let lanes = masked_streams(&r.log);
        let all = execs(&r.log);
        let colls: Vec<_> =
            all.iter().filter(|e| e.kernel().is_some_and(|k| k.starts_with("ncclDevKernel_"))).collect();
        assert_eq!(colls.len(), 4, "{tag}: {colls:#?}");
        for e in &colls {
            assert!(lanes.contains(&e.stream), "{tag}: {e:?} ran on an application stream");
            assert_eq!(e.cus, 304, "{tag}: {e:?} ran on a part of the device, not the whole-device service lane");
        }
        let census = r.census.as_ref().expect("census");
        assert_eq!(census["bind"]["dispatcher"]["collectives"], 4, "{tag}: {:#}", census["bind"]["dispatcher"]);
    }
}
