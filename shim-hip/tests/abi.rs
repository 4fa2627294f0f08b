//! The HIP constants and struct layouts of `ffi` against Debian's HIP headers: a C program
//! compiled against `/usr/include/hip` prints them, the test compares with the Rust values.

use std::mem::{offset_of, size_of};
use std::process::Command;

use vitamin_hip::ffi::*;

const PROGRAM: &str = r#"
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
    printf("success %d\n", (int)hipSuccess);
    printf("invalid_value %d\n", (int)hipErrorInvalidValue);
    printf("symbol_not_found %d\n", (int)hipErrorSharedObjectSymbolNotFound);
    printf("invalid_handle %d\n", (int)hipErrorInvalidHandle);
    printf("invalid_resource_handle %d\n", (int)hipErrorInvalidResourceHandle);
    printf("not_ready %d\n", (int)hipErrorNotReady);
    printf("launch_failure %d\n", (int)hipErrorLaunchFailure);
    printf("unknown %d\n", (int)hipErrorUnknown);
    printf("per_thread %zu\n", (size_t)hipStreamPerThread);
    printf("non_blocking %d\n", (int)hipStreamNonBlocking);
    printf("disable_timing %d\n", (int)hipEventDisableTiming);
    printf("interprocess %d\n", (int)hipEventInterprocess);
    printf("memory_host %d\n", (int)hipMemoryTypeHost);
    printf("dim3 %zu\n", sizeof(dim3));
    printf("pitched %zu\n", sizeof(hipPitchedPtr));
    printf("pitched_ysize %zu\n", offsetof(hipPitchedPtr, ysize));
    printf("extent %zu\n", sizeof(hipExtent));
    printf("extent_depth %zu\n", offsetof(hipExtent, depth));
    printf("attr_size %zu\n", sizeof(hipPointerAttribute_t));
    printf("attr_type %zu\n", offsetof(hipPointerAttribute_t, memoryType));
    printf("attr_device %zu\n", offsetof(hipPointerAttribute_t, device));
    printf("attr_devptr %zu\n", offsetof(hipPointerAttribute_t, devicePointer));
    printf("attr_hostptr %zu\n", offsetof(hipPointerAttribute_t, hostPointer));
    printf("attr_managed %zu\n", offsetof(hipPointerAttribute_t, isManaged));
    printf("attr_flags %zu\n", offsetof(hipPointerAttribute_t, allocationFlags));
    printf("not_supported %d\n", (int)hipErrorNotSupported);
    printf("param_buffer_pointer %zu\n", (size_t)HIP_LAUNCH_PARAM_BUFFER_POINTER);
    printf("param_buffer_size %zu\n", (size_t)HIP_LAUNCH_PARAM_BUFFER_SIZE);
    printf("param_end %zu\n", (size_t)HIP_LAUNCH_PARAM_END);
    printf("any_order %d\n", (int)hipExtAnyOrderLaunch);
    return 0;
}
"#;

#[test]
fn constants_and_layouts_match_the_headers() {
    let include = vitamin_hal_hip::test_double::include_dir();
    if !include.join("hip/hip_runtime_api.h").exists() {
        eprintln!("SKIPPED: no HIP headers under {} (install libamdhip64-dev)", include.display());
        return;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shimhip-abi");
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("abi.c"), dir.join("abi"));
    std::fs::write(&src, PROGRAM).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(format!("-I{}", include.display()))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}); install gcc or set CC"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&exe).output().expect("run the ABI program");
    let text = String::from_utf8(out.stdout).unwrap();
    let value = |k: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{k} missing from:\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("success"), i64::from(HIP_SUCCESS));
    assert_eq!(value("invalid_value"), i64::from(HIP_ERROR_INVALID_VALUE));
    assert_eq!(value("symbol_not_found"), i64::from(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND));
    assert_eq!(value("invalid_handle"), i64::from(HIP_ERROR_INVALID_HANDLE));
    assert_eq!(value("invalid_resource_handle"), i64::from(HIP_ERROR_INVALID_HANDLE));
    assert_eq!(value("not_ready"), i64::from(HIP_ERROR_NOT_READY));
    assert_eq!(value("launch_failure"), i64::from(HIP_ERROR_LAUNCH_FAILURE));
    assert_eq!(value("unknown"), i64::from(HIP_ERROR_UNKNOWN));
    assert_eq!(value("per_thread"), HIP_STREAM_PER_THREAD as i64);
    assert_eq!(value("non_blocking"), i64::from(HIP_STREAM_NON_BLOCKING));
    assert_eq!(value("disable_timing"), i64::from(HIP_EVENT_DISABLE_TIMING));
    assert_eq!(value("interprocess"), i64::from(HIP_EVENT_INTERPROCESS));
    assert_eq!(value("memory_host"), i64::from(HIP_MEMORY_TYPE_HOST));
    assert_eq!(value("dim3"), size_of::<Dim3>() as i64);
    assert_eq!(value("pitched"), size_of::<PitchedPtr>() as i64);
    assert_eq!(value("pitched_ysize"), offset_of!(PitchedPtr, ysize) as i64);
    assert_eq!(value("extent"), size_of::<Extent>() as i64);
    assert_eq!(value("extent_depth"), offset_of!(Extent, depth) as i64);
    assert_eq!(value("attr_size"), size_of::<HipPointerAttribute>() as i64);
    assert_eq!(value("attr_type"), offset_of!(HipPointerAttribute, memory_type) as i64);
    assert_eq!(value("attr_device"), offset_of!(HipPointerAttribute, device) as i64);
    assert_eq!(value("attr_devptr"), offset_of!(HipPointerAttribute, device_pointer) as i64);
    assert_eq!(value("attr_hostptr"), offset_of!(HipPointerAttribute, host_pointer) as i64);
    assert_eq!(value("attr_managed"), offset_of!(HipPointerAttribute, is_managed) as i64);
    assert_eq!(value("attr_flags"), offset_of!(HipPointerAttribute, allocation_flags) as i64);
    assert_eq!(value("not_supported"), i64::from(HIP_ERROR_NOT_SUPPORTED));
    assert_eq!(value("param_buffer_pointer"), HIP_LAUNCH_PARAM_BUFFER_POINTER as i64);
    assert_eq!(value("param_buffer_size"), HIP_LAUNCH_PARAM_BUFFER_SIZE as i64);
    assert_eq!(value("param_end"), HIP_LAUNCH_PARAM_END as i64);
    assert_eq!(value("any_order"), i64::from(HIP_EXT_ANY_ORDER_LAUNCH));
}

/// ROCm 6's launch configuration types, absent from HIP 5.2's headers: the sizes and offsets of
/// ROCm 6's `hip_runtime_api.h` (`hipLaunchAttribute` 72 bytes with its value at 8,
/// `hipLaunchConfig_t` and `HIP_LAUNCH_CONFIG` 56 bytes with the stream at 32, the attributes at
/// 40 and their count at 48), which the test double's C declarations also assert.
#[test]
fn rocm6_launch_configurations_have_the_rocm6_layout() {
    assert_eq!((size_of::<LaunchAttribute>(), offset_of!(LaunchAttribute, val)), (72, 8));
    assert_eq!(size_of::<LaunchConfig>(), 56);
    assert_eq!(offset_of!(LaunchConfig, block), 12);
    assert_eq!(offset_of!(LaunchConfig, dynamic_smem_bytes), 24);
    assert_eq!(offset_of!(LaunchConfig, stream), 32);
    assert_eq!(offset_of!(LaunchConfig, attrs), 40);
    assert_eq!(offset_of!(LaunchConfig, num_attrs), 48);
    assert_eq!(size_of::<DrvLaunchConfig>(), 56);
    assert_eq!(offset_of!(DrvLaunchConfig, shared_mem_bytes), 24);
    assert_eq!(offset_of!(DrvLaunchConfig, stream), 32);
    assert_eq!(offset_of!(DrvLaunchConfig, attrs), 40);
    assert_eq!(offset_of!(DrvLaunchConfig, num_attrs), 48);
}
