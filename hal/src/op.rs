//! Immutable operation descriptors: what an application submitted, exactly as submitted.
//!
//! A descriptor is built once (by a shim or a test), wrapped in an `Arc`, and only ever read
//! afterwards: every field is private, there are getters and no setters, and nothing hands out
//! `&mut` to a descriptor. The dispatcher and the backends therefore cannot change a launch's
//! binary, parallel structure or arguments (the contract in DESIGN.md). Reshaping baselines must
//! build a *new* descriptor ([`KernelLaunch::regridded`]), which is visible in the code.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// A 3-D extent (grid in blocks, block in threads, cluster in blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dim3 {
    /// x extent.
    pub x: u32,
    /// y extent.
    pub y: u32,
    /// z extent.
    pub z: u32,
}

impl Dim3 {
    /// `(x, y, z)`.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Dim3 { x, y, z }
    }
    /// `(x, 1, 1)`.
    pub const fn x(x: u32) -> Self {
        Dim3 { x, y: 1, z: 1 }
    }
    /// Number of elements `x*y*z`, saturating at `u64::MAX` (three `u32` extents can exceed
    /// `u64`: a hostile launch's shape must compare as too large, never wrap or panic).
    pub fn volume(&self) -> u64 {
        u64::from(self.x).saturating_mul(u64::from(self.y)).saturating_mul(u64::from(self.z))
    }
}

impl fmt::Display for Dim3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{},{})", self.x, self.y, self.z)
    }
}

/// What kind of handle a [`FunctionRef`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FunctionKind {
    /// A context-bound function handle of the backend's driver.
    Function,
    /// A context-independent kernel handle (loaded from a library, valid in every context).
    Kernel,
    /// A kernel of the simulated device, by registry index.
    Simulated,
}

/// An opaque reference to device code, with a name for humans.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionRef {
    handle: u64,
    kind: FunctionKind,
    name: Name,
}

/// A function's name: shared, or static (see [`FunctionRef::with_static_name`]).
#[derive(Clone)]
enum Name {
    Shared(Arc<str>),
    Static(&'static str),
}

impl Name {
    fn as_str(&self) -> &str {
        match self {
            Name::Shared(s) => s,
            Name::Static(s) => s,
        }
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl FunctionRef {
    /// Wraps a backend handle (pointer value) and its debug name.
    pub fn new(handle: u64, kind: FunctionKind, name: impl Into<Arc<str>>) -> Self {
        FunctionRef { handle, kind, name: Name::Shared(name.into()) }
    }
    /// The same with a name that lives for the process. Copying such a reference touches no
    /// reference count: an interposer building one descriptor per launch on the application
    /// thread, dropped later by another thread, would otherwise move the shared name's count
    /// between the two threads' cores at every launch.
    pub fn with_static_name(handle: u64, kind: FunctionKind, name: &'static str) -> Self {
        FunctionRef { handle, kind, name: Name::Static(name) }
    }
    /// The raw handle value as the backend gave it.
    pub fn handle(&self) -> u64 {
        self.handle
    }
    /// Handle kind.
    pub fn kind(&self) -> FunctionKind {
        self.kind
    }
    /// Debug name (mangled or demangled kernel name).
    pub fn name(&self) -> &str {
        self.name.as_str()
    }
}

/// Where one kernel parameter lives inside the argument bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParamLayout {
    /// Byte offset.
    pub offset: u32,
    /// Byte size.
    pub size: u32,
}

/// Copied kernel argument bytes with per-parameter layout (from the driver's parameter info or the
/// packing rules of the caller).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KernelArgs {
    bytes: Box<[u8]>,
    params: Box<[ParamLayout]>,
}

impl KernelArgs {
    /// Takes ownership of already laid-out bytes. Each parameter must lie within `bytes`.
    pub fn from_layout(bytes: Vec<u8>, params: Vec<ParamLayout>) -> Result<Self, String> {
        for (i, p) in params.iter().enumerate() {
            let end = u64::from(p.offset) + u64::from(p.size);
            if end > bytes.len() as u64 {
                return Err(format!("parameter {i} ({}+{}) exceeds {} argument bytes", p.offset, p.size, bytes.len()));
            }
        }
        Ok(KernelArgs { bytes: bytes.into(), params: params.into() })
    }

    /// Packs values with natural alignment (each parameter aligned to `min(size, 8)`), as the native
    /// kernel ABIs lay out parameters of scalar and pointer types.
    pub fn pack(values: &[&[u8]]) -> Self {
        let mut bytes = Vec::new();
        let mut params = Vec::with_capacity(values.len());
        for v in values {
            let align = v.len().clamp(1, 8).next_power_of_two();
            while bytes.len() % align != 0 {
                bytes.push(0);
            }
            params.push(ParamLayout { offset: bytes.len() as u32, size: v.len() as u32 });
            bytes.extend_from_slice(v);
        }
        KernelArgs { bytes: bytes.into(), params: params.into() }
    }

    /// No parameters.
    pub fn empty() -> Self {
        Self::pack(&[])
    }
    /// All argument bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Parameter layout.
    pub fn params(&self) -> &[ParamLayout] {
        &self.params
    }
    /// The bytes of parameter `i`.
    pub fn param(&self, i: usize) -> Option<&[u8]> {
        let p = self.params.get(i)?;
        self.bytes.get(p.offset as usize..(p.offset + p.size) as usize)
    }
    /// Parameter `i` read as a little-endian `u64` (pointers).
    pub fn param_u64(&self, i: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.param(i)?.try_into().ok()?))
    }
    /// Parameter `i` read as a little-endian `u32`.
    pub fn param_u32(&self, i: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.param(i)?.try_into().ok()?))
    }
    /// Parameter `i` read as an `f32`.
    pub fn param_f32(&self, i: usize) -> Option<f32> {
        self.param_u32(i).map(f32::from_bits)
    }
}

impl fmt::Debug for KernelArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelArgs({} params, {} bytes)", self.params.len(), self.bytes.len())
    }
}

/// A launch attribute vitamin does not interpret but must pass through unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawAttribute {
    /// The vendor's attribute id.
    pub id: u32,
    /// The attribute value's bytes, deep-copied.
    pub value: SmallVec<[u8; 16]>,
}

/// Launch attributes that constrain where a launch can run unchanged, plus opaque ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LaunchAttributes {
    cooperative: bool,
    coresident: bool,
    cluster: Option<Dim3>,
    priority: Option<i32>,
    raw: Box<[RawAttribute]>,
}

impl LaunchAttributes {
    /// Builds an attribute set.
    pub fn new(cooperative: bool, cluster: Option<Dim3>, priority: Option<i32>, raw: Vec<RawAttribute>) -> Self {
        LaunchAttributes { cooperative, coresident: false, cluster, priority, raw: raw.into() }
    }
    /// The same, with the placement constraint [`LaunchAttributes::coresident`] set or cleared.
    pub fn with_coresident(mut self, coresident: bool) -> Self {
        self.coresident = coresident;
        self
    }
    /// No attributes.
    pub fn none() -> Self {
        Self::default()
    }
    /// Whether all blocks must be co-resident (cooperative launch).
    pub fn cooperative(&self) -> bool {
        self.cooperative
    }
    /// Whether the kernel needs all its blocks resident at once although the launch is not
    /// cooperative: a placement constraint only, never passed to the driver (the launch stays
    /// unchanged). Collective kernels spin on blocks of other processes or devices (NCCL's), so
    /// on a partition that holds fewer of their blocks at once they could wait for ever on peers
    /// whose blocks wait on blocks that cannot be scheduled.
    pub fn coresident(&self) -> bool {
        self.coresident
    }
    /// Whether every block must be resident at once where the launch runs: cooperative, or
    /// [`LaunchAttributes::coresident`].
    pub fn needs_coresidency(&self) -> bool {
        self.cooperative || self.coresident
    }
    /// Thread-block cluster shape, if a cluster launch.
    pub fn cluster(&self) -> Option<Dim3> {
        self.cluster
    }
    /// Requested priority, if any.
    pub fn priority(&self) -> Option<i32> {
        self.priority
    }
    /// Attributes passed through uninterpreted.
    pub fn raw(&self) -> &[RawAttribute] {
        &self.raw
    }
}

/// The recurring identity of a launch configuration (kernel, grid, block, shared memory): the key
/// of execution-time profiles.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaunchConfig {
    /// Kernel name (handles differ between processes; names do not).
    pub kernel: String,
    /// Grid.
    pub grid: Dim3,
    /// Block.
    pub block: Dim3,
    /// Dynamic shared memory bytes.
    pub shared_mem_bytes: u32,
}

/// A kernel launch: binary, parallel structure and argument values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelLaunch {
    function: FunctionRef,
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    args: KernelArgs,
    attributes: LaunchAttributes,
    /// Blocks of this function and shape one unit holds at once (0: unknown).
    resident_per_unit: u16,
}

impl KernelLaunch {
    /// Builds a launch descriptor.
    pub fn new(
        function: FunctionRef,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        args: KernelArgs,
        attributes: LaunchAttributes,
    ) -> Self {
        KernelLaunch { function, grid, block, shared_mem_bytes, args, attributes, resident_per_unit: 0 }
    }
    /// The same launch, with its occupancy known: `blocks` of this function, block shape and
    /// dynamic shared memory fit on one unit at once (the driver's occupancy answer; 0: unknown).
    /// Scheduling information only: the launch itself is unchanged.
    #[must_use]
    pub fn with_resident_per_unit(mut self, blocks: u32) -> Self {
        self.resident_per_unit = u16::try_from(blocks).unwrap_or(u16::MAX);
        self
    }
    /// Blocks one unit holds at once, if known (see [`KernelLaunch::with_resident_per_unit`]).
    pub fn resident_per_unit(&self) -> Option<u32> {
        (self.resident_per_unit > 0).then_some(u32::from(self.resident_per_unit))
    }
    /// The device code.
    pub fn function(&self) -> &FunctionRef {
        &self.function
    }
    /// Grid in blocks.
    pub fn grid(&self) -> Dim3 {
        self.grid
    }
    /// Block in threads.
    pub fn block(&self) -> Dim3 {
        self.block
    }
    /// Dynamic shared memory bytes.
    pub fn shared_mem_bytes(&self) -> u32 {
        self.shared_mem_bytes
    }
    /// Argument bytes.
    pub fn args(&self) -> &KernelArgs {
        &self.args
    }
    /// Launch attributes.
    pub fn attributes(&self) -> &LaunchAttributes {
        &self.attributes
    }
    /// Total blocks.
    pub fn blocks(&self) -> u64 {
        self.grid.volume()
    }
    /// The profile key of this launch.
    pub fn config(&self) -> LaunchConfig {
        LaunchConfig {
            kernel: self.function.name().to_owned(),
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
        }
    }
    /// A **new** descriptor with another grid and arguments: what kernel-reshaping systems do and
    /// vitamin never does on its own. Exists for baselines and tests.
    #[must_use]
    pub fn regridded(&self, grid: Dim3, args: KernelArgs) -> KernelLaunch {
        KernelLaunch { grid, args, ..self.clone() }
    }
}

/// One end of a copy.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Device memory address.
    Device(u64),
    /// Host memory address (pinned or pageable), owned by the application.
    Host(u64),
    /// Host bytes copied at call time (a pageable host-to-device copy is staged before the API
    /// call returns, so the application may reuse its buffer at once).
    Staged(Arc<[u8]>),
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Device(a) => write!(f, "Device({a:#x})"),
            Endpoint::Host(a) => write!(f, "Host({a:#x})"),
            Endpoint::Staged(b) => write!(f, "Staged({} bytes)", b.len()),
        }
    }
}

/// A memory copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Copy {
    dst: Endpoint,
    src: Endpoint,
    bytes: u64,
}

impl Copy {
    /// Builds a copy of `bytes` bytes. A staged source must hold at least `bytes` bytes.
    pub fn new(dst: Endpoint, src: Endpoint, bytes: u64) -> Result<Self, String> {
        if let Endpoint::Staged(b) = &src {
            if (b.len() as u64) < bytes {
                return Err(format!("staged source holds {} bytes, copy wants {bytes}", b.len()));
            }
        }
        if matches!(dst, Endpoint::Staged(_)) {
            return Err("a staged buffer cannot be a copy destination".into());
        }
        Ok(Copy { dst, src, bytes })
    }
    /// Destination.
    pub fn dst(&self) -> &Endpoint {
        &self.dst
    }
    /// Source.
    pub fn src(&self) -> &Endpoint {
        &self.src
    }
    /// Byte count.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A memset of `count` elements of `element_size` bytes (1, 2 or 4) to `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fill {
    dst: u64,
    value: u32,
    element_size: u8,
    count: u64,
}

impl Fill {
    /// Builds a fill; `element_size` must be 1, 2 or 4.
    pub fn new(dst: u64, value: u32, element_size: u8, count: u64) -> Result<Self, String> {
        if !matches!(element_size, 1 | 2 | 4) {
            return Err(format!("fill element size {element_size} is not 1, 2 or 4"));
        }
        Ok(Fill { dst, value, element_size, count })
    }
    /// Destination device address.
    pub fn dst(&self) -> u64 {
        self.dst
    }
    /// Value (low `element_size` bytes used).
    pub fn value(&self) -> u32 {
        self.value
    }
    /// Element size in bytes.
    pub fn element_size(&self) -> u8 {
        self.element_size
    }
    /// Element count.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// A host function ordered in a stream (a native host-function launch or stream callback).
#[derive(Clone)]
pub struct HostFunction {
    name: Arc<str>,
    call: Arc<dyn Fn() + Send + Sync>,
}

impl HostFunction {
    /// Wraps a callable.
    pub fn new(name: impl Into<Arc<str>>, call: impl Fn() + Send + Sync + 'static) -> Self {
        HostFunction { name: name.into(), call: Arc::new(call) }
    }
    /// Debug name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Runs the function (backends call this once, when its stream predecessors completed).
    pub fn invoke(&self) {
        (self.call)()
    }
}

impl fmt::Debug for HostFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostFunction({})", self.name)
    }
}

/// Launch of an instantiated graph: one op, bound to one partition as a whole.
///
/// A graph's work runs where its nodes say, not where the launching stream runs (CUDA:
/// docs/results/graph-ctx-probe.md). A launch whose backend can confine the graph to one partition
/// carries [`PartitionCopies`]: the backend's source to make one executable copy per partition.
/// Without it the graph runs on the whole device whatever partition launches it.
#[derive(Debug, Clone)]
pub struct GraphLaunch {
    graph_exec: u64,
    name: Arc<str>,
    copies: Option<Arc<dyn PartitionCopies>>,
}

/// A backend's means to run one executable graph confined to a partition: a snapshot of the graph
/// the application instantiated, from which the backend's partitions make (and cache here) their
/// own executable copies. Shared by every launch of that executable graph until the application
/// changes or destroys it; dropped with the last launch that holds it.
pub trait PartitionCopies: Send + Sync + fmt::Debug {
    /// The backend's own type behind the trait (the partition that makes the copies knows it).
    fn as_any(&self) -> &dyn std::any::Any;
}

impl PartialEq for GraphLaunch {
    fn eq(&self, other: &Self) -> bool {
        let same_copies = match (&self.copies, &other.copies) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.graph_exec == other.graph_exec && self.name == other.name && same_copies
    }
}

impl Eq for GraphLaunch {}

impl std::hash::Hash for GraphLaunch {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.graph_exec.hash(state);
        self.name.hash(state);
    }
}

impl GraphLaunch {
    /// Wraps an executable-graph handle.
    pub fn new(graph_exec: u64, name: impl Into<Arc<str>>) -> Self {
        GraphLaunch { graph_exec, name: name.into(), copies: None }
    }
    /// The same launch, confinable to a partition through `copies`.
    pub fn with_copies(mut self, copies: Arc<dyn PartitionCopies>) -> Self {
        self.copies = Some(copies);
        self
    }
    /// The same launch (name, copies) of another executable graph: a partition's own copy.
    pub fn retargeted(&self, graph_exec: u64) -> Self {
        GraphLaunch { graph_exec, name: self.name.clone(), copies: self.copies.clone() }
    }
    /// The executable graph handle.
    pub fn graph_exec(&self) -> u64 {
        self.graph_exec
    }
    /// Debug name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The source of per-partition copies, when the backend can confine this graph.
    pub fn copies(&self) -> Option<&Arc<dyn PartitionCopies>> {
        self.copies.as_ref()
    }
}

/// Ordering-only ops with no device work of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// An application event record: generation `generation` of logical event `event`.
    EventRecord {
        /// Logical event id.
        event: u64,
        /// Generation number.
        generation: u64,
    },
    /// A stream wait on an event generation, kept for tracing.
    EventWait {
        /// Logical event id.
        event: u64,
        /// Generation number.
        generation: u64,
    },
    /// A no-op join point (e.g. a synchronous call's position in its stream).
    Barrier,
}

/// Every asynchronous operation vitamin schedules.
#[derive(Debug)]
pub enum OpDesc {
    /// Kernel launch.
    Kernel(KernelLaunch),
    /// Memory copy.
    Copy(Copy),
    /// Memory fill.
    Fill(Fill),
    /// Host function.
    Host(HostFunction),
    /// Graph launch.
    Graph(GraphLaunch),
    /// Ordering marker.
    Marker(Marker),
}

impl OpDesc {
    /// Short kind name for logs and timelines.
    pub fn kind_name(&self) -> &'static str {
        match self {
            OpDesc::Kernel(_) => "kernel",
            OpDesc::Copy(_) => "copy",
            OpDesc::Fill(_) => "fill",
            OpDesc::Host(_) => "host",
            OpDesc::Graph(_) => "graph",
            OpDesc::Marker(_) => "marker",
        }
    }
    /// A label for timelines: the kernel or host-function name, else the kind.
    pub fn label(&self) -> &str {
        match self {
            OpDesc::Kernel(k) => k.function().name(),
            OpDesc::Host(h) => h.name(),
            OpDesc::Graph(g) => g.name(),
            other => other.kind_name(),
        }
    }
    /// Whether the op occupies execution units (kernels and graphs); copies, fills, host
    /// functions and markers can run on any partition.
    pub fn uses_units(&self) -> bool {
        matches!(self, OpDesc::Kernel(_) | OpDesc::Graph(_))
    }
    /// The kernel launch, if this is one.
    pub fn as_kernel(&self) -> Option<&KernelLaunch> {
        match self {
            OpDesc::Kernel(k) => Some(k),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_aligns_like_the_c_abi() {
        let a = KernelArgs::pack(&[&7u8.to_le_bytes(), &0x1122_3344_5566_7788u64.to_le_bytes(), &3u32.to_le_bytes()]);
        assert_eq!(
            a.params(),
            &[
                ParamLayout { offset: 0, size: 1 },
                ParamLayout { offset: 8, size: 8 },
                ParamLayout { offset: 16, size: 4 }
            ]
        );
        assert_eq!(a.param_u64(1), Some(0x1122_3344_5566_7788));
        assert_eq!(a.param_u32(2), Some(3));
        assert_eq!(a.param(3), None);
    }

    #[test]
    fn layout_outside_bytes_is_rejected() {
        assert!(KernelArgs::from_layout(vec![0; 4], vec![ParamLayout { offset: 2, size: 4 }]).is_err());
    }

    #[test]
    fn static_and_shared_names_compare_and_hash_by_value() {
        use std::hash::{BuildHasher, RandomState};
        let shared = FunctionRef::new(3, FunctionKind::Function, "layer");
        let fixed = FunctionRef::with_static_name(3, FunctionKind::Function, "layer");
        assert_eq!(shared, fixed);
        assert_eq!(fixed.name(), "layer");
        let h = RandomState::new();
        assert_eq!(h.hash_one(&shared), h.hash_one(&fixed));
        assert_ne!(fixed, FunctionRef::with_static_name(3, FunctionKind::Function, "other"));
        assert_eq!(format!("{fixed:?}"), format!("{shared:?}"));
    }

    #[test]
    fn regridding_builds_a_new_descriptor_and_leaves_the_original() {
        let f = FunctionRef::new(1, FunctionKind::Simulated, "k");
        let k = Arc::new(OpDesc::Kernel(KernelLaunch::new(
            f,
            Dim3::x(64),
            Dim3::x(128),
            0,
            KernelArgs::empty(),
            LaunchAttributes::none(),
        )));
        let OpDesc::Kernel(orig) = &*k else { unreachable!() };
        let r = orig.regridded(Dim3::x(32), KernelArgs::empty());
        assert_eq!(r.grid(), Dim3::x(32));
        assert_eq!(orig.grid(), Dim3::x(64));
        assert_eq!(orig.config().grid, Dim3::x(64));
    }

    #[test]
    fn staged_copy_must_hold_its_bytes() {
        let src = Endpoint::Staged(Arc::from(vec![1u8; 4]));
        assert!(Copy::new(Endpoint::Device(0x1000), src.clone(), 8).is_err());
        assert!(Copy::new(Endpoint::Device(0x1000), src.clone(), 4).is_ok());
        assert!(Copy::new(src, Endpoint::Device(0x1000), 4).is_err());
        assert!(Fill::new(0, 0, 3, 1).is_err());
    }
}
