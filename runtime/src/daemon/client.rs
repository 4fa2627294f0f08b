//! The client side of a daemon session: connect, hello, map the received region, push ready
//! records / completions / continuations / hints, pop bindings, read the lease view.
//!
//! ## Safe mode
//! When the daemon goes away (its socket hangs up, it wrote a disconnect reason, or its
//! heartbeat is older than [`HEARTBEAT_STALE`]), the client enters **safe mode**: it receives no
//! bindings, keeps the leases it holds (the nodes where it has outstanding ops), and may only
//! continue work on those ([`DaemonClient::may_continue`]): no widening, no new nodes. The
//! executor decides what to do with ops that need a binding (wait, or fall back in-process).
//! [`DaemonClient::reconnect`] re-registers, reporting the held leases and their outstanding
//! ops; the daemon adopts those that conflict with nobody ([`super::control::Welcome::adopted`]).

use std::collections::{BTreeMap, HashSet};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use vitamin_hal::Topology;

use super::control::{HeldLease, Hello, Reply, Request, Welcome};
use super::ring::{Consumer, Producer, SharedRegion};
use super::transport;
use super::wire::{self, HintRecord, LeaseState, ReadyRecord, Up, WireError, DOWN_WORDS, PROTOCOL_VERSION};
use super::DaemonError;
use crate::policy::ClientClass;

/// A heartbeat older than this means the daemon is stalled or gone.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(2);

/// How to register.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Daemon socket.
    pub socket: PathBuf,
    /// Display name.
    pub name: String,
    /// Device index.
    pub device: u32,
    /// The device's topology as this process probed it.
    pub topology: Topology,
    /// Class.
    pub class: ClientClass,
    /// Lanes per node.
    pub lanes: u16,
    /// Deadline of the connect/hello exchange.
    pub timeout: Duration,
}

/// A binding received from the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Op id.
    pub op: u64,
    /// Node.
    pub node: u16,
    /// Lane.
    pub lane: u16,
    /// Lease-view epoch including its lease.
    pub epoch: u32,
}

/// One session with the daemon.
#[derive(Debug)]
pub struct DaemonClient {
    opts: ConnectOptions,
    sock: UnixStream,
    region: SharedRegion,
    welcome: Welcome,
    up: Producer,
    down: Consumer,
    /// Ready ops sent and not yet bound.
    pending: HashSet<u64>,
    /// Outstanding ops: op -> (node, lane).
    outstanding: BTreeMap<u64, (u16, u16)>,
    safe: Option<String>,
    /// The daemon-wide notices last seen (logged when they change).
    notice: u64,
}

fn connect_once(
    opts: &ConnectOptions,
    held: Vec<HeldLease>,
) -> Result<(UnixStream, SharedRegion, Welcome), DaemonError> {
    let sock = transport::connect(&opts.socket, opts.timeout)?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        pid: std::process::id(),
        name: opts.name.clone(),
        device: opts.device,
        topology: opts.topology.clone(),
        class: opts.class,
        lanes: opts.lanes,
        held,
    };
    // A daemon that refuses the peer's credentials answers before reading anything and closes:
    // the hello may then fail to send, but the refusal is still there to read.
    let sent = transport::write_frame(&sock, &Request::Hello(Box::new(hello)));
    let (reply, fd) = match transport::read_frame_with_fd::<Reply>(&sock) {
        Ok(r) => r,
        Err(e) => return Err(sent.err().unwrap_or(e)),
    };
    let welcome = match reply {
        Reply::Welcome(w) => *w,
        Reply::Refused { reason } => return Err(DaemonError::Refused(reason)),
        other => return Err(DaemonError::Protocol(format!("unexpected reply to hello: {other:?}"))),
    };
    if welcome.version != PROTOCOL_VERSION {
        return Err(DaemonError::Protocol(format!("daemon answered with protocol version {}", welcome.version)));
    }
    let fd = fd.ok_or_else(|| DaemonError::Protocol("the welcome carried no shared-memory descriptor".into()))?;
    let region = SharedRegion::open(fd, PROTOCOL_VERSION)?;
    if region.layout().nodes != usize::from(welcome.nodes) {
        return Err(DaemonError::Protocol("the region's node count differs from the welcome's".into()));
    }
    Ok((sock, region, welcome))
}

impl DaemonClient {
    /// Connects and registers.
    pub fn connect(opts: ConnectOptions) -> Result<DaemonClient, DaemonError> {
        let (sock, region, welcome) = connect_once(&opts, Vec::new())?;
        Ok(DaemonClient {
            opts,
            sock,
            region,
            welcome,
            up: Producer::new(),
            down: Consumer::new(),
            pending: HashSet::new(),
            outstanding: BTreeMap::new(),
            safe: None,
            notice: 0,
        })
    }

    /// The class this client registered with.
    pub fn class(&self) -> ClientClass {
        self.opts.class
    }

    /// The daemon's welcome (client id, node count, limits, policy).
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Whether the client runs in safe mode, and why.
    pub fn safe_mode(&self) -> Option<&str> {
        self.safe.as_deref()
    }

    /// Checks the daemon: socket hang-up, disconnect reason, heartbeat. Enters safe mode when
    /// it is gone. Returns whether it is usable.
    pub fn check_daemon(&mut self) -> bool {
        if self.safe.is_some() {
            return false;
        }
        let notice = self.region.notice();
        if notice != self.notice {
            self.notice = notice;
            if notice != 0 {
                tracing::error!("the vitamin daemon reports: {}", super::notice_text(notice));
            }
        }
        let why = match self.region.state() {
            0 => None,
            c if c == wire::Disconnect::Protocol as u64 => Some("disconnected: a record failed validation".into()),
            c if c == wire::Disconnect::Flood as u64 => Some("disconnected: too many ready or outstanding ops".into()),
            c if c == wire::Disconnect::Corrupt as u64 => Some("disconnected: a ring index was corrupted".into()),
            c if c == wire::Disconnect::Stalled as u64 => {
                Some("disconnected: bindings were left untaken past the daemon's stall timeout".into())
            }
            _ => Some("the daemon ended the session (shutdown)".into()),
        };
        let why = why.or_else(|| {
            let mut p = [PollFd::new(&self.sock, PollFlags::IN | PollFlags::RDHUP)];
            let hung = matches!(rustix::event::poll(&mut p, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0);
            hung.then(|| "the daemon's socket hung up".to_owned())
        });
        let why = why.or_else(|| {
            let hb = self.region.heartbeat();
            let age = super::now_ns().saturating_sub(hb);
            (hb != 0 && age > HEARTBEAT_STALE.as_nanos() as u64)
                .then(|| format!("the daemon's heartbeat is {} ms old", age / 1_000_000))
        });
        if let Some(w) = why {
            tracing::warn!(reason = %w, held = self.outstanding.len(), "vitamin daemon gone: safe mode (held leases only)");
            self.safe = Some(w);
            return false;
        }
        true
    }

    fn gone(&self) -> DaemonError {
        match &self.safe {
            Some(w) if w.starts_with("disconnected") => DaemonError::Disconnected(w.clone()),
            _ => DaemonError::DaemonGone,
        }
    }

    fn stage(&mut self, up: &Up) -> Result<bool, DaemonError> {
        if self.safe.is_some() {
            return Err(self.gone());
        }
        let ring = self.region.up();
        match self.up.stage(&ring, &up.encode().to_words()) {
            Ok(b) => Ok(b),
            Err(e) => {
                self.safe = Some(format!("disconnected: {e}"));
                Err(e.into())
            }
        }
    }

    /// Stages a ready op (publish with [`DaemonClient::flush`]). `Ok(false)`: the up ring is
    /// full; flush and retry later.
    pub fn ready(&mut self, r: ReadyRecord) -> Result<bool, DaemonError> {
        if self.pending.contains(&r.op) || self.outstanding.contains_key(&r.op) {
            return Err(WireError::DuplicateOp(r.op).into());
        }
        let ok = self.stage(&Up::Ready(r))?;
        if ok {
            self.pending.insert(r.op);
        }
        Ok(ok)
    }

    /// Stages a completion of an outstanding op. `Ok(false)`: the up ring is full; flush and
    /// retry later. In safe mode the op is forgotten locally.
    pub fn complete(&mut self, op: u64, completed_ns: u64) -> Result<bool, DaemonError> {
        self.finish(op, completed_ns, false)
    }

    /// Stages the return of a bound op its node refused (flag `NOT_RUN`: the launch cannot run
    /// unchanged there and comes again as a new ready record); otherwise as
    /// [`DaemonClient::complete`].
    pub fn return_not_run(&mut self, op: u64, at_ns: u64) -> Result<bool, DaemonError> {
        self.finish(op, at_ns, true)
    }

    fn finish(&mut self, op: u64, completed_ns: u64, not_run: bool) -> Result<bool, DaemonError> {
        let Some(&(node, _)) = self.outstanding.get(&op) else { return Err(WireError::UnknownOp(op).into()) };
        if self.safe.is_some() {
            self.outstanding.remove(&op);
            return Ok(true);
        }
        let ok = self.stage(&Up::Completion { op, node, completed_ns, not_run })?;
        if ok {
            self.outstanding.remove(&op);
        }
        Ok(ok)
    }

    /// Whether an op may be continued locally on (node, lane) now: connected, the lease view
    /// says the node is open and an op of ours is outstanding on that lane; in safe mode, an op
    /// of ours is outstanding on that lane (held leases only).
    pub fn may_continue(&self, node: u16, lane: u16) -> bool {
        let on_lane = self.outstanding.values().any(|&p| p == (node, lane));
        if !on_lane {
            return false;
        }
        if self.safe.is_some() {
            return true;
        }
        let mut v = Vec::new();
        self.region.view().read(&mut v).is_ok() && v.get(usize::from(node)) == Some(&(LeaseState::Open as u32))
    }

    /// Records an op this client submitted itself on (node, lane) behind an outstanding op
    /// there (lane continuation) and stages its `Continued` record (none in safe mode).
    /// `graph`: the op is a CUDA graph launch.
    pub fn continued(
        &mut self,
        op: u64,
        node: u16,
        lane: u16,
        submitted_ns: u64,
        graph: bool,
    ) -> Result<bool, DaemonError> {
        if !self.outstanding.values().any(|&p| p == (node, lane)) {
            return Err(WireError::NotContinuable { op, node, lane }.into());
        }
        if self.outstanding.contains_key(&op) || self.pending.contains(&op) {
            return Err(WireError::DuplicateOp(op).into());
        }
        if self.safe.is_none() && !self.stage(&Up::Continued { op, node, lane, submitted_ns, graph })? {
            return Ok(false);
        }
        self.outstanding.insert(op, (node, lane));
        Ok(true)
    }

    /// Whether the lease view shows `node` as this client's and open (false in safe mode or
    /// while the view is being rewritten).
    pub fn holds_open(&self, node: u16, view: &mut Vec<u32>) -> bool {
        self.safe.is_none()
            && self.region.view().read(view).is_ok()
            && view.get(usize::from(node)) == Some(&(LeaseState::Open as u32))
    }

    /// Records a fresh op this client submitted itself on (node, lane) of a node its lease view
    /// shows as its own and open (launch-first) and stages its `Launched` record. `Ok(false)`: the
    /// up ring is full (do not submit now). Not in safe mode.
    /// `graph`: the op is a CUDA graph launch.
    pub fn launched(
        &mut self,
        op: u64,
        node: u16,
        lane: u16,
        submitted_ns: u64,
        graph: bool,
    ) -> Result<bool, DaemonError> {
        if self.outstanding.contains_key(&op) || self.pending.contains(&op) {
            return Err(WireError::DuplicateOp(op).into());
        }
        if !self.stage(&Up::Launched { op, node, lane, submitted_ns, graph })? {
            return Ok(false);
        }
        self.outstanding.insert(op, (node, lane));
        Ok(true)
    }

    /// Stages raw record words as they are (fault injection and foreign encoders: the daemon
    /// validates every record, and a bad one ends this session).
    pub fn stage_raw(&mut self, words: &[u64; wire::UP_WORDS]) -> Result<bool, DaemonError> {
        if self.safe.is_some() {
            return Err(self.gone());
        }
        let ring = self.region.up();
        Ok(self.up.stage(&ring, words)?)
    }

    /// The mapped region (diagnostics and fault injection).
    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    /// Stages a lookahead hint.
    pub fn hint(&mut self, h: HintRecord) -> Result<bool, DaemonError> {
        self.stage(&Up::Hint(h))
    }

    /// Publishes everything staged (one wake-up of the daemon at most, and only if it sleeps).
    pub fn flush(&mut self) {
        if self.safe.is_none() {
            let ring = self.region.up();
            self.up.publish(&ring);
        }
    }

    /// Appends the bindings that arrived to `out`, waiting up to `timeout` for the first.
    /// Returns how many were appended. In safe mode: [`DaemonError::DaemonGone`].
    pub fn bindings(&mut self, out: &mut Vec<Binding>, timeout: Duration) -> Result<usize, DaemonError> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.check_daemon() {
                return Err(self.gone());
            }
            let ring = self.region.down();
            let mut buf = [0u64; DOWN_WORDS];
            let mut got: Vec<[u64; DOWN_WORDS]> = Vec::new();
            self.down.drain(&ring, u32::MAX, &mut buf, |w| {
                let mut r = [0u64; DOWN_WORDS];
                r.copy_from_slice(w);
                got.push(r);
            })?;
            let n = got.len();
            for w in got {
                let r = wire::decode_down(&w, self.welcome.nodes, self.welcome.lanes)?;
                if !self.pending.remove(&r.op) {
                    return Err(WireError::BadDown(format!("binding of op {}, which is not waiting", r.op)).into());
                }
                self.outstanding.insert(r.op, (r.node, r.lane));
                out.push(Binding { op: r.op, node: r.node, lane: r.lane, epoch: r.epoch });
            }
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            // Wake at least every 100 ms to notice a dead daemon.
            self.down.wait(&ring, left.min(Duration::from_millis(100)))?;
        }
    }

    /// The lease view as raw words ([`LeaseState`] values, unchecked), and its epoch.
    pub fn lease_view_raw(&self, out: &mut Vec<u32>) -> Result<u32, DaemonError> {
        Ok(self.region.view().read(out)?)
    }

    /// The lease view: one state per node, and its epoch.
    pub fn lease_view(&self, out: &mut Vec<LeaseState>) -> Result<u32, DaemonError> {
        let mut raw = Vec::new();
        let epoch = self.region.view().read(&mut raw)?;
        out.clear();
        for v in raw {
            out.push(LeaseState::from_u32(v)?);
        }
        Ok(epoch)
    }

    /// Since when (CLOCK_MONOTONIC ns) a latency-critical client of this device has had work
    /// outstanding, when the daemon's policy asks best-effort clients to hold their shared
    /// whole-device launches for it ([`crate::policy::Policy::guards_latency_clients`]); `None`
    /// otherwise. Read from the shared region, no round trip.
    pub fn guard_since(&self) -> Option<u64> {
        Some(self.region.guard()).filter(|&t| t != 0)
    }

    /// The daemon-wide notices ([`super::NOTICE_CONCURRENCY_FAULT`], ...) as last checked.
    pub fn notice(&self) -> u64 {
        self.notice
    }

    /// Ops waiting for a binding.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Outstanding ops (bound or continued, not completed).
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// The leases this client holds by its own account: nodes with outstanding ops.
    pub fn held_leases(&self) -> Vec<HeldLease> {
        let mut by_node: BTreeMap<u16, Vec<(u64, u16)>> = BTreeMap::new();
        for (&op, &(node, lane)) in &self.outstanding {
            by_node.entry(node).or_default().push((op, lane));
        }
        by_node.into_iter().map(|(node, ops)| HeldLease { node, ops }).collect()
    }

    /// Re-registers with a (restarted) daemon, reporting the held leases. Ops that were waiting
    /// for a binding are returned: the caller re-submits them as ready.
    pub fn reconnect(&mut self) -> Result<Vec<u64>, DaemonError> {
        let (sock, region, welcome) = connect_once(&self.opts, self.held_leases())?;
        self.sock = sock;
        self.region = region;
        self.welcome = welcome;
        self.up = Producer::new();
        self.down = Consumer::new();
        self.safe = None;
        Ok(std::mem::take(&mut self.pending).into_iter().collect())
    }

    /// Says goodbye (the daemon frees the leases once the completions it still expects arrive)
    /// and closes the session.
    pub fn goodbye(mut self) -> Result<(), DaemonError> {
        self.flush();
        transport::write_frame(&self.sock, &Request::Goodbye)
    }
}

/// Asks the daemon at `socket` for its status.
pub fn status(socket: &std::path::Path, timeout: Duration) -> Result<super::control::StatusReport, DaemonError> {
    let s = transport::connect(socket, timeout)?;
    transport::write_frame(&s, &Request::Status { version: PROTOCOL_VERSION })?;
    match transport::read_frame::<Reply>(&s)? {
        Reply::Status(st) => Ok(*st),
        Reply::Refused { reason } => Err(DaemonError::Refused(reason)),
        other => Err(DaemonError::Protocol(format!("unexpected reply to status: {other:?}"))),
    }
}

/// Asks the daemon at `socket` to stop.
pub fn stop(socket: &std::path::Path, timeout: Duration) -> Result<(), DaemonError> {
    let s = transport::connect(socket, timeout)?;
    transport::write_frame(&s, &Request::Stop { version: PROTOCOL_VERSION })?;
    match transport::read_frame::<Reply>(&s)? {
        Reply::Stopping => Ok(()),
        Reply::Refused { reason } => Err(DaemonError::Refused(reason)),
        other => Err(DaemonError::Protocol(format!("unexpected reply to stop: {other:?}"))),
    }
}
