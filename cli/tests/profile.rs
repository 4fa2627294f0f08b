//! `vitamin profile --merge`: the per-process files bind mode's `profile_out` writes, made one for
//! `vitamin daemon --profiles`.

use std::process::Command;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, KernelArgs, KernelLaunch, LaunchAttributes};
use vitamin_runtime::profile::{ProfileEntry, Profiles};

fn busy(sim: &SimBackend, grid: u32) -> KernelLaunch {
    KernelLaunch::new(
        sim.kernel("busy").expect("builtin"),
        Dim3::x(grid),
        Dim3::x(128),
        0,
        KernelArgs::pack(&[&10_000u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )
}

#[test]
fn merging_unites_the_files_of_one_device_and_refuses_two_devices() {
    let d = std::env::temp_dir().join(format!("vitamin-cli-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let sim = SimBackend::preset("h200").unwrap();
    let (a, b) = (busy(&sim, 528), busy(&sim, 64));
    let mut p1 = Profiles::new("GPU X");
    p1.insert(ProfileEntry { config: a.config(), times: vec![(8, 80.0), (132, 10.0)] });
    p1.save(&d.join("p1.json")).unwrap();
    let mut p2 = Profiles::new("GPU X");
    p2.insert(ProfileEntry { config: a.config(), times: vec![(132, 12.0)] });
    p2.insert(ProfileEntry { config: b.config(), times: vec![(16, 3.0)] });
    p2.save(&d.join("p2.json")).unwrap();
    Profiles::new("GPU Y").save(&d.join("other.json")).unwrap();
    let vitamin = || Command::new(env!("CARGO_BIN_EXE_vitamin"));
    let o = vitamin()
        .args(["profile", "--merge"])
        .arg(d.join("p1.json"))
        .arg(d.join("p2.json"))
        .arg("-o")
        .arg(d.join("m.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = Profiles::load(&d.join("m.json")).expect("merged file");
    assert_eq!((m.len(), m.device.as_str()), (2, "GPU X"));
    assert_eq!(m.get(&a.config()).unwrap().times, vec![(8, 80.0), (132, 12.0)], "the later file's time first");
    assert_eq!(m.get(&b.config()).unwrap().times, vec![(16, 3.0)]);
    let o = vitamin()
        .args(["profile", "--merge"])
        .arg(d.join("p1.json"))
        .arg(d.join("other.json"))
        .arg("-o")
        .arg(d.join("x.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("other.json") && err.contains("GPU Y"), "{err}");
    assert!(!d.join("x.json").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&d);
}
