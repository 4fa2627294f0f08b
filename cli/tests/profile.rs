//! `vitamin profile --merge`: the per-process files bind mode's `profile_out` writes, made one for
//! `vitamin daemon --profiles`.

use std::path::Path;
use std::process::{Command, Output};

use vitamin_hal::{Dim3, LaunchConfig};
use vitamin_runtime::profile::{ProfileEntry, Profiles};

fn config(kernel: &str, grid: u32) -> LaunchConfig {
    LaunchConfig { kernel: kernel.into(), grid: Dim3::x(grid), block: Dim3::x(128), shared_mem_bytes: 0 }
}

/// `vitamin profile --merge FILES -o OUT`.
fn merge(files: &[&Path], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitamin"))
        .args(["profile", "--merge"])
        .args(files)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn merging_unites_the_files_of_one_device_and_refuses_two_devices() {
    let d = std::env::temp_dir().join(format!("vitamin-cli-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let (a, b) = (config("gemm", 528), config("gemm", 64));
    let mut p1 = Profiles::new("GPU X");
    p1.insert(ProfileEntry { config: a.clone(), times: vec![(8, 80.0), (132, 10.0)] });
    p1.save(&d.join("p1.json")).unwrap();
    let mut p2 = Profiles::new("GPU X");
    p2.insert(ProfileEntry { config: a.clone(), times: vec![(132, 12.0)] });
    p2.insert(ProfileEntry { config: b.clone(), times: vec![(16, 3.0)] });
    p2.save(&d.join("p2.json")).unwrap();
    Profiles::new("GPU Y").save(&d.join("other.json")).unwrap();
    let o = merge(&[&d.join("p1.json"), &d.join("p2.json")], &d.join("m.json"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = Profiles::load(&d.join("m.json")).expect("merged file");
    assert_eq!((m.len(), m.device.as_str()), (2, "GPU X"));
    assert_eq!(m.get(&a).unwrap().times, vec![(8, 80.0), (132, 12.0)], "the later file's time first");
    assert_eq!(m.get(&b).unwrap().times, vec![(16, 3.0)]);
    let o = merge(&[&d.join("p1.json"), &d.join("other.json")], &d.join("x.json"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("other.json") && err.contains("GPU Y"), "{err}");
    assert!(!d.join("x.json").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&d);
}
