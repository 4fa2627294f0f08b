//! The re-entry guard: at most one level of vitamin logic per thread. It is the client runtime's
//! (`vitamin_runtime::client::guard`, shared with shim-hip); here it also covers `dlsym`: the real
//! `dlsym` may call back into the interposed one (a naive override segfaulted python, FACTS.md),
//! and the driver may call exported `cu*` symbols while serving one. A hook entered while the
//! guard is held forwards the call and does nothing else.

pub use vitamin_runtime::client::guard::{enter, is_held, Entered};
