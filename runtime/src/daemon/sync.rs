//! The atomics and the futex the ring uses: `std` and the kernel normally, `loom`'s model under
//! `cfg(loom)` (the tokio pattern), so the sleep/wake protocol is model-checked unchanged.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Futex wait/wake on a 32-bit word. Shared (not `FUTEX_PRIVATE`): the words live in a memfd
/// mapped by two processes, and the kernel keys shared futexes by (inode, offset).
#[cfg(not(loom))]
pub(crate) mod futex {
    use std::time::Duration;

    use rustix::thread::futex::{self, Flags};

    use super::AtomicU32;

    /// Sleeps while `*word == expected`, at most `timeout`. Returns on a wake-up, a value
    /// mismatch, the timeout or a signal; the caller re-checks its condition in every case.
    pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // EAGAIN (value changed), ETIMEDOUT and EINTR all mean "look again".
        let _ = futex::wait(word, Flags::empty(), expected, Some(&ts));
    }

    /// Wakes every sleeper on `word`.
    pub(crate) fn wake(word: &AtomicU32) {
        let _ = futex::wake(word, Flags::empty(), i32::MAX as u32);
    }
}

/// The futex modelled for loom: a wait checks the word and sleeps under one mutex, a wake
/// notifies under it, so a wake-up between the check and the sleep is never lost (as in the
/// kernel). Timeouts are not modelled: the model proves progress without them.
#[cfg(loom)]
pub(crate) mod futex {
    use std::time::Duration;

    use loom::sync::{Condvar, Mutex};

    use super::{AtomicU32, Ordering};

    loom::lazy_static! {
        static ref FUTEX: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    }

    pub(crate) fn wait(word: &AtomicU32, expected: u32, _timeout: Duration) {
        let (m, cv) = &*FUTEX;
        let g = m.lock().unwrap();
        if word.load(Ordering::SeqCst) == expected {
            drop(cv.wait(g).unwrap());
        }
    }

    pub(crate) fn wake(_word: &AtomicU32) {
        let (m, cv) = &*FUTEX;
        let _g = m.lock().unwrap();
        cv.notify_all();
    }
}
