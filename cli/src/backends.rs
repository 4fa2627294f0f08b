//! Backend selection: probe every compiled backend, log why any was skipped, pick one.
//!
//! `VITAMIN_BACKEND` (or `--backend`) forces `sim`, `cuda` or `hip`; `--sim` is short for `sim`.
//! Without a choice the first usable hardware backend wins (CUDA, then HIP) and the simulated
//! device is the fallback: the H200, or the preset `--sim-device` / `VITAMIN_SIM_DEVICE` names
//! (`mi300x`).
//!
//! The chosen backend is one enum over the compiled backends. The enum is matched by hand rather
//! than with `enum_dispatch`: that crate cannot register traits defined in another crate (the
//! `Backend` traits live in `vitamin-hal`), and the runtime is generic over `B: Backend`, so the
//! hot path is monomorphized per backend anyway; this enum only picks which instantiation runs.

use serde::Serialize;
use vitamin_hal::sim::{SimBackend, SimDevice};
use vitamin_hal::{Backend, HalError, Topology};
use vitamin_hal_cuda::CudaBackend;
use vitamin_hal_hip::HipBackend;

/// One backend's probe outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub backend: &'static str,
    pub usable: bool,
    pub reason: Option<String>,
}

/// The backend chosen at run time.
#[derive(Debug)]
pub enum AnyBackend {
    Sim(SimBackend),
    /// NVIDIA GPU: partitions are green contexts.
    Cuda(CudaBackend),
    /// AMD GPU: partitions are CU-masked streams (not validated on AMD hardware).
    Hip(HipBackend),
}

impl AnyBackend {
    pub fn topology(&self) -> &Topology {
        match self {
            AnyBackend::Sim(b) => b.topology(),
            AnyBackend::Cuda(b) => b.topology(),
            AnyBackend::Hip(b) => b.topology(),
        }
    }
}

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    Auto,
    Sim,
    Cuda,
    Hip,
}

fn report(backend: &'static str, r: Result<(), HalError>) -> ProbeReport {
    match r {
        Ok(()) => ProbeReport { backend, usable: true, reason: None },
        Err(e) => ProbeReport { backend, usable: false, reason: Some(e.to_string()) },
    }
}

/// Probes the backends and picks one; `sim` is the simulated device to fall back to.
pub fn select(choice: BackendChoice, sim: SimDevice) -> anyhow::Result<(AnyBackend, Vec<ProbeReport>)> {
    let mut reports = Vec::new();
    let mut chosen = None;
    if choice != BackendChoice::Sim {
        if matches!(choice, BackendChoice::Auto | BackendChoice::Cuda) {
            // Creating the backend is the probe: it also performs the one SM split.
            let created = CudaBackend::new();
            let r = report("cuda", created.as_ref().map(|_| ()).map_err(Clone::clone));
            tracing::info!(backend = "cuda", usable = r.usable, reason = r.reason.as_deref(), "probed");
            reports.push(r);
            chosen = created.ok().map(AnyBackend::Cuda);
        }
        if matches!(choice, BackendChoice::Auto | BackendChoice::Hip) {
            // Creating the backend is the probe (it also builds the leaf layout).
            let created = HipBackend::new();
            let r = report("hip", created.as_ref().map(|_| ()).map_err(Clone::clone));
            tracing::info!(backend = "hip", usable = r.usable, reason = r.reason.as_deref(), "probed");
            reports.push(r);
            if chosen.is_none() {
                chosen = created.ok().map(AnyBackend::Hip);
            }
        }
        if let Some(bad) = reports.iter().find(|r| !r.usable && choice != BackendChoice::Auto) {
            anyhow::bail!(
                "backend {} was requested but is unusable: {}",
                bad.backend,
                bad.reason.as_deref().unwrap_or("?")
            );
        }
        if let Some(b) = chosen {
            return Ok((b, reports));
        }
    }
    reports.push(ProbeReport {
        backend: "sim",
        usable: true,
        reason: Some(if choice == BackendChoice::Sim {
            "requested".into()
        } else {
            format!("no GPU backend is usable: falling back to the simulated {}", sim.name().to_uppercase())
        }),
    });
    Ok((AnyBackend::Sim(sim.backend()), reports))
}
