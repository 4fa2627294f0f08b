//! `vitamin info` and `vitamin pool` on the HIP backend: over the HIP test double (a simulated
//! MI300X behind a fake libamdhip64), without a device, and without the library. Without the HIP
//! headers or a C compiler the double cannot be built and the tests print `SKIPPED`.

use std::path::PathBuf;
use std::process::Command;

fn double() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hipfake-cli");
    match vitamin_hal_hip::test_double::build(&dir) {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("SKIPPED: the HIP test double cannot be built here ({why})");
            None
        }
    }
}

fn vitamin(lib: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vitamin"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("FAKE_HIP") {
            c.env_remove(k);
        }
    }
    c.env("VITAMIN_HIP_LIBRARY", lib);
    c
}

#[test]
fn info_and_pool_use_the_hip_backend_when_it_is_usable() {
    let Some(lib) = double() else { return };
    let out = vitamin(&lib).args(["info"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("hip   usable"), "{text}");
    assert!(text.contains("device: AMD Instinct MI300X (amd, backend hip)"), "{text}");
    assert!(text.contains("19 leaves") && text.contains("domain 7: 38 CUs"), "{text}");
    assert!(text.contains("not validated on AMD hardware"), "{text}");
    let out = vitamin(&lib).args(["info", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["hip_capabilities"]["cu_count"], 304);
    assert_eq!(v["hip_capabilities"]["xcds"], 8);
    assert_eq!(v["topology"]["capabilities"]["backend"], "hip");
    let out = vitamin(&lib).args(["--backend", "hip", "pool"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("71 nodes: 19 leaves, 18 internal, 34 remainders"), "{text}");
}

#[test]
fn info_says_why_hip_is_unusable() {
    let Some(lib) = double() else { return };
    let out = vitamin(&lib).env("FAKE_HIP_DEVICE", "none").args(["info"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "no device is no failure: {text}");
    assert!(
        text.contains("hip   skipped: hip backend unsupported:") && text.contains("hipErrorNoDevice (100)"),
        "{text}"
    );
    let out = vitamin(std::path::Path::new("/nonexistent/libamdhip64.so")).args(["info"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("the HIP runtime library (libamdhip64) was not found"), "{text}");
    let out = vitamin(&lib).env("FAKE_HIP_DEVICE", "none").args(["--backend", "hip", "info"]).output().unwrap();
    assert!(!out.status.success(), "a requested but unusable backend is an error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend hip was requested but is unusable"));
}
