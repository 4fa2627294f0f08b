//! End-to-end test of libvitamin_cuda.so without a GPU: a small C program (tests/fake/app.c) runs
//! against a test double of libcuda.so.1 (tests/fake/libcuda.c), once natively and once with the
//! shim preloaded in observe mode. Both are compiled here with the system C compiler.
//!
//! Checked: the program's output and the fake driver's call log are identical with and without the
//! shim (every call forwarded, unchanged, to the function the program would have called); the
//! census shows the calls of all three routes (direct link, dlsym, cuGetProcAddress incl. its
//! self-lookup) and the launches with their grids and blocks; pass-throughs stay untouched; a
//! forked child writes its own census; the shim is silent unless asked; a second interposer's
//! `dlsym(RTLD_NEXT, ..)` still works; and the exported symbols are exactly the hook table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

mod support;
use support::{build_fake_driver, compile, shim_path};

/// Everything the tests need, built once.
struct Fixture {
    dir: PathBuf,
    shim: PathBuf,
    app: PathBuf,
    next: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shim-interpose");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake");
        let s = |p: &Path| p.to_str().unwrap().to_string();
        build_fake_driver(&dir);
        let app = dir.join("app");
        compile(&["-O1", "-o", &s(&app), &s(&src.join("app.c")), &format!("-L{}", s(&dir)), "-lcuda", "-ldl"]);
        let next = dir.join("libnext.so");
        compile(&["-shared", "-fPIC", "-o", &s(&next), &s(&src.join("next_interposer.c")), "-ldl"]);
        Fixture { dir, shim: shim_path(), app, next }
    })
}

/// Runs the app with a clean VITAMIN_* environment plus `env`.
fn run_app(name: &str, env: &[(&str, String)]) -> (Output, String) {
    let f = fixture();
    let log = f.dir.join(format!("{name}.log"));
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(&f.app);
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd.env("LD_LIBRARY_PATH", &f.dir).env("FAKE_CUDA_LOG", &log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run app");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    (out, log)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr without the app's own `child_pid=` line.
fn stderr_of_shim(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).lines().filter(|l| !l.starts_with("child_pid=")).collect::<Vec<_>>().join("\n")
}

fn child_pid(o: &Output) -> u32 {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("child_pid="))
        .and_then(|p| p.trim().parse().ok())
        .expect("the app prints child_pid= on stderr")
}

fn shim_env(census: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", fixture().shim.display().to_string()),
        ("VITAMIN_MODE", "observe".into()),
        ("VITAMIN_CENSUS", census.display().to_string()),
    ]
}

fn read_json(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("census {} missing: {e}", p.display()));
    serde_json::from_str(&text).expect("census is JSON")
}

fn calls(census: &Value, symbol: &str) -> u64 {
    census["api"][symbol]["calls"].as_u64().unwrap_or(0)
}

/// (name, grid, block, launched, captured)
type Row = (String, Vec<u64>, Vec<u64>, u64, u64);

fn kernel_rows(census: &Value) -> BTreeSet<Row> {
    census["kernels"]
        .as_array()
        .expect("kernels array")
        .iter()
        .map(|r| {
            let dims = |k: &str| r[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>();
            (
                r["name"].as_str().unwrap().to_string(),
                dims("grid"),
                dims("block"),
                r["launched"].as_u64().unwrap(),
                r["captured"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn observe_mode_forwards_everything_unchanged_and_counts_every_route() {
    let f = fixture();
    let (native, native_log) = run_app("native", &[]);
    assert!(native.status.success(), "native run failed: {}", stdout(&native));
    let native_out = stdout(&native);
    assert!(native_out.contains("invalid launch (2048 threads per block): 1"), "{native_out}");
    assert!(native_out.contains("cuGetExportTable passes through: 1"), "{native_out}");

    let census_template = f.dir.join("census.%p.json");
    let (shim, shim_log) = run_app("shim", &shim_env(&census_template));
    assert!(shim.status.success(), "shim run failed:\n{}\n{}", stdout(&shim), stderr_of_shim(&shim));

    // Same program output and the fake driver saw exactly the same calls with the same arguments,
    // in the same order, including the invalid launch and the internal entry points.
    assert_eq!(stdout(&shim), native_out, "program output differs under the shim");
    assert_eq!(shim_log, native_log, "the driver saw different calls under the shim");
    assert!(native_log.contains("cuLaunchKernel[internal] vector_add grid=3,1,1"), "{native_log}");
    assert!(native_log.contains("cuMemcpyHtoD[v1] 16"), "old ABI reached: {native_log}");
    assert_eq!(stderr_of_shim(&shim), "", "the shim printed something without VITAMIN_LOG");

    let parent = read_json(&f.dir.join(format!("census.{}.json", app_pid(&shim))));
    assert_eq!(parent["schema"], "vitamin.shim.census/1");
    assert_eq!(parent["mode"], "observe");
    // Route 1, direct link: valid + invalid + captured launch.
    // Route 3, cuGetProcAddress v4000 flag 0: the driver's internal pointer, hooked as cuLaunchKernel.
    assert_eq!(calls(&parent, "cuLaunchKernel"), 4, "{parent:#}");
    assert_eq!(parent["api"]["cuLaunchKernel"]["failed"], 1);
    // Route 3 at v7000 with the per-thread flag.
    assert_eq!(calls(&parent, "cuLaunchKernel_ptsz"), 1);
    // Route 2, dlsym.
    assert_eq!(calls(&parent, "cuLaunchKernelEx"), 1);
    // dlsym'd cuGetProcAddress_v2 (self-lookup) + 9 lookups through the wrapper it returned.
    assert_eq!(calls(&parent, "cuGetProcAddress_v2"), 10);
    // Direct + RTLD_DEFAULT lookup (the shim's own export) + the driver's internal entry point.
    assert_eq!(calls(&parent, "cuStreamQuery"), 1);
    assert_eq!(calls(&parent, "cuStreamSynchronize"), 2);
    for (symbol, n) in [
        ("cuMemcpyHtoD_v2", 1),
        ("cuMemcpyHtoDAsync_v2", 1),
        ("cuMemcpyDtoH_v2", 3),
        ("cuMemsetD8Async", 1),
        ("cuMemsetD32_v2", 1),
        ("cuLaunchHostFunc", 1),
        ("cuEventCreate", 1),
        ("cuEventRecord", 1),
        ("cuEventQuery", 1),
        ("cuEventSynchronize", 1),
        ("cuEventDestroy_v2", 1),
        ("cuStreamCreate", 2),
        ("cuStreamDestroy_v2", 2),
        ("cuStreamBeginCapture_v2", 1),
        ("cuStreamEndCapture", 1),
        ("cuGraphLaunch", 2),
        ("cuCtxSynchronize", 1),
        ("cuMemFree_v2", 3),
    ] {
        assert_eq!(calls(&parent, symbol), n, "{symbol}");
    }
    // Nothing vitamin does not hook shows up.
    for absent in ["cuGetExportTable", "cuDriverGetVersion", "cuInit", "cuMemAlloc_v2"] {
        assert!(parent["api"].get(absent).is_none(), "{absent} is not hooked");
    }

    let totals = &parent["totals"];
    assert_eq!(totals["kernel_launches"], 4, "{totals}");
    assert_eq!(totals["captured_kernel_launches"], 1);
    assert_eq!(totals["graph_launches"], 2);
    let rows = kernel_rows(&parent);
    let row = |g: u64, b: u64, launched: u64, captured: u64| {
        ("vector_add".to_string(), vec![g, 1, 1], vec![b, 1, 1], launched, captured)
    };
    let expected: BTreeSet<_> = [
        row(4, 256, 1, 0), // direct
        row(2, 128, 1, 0), // dlsym'd cuLaunchKernelEx
        row(3, 64, 1, 0),  // cuGetProcAddress v4000
        row(5, 32, 1, 0),  // cuGetProcAddress v7000, per-thread
        row(2, 64, 0, 1),  // captured into the graph
    ]
    .into_iter()
    .collect();
    assert_eq!(rows, expected, "{:#}", parent["kernels"]);

    let ip = &parent["interposition"];
    assert_eq!(ip["dlsym_substituted"], 2, "cuLaunchKernelEx and cuGetProcAddress_v2: {ip}");
    assert_eq!(ip["dlsym_own"], 1, "RTLD_DEFAULT found the shim's export: {ip}");
    assert_eq!(ip["dlsym_passed"], 1, "cuGetExportTable: {ip}");
    assert_eq!(ip["proc_substituted"], 4, "self-lookup, cuLaunchKernel x2, cuStreamSynchronize: {ip}");
    // cuDriverGetVersion, cuGetExportTable, old cuMemcpyHtoD, unknown symbol (null: not counted),
    // the unknown flag combination.
    assert_eq!(ip["proc_passed"], 4, "{ip}");
    assert_eq!(ip["slots_full"], 0);
    assert_eq!(ip["missing_real"], 0);

    // The forked child counted only its own launch and wrote its own census.
    let child = read_json(&f.dir.join(format!("census.{}.json", child_pid(&shim))));
    assert_eq!(calls(&child, "cuLaunchKernel"), 1, "{child:#}");
    assert_eq!(calls(&child, "cuStreamSynchronize"), 1);
    assert_eq!(child["totals"]["kernel_launches"], 1);
    assert_eq!(kernel_rows(&child), [("vector_add".to_string(), vec![7, 1, 1], vec![32, 1, 1], 1, 0)].into());
    assert!(!rows.iter().any(|r| r.1 == vec![7, 1, 1]), "the parent must not count the child's launch");
}

/// The app's own pid: the parent census is the one whose file name is not the child's.
fn app_pid(o: &Output) -> u32 {
    let child = child_pid(o);
    let dir = &fixture().dir;
    let pids: Vec<u32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("census.")?.strip_suffix(".json")?.parse().ok()
        })
        .filter(|&p| p != child)
        .collect();
    assert_eq!(pids.len(), 1, "expected one parent census besides the child's, found {pids:?}");
    pids[0]
}

#[test]
fn quiet_by_default_and_logs_when_asked() {
    let f = fixture();
    let (out, _) = run_app("quiet", &[("LD_PRELOAD", f.shim.display().to_string())]);
    assert!(out.status.success());
    assert_eq!(stderr_of_shim(&out), "", "nothing printed without VITAMIN_LOG");

    let (native, _) = run_app("loud-native", &[]);
    let (out, _) = run_app(
        "loud",
        &[
            ("LD_PRELOAD", f.shim.display().to_string()),
            ("VITAMIN_LOG", "debug".into()),
            ("VITAMIN_MODE", "bind".into()),
        ],
    );
    assert!(out.status.success());
    let err = stderr_of_shim(&out);
    assert!(err.contains("mode bind"), "{err}");
    assert!(err.contains("dlsym(cuLaunchKernelEx) -> hook"), "{err}");
    assert!(err.contains("exit:"), "{err}");
    // This program never makes a context current, so bind mode never starts: every call is
    // forwarded and the program behaves as natively.
    assert_eq!(stdout(&out), stdout(&native));
    let (odd, _) = run_app(
        "odd-mode",
        &[
            ("LD_PRELOAD", f.shim.display().to_string()),
            ("VITAMIN_LOG", "warn".into()),
            ("VITAMIN_MODE", "turbo".into()),
        ],
    );
    assert!(stderr_of_shim(&odd).contains("unknown VITAMIN_MODE=\"turbo\""), "{}", stderr_of_shim(&odd));
}

#[test]
fn passthrough_mode_counts_nothing_but_still_forwards() {
    let f = fixture();
    let (native, native_log) = run_app("pt-native", &[]);
    let census = f.dir.join("passthrough.json");
    let mut env = shim_env(&census);
    env[1].1 = "passthrough".into();
    let (out, log) = run_app("pt-shim", &env);
    assert!(out.status.success());
    assert_eq!(stdout(&out), stdout(&native));
    assert_eq!(log, native_log);
    // Interposition happened (substitutions are counted), calls were not.
    let c = read_json(&census);
    assert_eq!(c["mode"], "passthrough");
    assert_eq!(c["totals"]["intercepted_calls"], 0);
    assert_eq!(c["interposition"]["dlsym_substituted"], 2);
}

#[test]
fn rtld_next_of_a_later_interposer_still_finds_the_next_object() {
    let f = fixture();
    let both = format!("{}:{}", f.shim.display(), f.next.display());
    let (with_shim, _) = run_app("next-shim", &[("LD_PRELOAD", both)]);
    let (without, _) = run_app("next-native", &[("LD_PRELOAD", f.next.display().to_string())]);
    assert!(without.status.success());
    assert!(stdout(&without).contains("[next] done"), "control run: {}", stdout(&without));
    assert!(
        with_shim.status.success(),
        "a later interposer's dlsym(RTLD_NEXT) broke under the shim: {:?}\n{}",
        with_shim.status,
        stderr_of_shim(&with_shim)
    );
    assert_eq!(stdout(&with_shim), stdout(&without));
}

#[test]
fn exported_symbols_are_exactly_the_hook_table_plus_dlsym() {
    let f = fixture();
    let Ok(out) = Command::new("nm").args(["-D", "--defined-only"]).arg(&f.shim).output() else {
        eprintln!("SKIPPED exported_symbols_are_exactly_the_hook_table_plus_dlsym: no `nm` (binutils) on this machine");
        return;
    };
    assert!(out.status.success());
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| !s.starts_with('_'))
        .map(|s| s.split('@').next().unwrap().to_string())
        .collect();
    let mut expected: BTreeSet<String> = vitamin_cuda::table::HOOKS.iter().map(|h| h.symbol.to_string()).collect();
    expected.insert("dlsym".to_string());
    assert_eq!(exported, expected);
}
