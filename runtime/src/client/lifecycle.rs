//! The life of an interposer's bind state in one process: started once, by the first call that
//! can start it; unavailable for good when it cannot start (the process then runs in observe
//! mode, and the census says why); disabled in a forked child (no dispatcher thread exists there).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

use super::log::clog;
use crate::config::LogLevel;

/// Why a start did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// Not yet possible (no current context): try again at the next call.
    NotYet,
    /// Bind mode cannot run in this process.
    Unavailable(String),
}

/// A start-once cell for a `T` (usable as a `static`).
#[derive(Debug)]
pub struct Lifecycle<T> {
    /// Set in a forked child and when the start failed: every call then takes the observe path.
    disabled: AtomicBool,
    /// Set in a forked child; `warned` once the child was told.
    forked: AtomicBool,
    warned: AtomicBool,
    /// The started state (`Some(None)`: unavailable in this process).
    state: OnceLock<Option<T>>,
    init: Mutex<()>,
    unavailable: OnceLock<String>,
}

impl<T> Lifecycle<T> {
    /// Not started.
    pub const fn new() -> Self {
        Lifecycle {
            disabled: AtomicBool::new(false),
            forked: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            state: OnceLock::new(),
            init: Mutex::new(()),
            unavailable: OnceLock::new(),
        }
    }

    /// Whether calls are handled (not disabled). The first call in a forked child logs one
    /// warning that the child runs in observe mode.
    #[inline]
    pub fn enabled(&self) -> bool {
        if !self.disabled.load(Ordering::Relaxed) {
            return true;
        }
        if self.forked.load(Ordering::Relaxed) && !self.warned.swap(true, Ordering::Relaxed) {
            clog!(
                LogLevel::Warn,
                "forked child (pid {}): bind mode is off here (its dispatcher thread stayed in the parent); \
                 this process's calls go to the driver unchanged (observe mode)",
                std::process::id()
            );
        }
        false
    }

    /// The started state if there is one (never starts it).
    #[inline]
    pub fn started(&self) -> Option<&T> {
        self.state.get().and_then(Option::as_ref)
    }

    /// The started state, starting it with `start` on first use (one caller at a time; `on_start`
    /// runs once, after a successful start); `None` means "take the observe path".
    #[inline]
    pub fn get(&self, start: impl FnOnce() -> Result<T, StartError>, on_start: impl FnOnce(&T)) -> Option<&T> {
        match self.state.get() {
            Some(b) => b.as_ref(),
            None => self.start_slow(start, on_start),
        }
    }

    #[cold]
    fn start_slow(&self, start: impl FnOnce() -> Result<T, StartError>, on_start: impl FnOnce(&T)) -> Option<&T> {
        let _l = self.init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = self.state.get() {
            return b.as_ref();
        }
        match start() {
            Ok(b) => {
                let _ = self.state.set(Some(b));
                if let Some(b) = self.started() {
                    on_start(b);
                }
            }
            Err(StartError::NotYet) => return None,
            Err(StartError::Unavailable(why)) => {
                clog!(LogLevel::Error, "bind mode unavailable, running in observe mode: {why}");
                let _ = self.unavailable.set(why);
                self.disabled.store(true, Ordering::Release);
                let _ = self.state.set(None);
            }
        }
        self.started()
    }

    /// In a forked child: every call takes the observe path from now on. Async-signal-safe (one
    /// atomic store).
    pub fn disable(&self) {
        self.forked.store(true, Ordering::Relaxed);
        self.disabled.store(true, Ordering::Relaxed);
    }

    /// The census of a state that did not start (`None` when it did: the caller renders it).
    pub fn census_reason(&self) -> Option<Value> {
        match self.state.get() {
            None => Some(
                json!({"active": false, "reason": "not started: no bind-mode call was made with a current context"}),
            ),
            Some(None) => Some(json!({"active": false, "reason": self.unavailable.get().cloned().unwrap_or_default()})),
            Some(Some(_)) => None,
        }
    }
}

impl<T> Default for Lifecycle<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_once_retries_when_not_yet_and_stays_unavailable() {
        let l: Lifecycle<u32> = Lifecycle::new();
        assert!(l.census_reason().is_some());
        assert_eq!(l.get(|| Err(StartError::NotYet), |_| unreachable!()), None);
        let mut started = 0;
        assert_eq!(l.get(|| Ok(7), |_| started += 1), Some(&7));
        assert_eq!(l.get(|| unreachable!("started once"), |_| unreachable!()), Some(&7));
        assert_eq!(started, 1);
        assert!(l.enabled() && l.census_reason().is_none());
        l.disable();
        assert!(!l.enabled(), "a forked child");

        let u: Lifecycle<u32> = Lifecycle::new();
        assert_eq!(u.get(|| Err(StartError::Unavailable("no pool".into())), |_| unreachable!()), None);
        assert_eq!(u.get(|| Ok(1), |_| unreachable!()), None, "unavailable for good");
        assert!(!u.enabled());
        assert_eq!(u.census_reason().unwrap()["reason"], "no pool");
    }
}
