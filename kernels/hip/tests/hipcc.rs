//! Offline compile check of the HIP kernels with `hipcc` (no AMD GPU needed): every variant's
//! options for gfx90a, the default variant for every target of `COMPILE_CHECK_TARGETS`, and a
//! probe of gfx942. Without `hipcc` (or `$HIPCC`) on the machine it prints SKIPPED.

use std::path::{Path, PathBuf};
use std::process::Command;

use vitamin_kernels_hip::{source, suite_kernel_names, Variant, COMPILE_CHECK_TARGETS};

fn hipcc() -> Option<PathBuf> {
    let p = std::env::var_os("HIPCC").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("hipcc"));
    Command::new(&p).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| p)
}

/// Compiles `src` to a code-object bundle for `targets` with `options`; the compiler's output on failure.
fn compile(hipcc: &Path, src: &Path, out: &Path, targets: &[&str], options: &[&str]) -> Result<Vec<u8>, String> {
    let mut cmd = Command::new(hipcc);
    cmd.args(["-x", "hip", "--genco", "-O3"]);
    for t in targets {
        cmd.arg(format!("--offload-arch={t}"));
    }
    cmd.args(options).arg(src).arg("-o").arg(out);
    let o = cmd.output().map_err(|e| format!("running {}: {e}", hipcc.display()))?;
    if !o.status.success() {
        return Err(format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    }
    std::fs::read(out).map_err(|e| format!("reading {}: {e}", out.display()))
}

fn assert_has_every_kernel(image: &[u8], what: &str) {
    for name in suite_kernel_names() {
        let needle = format!("{name}.kd");
        assert!(image.windows(needle.len()).any(|w| w == needle.as_bytes()), "{what}: no kernel descriptor {needle}");
    }
}

#[test]
fn the_suite_compiles_with_hipcc_for_amd_targets() {
    let Some(hipcc) = hipcc() else {
        eprintln!("SKIPPED: hipcc not found (CI installs Debian's hipcc; set HIPCC to use another)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hipcc_check");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("vitamin_suite.hip");
    std::fs::write(&src, source()).expect("write source");
    for v in Variant::ALL {
        let out = dir.join(format!("suite_{}_gfx90a.co", v.name()));
        let image = compile(&hipcc, &src, &out, &["gfx90a"], v.hip_options())
            .unwrap_or_else(|log| panic!("hipcc failed for variant {v} on gfx90a:\n{log}"));
        assert_has_every_kernel(&image, &format!("{v}/gfx90a"));
    }
    let out = dir.join("suite_default_all.co");
    let image = compile(&hipcc, &src, &out, COMPILE_CHECK_TARGETS, Variant::Default.hip_options())
        .unwrap_or_else(|log| panic!("hipcc failed for {COMPILE_CHECK_TARGETS:?}:\n{log}"));
    assert_has_every_kernel(&image, "default/all targets");
    for t in COMPILE_CHECK_TARGETS {
        let needle = format!("amdgcn-amd-amdhsa--{t}");
        assert!(image.windows(needle.len()).any(|w| w == needle.as_bytes()), "bundle lacks a {t} code object");
    }
    match compile(&hipcc, &src, &dir.join("suite_gfx942.co"), &["gfx942"], &[]) {
        Ok(image) => {
            assert_has_every_kernel(&image, "gfx942");
            eprintln!("gfx942: compiled");
        }
        Err(log) => eprintln!(
            "NOTE: this hipcc does not know gfx942 (MI300X), gfx940 stands in: {}",
            log.lines().next().unwrap_or("")
        ),
    }
}

/// FMA instructions (`v_fma*_f32`, `v_fmac_f32`, `v_pk_fma_f32`, `v_mac_f32`) in each kernel's body of
/// a gfx90a assembly listing.
fn fma_counts(asm: &str) -> std::collections::HashMap<String, usize> {
    let mut counts = std::collections::HashMap::new();
    let mut current: Option<String> = None;
    for line in asm.lines() {
        let t = line.split(';').next().unwrap_or("").trim();
        if let Some(name) = t.strip_suffix(':').filter(|n| suite_kernel_names().contains(n)) {
            current = Some(name.to_owned());
        } else if t.starts_with(".Lfunc_end") {
            current = None;
        } else if let Some(k) = &current {
            let op = t.split_whitespace().next().unwrap_or("");
            let op = op.trim_end_matches("_e32").trim_end_matches("_e64");
            if matches!(op, "v_fma_f32" | "v_fmac_f32" | "v_pk_fma_f32" | "v_mac_f32") {
                *counts.entry(k.clone()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// `-ffp-contract=off` really removes the contractions of `acc += a * b`: the GEMM and GEMV kernels
/// have fewer FMA instructions than with `-ffp-contract=fast`, and the reductions (nothing to
/// contract) have none either way. (The GEMM keeps a few `v_mac_f32` in both: the integer-division
/// expansion of its split-K chunk bounds; see docs/determinism.md.)
#[test]
fn contraction_off_removes_the_fmas_of_the_contractible_kernels() {
    let Some(hipcc) = hipcc() else {
        eprintln!("SKIPPED: hipcc not found (CI installs Debian's hipcc; set HIPCC to use another)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hipcc_asm");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("vitamin_suite.hip");
    std::fs::write(&src, source()).expect("write source");
    let asm = |v: Variant| {
        let out = dir.join(format!("suite_{}.s", v.name()));
        let o = Command::new(&hipcc)
            .args(["-x", "hip", "--cuda-device-only", "--offload-arch=gfx90a", "-O3", "-S"])
            .args(v.hip_options())
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .output()
            .expect("hipcc runs");
        assert!(o.status.success(), "hipcc -S failed for {v}: {}", String::from_utf8_lossy(&o.stderr));
        fma_counts(&std::fs::read_to_string(&out).expect("assembly"))
    };
    let (fast, off) = (asm(Variant::Default), asm(Variant::NoContract));
    eprintln!("FMA instructions per kernel, contraction on: {fast:?}\ncontraction off: {off:?}");
    for k in ["gemm_splitk_partial_f32", "gemv_f32", "gemm_splitk_partial_bf16", "gemv_f16"] {
        let (a, b) = (fast.get(k).copied().unwrap_or(0), off.get(k).copied().unwrap_or(0));
        assert!(a > b, "{k}: {a} FMAs with contraction, {b} without");
    }
    for k in ["reduce_partial_f32", "splitk_reduce_f32", "reduce_final"] {
        assert_eq!(fast.get(k).copied().unwrap_or(0) + off.get(k).copied().unwrap_or(0), 0, "{k} has nothing to fuse");
    }
}
