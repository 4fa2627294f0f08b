//! The capability probe: everything the backend needs to know about the HIP runtime and the
//! device, filled once ([`HipCapabilities`]), and the leaf layout built from it ([`leaf_layout`]).
//!
//! ## Leaf layout
//! A CU mask bit is a *logical* CU. The runtime deals logical CUs round-robin over the XCDs (MI300X:
//! bit `i` is on XCD `i mod 8`, then over shader engines; FACTS.md), and a full-device dispatch
//! deals workgroups over the XCDs the same way. A leaf is therefore a run of consecutive mask bits
//! whose length is a multiple of the *granule* `lcm(XCDs, 2 on WGP-mode parts)`: every leaf holds
//! the same number of CUs on every XCD (MI300X: 16 bits = 2 CUs on each of the 8 XCDs, 19 leaves),
//! so any union of leaves spreads over the XCDs as the whole device does, and on WGP-mode parts
//! (RDNA, gfx10-12) a leaf never splits a CU pair `2k, 2k+1` (FACTS.md: such chips need CUs in
//! even pairs). The leaf size is the smallest multiple of the granule that gives at most
//! [`MAX_LEAVES`] leaves (the pool's node count grows with the leaf count); the configuration key
//! `leaf_units` sets it (a multiple of the granule). A shorter remainder, if the CU count is not a multiple,
//! is one more leaf. Domains are the XCDs' bit sets (none on a single-XCD part).
//!
//! HIP 5.2 reports neither the XCD count nor WGP mode: both come from the architecture name
//! ([`xcds_for`], [`wgp_mode_for`]), overridable by the configuration keys `domains` and `paired_units` ([`crate::settings`]).
//! Nothing here was checked on AMD hardware.

use serde::Serialize;
use vitamin_hal::{HalError, UnitSet};

use crate::driver::{self, c_string, unsupported};
use crate::settings;

/// Most leaves the default layout produces.
pub const MAX_LEAVES: usize = 20;

/// What the probe found. Serialized into `vitamin info --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HipCapabilities {
    /// The library file that was loaded.
    pub library: String,
    /// `hipRuntimeGetVersion` (`HIP_VERSION`: major * 10^7 + minor * 10^5 + patch).
    pub runtime_version: i32,
    /// Device ordinal.
    pub ordinal: i32,
    /// `hipDeviceGetName` (`AMD Instinct MI300X`).
    pub device_name: String,
    /// `hipDeviceProp_t::gcnArchName` (`gfx942:sramecc+:xnack-`).
    pub arch: String,
    /// `hipDeviceAttributeMultiprocessorCount`: CUs, i.e. CU mask bits.
    pub cu_count: u32,
    /// XCDs (from the architecture, or the configuration key `domains`).
    pub xcds: u32,
    /// WGP mode: CU masks must hold CU pairs (from the architecture, or the configuration key
    /// `paired_units`).
    pub wgp_mode: bool,
    /// `hipDeviceAttributeCooperativeLaunch`.
    pub cooperative_launch: bool,
    /// `hipDeviceAttributeMaxThreadsPerBlock`.
    pub max_threads_per_block: u32,
    /// `hipDeviceTotalMem`.
    pub total_memory: u64,
    /// `hipLaunchHostFunc` exists (else host functions use `hipStreamAddCallback`).
    pub launch_host_func: bool,
    /// `hipModuleLaunchCooperativeKernel` exists (ROCm 6+; without it cooperative launches of
    /// module functions are refused).
    pub module_cooperative_launch: bool,
    /// `hipStreamWriteValue64` and mapped host memory exist (memory fences possible).
    pub stream_write_value64: bool,
    /// HIP green contexts (`hipDevSmResourceSplitByCount`, `hipGreenCtxCreate`,
    /// `hipExecutionCtxStreamCreate`, ROCm 7.14+) were found.
    pub green_contexts: bool,
    /// hipRTC `(major, minor)`, when found.
    pub rtc_version: Option<(i32, i32)>,
    /// Why hipRTC is unavailable.
    pub rtc_unavailable: Option<String>,
}

impl HipCapabilities {
    /// `5.2.21153` from `HIP_VERSION`.
    pub fn runtime_version_string(&self) -> String {
        let v = self.runtime_version;
        format!("{}.{}.{}", v / 10_000_000, v / 100_000 % 100, v % 100_000)
    }

    /// The architecture without feature flags (`gfx942`).
    pub fn arch_base(&self) -> &str {
        self.arch.split(':').next().unwrap_or("")
    }
}

/// The device ordinal from the configuration key `device`, default 0.
pub fn default_ordinal() -> Result<i32, HalError> {
    ordinal_from(&settings::process)
}

/// The device ordinal `get` gives for `device`, default 0.
pub fn ordinal_from(get: &impl Fn(&str) -> Option<String>) -> Result<i32, HalError> {
    match settings::value(get, settings::DEVICE) {
        Some(v) => v.parse().ok().filter(|&n: &i32| n >= 0).ok_or_else(|| {
            unsupported(format!(
                "configuration key {} = {v:?} is not a device ordinal: use 0, 1, ...",
                settings::DEVICE
            ))
        }),
        None => Ok(0),
    }
}

/// XCDs of a device from its architecture and CU count: CDNA 3 (gfx940-942) has 38 CUs per XCD
/// (MI300X 304 = 8 x 38, MI300A 228 = 6 x 38, partition modes fewer), CDNA 4 (gfx950) 32; every
/// other part is counted as one XCD.
pub fn xcds_for(arch: &str, cu_count: u32) -> u32 {
    let base = arch.split(':').next().unwrap_or("");
    let per_xcd = match base {
        "gfx940" | "gfx941" | "gfx942" => 38,
        "gfx950" => 32,
        _ => return 1,
    };
    if cu_count >= per_xcd && cu_count.is_multiple_of(per_xcd) {
        cu_count / per_xcd
    } else {
        1
    }
}

/// Whether an architecture runs in WGP mode by default (RDNA: gfx10, gfx11, gfx12).
pub fn wgp_mode_for(arch: &str) -> bool {
    ["gfx10", "gfx11", "gfx12"].iter().any(|p| arch.starts_with(p))
}

/// The leaves and domains of a device (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafLayout {
    /// Leaves, in bit order.
    pub leaves: Vec<UnitSet>,
    /// XCDs' bit sets (empty for one XCD).
    pub domains: Vec<UnitSet>,
    /// CUs per leaf (the last leaf may be shorter).
    pub leaf_size: usize,
    /// `lcm(XCDs, 2 if WGP mode)`.
    pub granule: usize,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Builds the leaf layout of `cu_count` CUs over `xcds` XCDs; `leaf_cus` overrides the size.
pub fn leaf_layout(cu_count: usize, xcds: usize, wgp: bool, leaf_cus: Option<usize>) -> Result<LeafLayout, HalError> {
    let bad = |why: String| Err(HalError::InvalidTopology(why));
    if cu_count == 0 || cu_count > vitamin_hal::MAX_UNITS {
        return bad(format!("{cu_count} CUs: vitamin handles 1..={} CUs", vitamin_hal::MAX_UNITS));
    }
    if xcds == 0 || xcds > cu_count {
        return bad(format!("{xcds} XCDs for {cu_count} CUs"));
    }
    let pair = if wgp { 2 } else { 1 };
    let granule = xcds / gcd(xcds, pair) * pair;
    let leaf_size = match leaf_cus {
        Some(n) if n == 0 || n % granule != 0 || n > cu_count => {
            return bad(format!(
                "configuration key {} = {n}: a leaf must be a multiple of {granule} CUs ({xcds} XCDs{}) and at most {cu_count}",
                settings::LEAF_UNITS,
                if wgp { ", WGP pairs" } else { "" }
            ));
        }
        Some(n) => n,
        None => {
            let mut size = granule;
            while cu_count.div_ceil(size) > MAX_LEAVES {
                size += granule;
            }
            size.min(cu_count)
        }
    };
    let leaves = (0..cu_count.div_ceil(leaf_size))
        .map(|i| UnitSet::range(i * leaf_size, ((i + 1) * leaf_size).min(cu_count)))
        .collect();
    let domains = if xcds > 1 {
        (0..xcds).map(|x| (0..cu_count).filter(|i| i % xcds == x).collect()).collect()
    } else {
        Vec::new()
    };
    Ok(LeafLayout { leaves, domains, leaf_size, granule })
}

/// The layout for probed capabilities, with the configuration's `leaf_units` applied.
pub fn layout_for(caps: &HipCapabilities) -> Result<LeafLayout, HalError> {
    layout_with(caps, &settings::process)
}

/// [`layout_for`] with the lookup `get`.
pub fn layout_with(caps: &HipCapabilities, get: &impl Fn(&str) -> Option<String>) -> Result<LeafLayout, HalError> {
    leaf_layout(caps.cu_count as usize, caps.xcds as usize, caps.wgp_mode, settings::number(get, settings::LEAF_UNITS)?)
}

/// The XCD count and WGP mode of a device of architecture `arch` with `cu_count` CUs: from the
/// architecture ([`xcds_for`], [`wgp_mode_for`]) unless `get` gives `domains` / `paired_units`.
pub fn arch_traits(arch: &str, cu_count: u32, get: &impl Fn(&str) -> Option<String>) -> Result<(u32, bool), HalError> {
    let xcds = match settings::number(get, settings::DOMAINS)? {
        Some(n) => n as u32,
        None => xcds_for(arch, cu_count),
    };
    let wgp = settings::flag(get, settings::PAIRED_UNITS)?.unwrap_or_else(|| wgp_mode_for(arch));
    Ok((xcds, wgp))
}

/// Probes the runtime and device `ordinal`. Never panics; every failure is `Unsupported` with the
/// reason (no library, missing symbols, no device).
pub fn probe_device(ordinal: i32) -> Result<HipCapabilities, HalError> {
    probe_library(None, ordinal)
}

/// [`probe_device`] with the runtime library at `library` (a path), or the default search for
/// `None`.
pub fn probe_library(library: Option<&str>, ordinal: i32) -> Result<HipCapabilities, HalError> {
    let api = driver::load_from(library)?;
    let mut version = 0;
    // SAFETY: out-pointer is a live local.
    api.check("hipRuntimeGetVersion", unsafe { (api.hipRuntimeGetVersion)(&mut version) })
        .map_err(|e| unsupported(format!("{}: {e}", api.path)))?;
    let ver = format!("{}.{}.{}", version / 10_000_000, version / 100_000 % 100, version % 100_000);
    let mut count = 0;
    // SAFETY: out-pointer is a live local.
    let r = unsafe { (api.hipGetDeviceCount)(&mut count) };
    if r != driver::SUCCESS || count == 0 {
        return Err(unsupported(format!(
            "{} (HIP runtime {ver}) loaded, but hipGetDeviceCount returned {} ({r}), {count} device(s): no AMD GPU is \
             visible to this process (is amdgpu loaded, and may this user open /dev/kfd and /dev/dri/renderD*?)",
            api.path,
            api.error_name(r)
        )));
    }
    if ordinal < 0 || ordinal >= count {
        return Err(unsupported(format!("device {ordinal} requested but the HIP runtime reports {count} device(s)")));
    }
    // SAFETY: a valid ordinal.
    api.check("hipSetDevice", unsafe { (api.hipSetDevice)(ordinal) })?;
    let attr = |a: i32| -> Result<i32, HalError> {
        let mut v = 0;
        // SAFETY: out-pointer is a live local; `a` is an attribute of the HIP 5.2 enum.
        api.check("hipDeviceGetAttribute", unsafe { (api.hipDeviceGetAttribute)(&mut v, a, ordinal) })?;
        Ok(v)
    };
    let cu_count = attr(driver::ATTR_MULTIPROCESSOR_COUNT)?.max(0) as u32;
    let cooperative_launch = attr(driver::ATTR_COOPERATIVE_LAUNCH).unwrap_or(0) != 0;
    let max_threads_per_block = attr(driver::ATTR_MAX_THREADS_PER_BLOCK).unwrap_or(1024).max(1) as u32;
    let mut name = [0u8; 256];
    // SAFETY: the buffer holds 256 bytes and we pass that length.
    api.check("hipDeviceGetName", unsafe { (api.hipDeviceGetName)(name.as_mut_ptr().cast(), 256, ordinal) })?;
    // Four times the HIP 5.2 struct, so that a runtime writing a larger (newer) layout behind the
    // same symbol stays inside the buffer; u64 words keep it aligned.
    let mut props = vec![0u64; driver::DEVICE_PROP_SIZE * 4 / 8];
    // SAFETY: the buffer is larger than hipDeviceProp_t and 8-byte aligned.
    api.check("hipGetDeviceProperties", unsafe { (api.hipGetDeviceProperties)(props.as_mut_ptr().cast(), ordinal) })?;
    let bytes: Vec<u8> = props.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let arch = c_string(&bytes[driver::DEVICE_PROP_GCN_ARCH_NAME..driver::DEVICE_PROP_GCN_ARCH_NAME + 256]);
    let mut total = 0usize;
    // SAFETY: out-pointer is a live local.
    api.check("hipDeviceTotalMem", unsafe { (api.hipDeviceTotalMem)(&mut total, ordinal) })?;
    let (xcds, wgp_mode) = arch_traits(&arch, cu_count, &settings::process)?;
    let (rtc_version, rtc_unavailable) = match crate::rtc::version_for(library) {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(HipCapabilities {
        library: api.path.clone(),
        runtime_version: version,
        ordinal,
        device_name: c_string(&name),
        arch,
        cu_count,
        xcds,
        wgp_mode,
        cooperative_launch,
        max_threads_per_block,
        total_memory: total as u64,
        launch_host_func: api.hipLaunchHostFunc.is_some(),
        module_cooperative_launch: api.hipModuleLaunchCooperativeKernel.is_some(),
        stream_write_value64: api.hipStreamWriteValue64.is_some()
            && api.hipHostMalloc.is_some()
            && api.hipHostFree.is_some()
            && api.hipHostGetDevicePointer.is_some(),
        green_contexts: api.has_green_contexts(),
        rtc_version,
        rtc_unavailable,
    })
}

/// Probes the device chosen by the configuration key `device`.
pub fn probe() -> Result<HipCapabilities, HalError> {
    probe_device(default_ordinal()?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn mi300x_leaves_are_16_bits_two_per_xcd() {
        assert_eq!(xcds_for("gfx942:sramecc+:xnack-", 304), 8);
        let l = leaf_layout(304, 8, false, None).unwrap();
        assert_eq!((l.granule, l.leaf_size, l.leaves.len(), l.domains.len()), (8, 16, 19, 8));
        for (i, leaf) in l.leaves.iter().enumerate() {
            assert_eq!(*leaf, UnitSet::range(16 * i, 16 * i + 16));
            for d in &l.domains {
                assert_eq!(leaf.intersection(d).len(), 2, "two CUs of leaf {i} on every XCD");
            }
        }
        for (x, d) in l.domains.iter().enumerate() {
            assert_eq!(d.len(), 38);
            assert!(d.iter().all(|bit| bit % 8 == x), "bit i is on XCD i mod 8");
        }
    }

    fn map(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn the_configuration_overrides_the_architecture() {
        assert_eq!(arch_traits("gfx942", 304, &map(&[])), Ok((8, false)));
        assert_eq!(arch_traits("gfx942", 304, &map(&[("domains", "4"), ("paired_units", "1")])), Ok((4, true)));
        assert_eq!(arch_traits("gfx1100", 96, &map(&[("paired_units", "auto")])), Ok((1, true)));
        assert!(arch_traits("gfx942", 304, &map(&[("paired_units", "maybe")])).is_err());
        assert_eq!(ordinal_from(&map(&[])), Ok(0));
        assert_eq!(ordinal_from(&map(&[("device", " 3 ")])), Ok(3));
        let e = ordinal_from(&map(&[("device", "-1")])).unwrap_err().to_string();
        assert!(e.contains("device") && e.contains("-1"), "{e}");
        let e = leaf_layout(304, 8, false, Some(12)).unwrap_err().to_string();
        assert!(e.contains("leaf_units") && e.contains("multiple of 8"), "{e}");
    }

    #[test]
    fn wgp_parts_take_cu_pairs() {
        assert!(wgp_mode_for("gfx1100") && !wgp_mode_for("gfx942") && !wgp_mode_for("gfx90a"));
        assert_eq!(xcds_for("gfx1100", 96), 1);
        let l = leaf_layout(96, 1, true, None).unwrap();
        assert_eq!((l.granule, l.leaf_size, l.leaves.len()), (2, 6, 16));
        assert!(l.domains.is_empty());
    }

    #[test]
    fn bad_leaf_sizes_and_counts_are_refused() {
        assert!(leaf_layout(304, 8, false, Some(12)).is_err(), "not a multiple of 8 XCDs");
        assert!(leaf_layout(96, 1, true, Some(3)).is_err(), "splits a WGP pair");
        assert!(leaf_layout(0, 1, false, None).is_err());
        assert!(leaf_layout(600, 1, false, None).is_err());
        assert!(leaf_layout(8, 9, false, None).is_err());
        assert_eq!(leaf_layout(304, 8, false, Some(32)).unwrap().leaves.len(), 10, "9 x 32 + 16");
    }

    #[test]
    fn xcd_table() {
        assert_eq!(xcds_for("gfx942", 228), 6, "MI300A");
        assert_eq!(xcds_for("gfx942", 38), 1, "one XCD (CPX mode)");
        assert_eq!(xcds_for("gfx942", 100), 1, "unknown split");
        assert_eq!(xcds_for("gfx950", 256), 8);
        assert_eq!(xcds_for("gfx90a", 110), 1);
    }

    proptest! {
        /// Against a simple model: leaves are disjoint runs of consecutive bits covering every CU,
        /// each (but the remainder) of the same size, a multiple of the granule; every full leaf
        /// has the same number of CUs on every XCD and never splits a WGP pair; at most
        /// MAX_LEAVES leaves unless the granule forces more.
        #[test]
        fn layout_invariants(cus in 1usize..=512, xcds_pick in 0usize..4, wgp: bool) {
            let xcds = [1, 2, 4, 8][xcds_pick].min(cus);
            let l = leaf_layout(cus, xcds, wgp, None).unwrap();
            let mut next = 0;
            for (i, leaf) in l.leaves.iter().enumerate() {
                prop_assert_eq!(leaf.first(), Some(next));
                prop_assert_eq!(*leaf, UnitSet::range(next, next + leaf.len()));
                let last = i + 1 == l.leaves.len();
                if !last {
                    prop_assert_eq!(leaf.len(), l.leaf_size);
                }
                if leaf.len() == l.leaf_size && l.leaf_size >= l.granule {
                    prop_assert_eq!(leaf.len() % l.granule, 0);
                    for d in &l.domains {
                        prop_assert_eq!(leaf.intersection(d).len(), leaf.len() / xcds);
                    }
                }
                if wgp {
                    prop_assert_eq!(next % 2, 0, "a leaf starts at an even bit");
                }
                next += leaf.len();
            }
            prop_assert_eq!(next, cus);
            prop_assert!(l.leaves.len() <= MAX_LEAVES || l.leaf_size == l.granule);
            let covered = l.domains.iter().fold(UnitSet::EMPTY, |a, d| a | *d);
            prop_assert!(l.domains.is_empty() || covered == UnitSet::first_n(cus));
        }
    }
}
