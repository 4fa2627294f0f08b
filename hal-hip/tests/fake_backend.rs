//! hal-hip on the HIP test double (no AMD GPU): probe, topology, pool realization, submission
//! order, fences, cooperative launches, asynchronous failures, partial realization, hipRTC.
//!
//! Each test runs its body in a child process (`support::in_child`) with the double configured
//! by environment variables. Without the HIP headers or a C compiler every test prints `SKIPPED`.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{config_file, in_child, in_child_case, log};
use vitamin_hal::{
    Backend, Dim3, Fence, FunctionRef, HalError, Incompatibility, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc,
    PhysicalPartition, UnitSet,
};
use vitamin_hal_hip::test_double::{TEST_KERNELS, TEST_KERNEL_NAMES};
use vitamin_hal_hip::{cu_mask, HipBackend, HipPartition, PartitionRealization};
use vitamin_runtime::pool::{Hierarchy, PoolError, Realized};

fn backend() -> HipBackend {
    HipBackend::new().expect("the HIP backend on the test double")
}

fn kernels(b: &HipBackend) -> Vec<FunctionRef> {
    b.compile_and_load(TEST_KERNELS, "test_kernels.hip", TEST_KERNEL_NAMES).expect("compile and load")
}

fn kernel(b: &HipBackend, name: &str) -> FunctionRef {
    kernels(b).into_iter().find(|f| f.name() == name).expect("kernel")
}

fn launch(f: &FunctionRef, grid: u32, block: u32, args: KernelArgs, attrs: LaunchAttributes) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(f.clone(), Dim3::x(grid), Dim3::x(block), 0, args, attrs)))
}

fn busy(f: &FunctionRef, grid: u32) -> Arc<OpDesc> {
    launch(f, grid, 64, KernelArgs::pack(&[&1000u32.to_le_bytes()]), LaunchAttributes::none())
}

/// Polls `p` until `n` fences completed (or an error); fails after 20 s.
fn wait(p: &HipPartition, n: usize) -> Result<Vec<Fence>, HalError> {
    let mut done = Vec::new();
    let start = Instant::now();
    while done.len() < n {
        p.poll(&mut done)?;
        assert!(start.elapsed() < Duration::from_secs(20), "only {} of {n} fences completed", done.len());
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(done)
}

fn mask_hex(words: &[u32]) -> String {
    words.iter().rev().map(|w| format!("{w:08x}")).collect()
}

/// `call stream-create` lines of the log: (stream id, mask).
fn created_streams(log: &str) -> Vec<(String, String)> {
    log.lines()
        .filter_map(|l| l.strip_prefix("call stream-create s"))
        .map(|rest| {
            let id = rest.split_whitespace().next().unwrap().to_string();
            let mask = rest.split("mask=").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
            (id, mask)
        })
        .collect()
}

/// The call that creates lane streams on this backend: CU-masked streams, or green-context
/// streams where the double has green contexts (variant `green-contexts`).
fn stream_create_call(b: &HipBackend) -> &'static str {
    match b.partition_realization() {
        PartitionRealization::CuMask => "hipExtStreamCreateWithCUMask",
        _ => "hipExecutionCtxStreamCreate",
    }
}

fn destroyed_streams(log: &str) -> usize {
    log.lines().filter(|l| l.starts_with("call stream-destroy")).count()
}

#[test]
fn probe_reads_the_simulated_mi300x() {
    in_child("probe_reads_the_simulated_mi300x", &[], || {
        let caps = vitamin_hal_hip::probe().expect("probe");
        assert_eq!(caps.device_name, "AMD Instinct MI300X");
        assert_eq!(caps.arch, "gfx942:sramecc+:xnack-");
        assert_eq!(caps.arch_base(), "gfx942");
        assert_eq!((caps.cu_count, caps.xcds, caps.wgp_mode), (304, 8, false));
        assert_eq!(caps.runtime_version_string(), "5.2.21153");
        assert!(caps.cooperative_launch && caps.module_cooperative_launch && caps.stream_write_value64);
        assert!(!caps.launch_host_func, "HIP 5.2 has no hipLaunchHostFunc: host functions use stream callbacks");
        let green = support::Variant::from_env() == support::Variant::GreenContexts;
        assert_eq!(caps.green_contexts, green, "green contexts exactly in the double's green-context variant");
        assert_eq!(caps.rtc_version, Some((5, 2)));
    });
}

#[test]
fn without_a_device_the_probe_says_why() {
    in_child("without_a_device_the_probe_says_why", &[("FAKE_HIP_DEVICE", "none")], || {
        match vitamin_hal_hip::probe() {
            Err(HalError::Unsupported { backend: "hip", reason }) => {
                assert!(reason.contains("hipErrorNoDevice (100)") && reason.contains("no AMD GPU"), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert!(matches!(HipBackend::new(), Err(HalError::Unsupported { .. })));
    });
}

#[test]
fn a_missing_library_or_symbol_is_unsupported() {
    in_child(
        "a_missing_library_or_symbol_is_unsupported",
        &[("VITAMIN_HIP_LIBRARY", "/nonexistent/libamdhip64.so")],
        || {
            match vitamin_hal_hip::probe() {
                Err(HalError::Unsupported { reason, .. }) => {
                    assert!(
                        reason.contains("libamdhip64) was not found") && reason.contains("/nonexistent"),
                        "{reason}"
                    );
                }
                other => panic!("expected Unsupported, got {other:?}"),
            }
            // A library that exists but is not a HIP runtime: every missing symbol is named.
            let libc = std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6");
            if libc.exists() {
                match vitamin_hal_hip::probe_library(Some(libc.to_str().unwrap()), 0) {
                    Err(HalError::Unsupported { reason, .. }) => {
                        assert!(
                            reason.contains("lacks hipGetErrorName") && reason.contains("hipExtStreamCreateWithCUMask")
                        );
                    }
                    other => panic!("expected Unsupported, got {other:?}"),
                }
            }
        },
    );
}

/// Debian's real libamdhip64 on a machine without an AMD GPU: the probe says why, no panic.
#[test]
fn debians_library_without_a_gpu_says_no_device() {
    let real = vitamin_hal_hip::symbols::DEBIAN_LIBAMDHIP64;
    if !std::path::Path::new(real).exists() {
        eprintln!("SKIPPED: {real} is not installed (apt-get install libamdhip64-dev)");
        return;
    }
    in_child("debians_library_without_a_gpu_says_no_device", &[("VITAMIN_HIP_LIBRARY", real)], || {
        match vitamin_hal_hip::probe() {
            Err(HalError::Unsupported { reason, .. }) => {
                assert!(reason.contains("hipGetDeviceCount returned"), "{reason}");
                eprintln!("Debian's libamdhip64 here: {reason}");
            }
            Ok(caps) => eprintln!("an AMD GPU is visible: {caps:?}"),
            Err(other) => panic!("expected Unsupported or a device, got {other}"),
        }
    });
}

#[test]
fn mi300x_leaves_put_bit_i_on_xcd_i_mod_8() {
    in_child("mi300x_leaves_put_bit_i_on_xcd_i_mod_8", &[], || {
        let b = backend();
        let top = b.topology();
        assert_eq!((top.unit_count(), top.leaves().len(), top.domains().len()), (304, 19, 8));
        assert_eq!(top.capabilities().backend, "hip");
        for (i, leaf) in top.leaves().iter().enumerate() {
            assert_eq!(*leaf, UnitSet::range(16 * i, 16 * i + 16));
            for (x, d) in top.domains().iter().enumerate() {
                assert_eq!(leaf.intersection(d).len(), 2, "leaf {i}: two CUs on XCD {x}");
                assert!(d.iter().all(|bit| bit % 8 == x));
            }
        }
        // The same hierarchical pool as the simulated MI300X builds.
        let sim = vitamin_hal::sim::SimBackend::preset("mi300x").unwrap();
        assert_eq!(top.leaves(), sim.topology().leaves());
        assert_eq!(Hierarchy::build(top).len(), Hierarchy::build(sim.topology()).len());
    });
}

#[test]
fn wgp_parts_take_cu_pairs() {
    in_child("wgp_parts_take_cu_pairs", &[("FAKE_HIP_DEVICE", "wgp")], || {
        let b = backend();
        assert!(b.capabilities().wgp_mode);
        let top = b.topology().clone();
        assert_eq!((top.unit_count(), top.leaves().len()), (96, 16));
        // The double refuses masks that split a CU pair: every leaf must realize.
        for leaf in top.leaves() {
            assert_eq!(leaf.len() % 2, 0);
            b.create_partition(leaf, 1).expect("a leaf holds whole CU pairs");
        }
        assert!(!log().contains("split WGP"));
    });
    in_child_case(
        "wgp_parts_take_cu_pairs",
        "leaf3",
        &[("FAKE_HIP_DEVICE", "wgp"), ("VITAMIN_CONFIG", &config_file("leaf3", "[advanced]\nleaf_units = 3\n"))],
        || match HipBackend::new() {
            Err(HalError::InvalidTopology(why)) => assert!(why.contains("multiple of 2"), "{why}"),
            other => panic!("a 3-CU leaf on a WGP part must be refused, got {other:?}"),
        },
    );
}

/// Every pool node's streams are created with exactly the node's mask, and only as many as the
/// pool needs; dropping the pool destroys them all.
#[test]
fn pool_realization_creates_each_nodes_masked_streams() {
    in_child("pool_realization_creates_each_nodes_masked_streams", &[], || {
        let b = backend();
        let h = Hierarchy::build(b.topology());
        let realized = Realized::create(&b, 2).expect("pool");
        assert_eq!(b.streams_in_use(), h.len() * 2);
        let streams = created_streams(&log());
        assert_eq!(streams.len(), h.len() * 2, "two streams per node, nothing else");
        for (i, node) in h.nodes().iter().enumerate() {
            let want = mask_hex(&cu_mask(&node.units, 304));
            let part = realized.partition(node.id);
            assert_eq!(mask_hex(part.cu_mask()), want);
            for lane in 0..2 {
                assert_eq!(streams[2 * i + lane].1, want, "node {} lane {lane}", node.id);
            }
        }
        drop(realized);
        assert_eq!(destroyed_streams(&log()), h.len() * 2);
        assert_eq!(b.streams_in_use(), 0);
    });
}

#[test]
fn the_stream_bound_refuses_a_pool_cleanly() {
    let config = config_file("max-streams-50", "[advanced]\nmax_streams = 50\n");
    in_child("the_stream_bound_refuses_a_pool_cleanly", &[("VITAMIN_CONFIG", &config)], || {
        let b = backend();
        match Realized::create(&b, 2) {
            Err(PoolError::Realize { source: HalError::InvalidPartition(why), .. }) => {
                assert!(why.contains("max_streams") && why.contains("bounded to 50"), "{why}");
            }
            other => panic!("expected the bound to refuse the pool, got {other:?}"),
        }
        let log = log();
        assert_eq!(created_streams(&log).len(), 50, "streams up to the bound, none beyond");
        assert_eq!(destroyed_streams(&log), 50, "and all destroyed with the failed pool");
        assert_eq!(b.streams_in_use(), 0);
        let lanes = b.stream_limits().max_lanes + 1;
        assert!(matches!(b.create_partition(&b.topology().all_units(), lanes), Err(HalError::InvalidPartition(_))));
    });
}

#[test]
fn out_of_queue_memory_at_pool_creation_is_a_clean_error() {
    in_child("out_of_queue_memory_at_pool_creation_is_a_clean_error", &[("FAKE_HIP_MAX_STREAMS", "41")], || {
        let b = backend();
        match Realized::create(&b, 2) {
            Err(PoolError::Realize { source: HalError::OutOfMemory(why), .. }) => {
                assert!(why.contains(stream_create_call(&b)) && why.contains("hipErrorOutOfMemory"), "{why}");
            }
            other => panic!("expected out of memory, got {other:?}"),
        }
        let log = log();
        assert_eq!(created_streams(&log).len(), 41);
        assert_eq!(destroyed_streams(&log), 41, "the part of the pool that was realized is destroyed");
        assert_eq!(b.streams_in_use(), 0);
        b.create_partition(&b.topology().leaves()[0], 2).expect("the backend stays usable");
    });
}

#[test]
fn a_failing_stream_creation_leaves_nothing_behind() {
    in_child("a_failing_stream_creation_leaves_nothing_behind", &[("FAKE_HIP_FAIL_STREAM_CREATE", "3")], || {
        let b = backend();
        match b.create_partition(&b.topology().leaves()[0], 4) {
            Err(HalError::Driver { call, code: 1, name }) => {
                assert_eq!((call, name.as_str()), (stream_create_call(&b), "hipErrorInvalidValue"));
            }
            other => panic!("expected the third stream to fail, got {other:?}"),
        }
        assert_eq!(destroyed_streams(&log()), 2);
        assert_eq!(b.streams_in_use(), 0);
    });
}

/// Ops on one lane execute one after another in submission order, on the lane's stream with the
/// partition's mask; fences come back once each, in order.
#[test]
fn submission_runs_in_stream_order() {
    in_child("submission_runs_in_stream_order", &[("FAKE_HIP_DELAY_US", "3000")], || {
        let b = backend();
        let f = kernel(&b, "busy");
        let p = b.create_partition(&b.topology().leaves()[3], 2).expect("leaf");
        let mut fences = Vec::new();
        for i in 0..4u32 {
            for lane in 0..2u32 {
                fences.push(p.submit(lane, &busy(&f, 10 + 10 * lane + i)).expect("submit"));
            }
        }
        let done = wait(&p, 8).expect("complete");
        assert_eq!(done.len(), 8);
        for lane in 0..2u32 {
            let seqs: Vec<u64> = done.iter().filter(|d| d.lane == lane).map(|d| d.seq).collect();
            assert_eq!(seqs, [1, 2, 3, 4], "lane {lane}");
        }
        let log = log();
        let streams = created_streams(&log);
        let mask = mask_hex(p.cu_mask());
        assert_eq!(mask, mask_hex(&cu_mask(&UnitSet::range(48, 64), 304)));
        for lane in 0..2u32 {
            let stream = format!(" s{} ", streams[lane as usize].0);
            let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("exec ") && l.contains(&stream)).collect();
            let expect: Vec<String> = (0..4u32)
                .flat_map(|i| {
                    let g = 10 + 10 * lane + i;
                    [format!("begin kernel busy grid={g}x1x1"), format!("end kernel busy grid={g}x1x1")]
                })
                .collect();
            assert_eq!(lines.len(), 8, "{log}");
            for (line, want) in lines.iter().zip(&expect) {
                let (kind, what) = want.split_once(' ').unwrap();
                assert!(line.starts_with(&format!("exec {kind}")) && line.contains(what), "{line} vs {want}\n{log}");
                if kind == "begin" {
                    assert!(line.contains(&format!("cus=16 mask={mask}")), "{line}");
                }
            }
        }
    });
}

fn reduction(b: &HipBackend, p: &HipPartition, n: u32, grid: u32) -> Result<u32, HalError> {
    let ks = kernels(b);
    let k = |n: &str| ks.iter().find(|f| f.name() == n).unwrap().clone();
    let xs: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.3).collect();
    let x = b.alloc(n as usize * 4)?;
    b.write_f32s(x, &xs)?;
    let partial = b.alloc(grid as usize * 4)?;
    let out = b.alloc(4)?;
    let args1 = KernelArgs::pack(&[&x.to_le_bytes(), &n.to_le_bytes(), &partial.to_le_bytes()]);
    let args2 = KernelArgs::pack(&[&partial.to_le_bytes(), &grid.to_le_bytes(), &out.to_le_bytes()]);
    p.submit(0, &launch(&k("reduce_partial"), grid, 256, args1, LaunchAttributes::none()))?;
    p.submit(0, &launch(&k("reduce_final"), 1, 32, args2, LaunchAttributes::none()))?;
    wait(p, 2)?;
    Ok(b.read_f32s(out, 1)?[0].to_bits())
}

/// The same reduction through event fences and through memory fences gives the simulator's bits.
#[test]
fn fences_by_event_and_by_stream_write() {
    fn expected(n: u32, grid: u32) -> u32 {
        use vitamin_hal::sim::SimBackend;
        let sim = SimBackend::preset("mi300x").unwrap();
        let xs: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.3).collect();
        let x = sim.alloc(n as usize * 4);
        sim.write_f32s(x, &xs).unwrap();
        let (partial, out) = (sim.alloc(grid as usize * 4), sim.alloc(4));
        let p = sim.create_partition(&sim.topology().all_units(), 1).unwrap();
        let args1 = KernelArgs::pack(&[&x.to_le_bytes(), &n.to_le_bytes(), &partial.to_le_bytes()]);
        let args2 = KernelArgs::pack(&[&partial.to_le_bytes(), &grid.to_le_bytes(), &out.to_le_bytes()]);
        p.submit(0, &launch(&sim.kernel("reduce_partial").unwrap(), grid, 256, args1, LaunchAttributes::none()))
            .unwrap();
        p.submit(0, &launch(&sim.kernel("reduce_final").unwrap(), 1, 32, args2, LaunchAttributes::none())).unwrap();
        sim.run_until_idle();
        sim.read_f32s(out, 1).unwrap()[0].to_bits()
    }
    for mode in ["event", "memory"] {
        let config = config_file(&format!("fence-{mode}"), &format!("[advanced]\nfence = \"{mode}\"\n"));
        in_child_case("fences_by_event_and_by_stream_write", mode, &[("VITAMIN_CONFIG", &config)], || {
            let b = backend();
            let memory = mode == "memory";
            assert_eq!(b.fence_mode() == vitamin_hal_hip::FenceMode::Memory, memory);
            let p = b.create_partition(&b.topology().leaves()[0], 1).expect("leaf");
            assert_eq!(reduction(&b, &p, 100_000, 96).expect("reduction"), expected(100_000, 96));
            let f = p.submit(0, &busy(&kernel(&b, "busy"), 4)).expect("submit");
            assert_eq!(p.lane_progress(0, f.seq).is_some(), memory, "a lock-free view only with memory fences");
            wait(&p, 1).expect("complete");
            let writes = log().lines().filter(|l| l.contains("write64")).count();
            assert_eq!(writes > 0, memory);
        });
    }
}

/// CU masks do not apply to cooperative launches: only the whole-device node takes them.
#[test]
fn cooperative_launches_go_to_the_whole_device_node() {
    in_child("cooperative_launches_go_to_the_whole_device_node", &[], || {
        let b = backend();
        let f = kernel(&b, "busy");
        let top = b.topology().clone();
        let leaf = b.create_partition(&top.leaves()[0], 1).expect("leaf");
        let half = b.create_partition(&top.leaves()[..8].iter().fold(UnitSet::EMPTY, |a, l| a | *l), 1).unwrap();
        let whole = b.create_partition(&top.all_units(), 1).expect("whole device");
        let coop = LaunchAttributes::new(true, None, None, Vec::new());
        let small = launch(&f, 40, 64, KernelArgs::pack(&[&1000u32.to_le_bytes()]), coop.clone());
        assert!(matches!(leaf.can_execute(&small), Err(Incompatibility::WholeDevice { .. })));
        assert!(matches!(half.can_execute(&small), Err(Incompatibility::WholeDevice { .. })));
        assert!(matches!(half.submit(0, &small), Err(HalError::Incompatible(Incompatibility::WholeDevice { .. }))));
        assert_eq!(whole.can_execute(&small), Ok(()));
        whole.submit(0, &small).expect("cooperative launch on the whole device");
        wait(&whole, 1).expect("complete");
        let too_big = launch(&f, 304 * 8 + 1, 64, KernelArgs::pack(&[&1000u32.to_le_bytes()]), coop);
        assert!(matches!(whole.can_execute(&too_big), Err(Incompatibility::NotCoResident { capacity: 2432, .. })));
        let log = log();
        let whole_stream = created_streams(&log).last().unwrap().0.clone();
        let coop_lines: Vec<&str> = log.lines().filter(|l| l.starts_with("call launch-cooperative")).collect();
        assert_eq!(coop_lines.len(), 1, "{log}");
        assert!(coop_lines[0].starts_with(&format!("call launch-cooperative s{whole_stream} busy")), "{log}");
        let cluster = launch(
            &f,
            4,
            64,
            KernelArgs::pack(&[&1u32.to_le_bytes()]),
            LaunchAttributes::new(false, Some(Dim3::x(2)), None, Vec::new()),
        );
        assert!(matches!(whole.can_execute(&cluster), Err(Incompatibility::InvalidLaunch(_))), "no clusters on AMD");
    });
}

/// A kernel that fails asynchronously is reported by the next poll with the runtime's code.
#[test]
fn an_asynchronous_failure_comes_back_with_the_native_code() {
    in_child(
        "an_asynchronous_failure_comes_back_with_the_native_code",
        &[("FAKE_HIP_FAIL_KERNEL", "reduce_final")],
        || {
            let b = backend();
            let p = b.create_partition(&b.topology().leaves()[1], 1).expect("leaf");
            match reduction(&b, &p, 10_000, 16) {
                Err(HalError::AsyncDriver { code, message }) => {
                    assert_eq!(code, 719, "hipErrorLaunchFailure");
                    assert!(message.contains("hipErrorLaunchFailure (719)") && message.contains("lane 0"), "{message}");
                }
                other => panic!("expected an asynchronous failure, got {other:?}"),
            }
            assert!(
                matches!(p.synchronize(), Err(HalError::AsyncDriver { code: 719, .. })),
                "synchronize reports it too"
            );
            assert!(log().contains("kernel reduce_final grid=1x1x1 block=32x1x1 FAILED"));
        },
    );
}

/// Host functions run on the lane after the ops before them (through `hipStreamAddCallback`,
/// since HIP 5.2 has no `hipLaunchHostFunc`), and a panicking one is an error, not an abort.
#[test]
fn host_functions_run_in_lane_order() {
    in_child("host_functions_run_in_lane_order", &[("FAKE_HIP_DELAY_US", "2000")], || {
        use std::sync::atomic::{AtomicU32, Ordering};
        let b = backend();
        let f = kernel(&b, "busy");
        let p = b.create_partition(&b.topology().leaves()[2], 1).expect("leaf");
        let seen = Arc::new(AtomicU32::new(0));
        let s = seen.clone();
        let host = Arc::new(OpDesc::Host(vitamin_hal::HostFunction::new("probe", move || {
            s.fetch_add(1, Ordering::SeqCst);
        })));
        p.submit(0, &busy(&f, 3)).unwrap();
        p.submit(0, &host).unwrap();
        wait(&p, 2).expect("complete");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        let log = log();
        let end_busy = log.find("exec end").unwrap();
        let callback = log.find("exec begin").and_then(|_| log.find("callback")).unwrap();
        assert!(end_busy < callback, "{log}");
        let bad = Arc::new(OpDesc::Host(vitamin_hal::HostFunction::new("bad", || panic!("host function panics"))));
        p.submit(0, &bad).unwrap();
        let start = Instant::now();
        let err = loop {
            let mut done = Vec::new();
            if let Err(e) = p.poll(&mut done) {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "the panic was never reported");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(matches!(&err, HalError::Async(w) if w.contains("bad panicked")), "{err}");
    });
}

#[test]
fn hiprtc_compiles_and_reports_errors() {
    in_child("hiprtc_compiles_and_reports_errors", &[], || {
        let code = vitamin_hal_hip::rtc::compile(TEST_KERNELS, "k.hip", "gfx942", &["-O3"]).expect("compile");
        assert!(code.starts_with(b"FAKEHIPCO1\n"));
        match vitamin_hal_hip::rtc::compile("#error no such kernel\n", "bad.hip", "gfx942", &[]) {
            Err(HalError::Driver { call: "hiprtcCompileProgram", code: 6, name }) => {
                assert!(name.contains("HIPRTC_ERROR_COMPILATION") && name.contains("bad.hip: error: #error"), "{name}");
            }
            other => panic!("expected a compilation error, got {other:?}"),
        }
        let b = backend();
        match b.load_module(b"not a code object", &["busy"]) {
            Err(HalError::Driver { call: "hipModuleLoadData", code: 200, .. }) => {}
            other => panic!("expected hipErrorInvalidImage, got {other:?}"),
        }
        let err = b.compile_and_load(TEST_KERNELS, "k.hip", &["nope"]).unwrap_err();
        assert!(matches!(err, HalError::Driver { call: "hipModuleGetFunction", .. }), "{err}");
    });
}

/// An invalid launch is refused before anything reaches the runtime.
#[test]
fn invalid_launches_are_refused_synchronously() {
    in_child("invalid_launches_are_refused_synchronously", &[], || {
        let b = backend();
        let f = kernel(&b, "busy");
        let p = b.create_partition(&b.topology().leaves()[0], 1).expect("leaf");
        let big = launch(&f, 1, 2048, KernelArgs::pack(&[&1u32.to_le_bytes()]), LaunchAttributes::none());
        assert!(matches!(p.submit(0, &big), Err(HalError::Incompatible(Incompatibility::InvalidLaunch(_)))));
        let sim = FunctionRef::new(0, vitamin_hal::FunctionKind::Simulated, "sim");
        let foreign = launch(&sim, 1, 32, KernelArgs::empty(), LaunchAttributes::none());
        assert!(matches!(p.can_execute(&foreign), Err(Incompatibility::UnknownFunction(_))));
        assert!(!log().contains("call launch "), "nothing was launched");
    });
}

/// Threads creating partitions at once never take the backend past its stream bound, and every
/// stream of a dropped partition is given back.
#[test]
fn concurrent_partition_creation_respects_the_bound() {
    let config = config_file("max-streams-24", "[advanced]\nmax_streams = 24\n");
    in_child("concurrent_partition_creation_respects_the_bound", &[("VITAMIN_CONFIG", &config)], || {
        let b = backend();
        let leaves = b.topology().leaves().to_vec();
        let peak = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (b, leaves, peak) = (&b, &leaves, &peak);
                s.spawn(move || {
                    for i in 0..20 {
                        let leaf = leaves[(t * 20 + i) % leaves.len()];
                        if let Ok(p) = b.create_partition(&leaf, 4) {
                            peak.fetch_max(b.streams_in_use(), std::sync::atomic::Ordering::SeqCst);
                            assert!(b.streams_in_use() <= 24);
                            drop(p);
                        }
                    }
                });
            }
        });
        assert!(peak.load(std::sync::atomic::Ordering::SeqCst) <= 24);
        assert_eq!(b.streams_in_use(), 0);
        let log = log();
        assert_eq!(created_streams(&log).len(), destroyed_streams(&log));
    });
}

/// Against a simple model (every submission's fence reported exactly once, per lane in
/// submission order): random interleavings of submissions on random lanes and polls, on the
/// asynchronous double.
#[test]
fn random_submissions_and_polls_report_every_fence_once_in_order() {
    in_child("random_submissions_and_polls_report_every_fence_once_in_order", &[("FAKE_HIP_DELAY_US", "50")], || {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let b = backend();
        let f = kernel(&b, "busy");
        let op = busy(&f, 2);
        let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
        let actions = proptest::collection::vec((0u32..3, any::<bool>()), 1..120);
        runner
            .run(&(1usize..4, actions), |(lanes, actions)| {
                let p = b.create_partition(&b.topology().leaves()[0], lanes).unwrap();
                let mut submitted = vec![0u64; lanes];
                let mut done = Vec::new();
                for (lane, poll) in actions {
                    let lane = lane % lanes as u32;
                    let fence = p.submit(lane, &op).unwrap();
                    submitted[lane as usize] += 1;
                    prop_assert_eq!(fence, Fence { lane, seq: submitted[lane as usize] });
                    if poll {
                        p.poll(&mut done).unwrap();
                    }
                }
                let total: u64 = submitted.iter().sum();
                let start = Instant::now();
                while (done.len() as u64) < total {
                    p.poll(&mut done).unwrap();
                    prop_assert!(start.elapsed() < Duration::from_secs(20), "{} of {total} reported", done.len());
                    std::thread::sleep(Duration::from_micros(100));
                }
                p.poll(&mut done).unwrap();
                prop_assert_eq!(done.len() as u64, total, "no fence twice");
                for (lane, &n) in submitted.iter().enumerate() {
                    let seqs: Vec<u64> = done.iter().filter(|d| d.lane == lane as u32).map(|d| d.seq).collect();
                    prop_assert_eq!(seqs, (1..=n).collect::<Vec<_>>());
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(b.streams_in_use(), 0);
    });
}
