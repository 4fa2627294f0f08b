//! The capability probe: everything the backend needs to know about the driver and device, filled
//! once (driver version, SM count, partition granularity, green-context support, NVRTC).

use serde::Serialize;
use vitamin_hal::HalError;

use crate::driver::{self, device, resource};
use cudarc::driver::sys::CUdevice_attribute as Attr;

/// Configuration key choosing the device ordinal (default 0; docs/config.md). A file key, no
/// environment variable: `CUDA_VISIBLE_DEVICES` selects devices per process.
pub const DEVICE_KEY: &str = "device";

/// What the probe found. Serialized into `vitamin info --json` and the determinism report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaCapabilities {
    /// `cuDriverGetVersion` (e.g. 13000 = CUDA 13.0).
    pub driver_version: i32,
    /// NVRTC `(major, minor)`, when the library was found.
    pub nvrtc_version: Option<(i32, i32)>,
    /// Why NVRTC is unavailable (vitamin's own kernels then cannot be compiled).
    pub nvrtc_unavailable: Option<String>,
    /// Device ordinal.
    pub ordinal: i32,
    /// Device name (`NVIDIA H200`).
    pub device_name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// SMs of the device's SM resource.
    pub sm_count: u32,
    /// Smallest SM group a split can produce (`minSmPartitionSize`, or the architecture's known
    /// value on drivers that do not report it).
    pub min_partition_size: u32,
    /// SM-group alignment (`smCoscheduledAlignment`, same fallback).
    pub partition_alignment: u32,
    /// Whether `cuDeviceGetDevResource` answered for SMs (green contexts usable).
    pub green_contexts: bool,
    /// `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`.
    pub cooperative_launch: bool,
    /// `CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH`.
    pub clusters: bool,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS`: lanes can be fenced by a 64-bit write
    /// to host-mapped memory (`cuStreamWriteValue64`) that polls read without a driver call.
    pub stream_mem_ops: bool,
}

impl CudaCapabilities {
    /// Driver version as `13.0`.
    pub fn driver_version_string(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, self.driver_version % 1000 / 10)
    }
}

/// The device ordinal from the configuration key [`DEVICE_KEY`], default 0.
pub fn default_ordinal() -> Result<i32, HalError> {
    match vitamin_runtime::config::process().get(DEVICE_KEY).map(|v| v.trim().to_owned()) {
        Some(v) if !v.is_empty() => v.parse().ok().filter(|&n: &i32| n >= 0).ok_or_else(|| {
            driver::unsupported(format!(
                "configuration key {DEVICE_KEY} = {v:?} is not a device ordinal: use 0, 1, ..."
            ))
        }),
        _ => Ok(0),
    }
}

/// Probes the driver and device `ordinal`. Never panics; every failure is `Unsupported` with the
/// reason (no library, old driver, no device, no green contexts).
pub fn probe_device(ordinal: i32) -> Result<CudaCapabilities, HalError> {
    let info = driver::load()?;
    if ordinal < 0 || ordinal >= info.device_count {
        return Err(driver::unsupported(format!(
            "device {ordinal} requested but the driver reports {} device(s)",
            info.device_count
        )));
    }
    let dev = device::get(ordinal)?;
    let attr = |a| device::attribute(dev, a);
    let cc = (
        attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let sm_resource = device::sm_resource(dev).map_err(|e| {
        driver::unsupported(format!("{e}: this device or driver does not expose SM resources (no green contexts)"))
    })?;
    let sm_count = resource::sm_count(&sm_resource);
    let (min, align) = resource::sm_granularity(&sm_resource);
    // CUDA 12.x drivers do not report granularity; Hopper and Blackwell need groups of 8 SMs,
    // older architectures of 2 (the CUDA programming guide's green-context section).
    let arch_min = if cc.0 >= 9 { 8 } else { 2 };
    let (nvrtc_version, nvrtc_unavailable) = match crate::nvrtc::load() {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(CudaCapabilities {
        driver_version: info.version,
        nvrtc_version,
        nvrtc_unavailable,
        ordinal,
        device_name: device::name(dev)?,
        compute_capability: cc,
        sm_count,
        min_partition_size: if min > 0 { min } else { arch_min },
        partition_alignment: if align > 0 { align } else { arch_min },
        green_contexts: sm_count > 0,
        cooperative_launch: attr(Attr::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
        clusters: attr(Attr::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)? != 0,
        total_memory: device::total_mem(dev)? as u64,
        stream_mem_ops: attr(Attr::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS).unwrap_or(0) != 0,
    })
}

/// Probes the device chosen by [`DEVICE_KEY`].
pub fn probe() -> Result<CudaCapabilities, HalError> {
    probe_device(default_ordinal()?)
}
