//! Several devices in one process, without a GPU: tests/fake/multi_device_app.c runs against the
//! fake libcuda with two devices (`FAKE_CUDA_DEVICES=2`), natively and under the shim.
//!
//! Checked for Chaos, Throughput and Exclusive: the program prints what it prints natively (its
//! host reads right after an event or stream synchronize on the other device's handle would see
//! unfinished work otherwise); every kernel ran on a pool node of its own device (device 0's
//! kernels on device 0's green contexts, device 1's on device 1's); the chain alternating between
//! the devices through events keeps its order in both directions; the census reports both
//! devices, each with its own pool and its cross-device waits.

use std::sync::OnceLock;

mod support;
use support::{check_exec_order, device_of, on_one_cpu, run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-devices", "multi_device_app"))
}

fn run(name: &str, bind: Option<&[(&str, &str)]>) -> AppRun {
    let f = fixture();
    // The whole-device node on a green context too, so every bound kernel names its device.
    let r = run_async_app(&f.app, &f.dir, name, bind, &[("FAKE_CUDA_DEVICES", "2"), ("VITAMIN_ROOT_CONTEXT", "green")]);
    assert!(r.out.status.success(), "{name} failed:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
    assert!(r.stdout().ends_with("done\n"), "{name}:\n{}", r.stdout());
    r
}

#[test]
fn each_device_binds_its_own_launches_in_cross_device_order() {
    let native = run("native", None);
    let mut edges = Vec::new();
    for i in 0..4 {
        edges.push((format!("end k{}", 10 + i), format!("begin k{}", 20 + i)));
        if i < 3 {
            edges.push((format!("end k{}", 20 + i), format!("begin k{}", 11 + i)));
        }
    }
    edges.push(("end k23".into(), "begin k95".into()));
    let edges: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    check_exec_order("native", &native.exec, &edges);
    for (name, vars) in [
        ("chaos", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3")]),
        ("throughput", vec![("VITAMIN_POLICY", "throughput")]),
        ("exclusive", vec![("VITAMIN_POLICY", "exclusive")]),
    ] {
        let r = run(name, Some(&vars));
        assert_eq!(r.stdout(), native.stdout(), "{name}: output differs from the native run");
        check_exec_order(name, &r.exec, &edges);
        for i in 0..4 {
            assert_eq!(
                device_of(&r.exec, &r.calls, &format!("k{}", 10 + i)),
                Some(0),
                "{name}: k{} on device 0's pool",
                10 + i
            );
            assert_eq!(
                device_of(&r.exec, &r.calls, &format!("k{}", 20 + i)),
                Some(1),
                "{name}: k{} on device 1's pool",
                20 + i
            );
        }
        assert_eq!(device_of(&r.exec, &r.calls, "k95"), Some(1));
        assert_eq!(device_of(&r.exec, &r.calls, "k96"), Some(1));
        assert_eq!(device_of(&r.exec, &r.calls, "k97"), Some(1));
        let census = r.census.as_ref().expect("census");
        let devices = census["bind"]["devices"].as_array().unwrap_or_else(|| panic!("{name}: {census}"));
        assert_eq!(devices.len(), 2, "{name}: {census}");
        let ops = |d: usize| &devices[d]["ops"];
        assert_eq!((ops(0)["kernels"].as_u64(), ops(1)["kernels"].as_u64()), (Some(4), Some(7)), "{name}");
        assert_eq!(ops(0)["cross_device_waits"], 3, "{name}: device 0 waited on device 1's event 3 times");
        assert_eq!(ops(1)["cross_device_waits"], 4, "{name}: device 1 waited on device 0's event 4 times");
        assert_eq!(devices[1]["ordinal"], 1);
        // Two pools of the fake's 36 SMs: 15 nodes each.
        assert_eq!(devices[0]["nodes"].as_array().map(Vec::len), Some(15));
        assert_eq!(devices[1]["nodes"].as_array().map(Vec::len), Some(15));
    }
}

/// The program synchronizes on device 1's event and stream with device 0's context current, and
/// on device 1's stream with no context current: the waiting thread cannot poll device 1's
/// completions itself (its wait assist acts only where that device's pool context is current),
/// so device 1's dispatcher thread must record and observe them. On one CPU, where the two
/// threads never run side by side, the program still finishes and prints what it prints
/// natively (it hung there when such a waiter counted as polling for itself).
#[test]
fn waits_on_another_devices_handles_end_on_one_cpu() {
    let native = run("native-one-cpu", None);
    for (name, vars) in [
        ("throughput-one-cpu", vec![("VITAMIN_POLICY", "throughput")]),
        ("chaos-one-cpu", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "5")]),
    ] {
        let r = on_one_cpu(|| run(name, Some(&vars)));
        assert_eq!(r.stdout(), native.stdout(), "{name}: output differs from the native run");
    }
}
