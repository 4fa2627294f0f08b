//! # libvitamin_hip.so: the HIP interposer
//!
//! The HIP counterpart of `libvitamin_cuda.so`: intercepts `hipLaunchKernel` and friends,
//! `hipGetProcAddress` and HIP stream/event calls of an unmodified HIP application. Not implemented
//! yet; the library exports nothing.
#![warn(missing_docs)]
