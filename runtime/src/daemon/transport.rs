//! The control socket: path, framing, peer credentials and descriptor passing.
//!
//! - Frames: a little-endian `u32` byte length, then that many bytes of JSON
//!   ([`super::control`]); at most [`MAX_FRAME`] bytes. Every read and write has a deadline (the
//!   socket's timeouts): a silent peer costs a bounded wait, never a hang.
//! - Credentials: [`peer_credentials`] is `SO_PEERCRED`, the kernel's record of the peer's pid,
//!   uid and gid at `connect`; the daemon checks it against the [`AllowList`] before it reads a
//!   single byte from the peer.
//! - The client's memfd travels with the welcome frame as `SCM_RIGHTS` ancillary data.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::DaemonError;

/// Largest control frame.
pub const MAX_FRAME: usize = 1 << 20;
/// Default deadline of one control read or write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The default socket path: `/run/vitamin/daemon.sock` as root, else
/// `$XDG_RUNTIME_DIR/vitamin/daemon.sock`, else `/tmp/vitamin-<uid>/daemon.sock`.
pub fn default_socket_path() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    if uid == 0 {
        return PathBuf::from("/run/vitamin/daemon.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("vitamin").join("daemon.sock"),
        None => PathBuf::from(format!("/tmp/vitamin-{uid}")).join("daemon.sock"),
    }
}

/// A peer's identity as the kernel recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (in the daemon's pid namespace).
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected socket.
pub fn peer_credentials(s: &UnixStream) -> Result<PeerCred, DaemonError> {
    let c = rustix::net::sockopt::socket_peercred(s).map_err(|e| DaemonError::os("getsockopt(SO_PEERCRED)", e))?;
    Ok(PeerCred { pid: c.pid.as_raw_nonzero().get() as u32, uid: c.uid.as_raw(), gid: c.gid.as_raw() })
}

/// Who may connect: a peer is allowed if its uid is listed or its gid is listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllowList {
    /// Allowed uids.
    pub uids: Vec<u32>,
    /// Allowed gids.
    pub gids: Vec<u32>,
}

impl Default for AllowList {
    /// The daemon's own uid and root.
    fn default() -> Self {
        let me = rustix::process::getuid().as_raw();
        let mut uids = vec![me];
        if me != 0 {
            uids.push(0);
        }
        AllowList { uids, gids: Vec::new() }
    }
}

impl AllowList {
    /// Whether `c` may connect.
    pub fn allows(&self, c: &PeerCred) -> bool {
        self.uids.contains(&c.uid) || self.gids.contains(&c.gid)
    }
}

/// Binds the daemon's listening socket at `path`: creates the directory (mode 0755: the peer
/// check, not the file mode, decides who gets in) and replaces a stale socket file, but refuses
/// when a daemon answers there.
pub fn bind_listener(path: &Path) -> Result<UnixListener, DaemonError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| DaemonError::Io(format!("creating {}: {e}", dir.display())))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(DaemonError::AlreadyRunning(path.to_owned()));
        }
        std::fs::remove_file(path).map_err(|e| DaemonError::Io(format!("removing stale {}: {e}", path.display())))?;
    }
    let l = UnixListener::bind(path).map_err(|e| DaemonError::Io(format!("binding {}: {e}", path.display())))?;
    // Any local user may connect; SO_PEERCRED decides who stays.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
    Ok(l)
}

/// Connects to a daemon at `path` with I/O deadlines set.
pub fn connect(path: &Path, timeout: Duration) -> Result<UnixStream, DaemonError> {
    let s = UnixStream::connect(path).map_err(|e| DaemonError::NotRunning(path.to_owned(), e.to_string()))?;
    set_timeouts(&s, timeout)?;
    Ok(s)
}

/// Sets read and write deadlines.
pub fn set_timeouts(s: &UnixStream, t: Duration) -> Result<(), DaemonError> {
    s.set_read_timeout(Some(t)).and_then(|()| s.set_write_timeout(Some(t))).map_err(|e| DaemonError::Io(e.to_string()))
}

fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, DaemonError> {
    let body = serde_json::to_vec(msg).map_err(|e| DaemonError::Protocol(format!("encoding: {e}")))?;
    if body.len() > MAX_FRAME {
        return Err(DaemonError::Protocol(format!("frame of {} bytes exceeds {MAX_FRAME}", body.len())));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

fn io(e: std::io::Error) -> DaemonError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => DaemonError::Timeout("control socket".into()),
        std::io::ErrorKind::UnexpectedEof => DaemonError::HungUp,
        _ => DaemonError::Io(e.to_string()),
    }
}

/// Writes one frame.
pub fn write_frame<T: Serialize>(mut s: &UnixStream, msg: &T) -> Result<(), DaemonError> {
    s.write_all(&encode(msg)?).map_err(io)
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, DaemonError> {
    serde_json::from_slice(body).map_err(|e| DaemonError::Protocol(format!("bad control message: {e}")))
}

/// Reads one frame.
pub fn read_frame<T: DeserializeOwned>(mut s: &UnixStream) -> Result<T, DaemonError> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(io)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(DaemonError::Protocol(format!("frame of {n} bytes announced (limit {MAX_FRAME})")));
    }
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).map_err(io)?;
    decode(&body)
}

/// Writes one frame with `fd` attached (`SCM_RIGHTS`).
pub fn write_frame_with_fd<T: Serialize>(s: &UnixStream, msg: &T, fd: &OwnedFd) -> Result<(), DaemonError> {
    let bytes = encode(msg)?;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    if !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(DaemonError::Protocol("no room for the descriptor".into()));
    }
    let sent = rustix::net::sendmsg(s, &[IoSlice::new(&bytes)], &mut cmsg, SendFlags::NOSIGNAL)
        .map_err(|e| DaemonError::os("sendmsg", e))?;
    // The descriptor went with the first byte; send whatever the kernel did not take.
    let mut w = s;
    w.write_all(&bytes[sent..]).map_err(io)
}

/// Reads one frame and the descriptor attached to it, if any.
pub fn read_frame_with_fd<T: DeserializeOwned>(s: &UnixStream) -> Result<(T, Option<OwnedFd>), DaemonError> {
    let mut head = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(s, &mut [IoSliceMut::new(&mut head)], &mut cmsg, RecvFlags::CMSG_CLOEXEC).map_err(
        |e| match e {
            rustix::io::Errno::AGAIN => DaemonError::Timeout("control socket".into()),
            e => DaemonError::os("recvmsg", e),
        },
    )?;
    if got.bytes == 0 {
        return Err(DaemonError::HungUp);
    }
    let mut fd = None;
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for f in fds {
                // Keep the first; extra descriptors are closed as they drop.
                if fd.is_none() {
                    fd = Some(f);
                }
            }
        }
    }
    let mut r = s;
    r.read_exact(&mut head[got.bytes..]).map_err(io)?;
    let n = u32::from_le_bytes(head) as usize;
    if n > MAX_FRAME {
        return Err(DaemonError::Protocol(format!("frame of {n} bytes announced (limit {MAX_FRAME})")));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(io)?;
    Ok((decode(&body)?, fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_descriptors_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        set_timeouts(&a, Duration::from_secs(5)).unwrap();
        set_timeouts(&b, Duration::from_secs(5)).unwrap();
        write_frame(&a, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(read_frame::<Vec<u32>>(&b).unwrap(), vec![1, 2, 3]);
        let f = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&f, 12345).unwrap();
        write_frame_with_fd(&a, &"hi", &f).unwrap();
        let (msg, fd) = read_frame_with_fd::<String>(&b).unwrap();
        assert_eq!(msg, "hi");
        assert_eq!(rustix::fs::fstat(fd.unwrap()).unwrap().st_size, 12345, "the same file arrived");
        let me = peer_credentials(&a).unwrap();
        assert_eq!(me.uid, rustix::process::getuid().as_raw());
        assert_eq!(me.pid, std::process::id());
        assert!(AllowList::default().allows(&me));
        assert!(!AllowList { uids: vec![me.uid + 1], gids: vec![] }.allows(&me));
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        set_timeouts(&b, Duration::from_millis(200)).unwrap();
        (&a).write_all(&(u32::MAX).to_le_bytes()).unwrap();
        assert!(matches!(read_frame::<u32>(&b), Err(DaemonError::Protocol(_))));
        (&a).write_all(&3u32.to_le_bytes()).unwrap();
        (&a).write_all(b"{{{").unwrap();
        assert!(matches!(read_frame::<u32>(&b), Err(DaemonError::Protocol(_))));
        assert!(matches!(read_frame::<u32>(&b), Err(DaemonError::Timeout(_))), "a silent peer times out");
        drop(a);
        assert!(matches!(read_frame::<u32>(&b), Err(DaemonError::HungUp)));
    }
}
