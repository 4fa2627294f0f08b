//! Backend selection: probe every compiled backend, log why any was skipped, pick one.
//!
//! `VITAMIN_BACKEND` (or `--backend`) forces `sim`, `cuda` or `hip`; `--sim` is short for `sim`.
//! Without a choice the first usable hardware backend wins and the simulated H200 is the fallback.
//!
//! The chosen backend is one enum over the compiled backends. The enum is matched by hand rather
//! than with `enum_dispatch`: that crate cannot register traits defined in another crate (the
//! `Backend` traits live in `vitamin-hal`), and the runtime is generic over `B: Backend`, so the
//! hot path is monomorphized per backend anyway; this enum only picks which instantiation runs.

use serde::Serialize;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, HalError, Topology};
use vitamin_hal_cuda::CudaBackend;

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
}

impl AnyBackend {
    pub fn topology(&self) -> &Topology {
        match self {
            AnyBackend::Sim(b) => b.topology(),
            AnyBackend::Cuda(b) => b.topology(),
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

/// Probes the backends and picks one.
pub fn select(choice: BackendChoice) -> anyhow::Result<(AnyBackend, Vec<ProbeReport>)> {
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
            let r = report("hip", vitamin_hal_hip::probe());
            tracing::info!(backend = "hip", usable = r.usable, reason = r.reason.as_deref(), "probed");
            reports.push(r);
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
            "no GPU backend is usable: falling back to the simulated H200".into()
        }),
    });
    Ok((AnyBackend::Sim(SimBackend::h200()), reports))
}
