//! Shared by the integration tests: the C compiler and the shim library cargo built.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The C compiler (`CC`, else `cc`).
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Runs the C compiler; fails the test with its output if it fails.
pub fn compile(args: &[&str]) {
    let out = Command::new(cc()).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run the C compiler `{}` ({e}); install gcc (CI's .ci/run does) or set CC", cc())
    });
    assert!(out.status.success(), "cc {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Builds the fake driver (tests/fake/libcuda.c) into `dir` as libcuda.so.1 (+ libcuda.so).
pub fn build_fake_driver(dir: &std::path::Path) {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/libcuda.c");
    let lib = dir.join("libcuda.so.1");
    // -Bsymbolic: like the real driver, the fake's own references to its functions (the
    // pointers its cuGetProcAddress hands out) bind inside it, not to the preloaded shim.
    compile(&[
        "-shared",
        "-fPIC",
        "-pthread",
        "-O1",
        "-Wl,-Bsymbolic",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        lib.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(dir.join("libcuda.so"));
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
}

/// The cdylib cargo built next to this test's dependencies, building it if it is missing.
pub fn shim_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    let candidates = [deps.join("libvitamin_cuda.so"), deps.parent().unwrap().join("libvitamin_cuda.so")];
    if let Some(p) = candidates.iter().find(|p| p.exists()) {
        return p.clone();
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-p", "vitamin-shim-cuda"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p vitamin-shim-cuda failed");
    candidates.into_iter().find(|p| p.exists()).expect("libvitamin_cuda.so after cargo build")
}
