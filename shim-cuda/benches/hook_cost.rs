//! Host cost of the interposer per intercepted call, without a GPU.
//!
//! `cargo bench -p vitamin-shim-cuda --bench hook_cost` builds the fake driver
//! (tests/fake/libcuda.c) and a C loop (benches/hook_bench.c) that calls `cuLaunchKernel` and
//! `cuStreamQuery` a million times each, then runs that loop natively, under the shim in observe
//! mode and in passthrough mode, ROUNDS times with the order rotated every round (so that drift
//! and position effects spread over all modes). It prints, per mode, the median over rounds of the
//! per-call time and the difference to native: the shim's own cost per call. The fake driver's
//! calls cost tens of nanoseconds, so the difference is not hidden under a real driver's 3-4 us.
//!
//! (Not a criterion bench: the quantity is a difference between processes with different
//! LD_PRELOAD, which criterion's in-process loop cannot express.)

use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: usize = 9;
const MODES: [&str; 3] = ["native", "observe", "passthrough"];

fn compile(args: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc).args(args).output().unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(out.status.success(), "cc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn shim() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.join("libvitamin_cuda.so"), deps.parent().unwrap().join("libvitamin_cuda.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libvitamin_cuda.so next to the bench binary (cargo bench builds it)")
}

fn run(dir: &Path, bin: &Path, shim: &Path, mode: &str) -> (f64, f64) {
    let mut cmd = Command::new(bin);
    cmd.env("LD_LIBRARY_PATH", dir).env_remove("FAKE_CUDA_LOG").env_remove("VITAMIN_CENSUS");
    if mode != "native" {
        cmd.env("LD_PRELOAD", shim).env("VITAMIN_MODE", mode);
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    let out = cmd.output().expect("run hook_bench");
    assert!(out.status.success(), "hook_bench failed in {mode}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("hook_bench prints JSON");
    (v["launch_ns"].as_f64().unwrap(), v["query_ns"].as_f64().unwrap())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo test --benches asks for the list of benchmarks
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shim-hook-cost");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let lib = dir.join("libcuda.so.1");
    compile(&[
        "-shared",
        "-fPIC",
        "-pthread",
        "-O2",
        "-Wl,-Bsymbolic",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &s(&lib),
        &s(&root.join("tests/fake/libcuda.c")),
    ]);
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    let bin = dir.join("hook_bench");
    compile(&["-O2", "-o", &s(&bin), &s(&root.join("benches/hook_bench.c")), &format!("-L{}", s(&dir)), "-lcuda"]);
    let shim = shim();

    let mut launch: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut query: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 0..ROUNDS {
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            let (l, q) = run(&dir, &bin, &shim, MODES[m]);
            launch[m].push(l);
            query[m].push(q);
        }
    }
    let launch: Vec<f64> = launch.into_iter().map(median).collect();
    let query: Vec<f64> = query.into_iter().map(median).collect();
    println!("hook_cost: median over {ROUNDS} rotated rounds, ns per call (fake driver)");
    println!("| mode | cuLaunchKernel | + vs native | cuStreamQuery | + vs native |");
    println!("| --- | --- | --- | --- | --- |");
    for (m, mode) in MODES.iter().enumerate() {
        println!(
            "| {mode} | {:.1} | {:+.1} | {:.1} | {:+.1} |",
            launch[m],
            launch[m] - launch[0],
            query[m],
            query[m] - query[0]
        );
    }
}
