//! Single-producer/single-consumer rings of fixed-size records in shared memory, with idle-only
//! futex wake-ups, and the sealed memfd that holds a client's rings and lease view.
//!
//! ## Ring protocol
//! A ring is a control block ([`RingCtl`]: `head`, `tail`, and a wake word pair `seq`/`waiting`,
//! each on its own cache lines) and `capacity` slots of `words` 64-bit words. Indices are `u32`
//! and wrap; the slot of index `i` is `i & (capacity - 1)` (capacity is a power of two), so a slot
//! access is always in bounds whatever the other side wrote.
//! - The producer writes slot words (relaxed), then publishes `tail` (SeqCst: a release for the
//!   slots, and one half of the sleep handshake).
//! - The consumer reads `tail`, copies the records out, and publishes `head` once per batch.
//! - **Each side keeps its own index locally** and only *reads* the other's from shared memory,
//!   validating it: a head ahead of the tail, or more than `capacity` records outstanding, is a
//!   [`RingError::Corrupt`] (a hostile peer), never an out-of-bounds access.
//! - **Sleeping** (consumer, ring empty): read `seq`, `waiting.swap(1)`, re-check `tail`; still
//!   empty: `futex_wait(seq, the value read, timeout)`, then `waiting.swap(0)`. **Waking** (producer,
//!   after publishing `tail`): `if waiting.swap(0) == 1 { seq += 1; futex_wake(seq) }`. Every
//!   access to `waiting` is an acquire-release read-modify-write, so they all lie in one release
//!   sequence: if the producer's swap precedes the consumer's announcement, the announcement
//!   synchronizes with it and the re-check sees the new tail; otherwise the producer's swap reads
//!   the announcement and bumps `seq` after the consumer read it, so the wait returns at once.
//!   No wake-up is lost (the loom model in this file checks it), and a producer pays a system
//!   call only when the consumer really went to sleep on an empty ring: the wake-ups are
//!   idle-only.
//! - Every wait is bounded by a timeout.
//!
//! Slots and control words are atomics even though each has one writer: the peer is another
//! process that may be hostile, and atomics make a concurrent overwrite a garbage value (caught by
//! the record checksum in [`super::wire`]) instead of undefined behaviour.
//!
//! ## The shared region ([`SharedRegion`])
//! One memfd per client, created by the daemon, sized, then sealed with
//! `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` before its descriptor is passed to the client: a
//! client cannot shrink it under the daemon's mapping (no SIGBUS) or reopen the seals. The daemon
//! never reads layout data back from the region: it keeps its own [`Layout`].
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use super::sync::{fence, futex, AtomicU32, AtomicU64, Ordering};

/// What went wrong with a ring or the shared region.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The peer wrote an index that no correct peer can write.
    #[error("ring corrupted by its peer: {what} (local {local}, peer wrote {peer}, capacity {capacity})")]
    Corrupt {
        /// Which index.
        what: &'static str,
        /// Our own index.
        local: u32,
        /// The value read from shared memory.
        peer: u32,
        /// Ring capacity.
        capacity: u32,
    },
    /// A record of the wrong width was offered.
    #[error("record has {got} words, the ring holds {want}-word records")]
    Width {
        /// Words offered.
        got: usize,
        /// Words per slot.
        want: usize,
    },
    /// A layout that cannot be built or mapped.
    #[error("invalid shared-region layout: {0}")]
    Layout(String),
    /// A system call failed.
    #[error("{call} failed: {err}")]
    Os {
        /// The call.
        call: &'static str,
        /// Its error.
        err: String,
    },
    /// The lease view stayed mid-update for too long.
    #[error("the lease view was being rewritten on every read ({0} tries)")]
    ViewBusy(u32),
}

/// A value on its own cache lines (128 bytes: two lines, against adjacent-line prefetch), with a
/// defined layout (`repr(C)`) so both processes agree on offsets.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

/// The wake words of one direction.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Wake {
    /// Bumped by the producer to wake a sleeping consumer; the futex word.
    pub seq: AtomicU32,
    /// 1 while the consumer is (about to be) asleep.
    pub waiting: AtomicU32,
}

/// One ring's control block.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingCtl {
    /// Consumer's index (next record to read).
    pub head: Padded<AtomicU32>,
    /// Producer's index (next slot to write).
    pub tail: Padded<AtomicU32>,
    /// Sleep/wake words.
    pub wake: Padded<Wake>,
}

/// Size of a [`RingCtl`] in bytes.
pub const RING_CTL_BYTES: usize = std::mem::size_of::<RingCtl>();

/// A view of one ring: its control block and slots. Cheap to copy; holds no local index.
#[derive(Debug, Clone, Copy)]
pub struct Ring<'a> {
    ctl: &'a RingCtl,
    slots: &'a [AtomicU64],
    capacity: u32,
    words: usize,
}

impl<'a> Ring<'a> {
    /// A ring over `ctl` and `slots` (`capacity * words` words). `capacity` must be a power of two.
    pub fn new(ctl: &'a RingCtl, slots: &'a [AtomicU64], capacity: u32, words: usize) -> Result<Self, RingError> {
        if !capacity.is_power_of_two() || words == 0 || slots.len() != capacity as usize * words {
            return Err(RingError::Layout(format!(
                "capacity {capacity} (power of two?) x {words} words != {} slot words",
                slots.len()
            )));
        }
        Ok(Ring { ctl, slots, capacity, words })
    }
    /// Slots.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    /// Words per record.
    pub fn words(&self) -> usize {
        self.words
    }
    /// Records published and not yet consumed, as far as shared memory says (for metrics only:
    /// unvalidated, clamped to the capacity).
    pub fn depth_hint(&self) -> u32 {
        let t = self.ctl.tail.0.load(Ordering::Relaxed);
        let h = self.ctl.head.0.load(Ordering::Relaxed);
        t.wrapping_sub(h).min(self.capacity)
    }
    fn slot(&self, index: u32) -> &'a [AtomicU64] {
        let s = (index & (self.capacity - 1)) as usize * self.words;
        &self.slots[s..s + self.words]
    }
}

/// The producer's local state of one ring.
#[derive(Debug, Clone, Default)]
pub struct Producer {
    tail: u32,
    head_seen: u32,
    wakes: u64,
}

impl Producer {
    /// A producer at index 0 (a fresh ring).
    pub fn new() -> Self {
        Self::default()
    }

    /// Free slots now (reads and validates the consumer's head).
    pub fn free(&mut self, ring: &Ring<'_>) -> Result<u32, RingError> {
        let head = ring.ctl.head.0.load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > ring.capacity {
            return Err(RingError::Corrupt { what: "head", local: self.tail, peer: head, capacity: ring.capacity });
        }
        self.head_seen = head;
        Ok(ring.capacity - used)
    }

    /// Writes one record into the next slot without publishing it. `Ok(false)`: the ring is full.
    pub fn stage(&mut self, ring: &Ring<'_>, record: &[u64]) -> Result<bool, RingError> {
        if record.len() != ring.words {
            return Err(RingError::Width { got: record.len(), want: ring.words });
        }
        if self.tail.wrapping_sub(self.head_seen) >= ring.capacity && self.free(ring)? == 0 {
            return Ok(false);
        }
        for (slot, &w) in ring.slot(self.tail).iter().zip(record) {
            slot.store(w, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(1);
        Ok(true)
    }

    /// Records staged and not yet published.
    pub fn staged(&self, ring: &Ring<'_>) -> u32 {
        self.tail.wrapping_sub(ring.ctl.tail.0.load(Ordering::Relaxed))
    }

    /// Publishes every staged record and wakes the consumer if it sleeps. Returns whether a
    /// wake-up was sent.
    pub fn publish(&mut self, ring: &Ring<'_>) -> bool {
        ring.ctl.tail.0.store(self.tail, Ordering::Release);
        // Every access to `waiting` is an acquire-release RMW, so they form one release
        // sequence: if this swap comes before the consumer's announcing swap, that swap
        // synchronizes with this one and the consumer's re-check sees this tail; otherwise this
        // swap reads the announcement and wakes it.
        if ring.ctl.wake.0.waiting.swap(0, Ordering::AcqRel) != 0 {
            ring.ctl.wake.0.seq.fetch_add(1, Ordering::SeqCst);
            futex::wake(&ring.ctl.wake.0.seq);
            self.wakes += 1;
            return true;
        }
        false
    }

    /// Stages and publishes one record. `Ok(false)`: full.
    pub fn push(&mut self, ring: &Ring<'_>, record: &[u64]) -> Result<bool, RingError> {
        let ok = self.stage(ring, record)?;
        if ok {
            self.publish(ring);
        }
        Ok(ok)
    }

    /// Wake-ups sent so far.
    pub fn wakes(&self) -> u64 {
        self.wakes
    }
}

/// The consumer's local state of one ring.
#[derive(Debug, Clone, Default)]
pub struct Consumer {
    head: u32,
    sleeps: u64,
}

impl Consumer {
    /// A consumer at index 0 (a fresh ring).
    pub fn new() -> Self {
        Self::default()
    }

    fn available_with(&self, ring: &Ring<'_>, order: Ordering) -> Result<u32, RingError> {
        let tail = ring.ctl.tail.0.load(order);
        let n = tail.wrapping_sub(self.head);
        if n > ring.capacity {
            return Err(RingError::Corrupt { what: "tail", local: self.head, peer: tail, capacity: ring.capacity });
        }
        Ok(n)
    }

    /// Records ready to read (reads and validates the producer's tail).
    pub fn available(&self, ring: &Ring<'_>) -> Result<u32, RingError> {
        self.available_with(ring, Ordering::Acquire)
    }

    /// Copies up to `max` records out, calling `f` with each (a slice of `words` words), then
    /// publishes the new head once. Returns how many were read.
    pub fn drain(
        &mut self,
        ring: &Ring<'_>,
        max: u32,
        buf: &mut [u64],
        mut f: impl FnMut(&[u64]),
    ) -> Result<u32, RingError> {
        if buf.len() != ring.words {
            return Err(RingError::Width { got: buf.len(), want: ring.words });
        }
        let n = self.available(ring)?.min(max);
        for _ in 0..n {
            for (b, slot) in buf.iter_mut().zip(ring.slot(self.head)) {
                *b = slot.load(Ordering::Relaxed);
            }
            self.head = self.head.wrapping_add(1);
            f(buf);
        }
        if n > 0 {
            ring.ctl.head.0.store(self.head, Ordering::Release);
        }
        Ok(n)
    }

    /// First half of going to sleep: announces it and returns the futex value to wait on, or
    /// `None` if records arrived meanwhile (then the announcement is withdrawn). After a
    /// `Some`, sleep on [`Ring::wake_word`] and call [`Consumer::end_sleep`].
    pub fn begin_sleep(&mut self, ring: &Ring<'_>) -> Result<Option<u32>, RingError> {
        // The futex value is read *before* the announcement: a wake-up answering this
        // announcement bumps it afterwards, so the wait cannot sleep on a value already bumped.
        // (Reading it after the announcement loses a wake-up when the producer answers the
        // announcement with data the consumer had already seen: the loom model found that.)
        let seq = ring.ctl.wake.0.seq.load(Ordering::Acquire);
        ring.ctl.wake.0.waiting.swap(1, Ordering::AcqRel);
        if self.available_with(ring, Ordering::Acquire)? > 0 {
            ring.ctl.wake.0.waiting.swap(0, Ordering::AcqRel);
            return Ok(None);
        }
        self.sleeps += 1;
        Ok(Some(seq))
    }

    /// Second half: withdraws the announcement (the producer may have done so already).
    pub fn end_sleep(&mut self, ring: &Ring<'_>) {
        ring.ctl.wake.0.waiting.swap(0, Ordering::AcqRel);
    }

    /// Waits until a record is available or `timeout` passes. Returns whether one is available.
    pub fn wait(&mut self, ring: &Ring<'_>, timeout: Duration) -> Result<bool, RingError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.available(ring)? > 0 {
                return Ok(true);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                return Ok(false);
            };
            if let Some(seq) = self.begin_sleep(ring)? {
                futex::wait(&ring.ctl.wake.0.seq, seq, left);
                self.end_sleep(ring);
            }
        }
    }

    /// Times this consumer went to sleep.
    pub fn sleeps(&self) -> u64 {
        self.sleeps
    }
}

impl Ring<'_> {
    /// The control block (diagnostics and fault injection).
    pub fn ctl(&self) -> &RingCtl {
        self.ctl
    }

    /// The futex word a sleeping consumer waits on (for multi-ring waits).
    pub fn wake_word(&self) -> &AtomicU32 {
        &self.ctl.wake.0.seq
    }
}

// ---- lease view ----------------------------------------------------------------------------

/// The client's read-only picture of its leases: one `u32` per pool node (a
/// [`super::wire::LeaseState`]), under a sequence lock written by the daemon only.
#[derive(Debug, Clone, Copy)]
pub struct LeaseView<'a> {
    seq: &'a AtomicU32,
    entries: &'a [AtomicU32],
}

/// Tries a reader makes before reporting [`RingError::ViewBusy`].
pub const VIEW_READ_TRIES: u32 = 1000;

impl<'a> LeaseView<'a> {
    /// A view over a sequence word and one entry per node.
    pub fn new(seq: &'a AtomicU32, entries: &'a [AtomicU32]) -> Self {
        LeaseView { seq, entries }
    }
    /// Nodes covered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether it covers no node.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Writer: replaces every entry (`states.len()` must equal [`LeaseView::len`]). Returns the
    /// new epoch.
    pub fn publish(&self, states: &[u32]) -> u32 {
        let s = self.seq.load(Ordering::Relaxed);
        let odd = s.wrapping_add(1) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        fence(Ordering::Release);
        for (e, &v) in self.entries.iter().zip(states) {
            e.store(v, Ordering::Relaxed);
        }
        let even = odd.wrapping_add(1);
        self.seq.store(even, Ordering::Release);
        even / 2
    }
    /// Reader: a consistent copy of every entry into `out`, and its epoch.
    pub fn read(&self, out: &mut Vec<u32>) -> Result<u32, RingError> {
        for _ in 0..VIEW_READ_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            out.clear();
            out.extend(self.entries.iter().map(|e| e.load(Ordering::Relaxed)));
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return Ok(s1 / 2);
            }
        }
        Err(RingError::ViewBusy(VIEW_READ_TRIES))
    }
}

// ---- the shared region (memfd) -------------------------------------------------------------

#[cfg(not(loom))]
pub use region::{Layout, SharedRegion, HEADER_WORDS, MAX_CAPACITY, MAX_NODES, REGION_MAGIC};

#[cfg(not(loom))]
mod region {
    use std::fs::File;
    use std::os::fd::OwnedFd;

    use memmap2::MmapMut;
    use rustix::fs::{MemfdFlags, SealFlags};

    use super::{AtomicU32, AtomicU64, LeaseView, Ordering, Ring, RingCtl, RingError, RING_CTL_BYTES};

    /// `"VITAMIN1"` little-endian: the first header word.
    pub const REGION_MAGIC: u64 = u64::from_le_bytes(*b"VITAMIN1");
    /// Header words (see [`Layout`] for their meaning).
    pub const HEADER_WORDS: usize = 16;
    /// Most nodes a lease view covers (a 512-unit device split into 512 leaves has 2043).
    pub const MAX_NODES: usize = 4096;
    /// Largest ring capacity.
    pub const MAX_CAPACITY: u32 = 1 << 16;

    const PAGE: usize = 4096;

    // Header word indices. Words 0..=10 are written once by the daemon before the region is
    // shared; 11.. are live.
    const H_MAGIC: usize = 0;
    const H_VERSION: usize = 1;
    const H_LEN: usize = 2;
    const H_NODES: usize = 3;
    const H_UP: usize = 4; // capacity | words << 32
    const H_DOWN: usize = 5;
    const H_UP_CTL: usize = 6;
    const H_DOWN_CTL: usize = 7;
    const H_UP_SLOTS: usize = 8;
    const H_DOWN_SLOTS: usize = 9;
    const H_VIEW: usize = 10;
    /// Daemon heartbeat: CLOCK_MONOTONIC ns of its last loop turn.
    pub(crate) const H_HEARTBEAT: usize = 11;
    /// 0 connected; otherwise a disconnect reason code ([`super::super::wire::Disconnect`]).
    pub(crate) const H_STATE: usize = 12;
    /// Daemon-wide notices ([`super::super::NOTICE_CONCURRENCY_FAULT`], ...), 0: none.
    pub(crate) const H_NOTICE: usize = 13;
    /// Since when (CLOCK_MONOTONIC ns) a latency-critical client of the client's device has had
    /// work outstanding, while the daemon's policy asks best-effort clients to hold their shared
    /// whole-device launches for it ([`crate::policy::Policy::guards_latency_clients`]); 0: no
    /// such guard.
    pub(crate) const H_GUARD: usize = 14;

    /// Where everything lives in a client's region. Computed by the daemon; the client
    /// re-derives it from the header and checks it against the file size.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Layout {
        /// Pool nodes (lease view entries).
        pub nodes: usize,
        /// Up ring (client -> daemon) slots.
        pub up_capacity: u32,
        /// Words per up record.
        pub up_words: usize,
        /// Down ring (daemon -> client) slots.
        pub down_capacity: u32,
        /// Words per down record.
        pub down_words: usize,
        /// Byte offsets.
        pub up_ctl: usize,
        /// Byte offset of the down ring's control block.
        pub down_ctl: usize,
        /// Byte offset of the lease view (a padded sequence word, then one `u32` per node).
        pub view: usize,
        /// Byte offset of the up slots.
        pub up_slots: usize,
        /// Byte offset of the down slots.
        pub down_slots: usize,
        /// Total bytes (page multiple).
        pub len: usize,
    }

    fn round_up(x: usize, to: usize) -> usize {
        x.div_ceil(to) * to
    }

    impl Layout {
        /// Lays out a region.
        pub fn new(
            nodes: usize,
            up_capacity: u32,
            up_words: usize,
            down_capacity: u32,
            down_words: usize,
        ) -> Result<Layout, RingError> {
            let cap_ok = |c: u32| c.is_power_of_two() && c <= MAX_CAPACITY;
            if nodes == 0 || nodes > MAX_NODES || !cap_ok(up_capacity) || !cap_ok(down_capacity) {
                return Err(RingError::Layout(format!(
                    "nodes {nodes} (1..={MAX_NODES}), capacities {up_capacity}/{down_capacity} (powers of two <= {MAX_CAPACITY})"
                )));
            }
            if !(1..=64).contains(&up_words) || !(1..=64).contains(&down_words) {
                return Err(RingError::Layout(format!("record widths {up_words}/{down_words} words (1..=64)")));
            }
            let up_ctl = PAGE;
            let down_ctl = up_ctl + round_up(RING_CTL_BYTES, 128);
            let view = down_ctl + round_up(RING_CTL_BYTES, 128);
            let up_slots = round_up(view + 128 + 4 * nodes, PAGE);
            let down_slots = round_up(up_slots + up_capacity as usize * up_words * 8, PAGE);
            let len = round_up(down_slots + down_capacity as usize * down_words * 8, PAGE);
            Ok(Layout {
                nodes,
                up_capacity,
                up_words,
                down_capacity,
                down_words,
                up_ctl,
                down_ctl,
                view,
                up_slots,
                down_slots,
                len,
            })
        }
    }

    /// A mapped client region: the daemon's (created, sealed) or the client's (received).
    #[derive(Debug)]
    pub struct SharedRegion {
        /// Base of the mapping, taken once from `map.as_mut_ptr()` so that writes through the
        /// atomics derived from it have write provenance.
        base: *mut u8,
        map: MmapMut,
        layout: Layout,
        /// The memfd itself, kept open for the region's life (diagnostics: it shows in
        /// `/proc/<pid>/fd` as `memfd:vitamin-client`).
        _fd: OwnedFd,
    }

    fn os(call: &'static str) -> impl FnOnce(rustix::io::Errno) -> RingError {
        move |e| RingError::Os { call, err: e.to_string() }
    }

    // SAFETY: `base` points into the mapping this value owns (it moves with it and is unmapped
    // only when it drops), and every access through it is atomic: moving the owner to another
    // thread, or sharing it, cannot create a data race.
    unsafe impl Send for SharedRegion {}
    // SAFETY: as for Send: shared access only hands out references to atomics.
    unsafe impl Sync for SharedRegion {}

    impl SharedRegion {
        /// Daemon side: creates the memfd, sizes it, seals it (shrink, grow, seal), maps it and
        /// writes the header. Returns the region and the descriptor to pass to the client.
        pub fn create(layout: Layout, version: u32) -> Result<(SharedRegion, OwnedFd), RingError> {
            let fd = rustix::fs::memfd_create("vitamin-client", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .map_err(os("memfd_create"))?;
            rustix::fs::ftruncate(&fd, layout.len as u64).map_err(os("ftruncate"))?;
            rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
                .map_err(os("fcntl(F_ADD_SEALS)"))?;
            let region = Self::map(&fd, layout)?;
            let h = region.header();
            let pack = |c: u32, w: usize| u64::from(c) | (w as u64) << 32;
            let vals = [
                (H_MAGIC, REGION_MAGIC),
                (H_VERSION, u64::from(version)),
                (H_LEN, layout.len as u64),
                (H_NODES, layout.nodes as u64),
                (H_UP, pack(layout.up_capacity, layout.up_words)),
                (H_DOWN, pack(layout.down_capacity, layout.down_words)),
                (H_UP_CTL, layout.up_ctl as u64),
                (H_DOWN_CTL, layout.down_ctl as u64),
                (H_UP_SLOTS, layout.up_slots as u64),
                (H_DOWN_SLOTS, layout.down_slots as u64),
                (H_VIEW, layout.view as u64),
            ];
            for (i, v) in vals {
                h[i].store(v, Ordering::Relaxed);
            }
            Ok((region, fd))
        }

        /// Client side: maps a received descriptor after checking that it is sealed against
        /// shrinking, that the header is ours, of `version`, and consistent with the file size.
        pub fn open(fd: OwnedFd, version: u32) -> Result<SharedRegion, RingError> {
            let seals = rustix::fs::fcntl_get_seals(&fd).map_err(os("fcntl(F_GET_SEALS)"))?;
            if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
                return Err(RingError::Layout("the region is not sealed against resizing".into()));
            }
            let size = rustix::fs::fstat(&fd).map_err(os("fstat"))?.st_size as usize;
            if size < PAGE {
                return Err(RingError::Layout(format!("region of {size} bytes is smaller than its header")));
            }
            // Map the header page alone first to read the layout.
            let head = Self::map_len(&fd, PAGE)?;
            let h = head.header();
            let word = |i: usize| h[i].load(Ordering::Relaxed);
            if word(H_MAGIC) != REGION_MAGIC {
                return Err(RingError::Layout("bad magic: not a vitamin client region".into()));
            }
            if word(H_VERSION) != u64::from(version) {
                return Err(RingError::Layout(format!(
                    "region version {} but this client speaks {version}",
                    word(H_VERSION)
                )));
            }
            let unpack = |v: u64| (v as u32, (v >> 32) as usize);
            let (upc, upw) = unpack(word(H_UP));
            let (dnc, dnw) = unpack(word(H_DOWN));
            let layout = Layout::new(word(H_NODES) as usize, upc, upw, dnc, dnw)?;
            let offsets = [
                (H_LEN, layout.len),
                (H_UP_CTL, layout.up_ctl),
                (H_DOWN_CTL, layout.down_ctl),
                (H_UP_SLOTS, layout.up_slots),
                (H_DOWN_SLOTS, layout.down_slots),
                (H_VIEW, layout.view),
            ];
            if offsets.iter().any(|&(i, v)| word(i) != v as u64) || layout.len != size {
                return Err(RingError::Layout(format!(
                    "header does not match the layout {layout:?} (file {size} bytes)"
                )));
            }
            drop(head);
            Self::map(&fd, layout)
        }

        fn map_len(fd: &OwnedFd, len: usize) -> Result<SharedRegion, RingError> {
            let layout = Layout {
                nodes: 0,
                up_capacity: 0,
                up_words: 0,
                down_capacity: 0,
                down_words: 0,
                up_ctl: 0,
                down_ctl: 0,
                view: 0,
                up_slots: 0,
                down_slots: 0,
                len,
            };
            Self::map_raw(fd, layout)
        }

        fn map(fd: &OwnedFd, layout: Layout) -> Result<SharedRegion, RingError> {
            let size = rustix::fs::fstat(fd).map_err(os("fstat"))?.st_size as usize;
            if size != layout.len {
                return Err(RingError::Layout(format!("file is {size} bytes, layout needs {}", layout.len)));
            }
            Self::map_raw(fd, layout)
        }

        fn map_raw(fd: &OwnedFd, layout: Layout) -> Result<SharedRegion, RingError> {
            let file = File::from(fd.try_clone().map_err(|e| RingError::Os { call: "dup", err: e.to_string() })?);
            // SAFETY: the file is a memfd sealed against shrinking (checked by `open`, done by
            // `create`), so the mapped pages stay backed for the mapping's life and no access can
            // fault with SIGBUS. Another process writes the same pages concurrently; every access
            // through this mapping goes through atomics (`words`), so that is not a data race.
            let mut map = unsafe { memmap2::MmapOptions::new().len(layout.len).map_mut(&file) }
                .map_err(|e| RingError::Os { call: "mmap", err: e.to_string() })?;
            let base = map.as_mut_ptr();
            Ok(SharedRegion {
                base,
                map,
                layout,
                _fd: fd.try_clone().map_err(|e| RingError::Os { call: "dup", err: e.to_string() })?,
            })
        }

        /// The layout.
        pub fn layout(&self) -> &Layout {
            &self.layout
        }

        /// `n` 64-bit atomics at byte offset `off`.
        fn words(&self, off: usize, n: usize) -> &[AtomicU64] {
            assert!(off & 7 == 0 && off + n * 8 <= self.map.len(), "region access {off}+{n} words out of bounds");
            // SAFETY: in bounds (asserted) and 8-aligned (the map is page-aligned, `off` is a
            // multiple of 8); `AtomicU64` has the size and alignment of `u64`, and any bit pattern
            // is a valid value. Shared references to atomics allow concurrent writes by the peer.
            unsafe { std::slice::from_raw_parts(self.base.add(off).cast::<AtomicU64>(), n) }
        }

        /// `n` 32-bit atomics at byte offset `off`.
        fn words32(&self, off: usize, n: usize) -> &[AtomicU32] {
            assert!(off & 3 == 0 && off + n * 4 <= self.map.len(), "region access {off}+{n} words out of bounds");
            // SAFETY: as in `words`, for 4-byte atomics at a 4-aligned offset.
            unsafe { std::slice::from_raw_parts(self.base.add(off).cast::<AtomicU32>(), n) }
        }

        fn ctl(&self, off: usize) -> &RingCtl {
            assert!(off & (std::mem::align_of::<RingCtl>() - 1) == 0 && off + RING_CTL_BYTES <= self.map.len());
            // SAFETY: in bounds and aligned (asserted); RingCtl is repr(C) and made only of
            // atomics (and padding), valid for any bit pattern, shared by reference.
            unsafe { &*self.base.add(off).cast::<RingCtl>() }
        }

        pub(crate) fn header(&self) -> &[AtomicU64] {
            self.words(0, HEADER_WORDS)
        }

        /// The up ring (client -> daemon).
        pub fn up(&self) -> Ring<'_> {
            let l = &self.layout;
            Ring::new(
                self.ctl(l.up_ctl),
                self.words(l.up_slots, l.up_capacity as usize * l.up_words),
                l.up_capacity,
                l.up_words,
            )
            .expect("layout validated")
        }

        /// The down ring (daemon -> client).
        pub fn down(&self) -> Ring<'_> {
            let l = &self.layout;
            Ring::new(
                self.ctl(l.down_ctl),
                self.words(l.down_slots, l.down_capacity as usize * l.down_words),
                l.down_capacity,
                l.down_words,
            )
            .expect("layout validated")
        }

        /// The lease view.
        pub fn view(&self) -> LeaseView<'_> {
            let l = &self.layout;
            LeaseView::new(&self.words32(l.view, 1)[0], self.words32(l.view + 128, l.nodes))
        }

        /// Daemon: stamps the heartbeat.
        pub fn set_heartbeat(&self, now_ns: u64) {
            self.header()[H_HEARTBEAT].store(now_ns, Ordering::Relaxed);
        }
        /// The last heartbeat stamped.
        pub fn heartbeat(&self) -> u64 {
            self.header()[H_HEARTBEAT].load(Ordering::Relaxed)
        }
        /// Daemon: records why the client is being disconnected (0: connected).
        pub fn set_state(&self, code: u64) {
            self.header()[H_STATE].store(code, Ordering::Release);
        }
        /// The disconnect reason code (0: connected).
        pub fn state(&self) -> u64 {
            self.header()[H_STATE].load(Ordering::Acquire)
        }
        /// Daemon: publishes the daemon-wide notices (a bit set).
        pub fn set_notice(&self, bits: u64) {
            self.header()[H_NOTICE].store(bits, Ordering::Release);
        }
        /// The daemon-wide notices.
        pub fn notice(&self) -> u64 {
            self.header()[H_NOTICE].load(Ordering::Acquire)
        }
        /// Daemon: publishes the guard word (see `H_GUARD`; 0: none).
        pub fn set_guard(&self, since_ns: u64) {
            self.header()[H_GUARD].store(since_ns, Ordering::Release);
        }
        /// The guard word: since when a latency-critical client of this device has been busy, 0
        /// while none is (or the policy asks for no guard).
        pub fn guard(&self) -> u64 {
            self.header()[H_GUARD].load(Ordering::Acquire)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn heap_ring(cap: u32, words: usize) -> (Box<RingCtl>, Vec<AtomicU64>) {
        (Box::default(), (0..cap as usize * words).map(|_| AtomicU64::new(0)).collect())
    }

    #[test]
    fn fifo_wraps_and_batches() {
        let (ctl, slots) = heap_ring(4, 2);
        let ring = Ring::new(&ctl, &slots, 4, 2).unwrap();
        let (mut p, mut c) = (Producer::new(), Consumer::new());
        let mut buf = [0u64; 2];
        let mut got = Vec::new();
        for round in 0..10u64 {
            for i in 0..3 {
                assert!(p.stage(&ring, &[round, i]).unwrap());
            }
            p.publish(&ring);
            assert_eq!(c.drain(&ring, 2, &mut buf, |r| got.push((r[0], r[1]))).unwrap(), 2);
            assert_eq!(c.drain(&ring, 8, &mut buf, |r| got.push((r[0], r[1]))).unwrap(), 1);
        }
        let want: Vec<_> = (0..10).flat_map(|r| (0..3).map(move |i| (r, i))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn full_ring_refuses_and_recovers() {
        let (ctl, slots) = heap_ring(2, 1);
        let ring = Ring::new(&ctl, &slots, 2, 1).unwrap();
        let (mut p, mut c) = (Producer::new(), Consumer::new());
        assert!(p.push(&ring, &[1]).unwrap());
        assert!(p.push(&ring, &[2]).unwrap());
        assert!(!p.push(&ring, &[3]).unwrap(), "a full ring refuses");
        let mut buf = [0];
        assert_eq!(c.drain(&ring, 1, &mut buf, |_| ()).unwrap(), 1);
        assert!(p.push(&ring, &[3]).unwrap());
        assert_eq!(p.push(&ring, &[1, 2]), Err(RingError::Width { got: 2, want: 1 }));
    }

    #[test]
    fn hostile_indices_are_errors_not_accesses() {
        let (ctl, slots) = heap_ring(8, 1);
        let ring = Ring::new(&ctl, &slots, 8, 1).unwrap();
        let mut c = Consumer::new();
        ctl.tail.0.store(9, Ordering::SeqCst); // more than capacity outstanding
        assert!(matches!(c.available(&ring), Err(RingError::Corrupt { what: "tail", .. })));
        ctl.tail.0.store(u32::MAX, Ordering::SeqCst); // "behind" the head
        let mut buf = [0];
        assert!(matches!(c.drain(&ring, 1, &mut buf, |_| ()), Err(RingError::Corrupt { .. })));
        let mut p = Producer::new();
        ctl.head.0.store(3, Ordering::SeqCst); // consumer claims to be ahead of us
        assert!(matches!(p.free(&ring), Err(RingError::Corrupt { what: "head", .. })));
    }

    #[test]
    fn wait_times_out_on_an_empty_ring_and_wakes_only_a_sleeper() {
        let (ctl, slots) = heap_ring(4, 1);
        let ring = Ring::new(&ctl, &slots, 4, 1).unwrap();
        let (mut p, mut c) = (Producer::new(), Consumer::new());
        assert!(!c.wait(&ring, Duration::from_millis(2)).unwrap());
        // The consumer went back to "awake": a publish now needs no wake-up.
        assert!(!p.publish(&ring));
        assert!(c.begin_sleep(&ring).unwrap().is_some());
        assert!(p.push(&ring, &[7]).unwrap());
        assert_eq!(p.wakes(), 1, "publishing to a sleeping consumer wakes it once");
        c.end_sleep(&ring);
        assert!(c.wait(&ring, Duration::from_millis(2)).unwrap());
    }

    #[test]
    fn lease_view_round_trips() {
        let seq = AtomicU32::new(0);
        let entries: Vec<AtomicU32> = (0..5).map(|_| AtomicU32::new(0)).collect();
        let v = LeaseView::new(&seq, &entries);
        let e1 = v.publish(&[1, 0, 2, 0, 3]);
        let mut out = Vec::new();
        assert_eq!(v.read(&mut out).unwrap(), e1);
        assert_eq!(out, vec![1, 0, 2, 0, 3]);
        let e2 = v.publish(&[0; 5]);
        assert_eq!(e2, e1 + 1);
        seq.store(7, Ordering::SeqCst); // a writer that never finishes
        assert_eq!(v.read(&mut out), Err(RingError::ViewBusy(VIEW_READ_TRIES)));
    }

    #[test]
    fn region_is_sealed_and_reopens() {
        let layout = Layout::new(59, 256, 9, 256, 4).unwrap();
        let (region, fd) = SharedRegion::create(layout, 1).unwrap();
        assert_eq!(rustix::fs::ftruncate(&fd, 4096), Err(rustix::io::Errno::PERM), "shrinking is sealed");
        assert_eq!(rustix::fs::ftruncate(&fd, layout.len as u64 * 2), Err(rustix::io::Errno::PERM));
        let client = SharedRegion::open(fd.try_clone().unwrap(), 1).unwrap();
        assert_eq!(client.layout(), region.layout());
        assert!(SharedRegion::open(fd, 2).is_err(), "a version mismatch is refused");
        let (mut p, mut c) = (Producer::new(), Consumer::new());
        let w: Vec<u64> = (0..9).collect();
        assert!(p.push(&client.up(), &w).unwrap());
        let mut buf = [0u64; 9];
        let mut got = Vec::new();
        c.drain(&region.up(), 8, &mut buf, |r| got.extend_from_slice(r)).unwrap();
        assert_eq!(got, w);
        region.view().publish(&[1; 59]);
        let mut out = Vec::new();
        client.view().read(&mut out).unwrap();
        assert_eq!(out, vec![1; 59]);
    }

    #[test]
    fn stress_two_threads_in_order() {
        const N: u64 = 200_000;
        let (ctl, slots) = heap_ring(64, 2);
        std::thread::scope(|s| {
            let ring = Ring::new(&ctl, &slots, 64, 2).unwrap();
            s.spawn(move || {
                let mut p = Producer::new();
                let mut i = 0;
                let give_up = Instant::now() + Duration::from_secs(60);
                while i < N {
                    assert!(Instant::now() < give_up, "producer watchdog");
                    let mut staged = 0;
                    while i < N && staged < 7 && p.stage(&ring, &[i, !i]).unwrap() {
                        i += 1;
                        staged += 1;
                    }
                    p.publish(&ring);
                    if staged == 0 {
                        std::thread::yield_now();
                    }
                }
            });
            let mut c = Consumer::new();
            let mut next = 0;
            let mut buf = [0u64; 2];
            let give_up = Instant::now() + Duration::from_secs(60);
            while next < N {
                assert!(Instant::now() < give_up, "consumer watchdog");
                c.wait(&ring, Duration::from_millis(100)).unwrap();
                c.drain(&ring, 16, &mut buf, |r| {
                    assert_eq!((r[0], r[1]), (next, !next), "records arrive intact and in order");
                    next += 1;
                })
                .unwrap();
            }
        });
    }
}

/// The loom model of the sleep/wake protocol: a consumer that sleeps on an empty ring is always
/// woken by the producer's next publish (loom reports a deadlock if a wake-up can be lost).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    fn model_ring(items: u64, cap: u32, batch: u64) {
        // Bounded preemptions (as tokio's loom tests do in CI): every schedule with at most 3
        // preemptions is explored.
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let ctl: &'static RingCtl = Box::leak(Box::default());
            let slots: &'static [AtomicU64] =
                Box::leak((0..cap as usize).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice());
            let producer = loom::thread::spawn(move || {
                let ring = Ring::new(ctl, slots, cap, 1).unwrap();
                let mut p = Producer::new();
                let mut i = 0;
                while i < items {
                    let mut staged = 0;
                    while i < items && staged < batch && p.stage(&ring, &[i + 1]).unwrap() {
                        i += 1;
                        staged += 1;
                    }
                    p.publish(&ring);
                    if staged == 0 {
                        loom::thread::yield_now();
                    }
                }
            });
            let ring = Ring::new(ctl, slots, cap, 1).unwrap();
            let mut c = Consumer::new();
            let mut next = 1;
            let mut buf = [0u64; 1];
            while next <= items {
                // Sleep with no usable timeout: only a wake-up can end it.
                if c.available(&ring).unwrap() == 0 {
                    if let Some(seq) = c.begin_sleep(&ring).unwrap() {
                        futex::wait(ring.wake_word(), seq, Duration::from_secs(3600));
                        c.end_sleep(&ring);
                    }
                }
                c.drain(&ring, 4, &mut buf, |r| {
                    assert_eq!(r[0], next);
                    next += 1;
                })
                .unwrap();
            }
            producer.join().unwrap();
        });
    }

    #[test]
    fn no_lost_wakeup_one_by_one() {
        model_ring(2, 2, 1);
    }

    #[test]
    fn no_lost_wakeup_full_ring_batches() {
        model_ring(3, 2, 2);
    }
}
