//! The ABI facts hal-hip hard-codes, checked against Debian's real HIP headers and library:
//! constants and `hipDeviceProp_t` offsets (a C program compiled against the headers prints
//! them), and the test double's exported symbols and version nodes (against `libamdhip64.so.5`).
//! Each test prints `SKIPPED` where the headers, the library or a C compiler are missing.

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use vitamin_hal_hip::driver as d;
use vitamin_hal_hip::symbols::{compare, exports, DEBIAN_LIBAMDHIP64};
use vitamin_hal_hip::test_double;

const PROBE: &str = r#"
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
  printf("DEVICE_PROP_SIZE %zu\n", sizeof(hipDeviceProp_t));
  printf("DEVICE_PROP_GCN_ARCH_NAME %zu\n", offsetof(hipDeviceProp_t, gcnArchName));
  printf("DEVICE_PROP_NAME %zu\n", offsetof(hipDeviceProp_t, name));
  printf("SUCCESS %d\n", hipSuccess);
  printf("ERROR_INVALID_VALUE %d\n", hipErrorInvalidValue);
  printf("ERROR_OUT_OF_MEMORY %d\n", hipErrorOutOfMemory);
  printf("ERROR_NO_DEVICE %d\n", hipErrorNoDevice);
  printf("ERROR_INVALID_DEVICE %d\n", hipErrorInvalidDevice);
  printf("ERROR_NOT_READY %d\n", hipErrorNotReady);
  printf("ERROR_LAUNCH_FAILURE %d\n", hipErrorLaunchFailure);
  printf("ATTR_COOPERATIVE_LAUNCH %d\n", hipDeviceAttributeCooperativeLaunch);
  printf("ATTR_COMPUTE_CAPABILITY_MAJOR %d\n", hipDeviceAttributeComputeCapabilityMajor);
  printf("ATTR_MAX_THREADS_PER_BLOCK %d\n", hipDeviceAttributeMaxThreadsPerBlock);
  printf("ATTR_MULTIPROCESSOR_COUNT %d\n", hipDeviceAttributeMultiprocessorCount);
  printf("MEMCPY_DEFAULT %d\n", hipMemcpyDefault);
  printf("EVENT_DISABLE_TIMING %d\n", hipEventDisableTiming);
  printf("HOST_MALLOC_MAPPED %d\n", hipHostMallocMapped);
  printf("HOST_MALLOC_PORTABLE %d\n", hipHostMallocPortable);
  printf("RTC_SUCCESS %d\n", HIPRTC_SUCCESS);
  return 0;
}
"#;

#[test]
fn abi_constants_match_the_real_headers() {
    if let Some(why) = test_double::unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hip-abi");
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&src, PROBE).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(format!("-I{}", test_double::include_dir().display()))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run the C compiler");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&exe).output().expect("run the probe");
    let values: HashMap<String, i64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let ours: &[(&str, i64)] = &[
        ("DEVICE_PROP_SIZE", d::DEVICE_PROP_SIZE as i64),
        ("DEVICE_PROP_GCN_ARCH_NAME", d::DEVICE_PROP_GCN_ARCH_NAME as i64),
        ("DEVICE_PROP_NAME", d::DEVICE_PROP_NAME as i64),
        ("SUCCESS", d::SUCCESS.into()),
        ("ERROR_INVALID_VALUE", d::ERROR_INVALID_VALUE.into()),
        ("ERROR_OUT_OF_MEMORY", d::ERROR_OUT_OF_MEMORY.into()),
        ("ERROR_NO_DEVICE", d::ERROR_NO_DEVICE.into()),
        ("ERROR_INVALID_DEVICE", d::ERROR_INVALID_DEVICE.into()),
        ("ERROR_NOT_READY", d::ERROR_NOT_READY.into()),
        ("ERROR_LAUNCH_FAILURE", d::ERROR_LAUNCH_FAILURE.into()),
        ("ATTR_COOPERATIVE_LAUNCH", d::ATTR_COOPERATIVE_LAUNCH.into()),
        ("ATTR_COMPUTE_CAPABILITY_MAJOR", d::ATTR_COMPUTE_CAPABILITY_MAJOR.into()),
        ("ATTR_MAX_THREADS_PER_BLOCK", d::ATTR_MAX_THREADS_PER_BLOCK.into()),
        ("ATTR_MULTIPROCESSOR_COUNT", d::ATTR_MULTIPROCESSOR_COUNT.into()),
        ("MEMCPY_DEFAULT", d::MEMCPY_DEFAULT.into()),
        ("EVENT_DISABLE_TIMING", d::EVENT_DISABLE_TIMING.into()),
        ("HOST_MALLOC_MAPPED", d::HOST_MALLOC_MAPPED.into()),
        ("HOST_MALLOC_PORTABLE", d::HOST_MALLOC_PORTABLE.into()),
        ("RTC_SUCCESS", 0),
    ];
    for (name, v) in ours {
        assert_eq!(values.get(*name), Some(v), "{name}: the headers say {:?}", values.get(*name));
    }
}

/// Every required and optional symbol of hal-hip's table is one the real library (or, for the
/// optional ones, a newer ROCm) exports; the required ones all exist in Debian's 5.2.3.
#[test]
fn required_symbols_exist_in_debians_library() {
    if !std::path::Path::new(DEBIAN_LIBAMDHIP64).exists() {
        eprintln!("SKIPPED: {DEBIAN_LIBAMDHIP64} is not installed (apt-get install libamdhip64-dev)");
        return;
    }
    let real = match exports(std::path::Path::new(DEBIAN_LIBAMDHIP64)) {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let names: std::collections::HashSet<&str> = real.iter().map(|e| e.name.as_str()).collect();
    for s in d::REQUIRED_SYMBOLS.iter().chain(vitamin_hal_hip::rtc::REQUIRED_RTC_SYMBOLS) {
        assert!(names.contains(s), "{s} is required but Debian's libamdhip64 5.2.3 lacks it");
    }
}

/// The symbol-version check the interposer will use: the double exports every `hip*` function
/// under the real library's version node; the only extras are the documented newer-API ones.
#[test]
fn the_test_double_exports_the_real_version_nodes() {
    if !std::path::Path::new(DEBIAN_LIBAMDHIP64).exists() {
        eprintln!("SKIPPED: {DEBIAN_LIBAMDHIP64} is not installed (apt-get install libamdhip64-dev)");
        return;
    }
    let Some(fake) = support::fake_lib() else { return };
    let (candidate, reference) = match (exports(&fake), exports(std::path::Path::new(DEBIAN_LIBAMDHIP64))) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let c = compare(&candidate, &reference, &["hip"]);
    assert!(c.versions_match(), "symbols under another version than libamdhip64.so.5: {:?}", c.mismatched);
    assert!(c.matching.len() >= 50, "only {} symbols compared: {:?}", c.matching.len(), c.matching);
    let mut extras: Vec<&str> = c.not_in_reference.iter().map(|(n, _)| n.as_str()).collect();
    extras.sort_unstable();
    let mut newer = test_double::NEWER_THAN_5_2.to_vec();
    if test_double::Variant::from_env() == test_double::Variant::GreenContexts {
        newer.extend_from_slice(test_double::GREEN_CONTEXT_EXPORTS);
    }
    newer.sort_unstable();
    assert_eq!(extras, newer);
    // The same chain of version nodes as the real library (plus the newer nodes last).
    let nodes = |p: &std::path::Path| vitamin_hal_hip::symbols::version_definitions(p).expect("objdump -p");
    let (ours, theirs) = (nodes(&fake), nodes(std::path::Path::new(DEBIAN_LIBAMDHIP64)));
    assert!(theirs.len() >= 7, "{theirs:?}");
    assert_eq!(&ours[..theirs.len()], &theirs[..], "version nodes and their parents");
    let mut newer_nodes = vec!["hip_5.5", "hip_6.2", "hip_6.5", "hip_7.0"];
    if test_double::Variant::from_env() == test_double::Variant::GreenContexts {
        newer_nodes.push("hip_7.14");
    }
    assert_eq!(ours[theirs.len()..].iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), newer_nodes);
    // Nothing but the HIP API leaks out of the double (its helpers stay local).
    let leaked: Vec<&str> = candidate
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| !n.starts_with("hip") && !n.starts_with('_') && !n.is_empty())
        .collect();
    assert!(leaked.is_empty(), "the double exports non-HIP symbols: {leaked:?}");
}

/// The reference kernels the HIP tests launch are real HIP: Debian's hipcc (clang 15) compiles
/// them to code objects for CDNA (gfx90a, gfx940) and a WGP-mode RDNA part (gfx1030). Clang 15
/// does not know gfx942; a ROCm host's hipRTC compiles for it at run time.
#[test]
fn the_test_kernels_compile_with_hipcc() {
    let hipcc = std::env::var("HIPCC").unwrap_or_else(|_| "hipcc".into());
    if Command::new(&hipcc).arg("--version").output().is_err() {
        eprintln!("SKIPPED: no hipcc (apt-get install hipcc, or set HIPCC)");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hip-kernels");
    std::fs::create_dir_all(&dir).unwrap();
    let (src, obj) = (dir.join("test_kernels.hip"), dir.join("test_kernels.co"));
    std::fs::write(&src, test_double::TEST_KERNELS).unwrap();
    let out = Command::new(&hipcc)
        .args(["--offload-arch=gfx90a", "--offload-arch=gfx940", "--offload-arch=gfx1030", "--cuda-device-only", "-c"])
        .arg("-o")
        .arg(&obj)
        .arg(&src)
        .output()
        .expect("run hipcc");
    assert!(out.status.success(), "hipcc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let bundle = std::fs::read(&obj).unwrap();
    for name in test_double::TEST_KERNEL_NAMES {
        assert!(bundle.windows(name.len()).any(|w| w == name.as_bytes()), "{name} is not in the code object");
    }
}
