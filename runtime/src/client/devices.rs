//! The bind states of one process's devices: one per device ordinal (its own pool, virtual
//! context and coordinator), each started by the first call made on that device's pool context,
//! each with its own [`Lifecycle`]. An interposer keeps one [`Devices`] as a `static` and asks it
//! which state a call belongs to: the current context's device's ([`Devices::current`]), or, for a
//! call on a stream or event handle, the device whose registry holds the handle
//! ([`Devices::owner`]): work of a stream belongs to the device the stream was created on.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::MutexGuard;

use serde_json::Value;

use super::handles::{Recorder, Registry};
use super::lifecycle::{Lifecycle, StartError};
use crate::config::{Config, Mode};
use crate::vctx::EventId;

/// Most devices of one process that bind mode handles (ordinals `0..MAX_DEVICES`); calls made on
/// a higher ordinal pass through.
pub const MAX_DEVICES: usize = 16;

/// What [`Devices`] needs of a device's bind state.
pub trait DeviceState {
    /// The context (as the driver's handle value) whose calls this state binds.
    fn pool_context(&self) -> usize;
    /// The state's handle registry.
    fn handles(&self) -> MutexGuard<'_, Registry>;
}

/// The bind states of a process's devices (usable as a `static`).
#[derive(Debug)]
pub struct Devices<T> {
    lives: [Lifecycle<T>; MAX_DEVICES],
    /// Bit `d` is set once device `d`'s state started.
    started: AtomicU32,
    /// Set in a forked child: no state handles calls there.
    forked: AtomicBool,
}

impl<T: DeviceState> Devices<T> {
    /// No device started.
    pub const fn new() -> Self {
        Devices {
            lives: [const { Lifecycle::new() }; MAX_DEVICES],
            started: AtomicU32::new(0),
            forked: AtomicBool::new(false),
        }
    }

    /// The started states, by ordinal (none in a forked child).
    pub fn started(&self) -> impl Iterator<Item = &T> {
        let bits = if self.forked.load(Ordering::Relaxed) { 0 } else { self.started.load(Ordering::Acquire) };
        (0..MAX_DEVICES).filter(move |d| bits & (1 << d) != 0).filter_map(|d| self.lives[d].started())
    }

    /// Whether more than one device's state started (handles then need routing by owner).
    #[inline]
    pub fn several(&self) -> bool {
        self.started.load(Ordering::Acquire).count_ones() > 1
    }

    /// Whether calls are handled at all: not in a forked child (whose first call logs, once,
    /// that it runs in observe mode).
    #[inline]
    pub fn enabled(&self) -> bool {
        !self.forked.load(Ordering::Relaxed) || self.lives[0].enabled()
    }

    /// The state whose pool context is `ctx` (the thread's current context, non-null), else the
    /// state of device `device()` (the current context's device), started with `start` on first
    /// use (`on_start` runs once after it started). `None`: the observe path (a device past
    /// [`MAX_DEVICES`], one whose state is unavailable, one not started because `start` said
    /// [`StartError::NotYet`]).
    pub fn current(
        &self,
        ctx: usize,
        device: impl FnOnce() -> Option<usize>,
        start: impl FnOnce() -> Result<T, StartError>,
        on_start: impl FnOnce(usize, &T),
    ) -> Option<&T> {
        if let Some(b) = self.started().find(|b| b.pool_context() == ctx) {
            return Some(b);
        }
        let d = device()?;
        let life = self.lives.get(d)?;
        if !life.enabled() {
            return None;
        }
        life.get(start, |b| {
            self.started.fetch_or(1 << d, Ordering::AcqRel);
            on_start(d, b);
        })
    }

    /// The state holding a handle (`holds`), `current` when it holds it or no other does. Only
    /// asks other states when several devices started.
    pub fn owner<'a>(&'a self, current: &'a T, holds: impl Fn(&T) -> bool) -> &'a T {
        if !self.several() || holds(current) {
            return current;
        }
        self.started().find(|o| holds(o)).unwrap_or(current)
    }

    /// The state holding application stream `handle` (`current` if no other does).
    pub fn stream_owner<'a>(&'a self, current: &'a T, handle: usize) -> &'a T {
        self.owner(current, |o| o.handles().stream(handle).is_some())
    }

    /// The state holding application event `handle` (`current` if no other does).
    pub fn event_owner<'a>(&'a self, current: &'a T, handle: usize) -> &'a T {
        self.owner(current, |o| o.handles().event(handle).is_some())
    }

    /// A state other than `current` that recorded application event `handle` logically, with the
    /// event's id: a wait on it from `current`'s device is a cross-device wait.
    pub fn logical_event_elsewhere(&self, current: &T, handle: usize) -> Option<(&T, EventId)> {
        if !self.several() {
            return None;
        }
        self.started().filter(|o| !std::ptr::eq(*o, current)).find_map(|o| {
            let entry = o.handles().event(handle)?;
            (entry.recorder == Recorder::Logical).then_some((o, entry.id))
        })
    }

    /// In a forked child: no state handles calls from now on. Async-signal-safe (atomic stores).
    pub fn disable_after_fork(&self) {
        self.forked.store(true, Ordering::Relaxed);
        for life in &self.lives {
            life.disable();
        }
    }

    /// The interposer's bind-mode census section (`None` outside bind mode): [`Devices::census`]
    /// with the process's policy, seed and lane-continuation settings.
    pub fn bind_census(&self, config: &Config, render: impl Fn(&T) -> Value) -> Option<Value> {
        if config.mode != Mode::Bind {
            return None;
        }
        let mut v = self.census(render);
        if let Some(o) = v.as_object_mut() {
            o.insert("policy".into(), config.policy.name().into());
            o.insert("seed".into(), config.seed.into());
            o.insert("lane_continuation".into(), config.lane_continuation.into());
        }
        Some(v)
    }

    /// The census section: the first started device's (rendered by `render`, with `active` and
    /// `ordinal`), with every started device's under `devices` when several started; when none
    /// did, why (an unavailable device's reason before "not started").
    pub fn census(&self, render: impl Fn(&T) -> Value) -> Value {
        let forked = self.forked.load(Ordering::Relaxed);
        let started: Vec<Value> = (0..MAX_DEVICES)
            .filter_map(|d| {
                let b = self.lives[d].started()?;
                let mut v = render(b);
                v["active"] = (!forked && self.lives[d].enabled()).into();
                v["ordinal"] = d.into();
                Some(v)
            })
            .collect();
        match started.first() {
            Some(first) => {
                let mut v = first.clone();
                if started.len() > 1 {
                    v["devices"] = Value::Array(started.clone());
                }
                v
            }
            None => self
                .lives
                .iter()
                .filter_map(Lifecycle::census_reason)
                .find(|r| r["reason"].as_str().is_some_and(|w| !w.starts_with("not started")))
                .or_else(|| self.lives[0].census_reason())
                .unwrap_or_default(),
        }
    }
}

impl<T: DeviceState> Default for Devices<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    #[derive(Debug)]
    struct State {
        ctx: usize,
        handles: Vec<usize>,
        registry: Mutex<Registry>,
    }

    impl DeviceState for State {
        fn pool_context(&self) -> usize {
            self.ctx
        }
        fn handles(&self) -> MutexGuard<'_, Registry> {
            self.registry.lock().unwrap()
        }
    }

    fn state(ctx: usize, handles: &[usize]) -> Result<State, StartError> {
        Ok(State { ctx, handles: handles.to_vec(), registry: Mutex::new(Registry::default()) })
    }

    #[test]
    fn each_device_starts_once_and_calls_find_their_device() {
        let d: Devices<State> = Devices::new();
        let mut starts = Vec::new();
        assert!(d.current(0x10, || Some(0), || Err(StartError::NotYet), |_, _| unreachable!()).is_none());
        let a = d.current(0x10, || Some(0), || state(0x10, &[1]), |i, _| starts.push(i)).expect("device 0");
        assert_eq!(a.ctx, 0x10);
        assert!(!d.several());
        let b = d.current(0x20, || Some(1), || state(0x20, &[2]), |i, _| starts.push(i)).expect("device 1");
        assert_eq!(b.ctx, 0x20);
        assert!(d.several());
        // Found by context, never started again.
        let again = d.current(0x20, || unreachable!("found by context"), || unreachable!(), |_, _| unreachable!());
        assert_eq!(again.map(|s| s.ctx), Some(0x20));
        assert_eq!(starts, vec![0, 1]);
        // A context of device 0 that is not its pool context gets device 0's state.
        assert_eq!(d.current(0x11, || Some(0), || unreachable!(), |_, _| unreachable!()).map(|s| s.ctx), Some(0x10));
        assert!(d.current(0x99, || Some(MAX_DEVICES), || unreachable!(), |_, _| unreachable!()).is_none());
        // Handles go to the device that holds them.
        assert_eq!(d.owner(a, |s| s.handles.contains(&2)).ctx, 0x20);
        assert_eq!(d.owner(b, |s| s.handles.contains(&1)).ctx, 0x10);
        assert_eq!(d.owner(a, |s| s.handles.contains(&7)).ctx, 0x10, "nobody holds it: the current device");
        let census = d.census(|s| json!({"ctx": s.ctx}));
        assert_eq!(census["ctx"], 0x10);
        assert_eq!(census["devices"][1]["ordinal"], 1);
        assert_eq!(census["devices"][1]["active"], true);
        d.disable_after_fork();
        assert!(!d.enabled() && d.started().next().is_none(), "nothing handles calls in a forked child");
    }

    #[test]
    fn registries_route_streams_and_events_to_their_device() {
        use super::super::handles::EventEntry;
        use crate::vctx::StreamId;
        let d: Devices<State> = Devices::new();
        let a = d.current(0x10, || Some(0), || state(0x10, &[]), |_, _| {}).unwrap();
        assert!(d.logical_event_elsewhere(a, 0x77).is_none(), "one device: never a cross-device wait");
        let b = d.current(0x20, || Some(1), || state(0x20, &[]), |_, _| {}).unwrap();
        b.handles().add_stream(0x55, StreamId(3));
        let id = b.handles().add_event(0x77, EventEntry::new(EventId(9), false, false));
        assert_eq!(d.stream_owner(a, 0x55).ctx, 0x20);
        assert_eq!(d.stream_owner(a, 0x56).ctx, 0x10, "unknown: the current device");
        assert_eq!(d.event_owner(a, 0x77).ctx, 0x20);
        assert!(d.logical_event_elsewhere(a, 0x77).is_none(), "never recorded: nothing to wait for");
        b.handles().set_recorder(id, Recorder::Logical);
        let (owner, e) = d.logical_event_elsewhere(a, 0x77).expect("recorded logically on device 1");
        assert_eq!((owner.ctx, e), (0x20, EventId(9)));
        assert!(d.logical_event_elsewhere(b, 0x77).is_none(), "its own device: not cross-device");
    }

    #[test]
    fn an_unavailable_device_passes_through_and_reports_why() {
        let d: Devices<State> = Devices::new();
        assert!(d.census(|_| json!({}))["reason"].as_str().unwrap().starts_with("not started"));
        let no = d.current(0x10, || Some(0), || Err(StartError::Unavailable("no green contexts".into())), |_, _| {});
        assert!(no.is_none());
        assert!(d.current(0x10, || Some(0), || unreachable!("unavailable for good"), |_, _| {}).is_none());
        assert_eq!(d.census(|_| json!({}))["reason"], "no green contexts");
        // Another device still starts.
        assert!(d.current(0x20, || Some(1), || state(0x20, &[]), |_, _| {}).is_some());
        assert!(d.enabled());
    }
}
