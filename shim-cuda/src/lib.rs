//! # libvitamin_cuda.so: the CUDA interposer
//!
//! Loaded with `LD_PRELOAD` (or by `vitamin run`), it sits between an unmodified CUDA application
//! and the driver: it catches `dlsym`, `cuGetProcAddress(_v2)` and directly linked driver symbols,
//! turns asynchronous calls into virtual-context ops and answers synchronization from logical
//! state. Filled in by the interposer issues; today the library exports nothing.
#![warn(missing_docs)]
