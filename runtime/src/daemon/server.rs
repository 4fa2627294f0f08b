//! The daemon process's threads: the **control thread** (socket: credentials, hello, sessions,
//! hang-ups, status, stop), one short-lived **handshake thread** per new connection (so a silent
//! peer delays nobody), the **decision loop** (owns the [`Decider`]; never blocks on a client:
//! it sleeps only in a bounded `futex_waitv` over every client's up-ring word and its own
//! doorbell), and optionally the **metrics endpoint** ([`super::metrics`]).
//!
//! Hang-up handling: the control thread polls every session socket; on hang-up it checks the
//! client's pidfd: if the process has exited its leases are freed at once, otherwise the
//! client departs (its pidfd is watched; it keeps its leases until its outstanding ops
//! complete, it exits, or the grace period passes).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::thread::futex::{Wait, WaitFlags, WaitPtr, WaitvFlags};

use super::control::{Hello, Reply, Request, StatusReport};
use super::decide::{DecideConfig, Decider};
use super::sync::{futex, AtomicU32};
use super::transport::{self, AllowList, PeerCred, IO_TIMEOUT};
use super::wire::PROTOCOL_VERSION;
use super::DaemonError;

/// First sleep of the decision loop while ready ops wait unbound.
const RETRY_MIN: Duration = Duration::from_micros(20);
/// Longest sleep of the decision loop while ready ops wait unbound.
const RETRY_MAX: Duration = Duration::from_millis(1);

/// Everything `vitamin daemon` configures.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Socket path.
    pub socket: PathBuf,
    /// Who may connect.
    pub allow: AllowList,
    /// Decision-loop settings (policy, limits, topology).
    pub decide: DecideConfig,
    /// Longest sleep of the decision loop with nothing to do (heartbeat period).
    pub idle_wait: Duration,
    /// Serve Prometheus metrics here (loopback only).
    pub metrics: Option<std::net::SocketAddr>,
    /// The cross-process concurrency check, as a sentence for status.
    pub concurrency_note: String,
    /// Write the binding timeline here when the daemon stops (Chrome trace JSON, loadable in
    /// Perfetto; `DecideConfig::timeline_spans` bounds it). Devices after the first go to
    /// `FILE.device<index>`.
    pub timeline: Option<PathBuf>,
}

impl DaemonConfig {
    /// Defaults with `socket`.
    pub fn new(socket: PathBuf) -> Self {
        DaemonConfig {
            socket,
            allow: AllowList::default(),
            decide: DecideConfig::default(),
            idle_wait: Duration::from_millis(100),
            metrics: None,
            concurrency_note: "not checked".into(),
            timeline: None,
        }
    }
}

/// Control thread -> decision loop.
enum Event {
    Hello {
        hello: Box<Hello>,
        cred: PeerCred,
        command: String,
        reply: Sender<Result<(super::control::Welcome, OwnedFd), String>>,
    },
    Gone {
        id: u32,
        exited: bool,
        at: Instant,
    },
    Refused,
    Concurrency {
        note: String,
        notice: u64,
    },
}

struct Shared {
    stop: AtomicBool,
    doorbell: AtomicU32,
    status: Mutex<StatusReport>,
    events: Mutex<Sender<Event>>,
    /// Decision loop -> control thread: clients to disconnect.
    kicks: Mutex<Vec<u32>>,
    kick_tx: Mutex<UnixStream>,
}

impl Shared {
    fn ring_doorbell(&self) {
        self.doorbell.fetch_add(1, super::sync::Ordering::SeqCst);
        futex::wake(&self.doorbell);
    }
    fn send(&self, e: Event) {
        if let Ok(tx) = self.events.lock() {
            let _ = tx.send(e);
        }
        self.ring_doorbell();
    }
}

/// A running daemon. Dropping it stops it.
#[derive(Debug)]
pub struct Daemon {
    shared: Arc<SharedHandle>,
    threads: Vec<JoinHandle<()>>,
    socket: PathBuf,
}

struct SharedHandle(Arc<Shared>);

impl std::fmt::Debug for SharedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Daemon {
    /// Binds the socket and starts the threads.
    pub fn start(cfg: DaemonConfig) -> Result<Daemon, DaemonError> {
        if let Some(a) = cfg.metrics {
            if !a.ip().is_loopback() {
                return Err(DaemonError::Config(format!(
                    "metrics address {a} is not a loopback address: the endpoint has no authentication"
                )));
            }
        }
        let mut decider = Decider::new(cfg.decide.clone()).map_err(DaemonError::Config)?;
        // A status request answered before the loop's first turn sees a real report.
        let initial = decider.status(&cfg.socket.display().to_string(), &cfg.concurrency_note);
        let listener = transport::bind_listener(&cfg.socket)?;
        listener.set_nonblocking(true).map_err(|e| DaemonError::Io(e.to_string()))?;
        let (tx, rx) = mpsc::channel();
        let (kick_tx, kick_rx) = UnixStream::pair().map_err(|e| DaemonError::Io(e.to_string()))?;
        kick_tx.set_nonblocking(true).map_err(|e| DaemonError::Io(e.to_string()))?;
        kick_rx.set_nonblocking(true).map_err(|e| DaemonError::Io(e.to_string()))?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            doorbell: AtomicU32::new(0),
            status: Mutex::new(initial),
            events: Mutex::new(tx),
            kicks: Mutex::new(Vec::new()),
            kick_tx: Mutex::new(kick_tx),
        });
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| DaemonError::Io(e.to_string()))
        };
        {
            let (s, c) = (shared.clone(), cfg.clone());
            threads.push(spawn("vitamin-decide", Box::new(move || decision_loop(decider, rx, &s, &c)))?);
        }
        {
            let (s, c) = (shared.clone(), cfg.clone());
            threads.push(spawn("vitamin-control", Box::new(move || control_loop(listener, kick_rx, &s, &c)))?);
        }
        if let Some(addr) = cfg.metrics {
            let l = std::net::TcpListener::bind(addr).map_err(|e| DaemonError::Io(format!("metrics {addr}: {e}")))?;
            let s = shared.clone();
            threads.push(spawn("vitamin-metrics", Box::new(move || metrics_loop(l, &s)))?);
        }
        tracing::info!(socket = %cfg.socket.display(), policy = cfg.decide.policy.name(), "vitamin daemon listening");
        Ok(Daemon { shared: Arc::new(SharedHandle(shared)), threads, socket: cfg.socket })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The latest status snapshot (refreshed by the decision loop at least every 100 ms).
    pub fn status(&self) -> StatusReport {
        self.shared.0.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Replaces the concurrency sentence of the status and publishes notice bits to every
    /// client ([`super::NOTICE_CONCURRENCY_FAULT`], ...): the caller watches the host's
    /// concurrency service (the CLI does, for its vendor).
    pub fn set_concurrency(&self, note: String, notice: u64) {
        if let Ok(tx) = self.shared.0.events.lock() {
            let _ = tx.send(Event::Concurrency { note, notice });
        }
        self.shared.0.ring_doorbell();
    }

    /// Whether a stop was requested (by [`Daemon::request_stop`] or a `stop` request).
    pub fn stop_requested(&self) -> bool {
        self.shared.0.stop.load(Ordering::SeqCst)
    }

    /// Asks every thread to finish.
    pub fn request_stop(&self) {
        self.shared.0.stop.store(true, Ordering::SeqCst);
        self.shared.0.ring_doorbell();
    }

    /// Stops and joins the threads, removes the socket file.
    pub fn shutdown(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        self.request_stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Blocks until a stop is requested, then shuts down.
    pub fn wait(mut self) {
        while !self.stop_requested() && self.threads.iter().all(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.finish();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.finish();
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn decision_loop(mut d: Decider, rx: Receiver<Event>, shared: &Shared, cfg: &DaemonConfig) {
    let socket = cfg.socket.display().to_string();
    let mut concurrency = cfg.concurrency_note.clone();
    let mut last_status = Instant::now() - Duration::from_secs(1);
    let mut retry = RETRY_MIN;
    let mut waiters: Vec<Wait> = Vec::new();
    let mut waitv_works = true;
    loop {
        let bell = shared.doorbell.load(super::sync::Ordering::SeqCst);
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let mut changed = false;
        while let Ok(e) = rx.try_recv() {
            changed = true;
            match e {
                Event::Hello { hello, cred, command, reply } => {
                    let r = d.register(&hello, cred, command);
                    if let Err(why) = &r {
                        d.note_refused_connection();
                        tracing::warn!(pid = cred.pid, uid = cred.uid, reason = %why, "client refused");
                    }
                    let _ = reply.send(r);
                }
                Event::Gone { id, exited, at } => {
                    let had = d.has_client(id);
                    d.client_gone(id, exited);
                    if exited && had {
                        let ns = at.elapsed().as_nanos() as u64;
                        d.note_free_latency(ns);
                        tracing::info!(client = id, free_us = ns / 1000, "client exited; its leases are free");
                    }
                }
                Event::Refused => d.note_refused_connection(),
                Event::Concurrency { note, notice } => {
                    if notice != d.notice() && notice != 0 {
                        tracing::error!(clients = d.client_ids().len(), "{}", super::notice_text(notice));
                    }
                    d.set_notice(notice);
                    concurrency = note;
                }
            }
        }
        let out = d.turn();
        if !out.disconnect.is_empty() || !out.removed.is_empty() {
            changed = true;
            if let Ok(mut k) = shared.kicks.lock() {
                k.extend(out.disconnect.iter().map(|(id, _)| *id).chain(out.removed.iter().copied()));
            }
            if let Ok(mut w) = shared.kick_tx.lock() {
                let _ = w.write(&[1]);
            }
        }
        if changed || last_status.elapsed() >= Duration::from_millis(100) {
            d.set_cpu_ns(thread_cpu_ns());
            let st = d.status(&socket, &concurrency);
            if let Ok(mut s) = shared.status.lock() {
                *s = st;
            }
            last_status = Instant::now();
        }
        if out.progress > 0 || changed {
            retry = RETRY_MIN;
            continue;
        }
        // Ready ops left unbound (declined by the policy, or their nodes leased by others): the
        // next turn may bind them although no record arrives (a lease frees when a completion
        // arrives, but Chaos declines at random and reclaims finish on their own), so sleep
        // briefly, backing off to `RETRY_MAX` while nothing changes.
        let wait = if d.has_ready() {
            let w = retry;
            retry = (retry * 2).min(RETRY_MAX);
            w
        } else {
            retry = RETRY_MIN;
            cfg.idle_wait
        };
        // A drained lease lingers: wake by the time it may be released.
        let wait = if d.lingering() { wait.min(Duration::from_nanos(d.lease_linger_ns().max(50_000))) } else { wait };
        // Nothing to do: sleep until a client's up ring gets a record, the control thread rings
        // the doorbell, or the heartbeat period passes.
        let Some(words) = d.begin_sleep() else { continue };
        waiters.clear();
        let mut w = Wait::new();
        w.val = u64::from(bell);
        w.uaddr = WaitPtr::new(shared.doorbell.as_ptr().cast());
        w.flags = WaitFlags::SIZE_U32;
        waiters.push(w);
        for &(p, v) in &words {
            let mut w = Wait::new();
            w.val = u64::from(v);
            w.uaddr = WaitPtr::new(p.cast_mut().cast());
            w.flags = WaitFlags::SIZE_U32;
            waiters.push(w);
        }
        let ts = rustix::time::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
        // futex_waitv takes at most 128 words (Linux >= 5.16); beyond that, or without it, a
        // short bounded sleep instead.
        if waitv_works && waiters.len() <= 128 {
            // The timeout of futex_waitv is absolute on the given clock.
            let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let mut abs = rustix::time::Timespec { tv_sec: now.tv_sec + ts.tv_sec, tv_nsec: now.tv_nsec + ts.tv_nsec };
            if abs.tv_nsec >= 1_000_000_000 {
                abs.tv_sec += 1;
                abs.tv_nsec -= 1_000_000_000;
            }
            let r = rustix::thread::futex::waitv(
                &waiters,
                WaitvFlags::empty(),
                Some(&abs),
                rustix::time::ClockId::Monotonic,
            );
            if r == Err(rustix::io::Errno::NOSYS) {
                waitv_works = false;
            }
        } else {
            futex::wait(&shared.doorbell, bell, wait.min(Duration::from_millis(1)));
        }
        d.end_sleep();
    }
    // Shutting down: tell every client why, so they enter safe mode at once.
    for id in d.client_ids() {
        d.remove(id);
    }
    if let Some(path) = &cfg.timeline {
        write_timelines(&d, path);
    }
}

/// Writes each device's binding timeline: device 0 to `path`, later ones to `path.device<index>`.
fn write_timelines(d: &Decider, path: &std::path::Path) {
    if d.device_count() == 0 {
        // No client came: an empty trace, so that the file says so.
        let empty = crate::dispatch::Timeline::default();
        match empty.write_chrome_trace(path) {
            Ok(()) => tracing::info!(file = %path.display(), "binding timeline written: no client registered"),
            Err(e) => tracing::error!(file = %path.display(), error = %e, "binding timeline not written"),
        }
        return;
    }
    for di in 0..d.device_count() {
        let Some((t, dropped)) = d.timeline(di) else { continue };
        let file = if di == 0 { path.to_path_buf() } else { PathBuf::from(format!("{}.device{di}", path.display())) };
        match t.write_chrome_trace(&file) {
            Ok(()) => tracing::info!(
                file = %file.display(),
                spans = t.spans.len(),
                dropped,
                "binding timeline written (open it in Perfetto)"
            ),
            Err(e) => tracing::error!(file = %file.display(), error = %e, "binding timeline not written"),
        }
    }
}

struct Session {
    id: u32,
    /// The session socket; `None` once it hung up (then only the pidfd is watched).
    stream: Option<UnixStream>,
    pidfd: Option<OwnedFd>,
    /// When its socket hung up (the start of the hang-up-to-free measurement).
    hung_at: Option<Instant>,
}

fn pid_exited(pidfd: Option<&OwnedFd>) -> bool {
    let Some(fd) = pidfd else { return false };
    let mut p = [PollFd::new(fd, PollFlags::IN)];
    matches!(rustix::event::poll(&mut p, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
}

fn drain_wake(s: &UnixStream) {
    let mut b = [0u8; 64];
    while std::io::Read::read(&mut &*s, &mut b).is_ok_and(|n| n > 0) {}
}

fn control_loop(listener: UnixListener, kick_rx: UnixStream, shared: &Arc<Shared>, cfg: &DaemonConfig) {
    let mut sessions: Vec<Session> = Vec::new();
    let (sess_tx, sess_rx) = mpsc::channel::<Session>();
    let (hs_wake_tx, hs_wake_rx) = match UnixStream::pair() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "control thread cannot start");
            shared.stop.store(true, Ordering::SeqCst);
            return;
        }
    };
    let _ = hs_wake_rx.set_nonblocking(true);
    let hs_wake_tx = Arc::new(Mutex::new(hs_wake_tx));
    while !shared.stop.load(Ordering::SeqCst) {
        // Poll set: listener, the loop's kick pipe, the handshake pipe, then per session its
        // socket while it is connected, else its pidfd.
        let mut fds = Vec::with_capacity(3 + sessions.len());
        fds.push(PollFd::new(&listener, PollFlags::IN));
        fds.push(PollFd::new(&kick_rx, PollFlags::IN));
        fds.push(PollFd::new(&hs_wake_rx, PollFlags::IN));
        let mut owner = Vec::with_capacity(sessions.len());
        for (i, s) in sessions.iter().enumerate() {
            match (&s.stream, &s.pidfd) {
                (Some(st), _) => fds.push(PollFd::new(st, PollFlags::IN | PollFlags::RDHUP)),
                (None, Some(p)) => fds.push(PollFd::new(p, PollFlags::IN)),
                (None, None) => continue,
            }
            owner.push(i);
        }
        let _ = rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 100_000_000 }));
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        let now = Instant::now();
        let mut drop_ids: Vec<u32> = Vec::new();
        for (k, &i) in owner.iter().enumerate() {
            if !ready[3 + k] {
                continue;
            }
            let s = &mut sessions[i];
            let Some(stream) = &s.stream else {
                // The pidfd fired: the departed process exited.
                shared.send(Event::Gone { id: s.id, exited: true, at: s.hung_at.unwrap_or(now) });
                drop_ids.push(s.id);
                continue;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            match transport::read_frame::<Request>(stream) {
                Ok(Request::Goodbye) => {
                    tracing::info!(client = s.id, "client said goodbye; draining its work");
                    shared.send(Event::Gone { id: s.id, exited: false, at: now });
                }
                Err(DaemonError::Timeout(_)) => {}
                Ok(_) | Err(DaemonError::Protocol(_)) => {
                    tracing::warn!(client = s.id, "unexpected message on a session socket; disconnecting");
                    shared.send(Event::Gone { id: s.id, exited: true, at: now });
                    drop_ids.push(s.id);
                }
                Err(_) => {
                    // Hung up. Exited: its submissions died with it, free now. Alive: it departs.
                    let exited = pid_exited(s.pidfd.as_ref());
                    shared.send(Event::Gone { id: s.id, exited, at: now });
                    if exited || s.pidfd.is_none() {
                        drop_ids.push(s.id);
                    } else {
                        // Usually the process is still exiting (its sockets close before its
                        // pidfd signals): the pidfd watch frees the leases a moment later.
                        s.stream = None;
                        s.hung_at = Some(now);
                    }
                }
            }
        }
        if ready[1] {
            drain_wake(&kick_rx);
            let kicks: Vec<u32> = shared.kicks.lock().map(|mut k| std::mem::take(&mut *k)).unwrap_or_default();
            drop_ids.extend(kicks);
        }
        if !drop_ids.is_empty() {
            sessions.retain(|s| {
                let keep = !drop_ids.contains(&s.id);
                if let (false, Some(st)) = (keep, &s.stream) {
                    let _ = st.shutdown(std::net::Shutdown::Both);
                }
                keep
            });
        }
        if ready[2] {
            drain_wake(&hs_wake_rx);
        }
        while let Ok(s) = sess_rx.try_recv() {
            sessions.push(s);
        }
        if ready[0] {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (s, c, tx, wake) = (shared.clone(), cfg.clone(), sess_tx.clone(), hs_wake_tx.clone());
                        let _ = std::thread::Builder::new().name("vitamin-handshake".into()).spawn(move || {
                            if let Some(sess) = handshake(stream, &s, &c) {
                                let _ = tx.send(sess);
                                if let Ok(mut w) = wake.lock() {
                                    let _ = w.write(&[1]);
                                }
                            }
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        break;
                    }
                }
            }
        }
    }
}

fn command_of(pid: u32) -> String {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(b) => {
            let s: Vec<String> = b
                .split(|&c| c == 0)
                .filter(|p| !p.is_empty())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            let s = s.join(" ");
            if s.len() > 200 {
                format!("{}...", &s[..s.char_indices().nth(197).map_or(s.len(), |(i, _)| i)])
            } else {
                s
            }
        }
        Err(_) => String::from("?"),
    }
}

/// One connection's first exchange. Credentials are checked before anything is read.
fn handshake(stream: UnixStream, shared: &Shared, cfg: &DaemonConfig) -> Option<Session> {
    let _ = stream.set_nonblocking(false);
    let _ = transport::set_timeouts(&stream, IO_TIMEOUT);
    let refuse = |why: String| {
        tracing::warn!(reason = %why, "connection refused");
        shared.send(Event::Refused);
        let _ = transport::write_frame(&stream, &Reply::Refused { reason: why });
        None
    };
    let cred = match transport::peer_credentials(&stream) {
        Ok(c) => c,
        Err(e) => return refuse(format!("cannot read the peer's credentials: {e}")),
    };
    if !cfg.allow.allows(&cred) {
        return refuse(format!(
            "uid {} / gid {} is not allowed by this daemon (allowed uids {:?}, gids {:?}); run as an allowed user or add it with --allow-uid",
            cred.uid, cred.gid, cfg.allow.uids, cfg.allow.gids
        ));
    }
    let req = match transport::read_frame::<Request>(&stream) {
        Ok(r) => r,
        Err(e) => return refuse(format!("no valid request: {e}")),
    };
    match req {
        Request::Status { .. } => {
            let st = shared.status.lock().map(|s| s.clone()).unwrap_or_default();
            let _ = transport::write_frame(&stream, &Reply::Status(Box::new(st)));
            None
        }
        Request::Stop { .. } => {
            tracing::info!(pid = cred.pid, uid = cred.uid, "stop requested");
            let _ = transport::write_frame(&stream, &Reply::Stopping);
            shared.stop.store(true, Ordering::SeqCst);
            shared.ring_doorbell();
            None
        }
        Request::Goodbye => refuse("goodbye before hello".into()),
        Request::Hello(hello) => {
            if hello.version != PROTOCOL_VERSION {
                return refuse(format!(
                    "protocol version {} but this daemon speaks {PROTOCOL_VERSION}: use matching vitamin builds",
                    hello.version
                ));
            }
            if hello.pid != cred.pid {
                tracing::debug!(
                    said = hello.pid,
                    kernel = cred.pid,
                    "hello pid differs from SO_PEERCRED (pid namespace?)"
                );
            }
            let pidfd = rustix::process::Pid::from_raw(cred.pid as i32)
                .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
            let (tx, rx) = mpsc::channel();
            shared.send(Event::Hello { hello, cred, command: command_of(cred.pid), reply: tx });
            let (welcome, fd) = match rx.recv_timeout(IO_TIMEOUT) {
                Ok(Ok(w)) => w,
                Ok(Err(why)) => {
                    let _ = transport::write_frame(&stream, &Reply::Refused { reason: why });
                    return None;
                }
                Err(_) => return refuse("the decision loop did not answer in time".into()),
            };
            let id = welcome.client;
            if let Err(e) = transport::write_frame_with_fd(&stream, &Reply::Welcome(Box::new(welcome)), &fd) {
                tracing::warn!(client = id, error = %e, "welcome not delivered");
                shared.send(Event::Gone { id, exited: true, at: Instant::now() });
                return None;
            }
            drop(fd);
            tracing::info!(client = id, pid = cred.pid, uid = cred.uid, "client registered");
            Some(Session { id, stream: Some(stream), pidfd, hung_at: None })
        }
    }
}

fn metrics_loop(l: std::net::TcpListener, shared: &Shared) {
    let _ = l.set_nonblocking(true);
    while !shared.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, _)) => {
                let st = shared.status.lock().map(|s| s.clone()).unwrap_or_default();
                super::metrics::respond(s, &st);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
