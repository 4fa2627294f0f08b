//! [`Hierarchy`]: the immutable tree of pool nodes (leaves, unions, remainders) built from a
//! [`Topology`]. See the module documentation of [`crate::pool`] for the construction rule.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use smallvec::SmallVec;
use vitamin_hal::{Topology, UnitSet};

/// Identifier of a pool node: a dense index into [`Hierarchy::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The id as an index into node-indexed slices.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What a node is in the hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// One leaf of the topology (the smallest allocation).
    Leaf,
    /// The union of its two children (a tree node over several leaves).
    Internal,
    /// The device minus one tree node (only where that complement is not itself a tree node).
    Remainder,
}

impl NodeKind {
    /// `leaf`, `internal` or `remainder`.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Leaf => "leaf",
            NodeKind::Internal => "internal",
            NodeKind::Remainder => "remainder",
        }
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One pool node: a unit set the backend realizes as one pre-created physical context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its id (its index in [`Hierarchy::nodes`]).
    pub id: NodeId,
    /// The units it covers: always a non-empty union of whole leaves.
    pub units: UnitSet,
    /// The tree node one level up; `None` for the root and for remainder nodes.
    pub parent: Option<NodeId>,
    /// Two children for an internal node, none otherwise.
    pub children: SmallVec<[NodeId; 2]>,
    /// The node covering exactly the device minus this node; `None` only for the root (and for
    /// a single-leaf device's only node). A remainder node links back to the node it complements.
    pub remainder: Option<NodeId>,
    /// Leaf, internal or remainder.
    pub kind: NodeKind,
    /// Distance from the root for tree nodes; a remainder node has the depth of the tree node it
    /// complements.
    pub depth: u8,
    /// `units.len()`, computed once (policies ask for sizes in their inner loops).
    size: u16,
}

impl Node {
    /// Number of units.
    pub fn size(&self) -> usize {
        usize::from(self.size)
    }
}

/// The immutable node structure of a pool: shared by every [`crate::pool::Pool`] built over the
/// same device (e.g. by a daemon and its clients).
#[derive(Debug, Clone)]
pub struct Hierarchy {
    unit_name: String,
    device: UnitSet,
    nodes: Vec<Node>,
    sizes: Vec<u16>,
    leaves: Vec<NodeId>,
    by_size: Vec<NodeId>,
    by_units: HashMap<UnitSet, NodeId>,
}

impl Hierarchy {
    /// Builds the hierarchy over `top`'s leaves (see [`crate::pool`] for the rule).
    pub fn build(top: &Topology) -> Hierarchy {
        let leaves = top.leaves();
        // A topology holds at most MAX_UNITS (512) non-empty leaves, so at most 4 * 512 nodes.
        debug_assert!(!leaves.is_empty() && leaves.len() <= vitamin_hal::MAX_UNITS);
        let mut h = Hierarchy {
            unit_name: top.unit_name().to_owned(),
            device: top.all_units(),
            nodes: Vec::with_capacity(4 * leaves.len()),
            sizes: Vec::new(),
            leaves: Vec::with_capacity(leaves.len()),
            by_size: Vec::new(),
            by_units: HashMap::new(),
        };
        h.build_tree(leaves, 0, leaves.len(), None, 0);
        h.build_remainders();
        h.sizes = h.nodes.iter().map(|n| n.size() as u16).collect();
        h.by_size = h.nodes.iter().map(|n| n.id).collect();
        h.by_size.sort_by_key(|id| (h.sizes[id.index()], *id));
        h
    }

    fn push(&mut self, node: Node) -> NodeId {
        let id = node.id;
        let previous = self.by_units.insert(node.units, id);
        debug_assert!(previous.is_none(), "two pool nodes over the same units");
        self.nodes.push(node);
        id
    }

    fn next_id(&self) -> NodeId {
        NodeId(u16::try_from(self.nodes.len()).expect("at most 2047 nodes for 512 units"))
    }

    /// Adds the tree node over leaves `[lo, hi)` and its subtree in pre-order; returns its id.
    fn build_tree(&mut self, leaves: &[UnitSet], lo: usize, hi: usize, parent: Option<NodeId>, depth: u8) -> NodeId {
        let units = leaves[lo..hi].iter().fold(UnitSet::EMPTY, |acc, l| acc | *l);
        let kind = if hi - lo == 1 { NodeKind::Leaf } else { NodeKind::Internal };
        let id = self.next_id();
        self.push(Node {
            id,
            units,
            parent,
            children: SmallVec::new(),
            remainder: None,
            kind,
            depth,
            size: units.len() as u16,
        });
        if kind == NodeKind::Leaf {
            self.leaves.push(id);
        } else {
            let mid = lo + (hi - lo).div_ceil(2);
            let a = self.build_tree(leaves, lo, mid, Some(id), depth + 1);
            let b = self.build_tree(leaves, mid, hi, Some(id), depth + 1);
            self.nodes[id.index()].children = SmallVec::from_buf([a, b]);
        }
        id
    }

    fn build_remainders(&mut self) {
        let tree_nodes = self.nodes.len();
        for i in 0..tree_nodes {
            let complement = self.device.difference(&self.nodes[i].units);
            if complement.is_empty() {
                continue; // the root
            }
            let rem = match self.by_units.get(&complement) {
                Some(&existing) => existing,
                None => {
                    let id = self.next_id();
                    let (of, depth) = (self.nodes[i].id, self.nodes[i].depth);
                    self.push(Node {
                        id,
                        units: complement,
                        parent: None,
                        children: SmallVec::new(),
                        remainder: Some(of),
                        kind: NodeKind::Remainder,
                        depth,
                        size: complement.len() as u16,
                    })
                }
            };
            self.nodes[i].remainder = Some(rem);
        }
    }

    /// All nodes, indexed by [`NodeId::index`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    ///
    /// # Panics
    /// If `id` is not a node of this hierarchy.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Whether `id` names a node of this hierarchy.
    pub fn contains(&self, id: NodeId) -> bool {
        id.index() < self.nodes.len()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a hierarchy has at least its root.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The root: the whole device.
    pub fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// The leaf nodes, in topology order.
    pub fn leaves(&self) -> &[NodeId] {
        &self.leaves
    }

    /// Every node in ascending size (ties by id): policies scan this.
    pub fn nodes_by_size(&self) -> &[NodeId] {
        &self.by_size
    }

    /// Node sizes, indexed by [`NodeId::index`].
    pub fn sizes(&self) -> &[u16] {
        &self.sizes
    }

    /// The node whose units are exactly `units`, if any.
    pub fn find(&self, units: &UnitSet) -> Option<NodeId> {
        self.by_units.get(units).copied()
    }

    /// All units of the device (the root's units).
    pub fn device_units(&self) -> UnitSet {
        self.device
    }

    /// The unit's short name ([`Topology::unit_name`]), for display.
    pub fn unit_name(&self) -> &str {
        &self.unit_name
    }

    /// Number of nodes of a kind.
    pub fn count(&self, kind: NodeKind) -> usize {
        self.nodes.iter().filter(|n| n.kind == kind).count()
    }

    /// Tree nodes (not remainders) in depth-first pre-order: the order to print the tree in.
    pub fn tree_preorder(&self) -> impl Iterator<Item = &Node> + '_ {
        // Tree nodes are created in pre-order and come before every remainder node.
        self.nodes.iter().take_while(|n| n.kind != NodeKind::Remainder)
    }

    /// Remainder nodes, in the order of the tree node each complements.
    pub fn remainders(&self) -> impl Iterator<Item = &Node> + '_ {
        self.nodes.iter().filter(|n| n.kind == NodeKind::Remainder)
    }
}
