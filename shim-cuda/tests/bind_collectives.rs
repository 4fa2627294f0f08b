//! NCCL collectives in bind mode, without a GPU: tests/fake/collective_app.c (a data-parallel
//! step loop: compute, an all-reduce on a communication stream after an event, the update after
//! the all-reduce; ring and tree grid shapes, and one all-reduce wider than the device holds at
//! once) runs against the fake libcuda in its asynchronous mode, natively and under the shim.
//!
//! Checked for every policy and several Chaos seeds: the program prints what it prints natively
//! (the fake fails a collective launched where its grid cannot be resident, as it could hang on a
//! GPU); each collective the device can hold at once ran on the service partition (the whole
//! device, no lease: `runtime::dispatch`), never on a smaller pool node, the one it cannot hold
//! ran natively; the stream and event order of the loop holds in the execution log.

use std::sync::OnceLock;

mod support;
use support::{check_exec_order, green_sms, run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-collectives", "collective_app"))
}

/// Runs the program; the whole-device node on a green context, so that a kernel on the primary
/// context is one the shim passed through natively.
fn run(name: &str, bind: Option<&[(&str, &str)]>) -> AppRun {
    let f = fixture();
    run_async_app(&f.app, &f.dir, name, bind, &[("VITAMIN_ROOT_CONTEXT", "green")])
}

/// Resident blocks per SM on the fake driver (tests/fake/libcuda.c).
const RESIDENT_PER_SM: u32 = 8;

/// Grid of collective `nccl<tag>` (tests/fake/collective_app.c).
fn grid_of(tag: u32) -> u32 {
    match tag - 20 {
        7 => 400,
        i if i % 2 == 0 => 100,
        _ => 24,
    }
}

/// The stream and event order of the loop, for every step.
fn edges() -> Vec<(String, String)> {
    let mut e = Vec::new();
    for i in 0..8 {
        let (k, nccl, update) = (format!("k{}", 1 + i), format!("nccl{}", 20 + i), format!("k{}", 40 + i));
        e.push((format!("end {k}"), format!("begin {nccl}")));
        e.push((format!("end {nccl}"), format!("begin {update}")));
        if i < 7 {
            e.push((format!("end {update}"), format!("begin k{}", 2 + i)));
        }
    }
    e
}

fn check(name: &str, r: &AppRun, native: &AppRun) {
    assert!(r.out.status.success(), "{name}: failed:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
    assert_eq!(r.stdout(), native.stdout(), "{name}: output differs from the native run");
    assert!(!r.calls.contains("WOULD_HANG"), "{name}: a collective ran where its grid is not resident");
    let edges = edges();
    let edges: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    check_exec_order(name, &r.exec, &edges);
    let sms = green_sms(&r.calls);
    let mut bound = 0;
    for line in r.exec.lines().filter(|l| l.starts_with("begin nccl")) {
        let label = line.split_whitespace().nth(1).unwrap();
        let grid = grid_of(label["nccl".len()..].parse().unwrap());
        let ctx = line.split_whitespace().find_map(|w| w.strip_prefix("ctx=")).unwrap();
        if grid > 36 * RESIDENT_PER_SM {
            assert_eq!(ctx, "p", "{name}: {label} ({grid} blocks) is wider than the device: it runs natively");
            continue;
        }
        let has = sms.get(ctx).copied().unwrap_or_else(|| panic!("{name}: {label} ran on {ctx}, not a pool context"));
        assert!(has * RESIDENT_PER_SM >= grid, "{name}: {label} ({grid} blocks) ran on {ctx} with {has} SMs");
        assert_eq!(has, 36, "{name}: {label} ran on {ctx}, not the whole-device service partition");
        bound += 1;
    }
    assert_eq!(bound, 7, "{name}: seven collectives bound");
    let ops = &r.census.as_ref().expect("census")["bind"]["ops"];
    assert_eq!(ops["cooperative_or_cluster"], 7, "{name}: {ops}");
    assert_eq!(ops["native_cooperative_or_cluster"], 1, "{name}: {ops}");
    let dispatcher = &r.census.as_ref().unwrap()["bind"]["dispatcher"];
    assert_eq!(dispatcher["collectives"], 7, "{name}: {dispatcher}");
}

#[test]
fn collectives_run_on_the_whole_device_without_a_lease_or_natively_when_too_wide() {
    let native = run("native", None);
    assert!(native.out.status.success() && native.stdout().ends_with("done\n"), "native: {}", native.stdout());
    assert!(native.exec.lines().any(|l| l.starts_with("begin nccl20")), "the fake logs collectives");
    let mut runs: Vec<(String, Vec<(&str, String)>)> = ["throughput", "tpot", "exclusive", "static"]
        .iter()
        .map(|p| (p.to_string(), vec![("VITAMIN_POLICY", p.to_string())]))
        .collect();
    for seed in [1, 2, 3, 4] {
        runs.push((
            format!("chaos-{seed}"),
            vec![("VITAMIN_POLICY", "chaos".to_string()), ("VITAMIN_SEED", seed.to_string())],
        ));
    }
    for (name, vars) in &runs {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        check(name, &run(name, Some(&vars)), &native);
    }
}
