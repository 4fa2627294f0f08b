//! Several devices in one process on the HIP test double (`FAKE_HIP_DEVICES=2`):
//! tests/fake/devices_app.c alternates a chain between a stream of device 0 and one of device 1
//! through events, then synchronizes device 1's event with device 0 current and reads the result
//! at once. Natively and in bind mode (Chaos, Throughput): the results are the chain's in order;
//! each device's kernels ran on CU-masked lanes of that device's own pool; the census reports
//! both devices and their cross-device waits.

mod support;

use support::{built, built_program, execs, masked_streams, run_program};

/// The device of each stream the double created (`dev=N` on its creation line; none: device 0).
fn stream_devices(log: &str) -> std::collections::HashMap<String, u32> {
    log.lines()
        .filter(|l| l.starts_with("call stream-create "))
        .filter_map(|l| {
            let s = l.split_whitespace().nth(2)?.to_owned();
            let dev = l.split_whitespace().find_map(|w| w.strip_prefix("dev=")).map_or(0, |d| d.parse().unwrap());
            Some((s, dev))
        })
        .collect()
}

#[test]
fn each_device_binds_its_own_launches_in_cross_device_order() {
    let Some(b) = built() else { return };
    let Some(exe) = built_program(b, "devices_app") else { return };
    let lib = b.lib.to_str().unwrap();
    let two = ("FAKE_HIP_DEVICES", "2");
    let slow = ("FAKE_HIP_DELAY_US", "2000");
    let native = run_program(b, &exe, "devices-native", false, &[], &[two, slow]);
    assert_eq!(native.line, "results=1");
    for (tag, policy) in [("devices-chaos", "chaos"), ("devices-throughput", "throughput")] {
        let env = [two, slow, ("VITAMIN_MODE", "bind"), ("VITAMIN_POLICY", policy), ("VITAMIN_HIP_LIBRARY", lib)];
        let r = run_program(b, &exe, tag, true, &[], &env);
        assert_eq!(r.line, "results=1", "{tag}: the chain ran out of order or a wait returned early\n{}", r.stderr);
        let devices = stream_devices(&r.log);
        let lanes = masked_streams(&r.log);
        let axpys: Vec<_> = execs(&r.log).into_iter().filter(|e| e.kernel() == Some("axpy")).collect();
        assert_eq!(axpys.len(), 8, "{tag}: {axpys:#?}");
        for e in &axpys {
            let want = if e.what.contains("grid=16x1x1") { 0 } else { 1 };
            assert!(lanes.contains(&e.stream), "{tag}: {e:?} ran on an application stream, not a pool lane");
            assert_eq!(devices[&e.stream], want, "{tag}: {e:?} ran on device {}'s stream", devices[&e.stream]);
        }
        let census = r.census.as_ref().expect("census");
        let per_device = census["bind"]["devices"].as_array().unwrap_or_else(|| panic!("{tag}: {census:#}"));
        assert_eq!(per_device.len(), 2, "{tag}");
        assert_eq!(per_device[0]["ops"]["cross_device_waits"], 3, "{tag}: device 0 waited on device 1's event 3 times");
        assert_eq!(per_device[1]["ops"]["cross_device_waits"], 4, "{tag}: device 1 waited on device 0's event 4 times");
        assert_eq!(
            (per_device[0]["ops"]["kernels"].as_u64(), per_device[1]["ops"]["kernels"].as_u64()),
            (Some(4), Some(4))
        );
    }
}
