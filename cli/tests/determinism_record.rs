//! `vitamin determinism --record` and `vitamin compare` end to end on the simulated device: two
//! records, one with a perturbed kernel (split-K GEMM recorded with another split factor), must
//! compare as matching everywhere except that kernel, with the report naming it, a histogram
//! image for it, and exit status 1; a record against itself exits 0; bad input exits 2. The
//! Python helper's application records compare the same way (skipped without python3).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vitamin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitamin")).args(args).output().expect("vitamin runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn record(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut args = vec![
        "--sim",
        "determinism",
        "--record",
        path.to_str().unwrap(),
        "--trials",
        "2",
        "--seeds",
        "3",
        "--kernels",
        "reduction,splitk_gemm,layernorm",
        "--dtypes",
        "f32,f16",
    ];
    args.extend_from_slice(extra);
    let o = vitamin(&args);
    assert!(o.status.success(), "record failed: {}", text(&o));
    path
}

#[test]
fn a_perturbed_kernel_is_the_only_mismatch() {
    let dir = tmp("det-compare");
    let a = record(&dir, "a.json.gz", &[]);
    let b = record(&dir, "b.json", &["--perturb", "splitk_gemm"]);
    assert_eq!(&std::fs::read(&a).unwrap()[..2], [0x1f, 0x8b], "a .gz record is gzip-compressed");

    let same = vitamin(&["compare", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    assert!(text(&same).contains("A vs B: 6/6 paired cases bitwise equal"), "{}", text(&same));

    let out = dir.join("report");
    let json = dir.join("report.json");
    let o = vitamin(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "mismatches exit 1: {}", text(&o));
    let summary = text(&o);
    assert!(summary.contains("A vs B: 4/6 paired cases bitwise equal"), "{summary}");
    assert!(summary.contains("differ: splitk_gemm/f32/seed 3") && summary.contains("differ: splitk_gemm/f16/seed 3"));
    assert!(!summary.contains("differ: reduction") && !summary.contains("differ: layernorm"), "{summary}");

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let row = md.lines().find(|l| l.starts_with("| splitk_gemm/f32/seed 3 |")).expect("a row for the GEMM");
    assert!(
        row.contains("**no**") && row.contains("split-K 33 vs split-K 1") && row.contains("| 2/2 | 2/2 |"),
        "{row}"
    );
    let png = md.lines().find_map(|l| l.strip_prefix("![ULP distances](")).expect("a histogram").trim_end_matches(')');
    assert_eq!(&std::fs::read(out.join(png)).unwrap()[..4], b"\x89PNG");
    assert!(std::fs::read_to_string(out.join("report.html")).unwrap().contains("<img src=\"histograms/"));

    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["schema"], "vitamin.compare.v1");
    assert_eq!(v["all_match"], false);
    let bad: Vec<&serde_json::Value> =
        v["pairs"][0]["cases"].as_array().unwrap().iter().filter(|c| c["bitwise_equal"] == false).collect();
    assert_eq!(bad.len(), 2);
    let d = &bad[0]["diff"];
    assert!(d["differing"].as_u64().unwrap() > 0 && d["max_ulp"].as_u64().unwrap() > 0);
    assert!(d["max_rel_error"].as_f64().unwrap() < 1e-3, "same function, other rounding: {d}");
}

#[test]
fn input_errors_exit_2() {
    let dir = tmp("det-compare-errors");
    let junk = dir.join("junk.json");
    std::fs::write(&junk, b"{\"schema\": \"something.else\"}").unwrap();
    let o = vitamin(&["compare", junk.to_str().unwrap(), junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("something.else"));
    let o = vitamin(&["compare", dir.join("missing.json").to_str().unwrap(), junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let o = vitamin(&["compare", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "one record is a usage error");
    let o = vitamin(&["--sim", "determinism", "--record", dir.join("x.json").to_str().unwrap(), "--variants", "nope"]);
    assert!(!o.status.success() && text(&o).contains("unknown variant"));
}

#[test]
fn application_records_from_the_python_helper_compare() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: python3 not found");
        return;
    }
    let dir = tmp("det-compare-app");
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let make = |name: &str| {
        let path = dir.join(name);
        let code = format!(
            "import struct, vitamin_record as v\n\
             r = v.Recorder({path:?})\n\
             r.add_bytes('logits', 'f32', [3], struct.pack('<3f', 1.0, 2.0, 3.0))\n\
             r.add_bytes('logits', 'f32', [3], struct.pack('<2f', 1.0, 2.0) + bytes([0, 0, 0x40, 0x40]))\n\
             r.add_bytes('tokens', 'i64', [2], struct.pack('<2q', 7, 9))\n\
             r.save()\n",
            path = path.to_str().unwrap()
        );
        let o = Command::new("python3").env("PYTHONPATH", &scripts).args(["-c", &code]).output().unwrap();
        assert!(o.status.success(), "python: {}", text(&o));
        path
    };
    // 3.0f32 is 0x40400000 (bytes 00 00 40 40); C's 0x40400001 is one ULP above it.
    let a = make("a.json.gz");
    let b = make("b.json");
    let o = vitamin(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let c = {
        let path = dir.join("c2.json");
        let code = format!(
            "import struct, vitamin_record as v\n\
             r = v.Recorder({path:?})\n\
             r.add_bytes('logits', 'f32', [3], struct.pack('<3f', 1.0, 2.0, 3.0))\n\
             r.add_bytes('logits', 'f32', [3], struct.pack('<2fI', 1.0, 2.0, 0x40400001))\n\
             r.add_bytes('tokens', 'i64', [2], struct.pack('<2q', 7, 9))\n\
             r.save()\n",
            path = path.to_str().unwrap()
        );
        let o = Command::new("python3").env("PYTHONPATH", &scripts).args(["-c", &code]).output().unwrap();
        assert!(o.status.success(), "python: {}", text(&o));
        path
    };
    let o = vitamin(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), c.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("A vs B: 3/3 paired cases bitwise equal"), "{t}");
    assert!(t.contains("A vs C: 2/3 paired cases bitwise equal"), "{t}");
    assert!(t.contains("differ: logits#1/f32 [app vs app]: 1/3 elements, first at 2, max ULP 1"), "{t}");
}
