//! The re-entry guard of an interposer: at most one level of vitamin logic per thread.
//!
//! A hook can be re-entered on its own thread: the vendor's runtime calls its own exported entry
//! points while serving one (an event creation calling the create-with-flags variant through the
//! symbol table, which the preloaded interposer wins), and the interposer's bookkeeping calls the
//! runtime. A hook entered while the guard is held only forwards. Runtime threads (the
//! coordinator's) hold it for their whole life ([`super::native::NativeApi::enter_runtime_thread`]),
//! so their own calls pass through untouched.
//!
//! The guard is a thread-local counter with a const initializer and no destructor: touching it
//! never allocates or registers a TLS destructor, and it works during thread exit (where it reads
//! as held, so a hook only forwards). One guard serves every interposer loaded in the process: a
//! thread inside any of them forwards whatever it re-enters.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Proof that this thread is inside vitamin logic; dropping it (or unwinding) releases it.
#[derive(Debug)]
pub struct Entered {
    // Not Send: the guard belongs to the thread that took it.
    _not_send: PhantomData<*const ()>,
}

/// Takes the guard, or `None` if this thread already holds it (or is exiting): the caller must
/// then only forward.
pub fn enter() -> Option<Entered> {
    DEPTH
        .try_with(|d| {
            if d.get() > 0 {
                None
            } else {
                d.set(1);
                Some(Entered { _not_send: PhantomData })
            }
        })
        .ok()
        .flatten()
}

/// Whether the calling thread holds the guard (an exiting thread counts as holding it).
pub fn is_held() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(true)
}

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_held_guard_refuses_entry_until_dropped() {
        assert!(!is_held());
        let g = enter().expect("free at first");
        assert!(is_held() && enter().is_none());
        drop(g);
        assert!(!is_held() && enter().is_some());
    }

    #[test]
    fn each_thread_has_its_own_guard() {
        let _g = enter().expect("free");
        let other = std::thread::spawn(|| enter().is_some()).join().unwrap();
        assert!(other, "another thread is not inside vitamin logic");
    }

    #[test]
    fn unwinding_releases_it() {
        assert!(std::panic::catch_unwind(|| {
            let _g = enter().expect("free");
            panic!("inside a hook");
        })
        .is_err());
        assert!(!is_held());
    }

    /// A hook re-entering itself `depth` times does its work once, at the outermost level.
    fn hook(depth: u32, work: &mut u32) {
        let entered = enter();
        if entered.is_some() {
            *work += 1;
        }
        if depth > 0 {
            hook(depth - 1, work);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn only_the_outermost_level_works(depths in proptest::collection::vec(0u32..20, 1..10)) {
            for d in depths {
                let mut work = 0;
                hook(d, &mut work);
                prop_assert_eq!(work, 1);
                prop_assert!(!is_held());
            }
        }
    }
}
