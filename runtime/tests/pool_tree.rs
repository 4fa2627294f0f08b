//! The pool hierarchy: the H200 and MI300X trees in detail, and the construction rule on random
//! topologies against an independent reference builder.

mod pool_support;

use std::collections::HashSet;

use pool_support::{arb_topology, h200, mi300x, reference_nodes, RefKind};
use proptest::prelude::*;
use vitamin_hal::{Topology, UnitSet};
use vitamin_runtime::pool::{Hierarchy, NodeKind, Pool};

fn ref_kind(k: NodeKind) -> RefKind {
    match k {
        NodeKind::Leaf => RefKind::Leaf,
        NodeKind::Internal => RefKind::Internal,
        NodeKind::Remainder => RefKind::Remainder,
    }
}

/// Structural checks that hold for every topology; panics with a message on the first failure.
fn check_structure(top: &Topology, h: &Hierarchy) {
    let device = top.all_units();
    let nodes = h.nodes();
    let n_leaves = top.leaves().len();

    // Same node set as the reference rule, each unit set once.
    let got: HashSet<(UnitSet, RefKind)> = nodes.iter().map(|n| (n.units, ref_kind(n.kind))).collect();
    let want: HashSet<(UnitSet, RefKind)> = reference_nodes(top).into_iter().collect();
    assert_eq!(got.len(), nodes.len(), "two nodes share a unit set");
    assert_eq!(got, want, "node set differs from the reference construction");
    let expected_count = if n_leaves == 1 { 1 } else { 4 * n_leaves - 5 };
    assert_eq!(nodes.len(), expected_count, "node count for {n_leaves} leaves");

    // Ids are dense indices; root is the device.
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n.id.index(), i);
        assert_eq!(n.size(), n.units.len());
        assert!(!n.units.is_empty());
        assert!(vitamin_hal::check_union_of_leaves(top, &n.units).is_ok(), "{} is not a union of leaves", n.id);
        assert_eq!(h.find(&n.units), Some(n.id));
    }
    let root = h.node(h.root());
    assert_eq!(root.units, device);
    assert_eq!(root.parent, None);
    assert_eq!(root.depth, 0);
    assert_eq!(root.remainder, None);

    // Leaves in topology order.
    assert_eq!(h.leaves().len(), n_leaves);
    for (leaf_id, leaf_units) in h.leaves().iter().zip(top.leaves()) {
        let n = h.node(*leaf_id);
        assert_eq!(n.kind, NodeKind::Leaf);
        assert_eq!(n.units, *leaf_units);
        assert!(n.children.is_empty());
    }

    // Tree links: children partition their parent, depth grows by one, parent links back.
    for n in nodes {
        match n.kind {
            NodeKind::Internal => {
                assert_eq!(n.children.len(), 2, "{} must have two children", n.id);
                let (a, b) = (h.node(n.children[0]), h.node(n.children[1]));
                assert!(a.units.is_disjoint(&b.units));
                assert_eq!(a.units | b.units, n.units);
                // The first child gets the larger half of the leaves (mid = lo + ceil(len/2)).
                let leaves_in = |u: &UnitSet| top.leaves().iter().filter(|l| l.is_subset(u)).count();
                assert_eq!(leaves_in(&a.units), leaves_in(&n.units).div_ceil(2));
                for c in [a, b] {
                    assert_eq!(c.parent, Some(n.id));
                    assert_eq!(c.depth, n.depth + 1);
                    assert_ne!(c.kind, NodeKind::Remainder);
                }
            }
            NodeKind::Leaf => assert!(n.children.is_empty()),
            NodeKind::Remainder => {
                assert!(n.children.is_empty());
                assert_eq!(n.parent, None);
            }
        }
        if n.id != h.root() && n.kind != NodeKind::Remainder {
            assert!(n.parent.is_some(), "tree node {} without parent", n.id);
        }
    }

    // Remainders: every node but the root has one; it is the complement; links are mutual.
    for n in nodes {
        if n.id == h.root() {
            continue;
        }
        let r = h.node(n.remainder.unwrap_or_else(|| panic!("{} has no remainder", n.id)));
        assert_eq!(r.units, device.difference(&n.units), "remainder of {}", n.id);
        assert_eq!(r.size(), device.len() - n.size());
        assert_eq!(r.remainder, Some(n.id), "remainder links of {} and {} are not mutual", n.id, r.id);
        if r.kind == NodeKind::Remainder {
            assert_eq!(r.depth, n.depth);
        }
    }

    // Ascending size order is a permutation of all ids.
    let by_size = h.nodes_by_size();
    assert_eq!(by_size.len(), nodes.len());
    assert!(by_size.windows(2).all(|w| (h.node(w[0]).size(), w[0]) < (h.node(w[1]).size(), w[1])));
    // Tree nodes come first, in pre-order; remainders after.
    let tree: Vec<_> = h.tree_preorder().map(|n| n.id).collect();
    assert_eq!(tree.len(), 2 * n_leaves - 1);
    assert!(tree.iter().enumerate().all(|(i, id)| id.index() == i));
    assert_eq!(h.remainders().count(), nodes.len() - tree.len());
}

#[test]
fn h200_tree() {
    let top = h200();
    let pool = Pool::build(&top);
    let h = pool.hierarchy();
    check_structure(&top, h);

    // 16 leaves: 15 of 8 SMs and the 12-SM remainder leaf, in split order.
    let sizes: Vec<usize> = pool.leaves().iter().map(|&l| pool.node(l).size()).collect();
    assert_eq!(sizes, [vec![8; 15], vec![12]].concat());
    assert_eq!(pool.node(pool.leaves()[15]).units, UnitSet::range(120, 132));
    // Root = 132 SMs; children 8 leaves (64 SMs) and 8 leaves (56 + 12 = 68 SMs) that
    // complement each other.
    let root = pool.node(pool.root());
    assert_eq!(root.size(), 132);
    let (a, b) = (pool.node(root.children[0]), pool.node(root.children[1]));
    assert_eq!((a.size(), b.size()), (64, 68));
    assert_eq!(a.units, UnitSet::range(0, 64));
    assert_eq!((a.remainder, b.remainder), (Some(b.id), Some(a.id)));
    // Every remainder = 132 - node size.
    for n in pool.nodes() {
        if n.id != pool.root() {
            assert_eq!(pool.node(n.remainder.unwrap()).size(), 132 - n.size());
        }
    }
    // The paper's example: an 8-SM leaf points to a 124-SM remainder.
    let leaf0 = pool.node(pool.leaves()[0]);
    assert_eq!(pool.node(leaf0.remainder.unwrap()).size(), 124);
    // 59 nodes: 16 leaves, 15 internal, 28 remainders; 5 levels of tree.
    assert_eq!(pool.nodes().len(), 59);
    assert_eq!((h.count(NodeKind::Leaf), h.count(NodeKind::Internal), h.count(NodeKind::Remainder)), (16, 15, 28));
    assert_eq!(pool.nodes().iter().map(|n| n.depth).max(), Some(4));
    // Sizes offered. Tree: leaves 8 and 12; pairs 16 and 8 + 12 = 20; quads 32 and 3 * 8 + 12 = 36;
    // halves 64 and 68; root 132. Remainders: 132 minus each of 8, 12, 16, 20, 32, 36.
    let mut offered: Vec<usize> = pool.nodes().iter().map(|n| n.size()).collect();
    offered.sort_unstable();
    offered.dedup();
    assert_eq!(offered, vec![8, 12, 16, 20, 32, 36, 64, 68, 96, 100, 112, 116, 120, 124, 132]);
}

#[test]
fn mi300x_tree() {
    let top = mi300x();
    let pool = Pool::build(&top);
    check_structure(&top, pool.hierarchy());
    assert_eq!(pool.nodes().len(), 71);
    assert_eq!(pool.leaves().len(), 19);
    assert_eq!(pool.node(pool.root()).size(), 304);
    let root = pool.node(pool.root());
    // 19 leaves split 10 + 9.
    assert_eq!((pool.node(root.children[0]).size(), pool.node(root.children[1]).size()), (160, 144));
    for n in pool.nodes() {
        if n.id != pool.root() {
            assert_eq!(pool.node(n.remainder.unwrap()).size(), 304 - n.size());
        }
    }
}

#[test]
fn single_and_two_leaf_devices() {
    let one = pool_support::topology("amd", "CU", 4, vec![UnitSet::range(0, 4)]);
    let p = Pool::build(&one);
    check_structure(&one, p.hierarchy());
    assert_eq!(p.nodes().len(), 1);
    assert_eq!(p.node(p.root()).kind, NodeKind::Leaf);

    let two = pool_support::topology("nvidia", "SM", 12, vec![UnitSet::range(0, 8), UnitSet::range(8, 12)]);
    let p = Pool::build(&two);
    check_structure(&two, p.hierarchy());
    assert_eq!(p.nodes().len(), 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn random_topologies_follow_the_rule(top in arb_topology(40)) {
        check_structure(&top, &Hierarchy::build(&top));
    }
}
