//! The re-entry guard: at most one level of vitamin logic per thread.
//!
//! Any hook can be re-entered on the same thread: the real `dlsym` may call back into an
//! interposed `dlsym` (the failure FACTS.md recorded: a naive override segfaulted python), the
//! driver may call exported `cu*` symbols while serving one, and the shim's own bookkeeping calls
//! the driver (kernel names). A hook entered while the guard is held forwards the call and does
//! nothing else. The guard is a thread-local counter with a const initializer and no destructor,
//! so touching it never allocates or registers TLS destructors, and it works during thread exit.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Proof that this thread is inside vitamin logic; leaving the scope (or unwinding) releases it.
#[derive(Debug)]
pub struct Entered {
    // Not Send: the guard belongs to the thread that took it.
    _not_send: PhantomData<*const ()>,
}

/// Takes the guard, or returns `None` if this thread already holds it (a re-entered hook, which
/// must only forward).
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

/// Whether the calling thread currently holds the guard.
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
    fn nested_entry_is_refused_until_released() {
        assert!(!is_held());
        let outer = enter().expect("first entry");
        assert!(is_held());
        assert!(enter().is_none(), "re-entry must be refused");
        assert!(enter().is_none(), "still refused");
        drop(outer);
        assert!(!is_held());
        let again = enter();
        assert!(again.is_some(), "released after drop");
    }

    #[test]
    fn threads_are_independent() {
        let _held = enter().expect("entry");
        let other = std::thread::spawn(|| {
            let g = enter();
            (g.is_some(), is_held())
        })
        .join()
        .unwrap();
        assert_eq!(other, (true, true), "another thread has its own guard");
        assert!(is_held());
    }

    #[test]
    fn released_on_unwind() {
        let r = std::panic::catch_unwind(|| {
            let _g = enter().expect("entry");
            panic!("inside a hook");
        });
        assert!(r.is_err());
        assert!(!is_held(), "a panic inside a hook must not leave the guard held");
        assert!(enter().is_some());
    }

    /// A hook that re-enters itself `depth` times: only the outermost level does the work.
    fn hook(depth: u32, work: &mut u32) {
        match enter() {
            Some(_g) => {
                *work += 1;
                if depth > 0 {
                    hook(depth - 1, work);
                }
            }
            None => {
                if depth > 0 {
                    hook(depth - 1, work);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn only_outermost_level_works(depths in proptest::collection::vec(0u32..20, 1..10)) {
            for d in depths {
                let mut work = 0;
                hook(d, &mut work);
                prop_assert_eq!(work, 1);
                prop_assert!(!is_held());
            }
        }
    }
}
