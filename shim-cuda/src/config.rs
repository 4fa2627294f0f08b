//! The interposer's configuration: the client runtime's ([`vitamin_runtime::config`]), read from
//! the environment once per process ([`crate::state::config`]).

pub use vitamin_runtime::config::*;
