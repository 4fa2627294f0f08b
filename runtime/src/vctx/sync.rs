//! The lock and condition variable the virtual context is built on, swappable for loom's.
//!
//! Normal builds use `parking_lot` (no poisoning, parks the thread; never spins for long).
//! Under `--cfg loom` the same API is backed by `loom::sync`, so the notify/wait protocol of
//! [`VirtualContext`](super::VirtualContext) is model-checked by `runtime/tests/vctx_loom.rs`.
//! loom does not model time: a timed wait there is an untimed wait that reports no timeout.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

static CONTENDED: AtomicU64 = AtomicU64::new(0);

/// How many acquisitions of a virtual context's lock in this process found it held (not counted
/// under loom).
pub fn contended_locks() -> u64 {
    CONTENDED.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(not(loom))]
mod imp {
    use std::time::Instant;

    /// A mutual-exclusion lock.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);
    /// A held lock.
    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(parking_lot::Mutex::new(value))
        }
        /// Locks; an acquisition that finds the lock held is counted ([`contended_locks`]) and
        /// marked in the op timeline: it may park the thread, and then costs its releaser a
        /// wake-up system call and itself the wake-up latency.
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            if let Some(g) = self.0.try_lock() {
                return g;
            }
            super::CONTENDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            crate::trace::mark(crate::trace::Tag::Contended, 1);
            self.0.lock()
        }
    }

    /// A condition variable.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(parking_lot::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(&mut guard);
            guard
        }
        /// Returns the guard and whether the deadline passed.
        pub(crate) fn wait_until<'a, T>(
            &self,
            mut guard: MutexGuard<'a, T>,
            deadline: Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            let timed_out = self.0.wait_until(&mut guard, deadline).timed_out();
            (guard, timed_out)
        }
        /// Wakes every waiter; returns whether there was one (a system call was made).
        pub(crate) fn notify_all(&self) -> bool {
            self.0.notify_all() > 0
        }
    }
}

#[cfg(loom)]
mod imp {
    use std::time::Instant;

    /// A mutual-exclusion lock (loom-checked).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);
    /// A held lock.
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            // A panic while holding the lock already fails the loom model; poisoning adds nothing.
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// A condition variable (loom-checked).
    #[derive(Debug)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }
        pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            self.0.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
        }
        pub(crate) fn wait_until<'a, T>(
            &self,
            guard: MutexGuard<'a, T>,
            _deadline: Instant,
        ) -> (MutexGuard<'a, T>, bool) {
            (self.wait(guard), false)
        }
        /// Wakes every waiter (loom cannot say whether there was one: reports `true`).
        pub(crate) fn notify_all(&self) -> bool {
            self.0.notify_all();
            true
        }
    }
}

pub(crate) use imp::{Condvar, Mutex, MutexGuard};

/// Waits on `cv` until notified, or until `deadline` if there is one. Returns the guard and
/// whether the deadline passed.
pub(crate) fn wait_opt<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> (MutexGuard<'a, T>, bool) {
    match deadline {
        None => (cv.wait(guard), false),
        Some(d) => cv.wait_until(guard, d),
    }
}
