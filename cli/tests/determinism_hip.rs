//! `vitamin determinism --record --backend hip` over hal-hip's HIP test double (a fake
//! libamdhip64 whose hipRTC keeps the compile options and whose kernels run suite.cu's structure
//! on the CPU), and `vitamin compare` of that record against the simulated device's (the CPU
//! reference). What the comparison says is reported, not forced, except where it holds by
//! construction: the double's `nocontract` build computes the CPU reference's operations in the
//! same order with the same libm, so those cases must agree. A kernel perturbed inside the double
//! (`FAKE_HIP_PERTURB`) must make `compare` exit 1 and be the only mismatch. The double's
//! execution log shows where the trials ran. Without the HIP headers or a C compiler the double
//! cannot be built and the tests print `SKIPPED`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn double() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hipfake-det");
    match vitamin_hal_hip::test_double::build(&dir) {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("SKIPPED: the HIP test double cannot be built here ({why})");
            None
        }
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `vitamin` with a clean environment: only the double (when given) and the extra variables.
fn vitamin(lib: Option<&Path>, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vitamin"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("FAKE_HIP") {
            c.env_remove(k);
        }
    }
    if let Some(lib) = lib {
        c.env("VITAMIN_HIP_LIBRARY", lib);
    }
    c.envs(env.iter().copied()).args(args).output().expect("vitamin runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const SELECTION: [&str; 6] =
    ["--trials", "2", "--seeds", "5", "--kernels", "reduction,splitk_gemm,layernorm,gemv,softmax,attention"];

fn record(lib: Option<&Path>, env: &[(&str, &str)], path: &Path) {
    let p = path.to_str().unwrap();
    let mut args: Vec<&str> = if lib.is_some() {
        vec!["--backend", "hip", "determinism", "--record", p]
    } else {
        vec!["--sim", "determinism", "--record", p]
    };
    args.extend_from_slice(&SELECTION);
    let o = vitamin(lib, env, &args);
    assert!(o.status.success(), "record failed: {}", text(&o));
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).expect("JSON")
}

#[test]
fn a_hip_record_over_the_double_compares_with_the_cpu_reference() {
    let Some(lib) = double() else { return };
    let dir = tmp("det-hip");
    let hip = dir.join("hip.json");
    let sim = dir.join("sim.json");
    record(Some(&lib), &[], &hip);
    record(None, &[], &sim);

    let r = json(&hip);
    assert_eq!(r["schema"], "vitamin.determinism.record.v1");
    assert_eq!(r["kind"], "suite");
    let host = &r["host"];
    assert_eq!((host["vendor"].as_str(), host["backend"].as_str()), (Some("AMD"), Some("hip")));
    assert_eq!(host["simulated"], true, "the double is not AMD hardware: {host}");
    assert!(host["device"].as_str().unwrap().contains("HIP test double"), "{host}");
    assert_eq!(host["compiler"], "hipRTC 5.2");
    assert!(host["driver"].as_str().unwrap().starts_with("HIP runtime 5.2.21153"), "{host}");
    assert_eq!(host["extra"]["arch"], "gfx942:sramecc+:xnack-");
    assert_eq!(host["extra"]["cu_count"], "304");
    assert_eq!(r["source"]["prelude"], "hip");
    assert_eq!(r["source"]["suite_sha256"], json(&sim)["source"]["suite_sha256"], "one suite source for every backend");
    let options: Vec<&serde_json::Value> = r["variants"].as_array().unwrap().iter().map(|v| &v["options"]).collect();
    let last = |o: &serde_json::Value| o.as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last(options[0]), "-ffp-contract=fast");
    assert_eq!(last(options[1]), "-ffp-contract=off");
    assert!(options[1].as_array().unwrap().iter().any(|o| o == "-fno-fast-math"), "{options:?}");
    assert_eq!(r["config"]["nodes"], 71, "the MI300X pool");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2 * 6 * 3, "variants x kernels x dtypes x one seed");
    for c in cases {
        assert_eq!(c["invariance"]["bitwise_equal"], 2, "{}", c["name"]);
        assert_eq!(c["output"]["encoding"], "zlib+base64");
        assert!(c["output"]["data"].as_str().is_some_and(|d| !d.is_empty()));
        assert!(c["launch"]["launches"].as_array().is_some_and(|l| !l.is_empty()));
    }

    let report = dir.join("report.json");
    let o = vitamin(
        None,
        &[],
        &[
            "compare",
            hip.to_str().unwrap(),
            sim.to_str().unwrap(),
            "--out",
            dir.join("report").to_str().unwrap(),
            "--json",
            report.to_str().unwrap(),
        ],
    );
    let code = o.status.code();
    assert!(matches!(code, Some(0 | 1)), "compare runs and reports: {}", text(&o));
    println!("{}", text(&o));
    let v = json(&report);
    let pairs = v["pairs"][0]["cases"].as_array().unwrap();
    assert_eq!(pairs.len(), 36, "every HIP case pairs with the CPU variant");
    for c in pairs {
        if c["variant_a"] == "nocontract" {
            assert_eq!(c["bitwise_equal"], true, "{}: same operations, same order, same libm", c["key"]);
        }
    }
    let differ = pairs.iter().filter(|c| c["bitwise_equal"] == false).count();
    assert_eq!(code == Some(0), differ == 0, "the exit status says whether everything matched");
    assert!(std::fs::read_to_string(dir.join("report/report.md")).unwrap().contains("| gemv/f32/seed 5 |"));
}

#[test]
fn a_kernel_perturbed_in_the_double_fails_the_comparison() {
    let Some(lib) = double() else { return };
    let dir = tmp("det-hip-perturb");
    let (a, b) = (dir.join("a.json.gz"), dir.join("b.json.gz"));
    record(Some(&lib), &[], &a);
    record(Some(&lib), &[("FAKE_HIP_PERTURB", "gemv")], &b);
    let same = vitamin(None, &[], &["compare", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    let o = vitamin(None, &[], &["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "a perturbed kernel is a mismatch: {}", text(&o));
    let t = text(&o);
    assert!(t.contains("A vs B: 30/36 paired cases bitwise equal"), "{t}");
    let differ: Vec<&str> = t.lines().filter(|l| l.trim_start().starts_with("differ:")).collect();
    assert_eq!(differ.len(), 6, "{t}");
    assert!(differ.iter().all(|l| l.contains("differ: gemv/")), "only GEMV differs: {t}");
}

/// The double's log (`FAKE_HIP_LOG`) shows where a record's launches went: the suite's kernels on
/// CU-masked streams of several pool nodes (not only the whole device), and each trial's
/// co-runner on a stream whose mask is disjoint from the trial's.
#[test]
fn trials_run_on_cu_masked_nodes_beside_a_disjoint_co_runner() {
    let Some(lib) = double() else { return };
    let dir = tmp("det-hip-log");
    let log = dir.join("hip.log");
    let path = dir.join("r.json");
    let o = vitamin(
        Some(&lib),
        &[("FAKE_HIP_LOG", log.to_str().unwrap())],
        &[
            "--backend",
            "hip",
            "determinism",
            "--record",
            path.to_str().unwrap(),
            "--kernels",
            "gemv",
            "--dtypes",
            "f32",
            "--seeds",
            "1",
            "--variants",
            "nocontract",
            "--trials",
            "6",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let log = std::fs::read_to_string(&log).unwrap();
    // "call stream-create s12 cus=16 mask=..." and "call launch s12 gemv_f32 grid=...".
    let mut masks = std::collections::HashMap::new();
    let mut launches = Vec::new();
    for l in log.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["call", "stream-create", s, cus, mask, ..] => {
                let cus: u32 = cus.strip_prefix("cus=").unwrap().parse().unwrap();
                let hex = mask.strip_prefix("mask=").unwrap();
                let words: Vec<u32> =
                    (0..hex.len() / 8).map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).unwrap()).collect();
                masks.insert(s.to_string(), (cus, words));
            }
            ["call", "launch", s, kernel, ..] => launches.push((s.to_string(), kernel.to_string())),
            _ => {}
        }
    }
    let gemv: Vec<&(String, String)> = launches.iter().filter(|(_, k)| k == "gemv_f32").collect();
    assert_eq!(gemv.len(), 7, "the whole-device run and 6 trials: {launches:?}");
    let partial = gemv.iter().filter(|(s, _)| masks[s].0 < 304).count();
    assert!(partial >= 1, "trials ran on smaller nodes: {gemv:?}");
    let distinct: std::collections::BTreeSet<&Vec<u32>> = gemv.iter().map(|(s, _)| &masks[s].1).collect();
    assert!(distinct.len() >= 2, "trials used several nodes");
    let mut corunners = 0;
    for (i, (s, k)) in launches.iter().enumerate() {
        if k != "busy" {
            continue;
        }
        corunners += 1;
        let (t, _) = launches[i + 1..].iter().find(|(_, k)| k == "gemv_f32").expect("a trial follows its co-runner");
        let (a, b) = (&masks[s].1, &masks[t].1);
        assert!(a.iter().zip(b).all(|(x, y)| x & y == 0), "co-runner mask {a:08x?} overlaps the trial's {b:08x?}");
    }
    assert!(corunners >= 1, "some trial had a co-runner: {launches:?}");
}
