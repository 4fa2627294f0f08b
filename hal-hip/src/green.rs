//! Pool nodes realized over HIP green contexts (ROCm 7.14+), where the probe finds them.
//!
//! The API follows ROCm's header (ROCm/rocm-systems, `projects/hip/include/hip/hip_runtime_api.h`
//! at commit 0ff4546a8c145316e90118fcc08eb3a0cc057806; the types are in [`crate::driver`]) and
//! what that commit's clr does (`projects/clr/hipamd/src/hip_executionctx.cpp`):
//! `hipDeviceGetDevResource` gives one CU resource of the whole device; `hipDevSmResourceSplit`
//! cuts a resource into groups of given CU counts, dealt out in order from the resource's first CU
//! (each group a positive multiple of the resource's `smCoscheduledAlignment`, 2 in WGP mode);
//! `hipDevResourceGenerateDesc` bundles groups of one split into a descriptor; `hipGreenCtxCreate`
//! turns the descriptor into a context whose CU mask is the union of the groups' CU ranges; and
//! `hipExecutionCtxStreamCreate` creates a stream with that mask (a CU-masked stream underneath).
//!
//! ## How a node is realized
//! A node's CU set is an arbitrary union of leaves, so it is expressed by position, not by count:
//! the device resource is split at every boundary of the node's runs of consecutive mask bits
//! ([`plan`]: the gaps before and between runs become groups too, the CUs after the last run the
//! remainder), the node's groups go into one descriptor, and the context gets exactly the node's
//! CUs. `hipDevSmResourceSplitByCount`, which makes equal groups only, cannot place a run, so it is
//! not used. A node is realized over a green context only when every run and gap is a multiple of
//! the alignment; otherwise, or when a call fails, or when a stream's mask reads back different
//! (`hipExtStreamGetCUMask`), the node falls back to CU-masked streams with the reason logged
//! (configuration `partitions = "auto"`), or its creation fails (`"green-context"`).
//!
//! The context is created once per node, with the node's lanes, and destroyed after its streams
//! (clr detaches the streams of a destroyed context). Not validated on AMD hardware: the test
//! double implements the same calls.

use std::ops::Range;

use vitamin_hal::{HalError, UnitSet};

use crate::driver::{self, Api, DevResource, DevSmResourceGroupParams, GreenApi, HipExecutionCtx, HipStream};
use crate::settings;

/// How partitions are realized (configuration key `partitions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRealization {
    /// Green contexts where the probe finds them, else CU-masked streams; a node green contexts
    /// cannot realize falls back to CU masks (the default).
    Auto,
    /// CU-masked streams (`hipExtStreamCreateWithCUMask`) always.
    CuMask,
    /// Green contexts always: a runtime without them, or a node they cannot realize, is an error.
    GreenContext,
}

impl PartitionRealization {
    /// The choice `get` gives for `partitions`: `auto` (also unset), `cu-mask`, `green-context`.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, HalError> {
        match settings::value(get, settings::PARTITIONS).map(|v| v.to_ascii_lowercase()).as_deref() {
            None => Ok(PartitionRealization::Auto),
            Some("cu-mask") => Ok(PartitionRealization::CuMask),
            Some("green-context") => Ok(PartitionRealization::GreenContext),
            Some(v) => Err(HalError::InvalidPartition(format!(
                "configuration key {} = {v:?}: use auto, cu-mask or green-context",
                settings::PARTITIONS
            ))),
        }
    }
}

/// How one partition's streams were made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Realization {
    /// `hipExtStreamCreateWithCUMask`.
    CuMask,
    /// `hipExecutionCtxStreamCreate` on a green context of the node's CUs.
    GreenContext,
}

/// The groups one `hipDevSmResourceSplit` call cuts the device resource into for a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPlan {
    /// CU count of each group, in resource units, in order from the first CU.
    pub groups: Vec<u32>,
    /// Indices of the groups that make up the node (the others are the gaps between its runs).
    pub node: Vec<usize>,
}

/// The runs of consecutive units of `units` below `bits`, in order.
pub fn runs(units: &UnitSet, bits: usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for u in units.iter().filter(|&u| u < bits) {
        match out.last_mut() {
            Some(r) if r.end == u => r.end = u + 1,
            _ => out.push(u..u + 1),
        }
    }
    out
}

/// The split that places `units` (CU-mask bits below `bits`) in groups of a resource of
/// `bits * per_bit` units whose groups must be positive multiples of `alignment`: `Err` says
/// which run or gap cannot be expressed.
pub fn plan(units: &UnitSet, bits: usize, per_bit: u32, alignment: u32) -> Result<SplitPlan, String> {
    let alignment = alignment.max(1);
    let mut plan = SplitPlan { groups: Vec::new(), node: Vec::new() };
    let mut at = 0usize;
    let runs = runs(units, bits);
    if runs.is_empty() {
        return Err("the node has no CUs".into());
    }
    for r in runs {
        for (range, in_node) in [(at..r.start, false), (r.clone(), true)] {
            if range.is_empty() {
                continue;
            }
            let count = u32::try_from(range.len()).map_err(|_| "too many CUs".to_string())? * per_bit;
            if !count.is_multiple_of(alignment) {
                return Err(format!(
                    "{} CUs {}..{} are {count} resource units, not a multiple of the split alignment {alignment}",
                    if in_node { "the node's" } else { "the gap of" },
                    range.start,
                    range.end
                ));
            }
            if in_node {
                plan.node.push(plan.groups.len());
            }
            plan.groups.push(count);
        }
        at = r.end;
    }
    Ok(plan)
}

/// A green context holding one node's CUs; destroyed when dropped (after the node's streams).
pub(crate) struct GreenContext {
    api: GreenApi,
    ctx: HipExecutionCtx,
}

// SAFETY: the context is a runtime handle usable from any thread; it is only read after creation.
unsafe impl Send for GreenContext {}
// SAFETY: as above.
unsafe impl Sync for GreenContext {}

impl GreenContext {
    /// A context of exactly `units` (CU-mask bits of a `cu_count`-CU device) on device `ordinal`,
    /// or why not. The calling thread has the device current.
    pub(crate) fn create(api: &Api, ordinal: i32, units: &UnitSet, cu_count: usize) -> Result<GreenContext, String> {
        let green = api.green().ok_or("this HIP runtime has no green contexts")?;
        let call = |name: &str, e: driver::HipError| {
            if e == driver::SUCCESS {
                Ok(())
            } else {
                Err(format!("{name}: {} ({e})", api.error_name(e)))
            }
        };
        let mut device = DevResource::zeroed();
        // SAFETY: the out-pointer is a live `hipDevResource` (layout checked in driver.rs).
        call("hipDeviceGetDevResource", unsafe {
            (green.get_resource)(ordinal, &mut device, driver::DEV_RESOURCE_TYPE_SM)
        })?;
        let sm = device.sm().ok_or("hipDeviceGetDevResource returned no CU resource")?;
        let total = sm.sm_count as usize;
        if total == 0 || cu_count == 0 || !total.is_multiple_of(cu_count) {
            return Err(format!(
                "the device's CU resource has {total} units for {cu_count} CU-mask bits: no whole number per bit"
            ));
        }
        let per_bit = (total / cu_count) as u32;
        let plan = plan(units, cu_count, per_bit, sm.sm_coscheduled_alignment)?;
        let mut params: Vec<DevSmResourceGroupParams> =
            plan.groups.iter().map(|&n| DevSmResourceGroupParams { sm_count: n, ..Default::default() }).collect();
        let mut groups = vec![DevResource::zeroed(); plan.groups.len()];
        // SAFETY: `groups` and `params` hold `len` entries each; `device` is the runtime's resource;
        // a null remainder discards the CUs after the node's last run.
        call("hipDevSmResourceSplit", unsafe {
            (green.split)(
                groups.as_mut_ptr(),
                groups.len() as u32,
                &device,
                std::ptr::null_mut(),
                0,
                params.as_mut_ptr(),
            )
        })?;
        let mut node: Vec<DevResource> = plan.node.iter().map(|&i| groups[i]).collect();
        let mut desc = std::ptr::null_mut();
        // SAFETY: `node` holds `len` resources from one split, next to each other (as the call
        // requires); the out-pointer is a live local.
        call("hipDevResourceGenerateDesc", unsafe {
            (green.generate_desc)(&mut desc, node.as_mut_ptr(), node.len() as u32)
        })?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `desc` was just generated for device `ordinal` and is handed over to the context;
        // flags must be 0.
        call("hipGreenCtxCreate", unsafe { (green.create)(&mut ctx, desc, ordinal, 0) })?;
        if ctx.is_null() {
            return Err("hipGreenCtxCreate returned no context".into());
        }
        Ok(GreenContext { api: green, ctx })
    }

    /// A stream of this context (`hipStreamDefault`, priority 0), or the runtime's error code.
    pub(crate) fn create_stream(&self) -> Result<HipStream, driver::HipError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: the context is live (destroyed only in drop); the out-pointer is a live local.
        match unsafe { (self.api.stream_create)(&mut s, self.ctx, driver::STREAM_DEFAULT, 0) } {
            driver::SUCCESS => Ok(s),
            e => Err(e),
        }
    }
}

impl Drop for GreenContext {
    fn drop(&mut self) {
        // SAFETY: the context is live and its streams are already destroyed (the partition drops
        // its lanes first).
        let e = unsafe { (self.api.destroy)(self.ctx) };
        if e != driver::SUCCESS {
            tracing::warn!(code = e, "hip partition teardown: hipExecutionCtxDestroy failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::settings::map;

    #[test]
    fn the_key_chooses_the_realization() {
        assert_eq!(PartitionRealization::from_lookup(&map(&[])), Ok(PartitionRealization::Auto));
        let get = map(&[("partitions", " Green-Context ")]);
        assert_eq!(PartitionRealization::from_lookup(&get), Ok(PartitionRealization::GreenContext));
        assert_eq!(
            PartitionRealization::from_lookup(&map(&[("partitions", "cu-mask")])),
            Ok(PartitionRealization::CuMask)
        );
        let e = PartitionRealization::from_lookup(&map(&[("partitions", "mig")])).unwrap_err().to_string();
        assert!(e.contains("partitions") && e.contains("mig"), "{e}");
    }

    #[test]
    fn a_leaf_in_the_middle_is_a_gap_then_the_node() {
        let p = plan(&UnitSet::range(32, 48), 304, 1, 2).unwrap();
        assert_eq!(p, SplitPlan { groups: vec![32, 16], node: vec![1] });
        let first = plan(&UnitSet::range(0, 16), 304, 1, 1).unwrap();
        assert_eq!(first, SplitPlan { groups: vec![16], node: vec![0] }, "no gap before the first CU");
        let two = plan(&UnitSet::range(0, 16).union(&UnitSet::range(64, 80)), 304, 2, 2).unwrap();
        assert_eq!(two, SplitPlan { groups: vec![32, 96, 32], node: vec![0, 2] }, "two CU units per bit");
    }

    #[test]
    fn runs_off_the_alignment_cannot_be_expressed() {
        let e = plan(&UnitSet::range(3, 8), 96, 1, 2).unwrap_err();
        assert!(e.contains("gap") && e.contains("0..3") && e.contains("alignment 2"), "{e}");
        let e = plan(&UnitSet::range(2, 5), 96, 1, 2).unwrap_err();
        assert!(e.contains("node's") && e.contains("2..5"), "{e}");
        assert!(plan(&UnitSet::range(0, 0), 96, 1, 1).is_err());
    }

    proptest! {
        /// Dealing the groups out in order from CU 0 gives back exactly the node's units.
        #[test]
        fn the_node_groups_cover_exactly_the_node(bits in proptest::collection::vec(any::<bool>(), 1..80)) {
            let mut units = UnitSet::first_n(0);
            for (i, &b) in bits.iter().enumerate() {
                if b { units.insert(i); }
            }
            match plan(&units, bits.len(), 1, 1) {
                Err(_) => prop_assert!(units.is_empty()),
                Ok(p) => {
                    let mut got = UnitSet::first_n(0);
                    let mut at = 0usize;
                    for (i, &n) in p.groups.iter().enumerate() {
                        if p.node.contains(&i) {
                            for u in at..at + n as usize { got.insert(u); }
                        }
                        at += n as usize;
                    }
                    prop_assert_eq!(got, units);
                    prop_assert!(p.groups.iter().all(|&n| n > 0));
                }
            }
        }
    }
}
