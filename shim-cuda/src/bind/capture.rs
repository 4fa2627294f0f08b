//! Descriptor capture, the pure part: from the arguments of `cuLaunchKernel(Ex)` to the pieces of
//! an immutable [`KernelLaunch`], without touching the driver.
//!
//! - **Arguments.** The driver copies argument values at the call, so vitamin must too: with
//!   `kernelParams` (one pointer per parameter) the bytes of parameter `i` are copied to its offset
//!   from `cuFuncGetParamInfo` ([`pack_params`]); with the `extra` form the application's packed
//!   buffer (`CU_LAUNCH_PARAM_BUFFER_POINTER` / `CU_LAUNCH_PARAM_BUFFER_SIZE`, parsed by
//!   [`parse_extra`]) is copied whole and described by the same layout ([`args_from_buffer`]). The
//!   backend later submits one pointer per parameter into these bytes, which is exactly what the
//!   driver reads in either form.
//! - **Attributes** ([`decode_attributes`]): each `CUlaunchAttribute` is deep-copied (all 64 value
//!   bytes). Cooperative, cluster-dimension and priority attributes become the structured fields the
//!   dispatcher checks (a cooperative or cluster launch only fits some partitions); every other id
//!   is kept raw and re-submitted unchanged. Attributes that make the driver signal an event
//!   (programmatic event, launch-completion event) are not modelled: such a launch passes through.
//! - **Validation** ([`validate`]): what the driver checks synchronously about a launch's shape
//!   (zero extents, block limits, threads per block of this function, dynamic shared memory above
//!   this function's limit, grid limits). A launch that fails here is not deferred: the caller
//!   drains its stream and lets the driver answer, so the application gets the driver's own error
//!   code, synchronously; if the driver accepts it after all (vitamin stricter than the driver),
//!   nothing is lost either.
//!
//! - **Cooperative and cluster launches** are bound like any launch; the dispatcher offers them only
//!   the pool nodes that can run them unchanged (co-residency, cluster occupancy). What the driver
//!   would refuse synchronously is found here, against the whole device (the largest partition):
//!   a cooperative grid larger than the device's co-resident blocks ([`check_cooperative`]: the
//!   driver answers `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`), a grid that is not a multiple of
//!   the cluster shape ([`check_cluster_shape`]), a cluster shape the device cannot hold at all
//!   ([`check_cluster_occupancy`]). Such a launch takes the native path, so the application gets the
//!   driver's own error at the call, never a deferred failure; any launch that passes fits at least
//!   the whole-device node.
//!
//! Every function returns [`Decline`] when vitamin cannot or should not model the call; the caller
//! then takes the native path. Nothing here panics on application input.
#![forbid(unsafe_code)]

use smallvec::SmallVec;
use vitamin_hal::{Dim3, KernelArgs, LaunchAttributes, ParamLayout, RawAttribute};

/// `CU_LAUNCH_PARAM_END`.
pub const LAUNCH_PARAM_END: usize = 0;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER`.
pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`.
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
/// Most `extra` entries read before giving up (a well-formed array has at most five words).
pub const MAX_EXTRA_WORDS: usize = 64;

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
pub const ATTR_COOPERATIVE: u32 = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
pub const ATTR_CLUSTER_DIMENSION: u32 = 4;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`: the driver records an application event.
pub const ATTR_PROGRAMMATIC_EVENT: u32 = 7;
/// `CU_LAUNCH_ATTRIBUTE_PRIORITY`.
pub const ATTR_PRIORITY: u32 = 8;
/// `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`: the driver records an application event.
pub const ATTR_LAUNCH_COMPLETION_EVENT: u32 = 12;

/// Hardware block limits (all current NVIDIA GPUs): x and y up to 1024 threads, z up to 64.
pub const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
/// Grid limits: x up to 2^31 - 1 blocks, y and z up to 65535.
pub const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// Why a call is not turned into a vCtx op; the caller takes the native path (drain the stream,
/// call the driver, wait for the native stream), so the application sees the driver's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Decline {
    /// The driver would reject the call (or vitamin thinks so): let it answer.
    #[error("invalid launch: {0}")]
    Invalid(String),
    /// A form vitamin does not model; correct natively, without late binding.
    #[error("not modelled: {0}")]
    Unmodelled(String),
}

/// Launch shape as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Grid in blocks.
    pub grid: Dim3,
    /// Block in threads.
    pub block: Dim3,
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
}

/// The limits of one function that a launch must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionLimits {
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` (fixed when the function was compiled).
    pub max_threads_per_block: u32,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` as of this launch (the application may
    /// raise it with `cuFuncSetAttribute`, so it is read per launch when the launch asks for any).
    pub max_dynamic_shared_bytes: u32,
}

/// Checks a launch's shape the way the driver does before accepting it.
pub fn validate(g: &Geometry, limits: &FunctionLimits) -> Result<(), Decline> {
    let (grid, block) = ([g.grid.x, g.grid.y, g.grid.z], [g.block.x, g.block.y, g.block.z]);
    if grid.contains(&0) || block.contains(&0) {
        return Err(Decline::Invalid(format!("grid {} x block {} has a zero extent", g.grid, g.block)));
    }
    for axis in 0..3 {
        if block[axis] > MAX_BLOCK[axis] {
            return Err(Decline::Invalid(format!("block {} exceeds the per-axis limit {:?}", g.block, MAX_BLOCK)));
        }
        if grid[axis] > MAX_GRID[axis] {
            return Err(Decline::Invalid(format!("grid {} exceeds the per-axis limit {:?}", g.grid, MAX_GRID)));
        }
    }
    let threads = g.block.volume();
    if threads > u64::from(limits.max_threads_per_block) {
        return Err(Decline::Invalid(format!(
            "block {} has {threads} threads; this function allows {}",
            g.block, limits.max_threads_per_block
        )));
    }
    if g.shared_mem_bytes > limits.max_dynamic_shared_bytes {
        return Err(Decline::Invalid(format!(
            "{} bytes of dynamic shared memory; this function allows {}",
            g.shared_mem_bytes, limits.max_dynamic_shared_bytes
        )));
    }
    Ok(())
}

/// A cooperative launch needs all its blocks co-resident: at most `blocks_per_sm` (the occupancy
/// of this function and block shape) x `sm_count` (the whole device) blocks.
pub fn check_cooperative(grid: Dim3, blocks_per_sm: u32, sm_count: u32) -> Result<(), Decline> {
    let capacity = u64::from(blocks_per_sm) * u64::from(sm_count);
    if grid.volume() > capacity {
        return Err(Decline::Invalid(format!(
            "cooperative grid {grid} ({} blocks) exceeds the {capacity} blocks the device holds at once \
             ({blocks_per_sm} per SM x {sm_count} SMs)",
            grid.volume()
        )));
    }
    Ok(())
}

/// A cluster launch's grid must be a whole number of clusters in every dimension.
pub fn check_cluster_shape(grid: Dim3, cluster: Dim3) -> Result<(), Decline> {
    let (g, c) = ([grid.x, grid.y, grid.z], [cluster.x, cluster.y, cluster.z]);
    if c.contains(&0) {
        return Err(Decline::Invalid(format!("cluster {cluster} has a zero extent")));
    }
    if (0..3).any(|i| g[i] % c[i] != 0) {
        return Err(Decline::Invalid(format!("grid {grid} is not a whole number of {cluster} clusters")));
    }
    Ok(())
}

/// The driver's answer to "how many clusters of this shape does the whole device hold at once"
/// (`cuOccupancyMaxActiveClusters`): an error or zero means the driver will refuse the launch.
pub fn check_cluster_occupancy(cluster: Dim3, max_active: Result<u32, i32>) -> Result<(), Decline> {
    match max_active {
        Ok(0) => Err(Decline::Invalid(format!("the device cannot hold one {cluster} cluster of this launch"))),
        Ok(_) => Ok(()),
        Err(code) => Err(Decline::Invalid(format!("the driver rejects cluster {cluster} for this launch ({code})"))),
    }
}

/// Bytes needed to hold every parameter of `layout`.
pub fn layout_size(layout: &[ParamLayout]) -> usize {
    layout.iter().map(|p| p.offset as usize + p.size as usize).max().unwrap_or(0)
}

/// Builds the argument bytes of the `kernelParams` form: `values[i]` holds the bytes of parameter
/// `i` (read through the application's pointer `kernelParams[i]`, `layout[i].size` bytes).
pub fn pack_params(layout: &[ParamLayout], values: &[&[u8]]) -> Result<KernelArgs, Decline> {
    if values.len() != layout.len() {
        return Err(Decline::Invalid(format!("{} parameter values for {} parameters", values.len(), layout.len())));
    }
    let mut bytes = vec![0u8; layout_size(layout)];
    for (i, (p, v)) in layout.iter().zip(values).enumerate() {
        if v.len() != p.size as usize {
            return Err(Decline::Invalid(format!("parameter {i}: {} bytes given, {} expected", v.len(), p.size)));
        }
        bytes[p.offset as usize..p.offset as usize + v.len()].copy_from_slice(v);
    }
    KernelArgs::from_layout(bytes, layout.to_vec()).map_err(Decline::Invalid)
}

/// Where the `extra` array's buffer and its size live (application addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtraBuffer {
    /// Value of `CU_LAUNCH_PARAM_BUFFER_POINTER`: the packed argument buffer.
    pub buffer: usize,
    /// Value of `CU_LAUNCH_PARAM_BUFFER_SIZE`: a pointer to a `size_t` holding its size.
    pub size_ptr: usize,
}

/// Parses the words of a launch's `extra` array: `(key, value)` pairs up to `CU_LAUNCH_PARAM_END`.
/// Consumes the iterator only up to the terminator (the caller reads application memory lazily).
pub fn parse_extra(words: impl IntoIterator<Item = usize>) -> Result<ExtraBuffer, Decline> {
    let mut it = words.into_iter().take(MAX_EXTRA_WORDS);
    let (mut buffer, mut size_ptr) = (None, None);
    loop {
        match it.next() {
            None => {
                return Err(Decline::Unmodelled(format!("extra array without an end within {MAX_EXTRA_WORDS} words")))
            }
            Some(LAUNCH_PARAM_END) => break,
            Some(key @ (LAUNCH_PARAM_BUFFER_POINTER | LAUNCH_PARAM_BUFFER_SIZE)) => {
                let Some(value) = it.next() else {
                    return Err(Decline::Unmodelled("extra array ends inside a key/value pair".into()));
                };
                let slot = if key == LAUNCH_PARAM_BUFFER_POINTER { &mut buffer } else { &mut size_ptr };
                if slot.replace(value).is_some() {
                    return Err(Decline::Unmodelled(format!("extra array repeats key {key}")));
                }
            }
            Some(key) => return Err(Decline::Invalid(format!("unknown extra key {key:#x}"))),
        }
    }
    match (buffer, size_ptr) {
        (Some(buffer), Some(size_ptr)) if buffer != 0 && size_ptr != 0 => Ok(ExtraBuffer { buffer, size_ptr }),
        _ => Err(Decline::Unmodelled("extra array without both a buffer pointer and a size".into())),
    }
}

/// The argument bytes of the `extra` form: the application's buffer, copied whole, described by
/// the function's layout.
pub fn args_from_buffer(layout: &[ParamLayout], buffer: &[u8]) -> Result<KernelArgs, Decline> {
    let need = layout_size(layout);
    if buffer.len() < need {
        return Err(Decline::Invalid(format!("argument buffer of {} bytes; the parameters need {need}", buffer.len())));
    }
    KernelArgs::from_layout(buffer.to_vec(), layout.to_vec()).map_err(Decline::Invalid)
}

/// One `CUlaunchAttribute` as the application passed it: its id and all 64 value bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeBytes {
    /// `CUlaunchAttributeID`.
    pub id: u32,
    /// `CUlaunchAttributeValue` (a 64-byte union).
    pub value: [u8; 64],
}

fn i32_at(v: &[u8; 64], at: usize) -> i32 {
    i32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]])
}
fn u32_at(v: &[u8; 64], at: usize) -> u32 {
    u32::from_le_bytes([v[at], v[at + 1], v[at + 2], v[at + 3]])
}

/// Deep-copies a launch's attributes. `cooperative_entry` is set for `cuLaunchCooperativeKernel`.
pub fn decode_attributes(attrs: &[AttributeBytes], cooperative_entry: bool) -> Result<LaunchAttributes, Decline> {
    let mut cooperative = cooperative_entry;
    let (mut cluster, mut priority) = (None, None);
    let mut seen_structured = [false; 3];
    let mut raw = Vec::new();
    for a in attrs {
        let structured = match a.id {
            ATTR_COOPERATIVE if i32_at(&a.value, 0) != 0 => Some(0),
            ATTR_CLUSTER_DIMENSION => Some(1),
            ATTR_PRIORITY => Some(2),
            ATTR_PROGRAMMATIC_EVENT | ATTR_LAUNCH_COMPLETION_EVENT => {
                return Err(Decline::Unmodelled(format!("launch attribute {} makes the driver record an event", a.id)))
            }
            _ => None,
        };
        match structured {
            Some(slot) => {
                if std::mem::replace(&mut seen_structured[slot], true) {
                    return Err(Decline::Unmodelled(format!("launch attribute {} given twice", a.id)));
                }
                match slot {
                    0 => cooperative = true,
                    1 => {
                        let d = Dim3::new(u32_at(&a.value, 0), u32_at(&a.value, 4), u32_at(&a.value, 8));
                        if d.volume() == 0 {
                            return Err(Decline::Invalid(format!("cluster dimension {d} has a zero extent")));
                        }
                        cluster = Some(d);
                    }
                    _ => priority = Some(i32_at(&a.value, 0)),
                }
            }
            None => raw.push(RawAttribute { id: a.id, value: SmallVec::from_slice(&a.value) }),
        }
    }
    Ok(LaunchAttributes::new(cooperative, cluster, priority, raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> FunctionLimits {
        FunctionLimits { max_threads_per_block: 1024, max_dynamic_shared_bytes: 48 * 1024 }
    }
    fn geo(grid: [u32; 3], block: [u32; 3], smem: u32) -> Geometry {
        Geometry {
            grid: Dim3::new(grid[0], grid[1], grid[2]),
            block: Dim3::new(block[0], block[1], block[2]),
            shared_mem_bytes: smem,
        }
    }

    #[test]
    fn the_driver_s_rejections_are_found() {
        assert!(validate(&geo([1, 1, 1], [256, 1, 1], 0), &limits()).is_ok());
        assert!(validate(&geo([1, 1, 1], [2048, 1, 1], 0), &limits()).is_err(), "2048 threads");
        assert!(validate(&geo([1, 1, 1], [32, 32, 2], 0), &limits()).is_err(), "2048 threads in 3-D");
        assert!(validate(&geo([0, 1, 1], [32, 1, 1], 0), &limits()).is_err(), "empty grid");
        assert!(validate(&geo([1, 1, 1], [1, 1, 65], 0), &limits()).is_err(), "block z above 64");
        assert!(validate(&geo([1, 65536, 1], [1, 1, 1], 0), &limits()).is_err(), "grid y above 65535");
        assert!(validate(&geo([1, 1, 1], [32, 1, 1], 48 * 1024 + 1), &limits()).is_err(), "smem above limit");
        let tight = FunctionLimits { max_threads_per_block: 256, ..limits() };
        assert!(validate(&geo([1, 1, 1], [512, 1, 1], 0), &tight).is_err(), "launch bounds of the function");
        let raised = FunctionLimits { max_dynamic_shared_bytes: 200 * 1024, ..limits() };
        assert!(validate(&geo([1, 1, 1], [32, 1, 1], 100 * 1024), &raised).is_ok(), "opted-in shared memory");
    }

    /// Reference model: the driver's rules written out per component.
    fn model_ok(g: &Geometry, l: &FunctionLimits) -> bool {
        let b = [g.block.x, g.block.y, g.block.z];
        let gr = [g.grid.x, g.grid.y, g.grid.z];
        b.iter().all(|&x| x >= 1)
            && gr.iter().all(|&x| x >= 1)
            && b[0] <= 1024
            && b[1] <= 1024
            && b[2] <= 64
            && gr[0] <= 0x7fff_ffff
            && gr[1] <= 65535
            && gr[2] <= 65535
            && u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]) <= u64::from(l.max_threads_per_block)
            && g.shared_mem_bytes <= l.max_dynamic_shared_bytes
    }

    fn any_extent() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..4, 1u32..2048, Just(65535), Just(65536), Just(i32::MAX as u32), Just(u32::MAX)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn validation_matches_the_model(
            grid in proptest::array::uniform3(any_extent()),
            block in proptest::array::uniform3(any_extent()),
            smem in prop_oneof![Just(0u32), 0u32..300_000],
            max_threads in prop_oneof![Just(1024u32), 1u32..1024],
            max_smem in prop_oneof![Just(48 * 1024u32), 0u32..300_000],
        ) {
            let g = geo(grid, block, smem);
            let l = FunctionLimits { max_threads_per_block: max_threads, max_dynamic_shared_bytes: max_smem };
            prop_assert_eq!(validate(&g, &l).is_ok(), model_ok(&g, &l));
        }

        /// Packing then reading back gives every parameter's bytes at its offset, for C-ABI layouts.
        #[test]
        fn packed_parameters_read_back(values in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1),
                proptest::collection::vec(any::<u8>(), 2),
                proptest::collection::vec(any::<u8>(), 4),
                proptest::collection::vec(any::<u8>(), 8),
                proptest::collection::vec(any::<u8>(), 16..48),
            ], 0..12)) {
            let slices: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
            let reference = KernelArgs::pack(&slices); // the C ABI's natural alignment
            let layout = reference.params().to_vec();
            let args = pack_params(&layout, &slices).unwrap();
            prop_assert_eq!(args.params(), layout.as_slice());
            for (i, v) in values.iter().enumerate() {
                prop_assert_eq!(args.param(i).unwrap(), v.as_slice());
            }
            // The extra form with the same packed buffer describes the same arguments.
            let via_buffer = args_from_buffer(&layout, reference.bytes()).unwrap();
            for i in 0..values.len() {
                prop_assert_eq!(via_buffer.param(i), args.param(i));
            }
        }
    }

    #[test]
    fn cooperative_and_cluster_examples() {
        assert!(check_cooperative(Dim3::x(288), 8, 36).is_ok(), "exactly the device");
        assert!(matches!(check_cooperative(Dim3::x(289), 8, 36), Err(Decline::Invalid(_))));
        assert!(check_cooperative(Dim3::new(16, 16, 1), 2, 132).is_ok());
        assert!(check_cooperative(Dim3::x(1), 0, 132).is_err(), "a function that fits nowhere");
        assert!(check_cluster_shape(Dim3::new(8, 4, 1), Dim3::new(2, 2, 1)).is_ok());
        assert!(check_cluster_shape(Dim3::new(9, 4, 1), Dim3::new(2, 2, 1)).is_err());
        assert!(check_cluster_shape(Dim3::new(8, 4, 1), Dim3::new(2, 0, 1)).is_err());
        assert!(check_cluster_occupancy(Dim3::x(8), Ok(16)).is_ok());
        assert!(matches!(check_cluster_occupancy(Dim3::x(16), Ok(0)), Err(Decline::Invalid(_))));
        assert!(matches!(check_cluster_occupancy(Dim3::x(32), Err(912)), Err(Decline::Invalid(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// Against the rules written per dimension: accepted iff every extent is a positive
        /// multiple of a positive cluster extent; cooperative iff blocks <= per-SM x SMs.
        #[test]
        fn constraint_checks_match_the_model(
            grid in proptest::array::uniform3(1u32..200),
            cluster in proptest::array::uniform3(0u32..9),
            per_sm in 0u32..33,
            sms in 1u32..200,
        ) {
            let (g, c) = (Dim3::new(grid[0], grid[1], grid[2]), Dim3::new(cluster[0], cluster[1], cluster[2]));
            let whole = (0..3).all(|i| cluster[i] > 0 && grid[i] % cluster[i] == 0);
            prop_assert_eq!(check_cluster_shape(g, c).is_ok(), whole);
            let blocks = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
            prop_assert_eq!(check_cooperative(g, per_sm, sms).is_ok(), blocks <= u64::from(per_sm) * u64::from(sms));
        }
    }

    #[test]
    fn packing_rejects_mismatches() {
        let layout = [ParamLayout { offset: 0, size: 8 }, ParamLayout { offset: 8, size: 4 }];
        assert!(pack_params(&layout, &[&[0; 8]]).is_err(), "too few values");
        assert!(pack_params(&layout, &[&[0; 8], &[0; 8]]).is_err(), "wrong size");
        assert!(args_from_buffer(&layout, &[0; 11]).is_err(), "buffer shorter than the layout");
        let ok = args_from_buffer(&layout, &[7; 16]).unwrap();
        assert_eq!(ok.bytes().len(), 16, "the whole buffer is kept");
        assert_eq!(pack_params(&[], &[]).unwrap().bytes().len(), 0);
    }

    #[test]
    fn extra_arrays() {
        let ok = parse_extra([1, 0x1000, 2, 0x2000, 0, 99]).unwrap();
        assert_eq!(ok, ExtraBuffer { buffer: 0x1000, size_ptr: 0x2000 });
        assert_eq!(parse_extra([2, 0x2000, 1, 0x1000, 0]).unwrap(), ok, "any order");
        assert!(matches!(parse_extra([1, 0x1000, 0]), Err(Decline::Unmodelled(_))), "no size");
        assert!(matches!(parse_extra([0]), Err(Decline::Unmodelled(_))), "empty");
        assert!(matches!(parse_extra([5, 1, 0]), Err(Decline::Invalid(_))), "unknown key");
        assert!(matches!(parse_extra([1, 0x1000, 1, 0x1000, 2, 8, 0]), Err(Decline::Unmodelled(_))), "repeated");
        assert!(matches!(parse_extra([1]), Err(Decline::Unmodelled(_))), "truncated pair");
        assert!(matches!(parse_extra(std::iter::repeat(1usize)), Err(Decline::Unmodelled(_))), "no terminator");
        // Stops reading at the terminator.
        let mut read = 0;
        let words = [1usize, 0x1000, 2, 0x2000, 0, 7, 7, 7];
        parse_extra(words.iter().map(|w| {
            read += 1;
            *w
        }))
        .unwrap();
        assert_eq!(read, 5);
    }

    fn attr(id: u32, v: &[u8]) -> AttributeBytes {
        let mut value = [0u8; 64];
        value[..v.len()].copy_from_slice(v);
        AttributeBytes { id, value }
    }

    #[test]
    fn attributes_are_deep_copied_and_classified() {
        let mut cluster = Vec::new();
        for x in [2u32, 1, 1] {
            cluster.extend_from_slice(&x.to_le_bytes());
        }
        let mut tail = [0u8; 64];
        tail[63] = 0xab;
        let a = decode_attributes(
            &[
                attr(ATTR_COOPERATIVE, &1i32.to_le_bytes()),
                attr(ATTR_CLUSTER_DIMENSION, &cluster),
                attr(ATTR_PRIORITY, &(-3i32).to_le_bytes()),
                AttributeBytes { id: 10, value: tail },
            ],
            false,
        )
        .unwrap();
        assert!(a.cooperative());
        assert_eq!(a.cluster(), Some(Dim3::new(2, 1, 1)));
        assert_eq!(a.priority(), Some(-3));
        assert_eq!(a.raw().len(), 1);
        assert_eq!(a.raw()[0].id, 10);
        assert_eq!(a.raw()[0].value.len(), 64, "all 64 value bytes");
        assert_eq!(a.raw()[0].value[63], 0xab);
        // cooperative = 0 is kept raw (no constraint, passed on unchanged).
        let off = decode_attributes(&[attr(ATTR_COOPERATIVE, &0i32.to_le_bytes())], false).unwrap();
        assert!(!off.cooperative());
        assert_eq!(off.raw()[0].id, ATTR_COOPERATIVE);
        assert!(decode_attributes(&[], true).unwrap().cooperative(), "cuLaunchCooperativeKernel");
        assert!(matches!(decode_attributes(&[attr(7, &[1])], false), Err(Decline::Unmodelled(_))));
        assert!(matches!(decode_attributes(&[attr(12, &[1])], false), Err(Decline::Unmodelled(_))));
        assert!(matches!(
            decode_attributes(&[attr(ATTR_PRIORITY, &[1]), attr(ATTR_PRIORITY, &[2])], false),
            Err(Decline::Unmodelled(_))
        ));
        assert!(matches!(
            decode_attributes(&[attr(ATTR_CLUSTER_DIMENSION, &[0; 12])], false),
            Err(Decline::Invalid(_))
        ));
    }
}
