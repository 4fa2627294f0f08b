//! Descriptor capture under hostile input: random `extra` arrays, launch attribute arrays, launch
//! shapes, argument buffers and cooperative/cluster shapes, checked to never panic and to accept
//! only what the driver would accept. CI runs 10^5 cases per property (an optimized build, see
//! `.ci/run`); a bench run sets `VITAMIN_FUZZ_CASES=10000000` (docs/results/capture-fuzz.md):
//!
//! ```text
//! VITAMIN_FUZZ_CASES=10000000 cargo test --release -p vitamin-shim-cuda --test capture_hostile
//! ```
use proptest::prelude::*;
use vitamin_cuda::bind::capture::*;
use vitamin_hal::{Dim3, ParamLayout};

/// 10^5 cases per property by default (CI); in an unoptimized build (the README's test command)
/// the default is 10^4, so that CI's debug run stays short, unless `VITAMIN_FUZZ_CASES` is set.
fn cases() -> u32 {
    let default = if cfg!(debug_assertions) { 10_000 } else { 100_000 };
    std::env::var("VITAMIN_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() }
}

/// Words of an `extra` array: mostly the meaningful keys, sometimes anything.
fn word() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..4, 1 => any::<usize>(), 1 => Just(usize::MAX)]
}

fn attribute() -> impl Strategy<Value = AttributeBytes> {
    let id = prop_oneof![4 => 0u32..16, 1 => any::<u32>()];
    let value = prop::array::uniform32(any::<u8>()).prop_flat_map(|a| {
        prop::array::uniform32(any::<u8>()).prop_map(move |b| {
            let mut v = [0u8; 64];
            v[..32].copy_from_slice(&a);
            v[32..].copy_from_slice(&b);
            v
        })
    });
    (id, value).prop_map(|(id, value)| AttributeBytes { id, value })
}

fn extent() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0u32..4, 3 => 1u32..2048, 1 => any::<u32>(), 1 => Just(u32::MAX)]
}

fn dim3() -> impl Strategy<Value = Dim3> {
    (extent(), extent(), extent()).prop_map(|(x, y, z)| Dim3::new(x, y, z))
}

/// A parameter layout as a driver reports it (in order, not overlapping, at most 4 KiB).
fn layout() -> impl Strategy<Value = Vec<ParamLayout>> {
    prop::collection::vec(prop_oneof![Just(1u32), Just(2), Just(4), Just(8), Just(16), 1u32..64], 0..12).prop_map(
        |sizes| {
            let mut offset = 0u32;
            sizes
                .into_iter()
                .map(|size| {
                    let align = size.next_power_of_two().min(8);
                    offset = offset.div_ceil(align) * align;
                    let p = ParamLayout { offset, size };
                    offset += size;
                    p
                })
                .collect()
        },
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn extra_arrays(words in prop::collection::vec(word(), 0..80)) {
        if let Ok(e) = parse_extra(words.iter().copied()) {
            prop_assert!(e.buffer != 0 && e.size_ptr != 0);
            // Both keys appear, with these values, before the first terminator.
            let end = words.iter().position(|&w| w == LAUNCH_PARAM_END).expect("accepted arrays end");
            prop_assert!(end <= MAX_EXTRA_WORDS);
            let pairs = &words[..end];
            prop_assert!(pairs.windows(2).any(|w| w == [LAUNCH_PARAM_BUFFER_POINTER, e.buffer]));
            prop_assert!(pairs.windows(2).any(|w| w == [LAUNCH_PARAM_BUFFER_SIZE, e.size_ptr]));
        }
    }

    #[test]
    fn attribute_arrays(attrs in prop::collection::vec(attribute(), 0..10), coop in any::<bool>()) {
        if let Ok(a) = decode_attributes(&attrs, coop) {
            prop_assert!(!attrs.iter().any(|x| x.id == ATTR_PROGRAMMATIC_EVENT || x.id == ATTR_LAUNCH_COMPLETION_EVENT));
            if let Some(c) = a.cluster() {
                prop_assert!(c.volume() > 0);
            }
            prop_assert!(a.raw().len() <= attrs.len());
            prop_assert!(!coop || a.cooperative(), "the cooperative entry point stays cooperative");
        }
    }

    #[test]
    fn launch_shapes(grid in dim3(), block in dim3(), smem in any::<u32>(), max_threads in 0u32..2048, max_smem in any::<u32>()) {
        let g = Geometry { grid, block, shared_mem_bytes: smem };
        let limits = FunctionLimits { max_threads_per_block: max_threads, max_dynamic_shared_bytes: max_smem, device: SHAPE };
        if validate(&g, &limits).is_ok() {
            prop_assert!(grid.volume() > 0 && block.volume() > 0);
            prop_assert!(block.volume() <= u64::from(max_threads));
            prop_assert!(smem <= max_smem);
            prop_assert!(block.x <= SHAPE.max_block[0] && block.y <= SHAPE.max_block[1] && block.z <= SHAPE.max_block[2]);
            prop_assert!(grid.x <= SHAPE.max_grid[0] && grid.y <= SHAPE.max_grid[1] && grid.z <= SHAPE.max_grid[2]);
        }
    }

    #[test]
    fn argument_bytes(layout in layout(), buffer in prop::collection::vec(any::<u8>(), 0..4200), lens in prop::collection::vec(0usize..80, 0..14)) {
        if let Ok(args) = args_from_buffer(&layout, &buffer) {
            prop_assert!(args.bytes().len() >= layout_size(&layout));
        }
        let values: Vec<Vec<u8>> = lens.iter().map(|&n| vec![7u8; n]).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        if let Ok(args) = pack_params(&layout, &refs) {
            prop_assert_eq!(refs.len(), layout.len());
            prop_assert_eq!(args.bytes().len(), layout_size(&layout));
        }
    }

    #[test]
    fn cooperative_and_cluster_shapes(grid in dim3(), cluster in dim3(), per_sm in any::<u32>(), sms in any::<u32>(), active in prop_oneof![any::<u32>().prop_map(Ok), any::<i32>().prop_map(Err)]) {
        if check_cooperative(grid, per_sm, sms).is_ok() {
            prop_assert!(grid.volume() <= u64::from(per_sm) * u64::from(sms));
        }
        if check_cluster_shape(grid, cluster).is_ok() {
            prop_assert!(cluster.volume() > 0 && grid.x % cluster.x == 0 && grid.y % cluster.y == 0 && grid.z % cluster.z == 0);
        }
        let _ = check_cluster_occupancy(cluster, active);
    }
}
