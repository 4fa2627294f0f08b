//! Partitions over HIP green contexts, on the test double's green-context variant (and, for the
//! absent case, its base variant): which realization a node gets, the CUs its streams may use,
//! and the fallback to CU masks.

mod support;

use support::{in_child, in_child_case, lib_of, log, Variant};
use vitamin_hal::{Backend, HalError};
use vitamin_hal_hip::{cu_mask, HipBackend, PartitionRealization, Realization, StreamLimits};
use vitamin_runtime::pool::Realized;

fn backend(p: PartitionRealization) -> Result<HipBackend, HalError> {
    HipBackend::with_partitions(None, 0, StreamLimits::default(), p)
}

fn mask_hex(words: &[u32]) -> String {
    words.iter().rev().map(|w| format!("{w:08x}")).collect()
}

/// `call stream-create` lines: (mask, green context or "").
fn created(log: &str) -> Vec<(String, String)> {
    log.lines()
        .filter_map(|l| l.strip_prefix("call stream-create s"))
        .map(|rest| {
            let mask = rest.split("mask=").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
            let gctx = rest.split("gctx=").nth(1).map(|g| g.trim().to_string()).unwrap_or_default();
            (mask, gctx)
        })
        .collect()
}

#[test]
fn the_pool_realizes_over_green_contexts_with_each_node_s_units() {
    let Some(lib) = lib_of(Variant::GreenContexts) else { return };
    let env = [("VITAMIN_HIP_LIBRARY", lib.as_str())];
    in_child("the_pool_realizes_over_green_contexts_with_each_node_s_units", &env, || {
        let b = backend(PartitionRealization::Auto).expect("backend");
        assert!(b.capabilities().green_contexts);
        assert_eq!(b.partition_realization(), PartitionRealization::Auto);
        let pool = Realized::create(&b, 2).expect("the default pool");
        let mut expected = Vec::new();
        for node in pool.partitions() {
            assert_eq!(node.realization(), Realization::GreenContext, "{:?}", node.cu_mask());
            expected.push(mask_hex(node.cu_mask()));
        }
        let log = log();
        let streams = created(&log);
        assert_eq!(streams.len(), 2 * expected.len());
        for (i, (mask, gctx)) in streams.iter().enumerate() {
            assert_eq!(mask, &expected[i / 2], "stream {i} may use exactly its node's CUs");
            assert!(!gctx.is_empty(), "stream {i} was made on a green context:\n{log}");
        }
        let contexts: Vec<&str> = log.lines().filter(|l| l.starts_with("call green-ctx-create g")).collect();
        assert_eq!(contexts.len(), expected.len(), "one green context per node");
        for (c, want) in contexts.iter().zip(&expected) {
            assert!(c.ends_with(&format!("mask={want}")), "{c} should hold {want}");
        }
        drop(pool);
        let log = self::log();
        let destroyed: Vec<&str> = log.lines().filter(|l| l.starts_with("call green-ctx-destroy")).collect();
        assert_eq!(destroyed.len(), expected.len());
        assert!(destroyed.iter().all(|l| l.ends_with("live-streams=0")), "streams go before their context:\n{log}");
        assert_eq!(b.streams_in_use(), 0);
    });
}

/// A node of two runs with a gap (leaves 0 and 2) gets a context of exactly those CUs; on the
/// WGP part (alignment 2) too.
#[test]
fn a_node_of_separate_runs_is_one_context() {
    let Some(lib) = lib_of(Variant::GreenContexts) else { return };
    for device in ["mi300x", "wgp"] {
        let env = [("VITAMIN_HIP_LIBRARY", lib.as_str()), ("FAKE_HIP_DEVICE", device)];
        in_child_case("a_node_of_separate_runs_is_one_context", device, &env, || {
            let b = backend(PartitionRealization::GreenContext).expect("backend");
            let leaves = b.topology().leaves();
            let units = leaves[0].union(&leaves[2]);
            let p = b.create_partition(&units, 2).expect("two leaves apart");
            assert_eq!(p.realization(), Realization::GreenContext);
            let want = mask_hex(&cu_mask(&units, b.capabilities().cu_count as usize));
            let streams = created(&log());
            assert_eq!(streams.len(), 2);
            assert!(streams.iter().all(|(m, g)| *m == want && !g.is_empty()), "{streams:?} vs {want}");
        });
    }
}

#[test]
fn without_green_contexts_the_pool_uses_cu_masks() {
    let Some(lib) = lib_of(Variant::Base) else { return };
    let env = [("VITAMIN_HIP_LIBRARY", lib.as_str())];
    in_child("without_green_contexts_the_pool_uses_cu_masks", &env, || {
        let b = backend(PartitionRealization::Auto).expect("backend");
        assert!(!b.capabilities().green_contexts);
        assert_eq!(b.partition_realization(), PartitionRealization::CuMask, "auto resolves to CU masks");
        let pool = Realized::create(&b, 2).expect("the default pool");
        assert!(pool.partitions().iter().all(|p| p.realization() == Realization::CuMask));
        let log = log();
        assert!(created(&log).iter().all(|(_, g)| g.is_empty()));
        match backend(PartitionRealization::GreenContext) {
            Err(HalError::Unsupported { reason, .. }) => {
                assert!(reason.contains("green-context") && reason.contains("hipGreenCtxCreate"), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    });
}

#[test]
fn cu_masks_can_be_chosen_where_green_contexts_exist() {
    let Some(lib) = lib_of(Variant::GreenContexts) else { return };
    let env = [("VITAMIN_HIP_LIBRARY", lib.as_str())];
    in_child("cu_masks_can_be_chosen_where_green_contexts_exist", &env, || {
        let b = backend(PartitionRealization::CuMask).expect("backend");
        let p = b.create_partition(&b.topology().leaves()[1], 2).expect("leaf");
        assert_eq!(p.realization(), Realization::CuMask);
        let log = log();
        assert!(!log.contains("green-ctx-create"), "{log}");
        assert_eq!(created(&log).len(), 2);
    });
}

/// The first green context fails: that node falls back to CU-masked streams with the same CUs,
/// the next node gets a green context; with `green-context` the failure is an error instead.
#[test]
fn a_failing_green_context_falls_back_to_cu_masks() {
    let Some(lib) = lib_of(Variant::GreenContexts) else { return };
    let env = [("VITAMIN_HIP_LIBRARY", lib.as_str()), ("FAKE_HIP_FAIL_GREEN_CTX", "1")];
    in_child_case("a_failing_green_context_falls_back_to_cu_masks", "auto", &env, || {
        let b = backend(PartitionRealization::Auto).expect("backend");
        let leaves = b.topology().leaves();
        let first = b.create_partition(&leaves[0], 2).expect("falls back");
        assert_eq!(first.realization(), Realization::CuMask);
        let second = b.create_partition(&leaves[1], 2).expect("a green context");
        assert_eq!(second.realization(), Realization::GreenContext);
        let log = log();
        assert!(log.contains("call green-ctx-create-failed 1"), "{log}");
        let streams = created(&log);
        let want0 = mask_hex(first.cu_mask());
        let want1 = mask_hex(second.cu_mask());
        assert_eq!(streams.len(), 4, "no stream was made for the failed context:\n{log}");
        assert!(streams[..2].iter().all(|(m, g)| *m == want0 && g.is_empty()), "{streams:?}");
        assert!(streams[2..].iter().all(|(m, g)| *m == want1 && !g.is_empty()), "{streams:?}");
        assert_eq!(b.streams_in_use(), 4);
    });
    in_child_case("a_failing_green_context_falls_back_to_cu_masks", "required", &env, || {
        let b = backend(PartitionRealization::GreenContext).expect("backend");
        match b.create_partition(&b.topology().leaves()[0], 2) {
            Err(HalError::Unsupported { reason, .. }) => {
                assert!(reason.contains("hipGreenCtxCreate") && reason.contains("hipErrorOutOfMemory"), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert_eq!(b.streams_in_use(), 0);
        assert!(created(&log()).is_empty(), "nothing was created");
    });
}
