//! Descriptor capture and validation rules, the vendor-neutral part: from a launch's shape and
//! argument bytes to the pieces of an immutable [`KernelLaunch`](vitamin_hal::KernelLaunch),
//! without touching the driver. The interposer reads the application's memory (argument pointers,
//! packed buffers, launch attributes) and converts its vendor's types; the rules live here once.
//!
//! - **Arguments.** The driver copies argument values at the call, so vitamin must too: with one
//!   pointer per parameter the bytes of parameter `i` are copied to its offset from the function's
//!   parameter layout ([`pack_params`]); with a packed argument buffer (the `extra` form) the buffer
//!   is copied whole and described by the same layout ([`args_from_buffer`]). The backend later
//!   submits one pointer per parameter into these bytes, which is exactly what the driver reads in
//!   either form.
//! - **Validation** ([`validate`]): what the driver checks synchronously about a launch's shape
//!   (zero extents, the device's block and grid limits, threads per block of this function,
//!   dynamic shared memory above this function's limit). A launch that fails here is not deferred:
//!   the caller drains its stream and lets the driver answer, so the application gets the driver's
//!   own error code, synchronously; if the driver accepts it after all (vitamin stricter than the
//!   driver), nothing is lost either. Every launch is validated once, on the one path that both
//!   launch-first and recording take.
//! - **Cooperative and cluster launches** are bound like any launch; the dispatcher offers them only
//!   the pool nodes that can run them unchanged (co-residency, cluster occupancy). What the driver
//!   would refuse synchronously is found here, against the whole device (the largest partition):
//!   a cooperative grid larger than the device's co-resident blocks ([`check_cooperative`]), a grid
//!   that is not a multiple of the cluster shape ([`check_cluster_shape`]), a cluster shape the
//!   device cannot hold at all ([`check_cluster_occupancy`]). Such a launch takes the native path,
//!   so the application gets the driver's own error at the call, never a deferred failure; any
//!   launch that passes fits at least the whole-device node.
//!
//! - **Collective kernels** ([`spins_on_peers`]): NCCL's (and RCCL's) device kernels, and the
//!   custom all-reduce kernels of serving frameworks, spin on flags written by blocks of other
//!   processes or devices. They are ordinary launches to the driver, but on a partition that holds
//!   fewer of their blocks at once than the grid, a resident block could wait on a peer whose
//!   partner block waits for a unit here: a deadlock across devices. So they carry the placement
//!   constraint [`LaunchAttributes::coresident`] (never passed to the driver: the launch stays
//!   unchanged); the dispatcher runs them on its service partition, the whole device, without a
//!   lease (`dispatch::spins_on_peers`). One whose grid the whole device cannot hold at once, or
//!   whose occupancy the driver does not report, runs natively, as it would without vitamin.
//!
//! Every function returns [`Decline`] when vitamin cannot or should not model the call; the caller
//! then takes the native path. Nothing here panics on application input.

use vitamin_hal::{Dim3, KernelArgs, LaunchAttributes, ParamLayout};

/// The device's limits on a launch's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeLimits {
    /// Most threads per block along x, y and z.
    pub max_block: [u32; 3],
    /// Most blocks per grid along x, y and z.
    pub max_grid: [u32; 3],
}

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
    /// The function's threads-per-block limit (fixed when the function was compiled).
    pub max_threads_per_block: u32,
    /// The function's dynamic shared memory limit as of this launch (the application may raise
    /// it, so it is read per launch when the launch asks for any).
    pub max_dynamic_shared_bytes: u32,
    /// The device's shape limits.
    pub device: ShapeLimits,
}

/// Checks a launch's shape the way the driver does before accepting it.
pub fn validate(g: &Geometry, limits: &FunctionLimits) -> Result<(), Decline> {
    let (grid, block) = ([g.grid.x, g.grid.y, g.grid.z], [g.block.x, g.block.y, g.block.z]);
    if grid.contains(&0) || block.contains(&0) {
        return Err(Decline::Invalid(format!("grid {} x block {} has a zero extent", g.grid, g.block)));
    }
    for axis in 0..3 {
        if block[axis] > limits.device.max_block[axis] {
            let max = limits.device.max_block;
            return Err(Decline::Invalid(format!("block {} exceeds the per-axis limit {max:?}", g.block)));
        }
        if grid[axis] > limits.device.max_grid[axis] {
            let max = limits.device.max_grid;
            return Err(Decline::Invalid(format!("grid {} exceeds the per-axis limit {max:?}", g.grid)));
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
/// (its cluster occupancy query): an error or zero means the driver will refuse the launch.
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

/// Builds the argument bytes of the one-pointer-per-parameter form: `values[i]` holds the bytes of parameter
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

/// The argument bytes of the `extra` form: the application's buffer, copied whole, described by
/// the function's layout.
pub fn args_from_buffer(layout: &[ParamLayout], buffer: &[u8]) -> Result<KernelArgs, Decline> {
    let need = layout_size(layout);
    if buffer.len() < need {
        return Err(Decline::Invalid(format!("argument buffer of {} bytes; the parameters need {need}", buffer.len())));
    }
    KernelArgs::from_layout(buffer.to_vec(), layout.to_vec()).map_err(Decline::Invalid)
}

/// What the device allows for launches with constraints, queried once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Units (SMs, CUs) of the whole device.
    pub units: u32,
    /// Whether the device supports cooperative launches.
    pub cooperative_launch: bool,
}

/// Kernel-name prefixes of kernels that spin on peers (see the module docs): NCCL's and RCCL's device
/// kernels since NCCL 2.19 (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, ...) and before it
/// (`ncclKernel_AllReduce_RING_LL_Sum_float`, ...), and the one-shot and two-shot custom
/// all-reduce kernels of vLLM (`cross_device_reduce_1stage`, `cross_device_reduce_2stage`), which
/// spin on peer flags over the peer-to-peer mappings.
pub const PEER_SPINNING_PREFIXES: [&str; 3] = ["ncclDevKernel_", "ncclKernel_", "cross_device_reduce_"];

/// Whether the kernel named `name` spins on peers: its identifier, mangled or not, starts with one
/// of [`PEER_SPINNING_PREFIXES`]. A mangled name (`_Z<len><identifier>...`, nested names
/// `_ZN<len><scope>...<len><identifier>...E`) is matched by each of its name components; a
/// demangled one (`ns::ncclDevKernel_...(args)`) by each `::` component.
pub fn spins_on_peers(name: &str) -> bool {
    let starts = |ident: &str| PEER_SPINNING_PREFIXES.iter().any(|p| ident.starts_with(p));
    if let Some(rest) = name.strip_prefix("_Z") {
        // Itanium mangling: a (possibly nested) name is a run of <length><identifier> pieces,
        // after an optional `N` and cv/ref qualifiers; stop at the first non-digit after a piece.
        let mut rest = rest.strip_prefix('N').unwrap_or(rest).trim_start_matches(['K', 'V', 'r', 'R', 'O']);
        loop {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let Ok(len) = rest[..digits].parse::<usize>() else { return false };
            let Some(ident) = digits.checked_add(len).and_then(|end| rest.get(digits..end)) else { return false };
            if starts(ident) {
                return true;
            }
            rest = &rest[digits + len..];
        }
    }
    let head = name.split('(').next().unwrap_or(name);
    head.split("::").any(|c| starts(c.trim_start_matches(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_')))
}

/// The cooperative and cluster constraints of a launch with `attributes` (and `required_cluster`
/// compiled into its function), checked against the whole device: `Ok(true)` for a constrained
/// launch the dispatcher binds only to the nodes that hold it, `Ok(false)` for a plain one.
/// `blocks_per_unit` (the function's occupancy with this block shape) and `max_active_clusters`
/// (the device's cluster occupancy for this launch) are asked only when they matter. An
/// `Err(Decline::Unmodelled)` is a constrained launch vitamin cannot place (unknown occupancy,
/// cluster dimensions compiled into the function); an `Err(Decline::Invalid)` one the driver
/// refuses.
pub fn check_constraints(
    g: &Geometry,
    attributes: &LaunchAttributes,
    required_cluster: Option<Dim3>,
    device: DeviceLimits,
    blocks_per_unit: impl FnOnce() -> Option<u32>,
    max_active_clusters: impl FnOnce(Dim3) -> Result<u32, i32>,
) -> Result<bool, Decline> {
    if attributes.cooperative() {
        if !device.cooperative_launch {
            return Err(Decline::Invalid("the device does not support cooperative launches".into()));
        }
        let Some(per_unit) = blocks_per_unit() else {
            return Err(Decline::Unmodelled(
                "the occupancy of this cooperative launch is unknown to the driver".into(),
            ));
        };
        check_cooperative(g.grid, per_unit, device.units)?;
    } else if attributes.coresident() {
        // The driver accepts any grid here: what vitamin cannot place co-resident runs natively.
        let Some(per_unit) = blocks_per_unit() else {
            return Err(Decline::Unmodelled("the occupancy of a kernel that spins on peers is unknown".into()));
        };
        check_cooperative(g.grid, per_unit, device.units).map_err(|_| {
            Decline::Unmodelled(format!(
                "a kernel that spins on peers with grid {} larger than the device holds at once",
                g.grid
            ))
        })?;
    }
    match attributes.cluster() {
        Some(cluster) => {
            check_cluster_shape(g.grid, cluster)?;
            check_cluster_occupancy(cluster, max_active_clusters(cluster))?;
        }
        // Compiled-in cluster dimensions the descriptor does not carry: the dispatcher could not
        // tell which nodes hold its clusters, so it runs natively.
        None if required_cluster.is_some() => {
            return Err(Decline::Unmodelled("cluster dimensions compiled into the function".into()));
        }
        None => {}
    }
    Ok(attributes.needs_coresidency() || attributes.cluster().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Block and grid limits as one device vendor documents them.
    const DEVICE: ShapeLimits = ShapeLimits { max_block: [1024, 1024, 64], max_grid: [i32::MAX as u32, 65535, 65535] };

    fn limits() -> FunctionLimits {
        FunctionLimits { max_threads_per_block: 1024, max_dynamic_shared_bytes: 48 * 1024, device: DEVICE }
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
            let l = FunctionLimits { max_threads_per_block: max_threads, max_dynamic_shared_bytes: max_smem, device: DEVICE };
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
    fn collective_kernels_are_told_by_name() {
        for name in [
            // NCCL 2.19+ (mangled as cuFuncGetName reports it, and demangled).
            "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
            "_Z34ncclDevKernel_Broadcast_RING_LL12824ncclDevKernelArgsStorageILm4096EE",
            "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevKernelArgsStorage<4096ul>)",
            "_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE",
            // NCCL 2.12-2.18.
            "_Z38ncclKernel_AllReduce_RING_LL_Sum_floatP11ncclDevCommmP8ncclWork",
            // vLLM's custom all-reduce (namespaced, templated).
            "_ZN4vllm26cross_device_reduce_1stageIfLi2EEEvPNS_8RankDataENS_5SignalEPPvPT_ii",
            "void vllm::cross_device_reduce_2stage<float, 8>(vllm::RankData*, vllm::Signal, vllm::Signal**, float*, int, int)",
        ] {
            assert!(spins_on_peers(name), "{name}");
        }
        for name in [
            "_Z6kernelPf",
            "ampere_sgemm_128x64_nn",
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_T1_",
            "my_ncclDevKernel_copy",
            "_Z9999999999999999999999ncclDevKernel_",
            "_Z",
            "",
        ] {
            assert!(!spins_on_peers(name), "{name}");
        }
    }

    proptest! {
        #[test]
        fn name_matching_never_panics(name in "\\PC{0,40}", prefix in "(_Z|_ZN|)[0-9]{0,3}") {
            let _ = spins_on_peers(&format!("{prefix}{name}"));
        }
    }

    #[test]
    fn peer_spinning_kernels_must_fit_at_once_or_run_natively() {
        let device = DeviceLimits { units: 132, cooperative_launch: false };
        let plain = LaunchAttributes::none();
        let nccl = plain.clone().with_coresident(true);
        assert!(nccl.needs_coresidency() && !nccl.cooperative(), "a placement constraint, not a driver attribute");
        let ring = Geometry { grid: Dim3::x(32), block: Dim3::x(640), shared_mem_bytes: 0 };
        let never = |_: Dim3| -> Result<u32, i32> { unreachable!() };
        // Constrained (bound where it fits), even on a device without cooperative launches.
        assert_eq!(check_constraints(&ring, &nccl, None, device, || Some(1), never), Ok(true));
        let huge = Geometry { grid: Dim3::x(133), ..ring };
        assert!(
            matches!(check_constraints(&huge, &nccl, None, device, || Some(1), never), Err(Decline::Unmodelled(_))),
            "more blocks than the device holds: native, as without vitamin (the driver accepts it)"
        );
        assert!(matches!(check_constraints(&ring, &nccl, None, device, || None, never), Err(Decline::Unmodelled(_))));
        assert_eq!(check_constraints(&ring, &plain, None, device, || unreachable!(), never), Ok(false));
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
    fn constraints_ask_the_device_only_when_they_matter() {
        let device = DeviceLimits { units: 132, cooperative_launch: true };
        let g = geo([264, 1, 1], [256, 1, 1], 0);
        let never = || -> Option<u32> { panic!("a plain launch asks for no occupancy") };
        let plain = LaunchAttributes::default();
        assert_eq!(check_constraints(&g, &plain, None, device, never, |_| panic!("no clusters")), Ok(false));
        let coop = LaunchAttributes::new(true, None, None, Vec::new());
        assert_eq!(check_constraints(&g, &coop, None, device, || Some(2), |_| unreachable!()), Ok(true));
        assert!(matches!(
            check_constraints(&g, &coop, None, device, || Some(1), |_| unreachable!()),
            Err(Decline::Invalid(_))
        ));
        assert!(matches!(
            check_constraints(&g, &coop, None, device, || None, |_| unreachable!()),
            Err(Decline::Unmodelled(_))
        ));
        let no_coop = DeviceLimits { cooperative_launch: false, ..device };
        assert!(matches!(
            check_constraints(&g, &coop, None, no_coop, || Some(8), |_| unreachable!()),
            Err(Decline::Invalid(_))
        ));
        let cluster = LaunchAttributes::new(false, Some(Dim3::x(2)), None, Vec::new());
        assert_eq!(check_constraints(&g, &cluster, None, device, never, |_| Ok(4)), Ok(true));
        assert!(check_constraints(&g, &cluster, None, device, never, |_| Ok(0)).is_err());
        assert!(matches!(
            check_constraints(&g, &plain, Some(Dim3::x(2)), device, never, |_| unreachable!()),
            Err(Decline::Unmodelled(_))
        ));
    }
}
