// vitamin kernel prelude for HIP (hipRTC, or hipcc for the offline compile check). Maps the few
// names the shared suite source (kernels/common/suite.cu) needs. hipRTC defines __HIPCC_RTC__ and
// needs no header; hipcc compiling a file needs hip_runtime.h for the built-in variables.
#if !defined(__HIPCC_RTC__)
#include <hip/hip_runtime.h>
#endif
#define VT_VENDOR_AMD 1
#define VT_KERNEL extern "C" __global__
#define vt_as_float(u) __uint_as_float(u)
#define vt_as_uint(f) __float_as_uint(f)
