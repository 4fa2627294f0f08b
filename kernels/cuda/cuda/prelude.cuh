// vitamin kernel prelude for NVRTC (CUDA C++). Maps the few names the shared suite source
// (kernels/common/suite.cu) needs; NVRTC compiles it without any header.
#define VT_VENDOR_NVIDIA 1
#define VT_KERNEL extern "C" __global__
#define vt_as_float(u) __uint_as_float(u)
#define vt_as_uint(f) __float_as_uint(f)
