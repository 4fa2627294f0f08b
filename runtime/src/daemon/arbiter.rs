//! The daemon as an [`Arbiter`]: the record interface over real sessions with a running daemon,
//! one [`DaemonClient`] per registered client (its own socket, sealed memfd and rings), so that
//! the same record-level checks run against the in-process arbiter and the daemon
//! (`runtime/tests/arbiter_in_process.rs`).
//!
//! The executor does not go through this type: it drives its one session directly
//! ([`crate::dispatch::Remote`]), because it also reports work it submitted itself under its
//! lease (continued and launched-first ops) and rides out a daemon that goes away (safe mode,
//! re-registration, fallback), which the plain record interface has no words for.
//!
//! Mapping: a [`ReadyRecord`] is one wire ready record (its lookahead, when set, one hint
//! record); a [`Completion`] one wire completion; the bindings are those that arrived on each
//! session's down ring, collected for up to the arbiter's `wait`; the lease view is the session's
//! view in shared memory (open: `held`, draining: `draining`). A record whose floor exceeds the
//! device is dropped here, as the executor fails such an op itself (the daemon would keep it
//! ready for ever).

use std::time::{Duration, Instant};

use super::client::{self, ConnectOptions, DaemonClient};
use super::wire::{self, HintRecord, LeaseState, FLAG_CLUSTER, FLAG_COOPERATIVE, FLAG_GRAPH};
use super::DaemonError;
use crate::arbiter::{Arbiter, ArbiterError, Binding, Class, ClientId, Completion, LeaseView, ReadyRecord};
use crate::policy::ClientClass;
use crate::pool::NodeId;

/// Sessions with a daemon, one per registered client. See the module documentation.
#[derive(Debug)]
pub struct DaemonArbiter {
    template: ConnectOptions,
    sessions: Vec<DaemonClient>,
    wait: Duration,
    got: Vec<client::Binding>,
    /// Ready records no node of the device could run (dropped, as the executor fails them).
    pub unplaceable: u64,
}

impl From<DaemonError> for ArbiterError {
    fn from(e: DaemonError) -> Self {
        ArbiterError::Unavailable(e.to_string())
    }
}

impl DaemonArbiter {
    /// Registers clients with the daemon at `template.socket` (each with `template`'s device,
    /// topology and lanes, and the class it registers with); [`Arbiter::bindings`] collects
    /// bindings for up to `wait`.
    pub fn new(template: ConnectOptions, wait: Duration) -> DaemonArbiter {
        DaemonArbiter { template, sessions: Vec::new(), wait, got: Vec::new(), unplaceable: 0 }
    }

    fn session(&mut self, c: ClientId) -> Result<&mut DaemonClient, ArbiterError> {
        self.sessions.get_mut(c.0 as usize).ok_or(ArbiterError::UnknownClient(c))
    }

    /// Stages one up record, publishing and retrying while the ring is full, for up to `wait`.
    fn stage(
        &mut self,
        c: ClientId,
        mut push: impl FnMut(&mut DaemonClient) -> Result<bool, DaemonError>,
    ) -> Result<(), ArbiterError> {
        let deadline = Instant::now() + self.wait;
        let s = self.session(c)?;
        loop {
            if push(s)? {
                return Ok(());
            }
            s.flush();
            if Instant::now() >= deadline {
                return Err(ArbiterError::Busy);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn class_of(class: Class) -> ClientClass {
    match class.tpot_target_ns {
        0 => ClientClass::BestEffort,
        t => ClientClass::LatencyCritical { tpot_target_ns: t },
    }
}

impl Arbiter for DaemonArbiter {
    fn register(&mut self, class: Class) -> Result<ClientId, ArbiterError> {
        let id = ClientId(self.sessions.len() as u32);
        let mut opts = self.template.clone();
        opts.name = format!("{} {}", opts.name, id.0);
        opts.class = class_of(class);
        self.sessions.push(DaemonClient::connect(opts)?);
        Ok(id)
    }

    fn ready(&mut self, records: &[ReadyRecord]) -> Result<(), ArbiterError> {
        let units = self.template.topology.unit_count();
        let mut touched = Vec::new();
        for r in records {
            if r.min_units as usize > units {
                self.unplaceable += 1;
                continue;
            }
            let deadline_ns = (r.class.deadline_ns != 0).then_some(r.class.deadline_ns);
            let flags =
                [(r.flags.cooperative, FLAG_COOPERATIVE), (r.flags.cluster, FLAG_CLUSTER), (r.flags.graph, FLAG_GRAPH)]
                    .iter()
                    .filter(|(on, _)| *on)
                    .fold(0, |f, (_, bit)| f | bit);
            let rec = wire::ReadyRecord {
                op: r.op,
                flags,
                min_units: u16::try_from(r.min_units).unwrap_or(u16::MAX),
                kernel: r.key.name_hash,
                grid: r.key.grid,
                block: r.key.block,
                smem: r.key.shared_mem_bytes,
                resident_per_unit: u16::try_from(r.key.resident_per_unit).unwrap_or(u16::MAX),
                ready_since_ns: r.ready_since_ns,
                deadline_ns,
            };
            if r.lookahead_units > 0 {
                let hint = HintRecord {
                    op: r.op,
                    kernel: r.key.name_hash,
                    grid: r.key.grid,
                    block: r.key.block,
                    demand_units: u16::try_from(r.lookahead_units).unwrap_or(u16::MAX),
                    ready_at_ns: 0,
                    deadline_ns,
                };
                self.stage(r.client, |s| s.hint(hint))?;
            }
            self.stage(r.client, |s| s.ready(rec))?;
            if !touched.contains(&r.client) {
                touched.push(r.client);
            }
        }
        for c in touched {
            self.session(c)?.flush();
        }
        Ok(())
    }

    fn completed(&mut self, completions: &[Completion]) -> Result<(), ArbiterError> {
        let mut touched = Vec::new();
        for c in completions {
            self.stage(c.client, |s| s.complete(c.op, c.completed_ns))?;
            if !touched.contains(&c.client) {
                touched.push(c.client);
            }
        }
        for c in touched {
            self.session(c)?.flush();
        }
        Ok(())
    }

    fn bindings(&mut self, _now_ns: u64, out: &mut Vec<Binding>) -> Result<(), ArbiterError> {
        let deadline = Instant::now() + self.wait;
        loop {
            let mut n = 0;
            for (i, s) in self.sessions.iter_mut().enumerate() {
                self.got.clear();
                n += s.bindings(&mut self.got, Duration::ZERO)?;
                out.extend(self.got.iter().map(|b| Binding {
                    client: ClientId(i as u32),
                    op: b.op,
                    node: NodeId(b.node),
                    lane: u32::from(b.lane),
                }));
            }
            if n > 0 || Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn lease_view(&self, client: ClientId) -> Result<LeaseView, ArbiterError> {
        let s = self.sessions.get(client.0 as usize).ok_or(ArbiterError::UnknownClient(client))?;
        let mut states = Vec::new();
        s.lease_view(&mut states)?;
        let mut v = LeaseView::default();
        for (i, st) in states.iter().enumerate() {
            match st {
                LeaseState::Open => v.held.insert(NodeId(i as u16)),
                LeaseState::Draining => v.draining.insert(NodeId(i as u16)),
                _ => {}
            }
        }
        Ok(v)
    }
}
