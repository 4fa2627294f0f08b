//! # libvitamin_hip.so: the HIP interposer
//!
//! Loaded with `LD_PRELOAD` (by `vitamin run` when the program links `libamdhip64`, is a script,
//! or links neither vendor's library, or with `--backend hip`), the library sits
//! between an unmodified HIP application and `libamdhip64`. **Bind mode** (the default, [`bind`]):
//! kernel launches, copies, fills, host callbacks and graph launches become ops of a virtual
//! context, late-bound by the client runtime's in-process coordinator to the pool of CU-masked
//! streams ([`vitamin_hal_hip`]), while the application sees native semantics; if bind mode cannot
//! start, the process runs in observe mode and the census says why. **Observe mode**
//! (`VITAMIN_MODE=observe`): every intercepted call is forwarded unchanged and counted; both
//! modes write the census JSON at exit when `VITAMIN_CENSUS` asks for one (the same schema as the
//! CUDA interposer's, with `"interposer": "hip"`).
//!
//! **Not validated on AMD hardware** (there is none here): it is built against Debian's HIP 5.2.3
//! headers and tested in CI on the project's HIP test double (`hal-hip/tests/fake`), which runs
//! kernels on the CPU; `docs/amd.md` says what that shows and what it cannot.
//!
//! ## Interposition
//! The library exports every hooked HIP symbol ([`hooks::HOOKS`]) under libamdhip64's version
//! node (`hipLaunchKernel@@hip_4.2`; [`versions`]: the committed list `symbol-versions.txt`, from
//! which the workspace's linker wrapper `scripts/cc-link.sh` writes the version script); each
//! forwards to the real runtime's function of the same name ([`real`]: `VITAMIN_HIP_LIBRARY`,
//! else the next definition in the loader's order). `__hipRegisterFunction` is hooked to learn
//! host stubs' kernel names, `__hipRegisterFatBinary` and the module loads to read kernel argument
//! layouts from code objects ([`codeobj`]) in bind mode. `hipGetProcAddress` (ROCm 6.2) answers a
//! hooked name with the hook when the runtime's answer is the function the hook forwards to
//! ([`hooks::proc_address_substitute`]). `hipExtModuleLaunchKernel` is exported under its C name
//! and under the C++ name HIP 5.2's `hip_ext.h` gives it (the only one Debian's 5.2.3 exports);
//! ROCm 6's `hipLaunchKernelExC` / `hipDrvLaunchKernelEx` are hooked with their types declared in
//! [`ffi`]. **Not intercepted yet:** symbols an application looks up
//! itself with `dlsym` on a `dlopen`ed `libamdhip64` (Triton's AMD backend, hip-python):
//! such calls reach the runtime directly (`docs/amd.md` says why `dlsym` is not interposed here).
//!
//! ## Invariants
//! - Observe mode never changes a call; bind mode never changes a launch (what it submits is the
//!   application's descriptor, copied at the call).
//! - Nothing happens at load time; state is initialized by the first intercepted call.
//! - Every exported function body runs inside `catch_unwind` (a panic becomes `hipErrorUnknown`);
//!   a re-entered hook (HIP calls its own exports) only forwards
//!   ([`vitamin_runtime::client::guard`]). A forked child runs in observe mode.
//!
//! ## Layout
//! What every interposer needs (registry, capture rules, record and wait paths, coordinator,
//! census tables, configuration, re-entry guard) is the client runtime's
//! ([`vitamin_runtime::client`]); this crate keeps HIP's types ([`ffi`]), the real-function table
//! ([`real`]), the hook table ([`hooks`]), the symbol version list ([`versions`]), the
//! code-object reader ([`codeobj`], pure), the process state ([`state`]) and the bind-mode
//! handlers with the client's view of the runtime ([`bind`], [`bind::HipNative`]).
#![warn(missing_docs)]

pub mod bind;
pub mod codeobj;
pub mod ffi;
pub mod hooks;
pub mod real;
pub mod state;
pub mod versions;
