//! The HIP interposer on the test double: a HIP application (tests/fake/app.c: two streams,
//! events, a host callback, async copies and memsets, host-stub, module and graph launches, host
//! threads on per-thread default streams) runs
//! natively and under `LD_PRELOAD=libvitamin_hip.so` in observe and bind mode; the outputs are
//! bitwise identical, the happens-before edges the application expressed hold in the double's
//! execution log, bind mode's kernels run on the pool's CU-masked lanes (the census names the
//! nodes), a faulting kernel reports the native code, and no run hangs (watchdog).

mod support;

use support::{built, execs, masked_streams, run, Exec, Run};

const LIB_ENV: &str = "VITAMIN_HIP_LIBRARY";
const ITERS: usize = 6;
/// Host threads of the application, two launches each on its per-thread default stream.
const THREADS: usize = 3;

/// Kernels a run of `iters` iterations executes: reduce_partial, reduce_final, axpy and the
/// captured graph's axpy per iteration, the per-thread stream's empty kernel, the threads'.
fn kernels_of(iters: usize) -> usize {
    4 * iters + 1 + 2 * THREADS
}

/// The happens-before edges of every iteration k, checked on the executed operations (begin and
/// end lines of the double's log, one global order):
/// memset(partial) < reduce_partial_k < reduce_final_k < callback_k, axpy_k < copy(y)_k, and
/// reduce_final_k < reduce_partial_{k+1} (s1 waits on e2, recorded on s2 after iteration k).
fn check_happens_before(tag: &str, ops: &[Exec]) {
    let nth = |pred: &dyn Fn(&Exec) -> bool, k: usize| -> &Exec {
        ops.iter().filter(|e| pred(e)).nth(k).unwrap_or_else(|| panic!("{tag}: occurrence {k} missing: {ops:#?}"))
    };
    // Operations a graph launch ran (logged inside its begin and end) are the graph's.
    let graphs: Vec<&Exec> = ops.iter().filter(|e| e.what == "graph").collect();
    let in_graph = |e: &Exec| graphs.iter().any(|g| g.begin < e.begin && e.end < g.end);
    let in_graph = &in_graph;
    let kernel = |name: &'static str| move |e: &Exec| e.kernel() == Some(name) && !in_graph(e);
    let what = |w: &'static str| move |e: &Exec| e.what == w;
    let before = |a: &Exec, b: &Exec, edge: &str| {
        assert!(a.end < b.begin, "{tag}: {edge}: {a:?} must end before {b:?} begins");
    };
    for k in 0..ITERS {
        let partial = nth(&kernel("reduce_partial"), k);
        let fin = nth(&kernel("reduce_final"), k);
        let axpy = nth(&kernel("axpy"), k);
        before(nth(&what("fill 64 x 1"), k), partial, "memset(partial) -> reduce_partial");
        before(partial, fin, "reduce_partial -> (e1) -> reduce_final");
        before(fin, nth(&what("callback"), k), "reduce_final -> host callback");
        before(axpy, nth(&what("copy 160000"), k), "axpy -> copy of y");
        before(fin, nth(&what("copy 4"), k), "reduce_final -> copy of the sum");
        let graph = nth(&what("graph"), k);
        before(nth(&what("copy 160000"), k), graph, "copy of y -> graph launch");
        if k + 1 < ITERS {
            before(graph, nth(&kernel("axpy"), k + 1), "graph (y += x) -> the next axpy");
        }
        if k + 1 < ITERS {
            before(fin, nth(&kernel("reduce_partial"), k + 1), "iteration k (e2) -> reduce_partial k+1");
        }
    }
}

fn native(b: &support::Built, tag: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    run(b, tag, false, args, env)
}

#[test]
fn observe_and_bind_give_the_native_results_in_the_native_order() {
    let Some(b) = built() else { return };
    let lib = b.lib.to_str().unwrap();
    let iters = ITERS.to_string();
    let n = native(b, "native", &[&iters], &[]);
    assert!(n.line.contains("cb_ok=1 invalid=1 elapsed_ok=1 sync=0 extra=1 null=400"), "native: {}", n.line);
    check_happens_before("native", &execs(&n.log));

    let observe = run(b, "observe", true, &[&iters], &[("VITAMIN_MODE", "observe"), (LIB_ENV, lib)]);
    assert_eq!(observe.line, n.line, "observe mode changes nothing");
    check_happens_before("observe", &execs(&observe.log));
    let c = observe.census.as_ref().expect("observe census");
    assert_eq!(c["mode"], "observe");
    assert_eq!(c["interposer"], "hip");
    assert_eq!(c["totals"]["graph_launches"], ITERS as u64);
    assert_eq!(c["api"]["hipLaunchKernel"]["calls"], (2 * ITERS + 3 + 2 * THREADS) as u64, "{c:#}");
    assert_eq!(c["totals"]["captured_kernel_launches"], 1, "the launch captured into the graph");
    assert_eq!(c["api"]["hipLaunchKernel"]["failed"], 1, "the invalid launch");
    assert_eq!(c["api"]["hipModuleLaunchKernel"]["calls"], ITERS as u64 + 2);
    // The double calls its own exports (hipEventCreate -> hipEventCreateWithFlags, hipMemset ->
    // hipMemsetAsync, hipExtLaunchKernel -> hipLaunchKernel): re-entered hooks only forward, so
    // only the application's own calls are counted.
    assert_eq!(c["api"]["hipEventCreate"]["calls"], 2);
    assert_eq!(c["api"]["hipEventCreateWithFlags"]["calls"], 2, "{:#}", c["api"]);
    assert_eq!(c["api"]["hipMemset"]["calls"], 1);
    assert_eq!(c["api"]["hipMemsetAsync"]["calls"], (ITERS + THREADS) as u64, "{:#}", c["api"]);
    let names: Vec<&str> = c["kernels"].as_array().unwrap().iter().filter_map(|k| k["name"].as_str()).collect();
    for k in ["reduce_partial", "reduce_final", "axpy", "empty_kernel"] {
        assert!(names.contains(&k), "kernel census names {k}: {names:?}");
    }

    for (tag, policy, seed) in [("throughput", "throughput", "1"), ("chaos1", "chaos", "1"), ("chaos2", "chaos", "2")] {
        let env = [("VITAMIN_MODE", "bind"), ("VITAMIN_POLICY", policy), ("VITAMIN_SEED", seed), (LIB_ENV, lib)];
        let r = run(b, tag, true, &[&iters], &env);
        assert_eq!(r.line, n.line, "{tag}: bind mode's results are bitwise the native ones");
        let ops = execs(&r.log);
        check_happens_before(tag, &ops);
        // Every kernel ran on a pool lane (a stream the backend created with a node's CU mask),
        // none on the application's own streams.
        let lanes = masked_streams(&r.log);
        let kernels: Vec<&Exec> = ops.iter().filter(|e| e.kernel().is_some()).collect();
        assert_eq!(kernels.len(), kernels_of(ITERS), "{tag}: every kernel ran once");
        for k in &kernels {
            assert!(lanes.contains(&k.stream), "{tag}: {k:?} did not run on a pool lane");
        }
        let c = r.census.as_ref().expect("bind census");
        let bind = &c["bind"];
        assert_eq!(bind["active"], true, "{tag}: {bind:#}");
        assert_eq!(bind["policy"], policy);
        let nodes: Vec<&str> = bind["nodes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
        assert_eq!(nodes.len(), 71, "{tag}: the MI300X pool: {nodes:?}");
        assert_eq!(nodes[0], "CU 0-303");
        let per_node: u64 = bind["dispatcher"]["per_node"].as_array().unwrap().iter().filter_map(|n| n.as_u64()).sum();
        assert!(per_node > 0, "{tag}: ops bound to pool nodes: {bind:#}");
        assert!(bind["ops"]["kernels"].as_u64().unwrap() >= 3 * ITERS as u64, "{tag}: {bind:#}");
        assert!(bind["ops"]["host_functions"].as_u64().unwrap() >= ITERS as u64, "{tag}: {bind:#}");
        assert!(bind["ops"]["copies"].as_u64().unwrap() >= 2 * ITERS as u64, "{tag}: {bind:#}");
        assert!(bind["ops"]["invalid_launches"].as_u64().unwrap() >= 1, "{tag}: the 2048-thread launch");
        // Graph launches go to the whole-device node (its lanes have every CU).
        let graphs: Vec<&Exec> = ops.iter().filter(|e| e.what == "graph").collect();
        assert_eq!(graphs.len(), ITERS, "{tag}");
        assert!(graphs.iter().all(|g| lanes.contains(&g.stream) && g.cus == 304), "{tag}: {graphs:?}");
        assert_eq!(bind["ops"]["graph_launches"], ITERS as u64, "{tag}: {bind:#}");
        assert_eq!(bind["ops"]["forwarded_capturing"], 1, "{tag}: the captured launch was forwarded");
        // The occupancy (the policies' size model) is asked once per function and launch shape.
        let mut asked = std::collections::BTreeMap::new();
        for l in r.log.lines().filter_map(|l| l.strip_prefix("occupancy ")) {
            *asked.entry(l.to_owned()).or_insert(0) += 1;
        }
        let want = [
            "axpy threads=256 smem=0",
            "empty_kernel threads=32 smem=0",
            "reduce_final threads=1 smem=0",
            "reduce_partial threads=64 smem=0",
        ];
        for k in want {
            assert_eq!(asked.get(k), Some(&1), "{tag}: {k} asked once: {asked:?}");
        }
        assert_eq!(asked.len(), 4, "{tag}: only the shapes launched: {asked:?}");
        if policy == "chaos" {
            let sizes: std::collections::BTreeSet<u32> = kernels.iter().map(|k| k.cus).collect();
            assert!(sizes.len() >= 2, "{tag}: chaos bound kernels to nodes of one size only: {sizes:?}");
        }
    }
}

/// Without `VITAMIN_HIP_LIBRARY`, the interposer forwards to the library the application loaded
/// and builds the pool from that same library.
#[test]
fn bind_mode_finds_the_applications_library() {
    let Some(b) = built() else { return };
    let n = native(b, "native-lib", &["2"], &[]);
    let r = run(b, "bind-lib", true, &["2"], &[("VITAMIN_MODE", "bind")]);
    assert_eq!(r.line, n.line);
    let c = r.census.as_ref().expect("census");
    assert_eq!(c["bind"]["active"], true, "{:#}", c["bind"]);
    assert!(!masked_streams(&r.log).is_empty(), "the pool's lanes were created in the application's library");
}

/// A kernel that fails asynchronously: the next synchronize reports the runtime's own code
/// (hipErrorLaunchFailure), as does the device synchronize after it, in every mode.
#[test]
fn an_asynchronous_failure_reports_the_native_code() {
    let Some(b) = built() else { return };
    let lib = b.lib.to_str().unwrap();
    let fail = ("FAKE_HIP_FAIL_KERNEL", "reduce_final");
    let n = native(b, "fault-native", &["3", "fault"], &[fail]);
    assert!(n.line.contains("sync=719"), "native: {}", n.line);
    for (tag, mode, policy) in [("fault-observe", "observe", "throughput"), ("fault-bind", "bind", "chaos")] {
        let env = [fail, ("VITAMIN_MODE", mode), ("VITAMIN_POLICY", policy), (LIB_ENV, lib)];
        let r = run(b, tag, true, &["3", "fault"], &env);
        assert_eq!(r.line, n.line, "{tag}");
        assert!(r.line.contains("sync=719") && r.line.contains("invalid=1"), "{tag}: {}", r.line);
    }
}

/// The double's failure injection at start-up: when the pool cannot be realized (the stream
/// bound refuses it), the process keeps running natively in observe mode and the census says why.
#[test]
fn bind_mode_falls_back_to_observe_when_the_pool_cannot_be_built() {
    let Some(b) = built() else { return };
    let lib = b.lib.to_str().unwrap();
    let n = native(b, "fallback-native", &["2"], &[]);
    let env = [
        ("VITAMIN_MODE", "bind"),
        (LIB_ENV, lib),
        ("VITAMIN_CONFIG", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/max-streams-4.toml")),
    ];
    let r = run(b, "fallback", true, &["2"], &env);
    assert_eq!(r.line, n.line);
    let bind = &r.census.as_ref().expect("census")["bind"];
    assert_eq!(bind["active"], false, "{bind:#}");
    let reason = bind.to_string();
    assert!(reason.contains("stream"), "the census says why: {reason}");
    // The partly realized pool was torn down; every kernel ran on the application's streams.
    let lanes = masked_streams(&r.log);
    let kernels: Vec<Exec> = execs(&r.log).into_iter().filter(|e| e.kernel().is_some()).collect();
    assert_eq!(kernels.len(), kernels_of(2));
    assert!(kernels.iter().all(|k| !lanes.contains(&k.stream)), "{kernels:?}\n{}", r.log);
}

/// Every symbol the interposer exports is an entry point of Debian's real `libamdhip64.so.5`,
/// except those newer than HIP 5.2 (where present, they are forwarded too) and the C name of
/// `hipExtModuleLaunchKernel` (5.2 has only its C++ name, which is exported too).
#[test]
fn exports_are_real_hip_entry_points() {
    use vitamin_hal_hip::symbols::{exports, DEBIAN_LIBAMDHIP64};
    let reference = match exports(std::path::Path::new(DEBIAN_LIBAMDHIP64)) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let ours = exports(&support::shim_path()).expect("objdump -T of libvitamin_hip.so");
    let real: std::collections::HashSet<&str> = reference.iter().map(|e| e.name.as_str()).collect();
    let newer = [
        "hipModuleLaunchCooperativeKernel",
        "hipLaunchHostFunc",
        "hipGetProcAddress",
        "hipLaunchKernelExC",
        "hipDrvLaunchKernelEx",
        "hipExtModuleLaunchKernel",
    ];
    let hooked: Vec<&str> =
        ours.iter().map(|e| e.name.as_str()).filter(|n| n.starts_with("hip") || n.starts_with("__hip")).collect();
    assert!(hooked.len() >= 60, "{hooked:?}");
    for name in &hooked {
        assert!(real.contains(name) || newer.contains(name), "{name} is not a HIP 5.2 entry point");
    }
    for name in vitamin_hip::hooks::HOOKS.iter().map(|h| h.symbol()) {
        assert!(hooked.contains(&name), "{name} is in the hook table but not exported");
    }
    let cxx = vitamin_hip::ffi::EXT_MODULE_LAUNCH_KERNEL_CXX;
    assert!(real.contains(cxx) && ours.iter().any(|e| e.name == cxx), "{cxx}: exported as 5.2 exports it");
}

/// A runtime without `hipKernelGetParamInfo` and `hipGetFuncBySymbol` (HIP before ROCm 6, here
/// the double with `FAKE_HIP_API=5.2`): without code objects to read, every launch takes the
/// native path; with the application's code objects (a module's ELF, the host stubs' offload
/// bundle), their metadata gives the layouts and every kernel is bound, the host stubs launched
/// as themselves with `hipLaunchKernel` on the pool's lanes.
#[test]
fn layouts_from_code_objects_bind_launches_on_runtimes_without_param_info() {
    use vitamin_hal::ParamLayout;
    use vitamin_hip::codeobj::build::{bundle, code_object, metadata};
    let Some(b) = built() else { return };
    let lib = b.lib.to_str().unwrap();
    let p = |offset, size| ParamLayout { offset, size };
    // The reference kernels' parameters as the double lays them out (natural alignment).
    let reduce = [p(0, 8), p(8, 4), p(16, 8)];
    let axpy = [p(0, 4), p(8, 8), p(16, 8), p(24, 4)];
    let module = code_object(&metadata(&[("reduce_final", &reduce)]));
    let stubs = code_object(&metadata(&[("reduce_partial", &reduce), ("axpy", &axpy), ("empty_kernel", &[])]));
    let fatbin = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx942", &stubs)]);
    let (co_path, fat_path) = (b.dir.join("module.co"), b.dir.join("stubs.hipfb"));
    std::fs::write(&co_path, &module).unwrap();
    std::fs::write(&fat_path, &fatbin).unwrap();
    let (co, fat) = (co_path.to_str().unwrap(), fat_path.to_str().unwrap());
    let iters = "3";
    let old = ("FAKE_HIP_API", "5.2");

    let n = native(b, "old-native", &[iters], &[old]);
    let plain = run(b, "old-plain", true, &[iters], &[old, ("VITAMIN_MODE", "bind"), (LIB_ENV, lib)]);
    assert_eq!(plain.line, n.line);
    let lanes = masked_streams(&plain.log);
    // Graph launches need no layout (they are bound whole); the kernels launched directly do.
    let ops = execs(&plain.log);
    let graphs: Vec<&Exec> = ops.iter().filter(|e| e.what == "graph").collect();
    let direct =
        ops.iter().filter(|e| e.kernel().is_some() && !graphs.iter().any(|g| g.begin < e.begin && e.end < g.end));
    assert_eq!(direct.filter(|e| lanes.contains(&e.stream)).count(), 0, "no layout: every launch took the native path");
    assert!(graphs.iter().all(|g| lanes.contains(&g.stream)), "graph launches are bound");

    let with_images = [old, ("APP_CODE_OBJECT", co), ("APP_FATBIN", fat)];
    let n = native(b, "images-native", &[iters], &with_images);
    assert_eq!(n.line, plain.line, "the images change nothing natively");
    for (tag, policy) in [("images-throughput", "throughput"), ("images-chaos", "chaos")] {
        let env = [old, ("APP_CODE_OBJECT", co), ("APP_FATBIN", fat), ("VITAMIN_POLICY", policy), (LIB_ENV, lib)];
        let r = run(b, tag, true, &[iters], &env);
        assert_eq!(r.line, n.line, "{tag}");
        let lanes = masked_streams(&r.log);
        let kernels: Vec<Exec> = execs(&r.log).into_iter().filter(|e| e.kernel().is_some()).collect();
        assert_eq!(kernels.len(), kernels_of(3));
        for k in &kernels {
            assert!(lanes.contains(&k.stream), "{tag}: {k:?} was not bound");
        }
        assert!(r.log.contains("call launch-stub s"), "host stubs were launched as themselves");
    }
}
