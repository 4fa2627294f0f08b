//! # vitamin-kernels-hip: fixed-structure test kernels for AMD
//!
//! The HIP versions of `vitamin-kernels-cuda`'s kernels, for hipRTC. Not written yet.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
