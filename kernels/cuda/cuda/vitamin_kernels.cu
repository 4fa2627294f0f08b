// vitamin's NVIDIA-only utility kernels, compiled by NVRTC after the prelude and the shared suite
// (kernels/common/suite.cu, whose helpers they use): conformance-suite kernels with exactly the
// simulator's semantics, a %smid census, a spinning co-runner and empty kernels. They read
// %globaltimer and %smid with inline PTX, so they are not part of the cross-vendor source.

// ---------------------------------------------------------------------------------------------
// Test kernels of the conformance suite: exactly the simulator's semantics (hal/src/sim/kernels.rs).

// reduce_partial is the suite's FP32 partial sum (reduce_partial_impl, kernels/common/suite.cu);
// reduce_final comes from the suite as is.
VT_KERNEL void reduce_partial(const float* x, unsigned n, float* partial) {
  reduce_partial_impl<float>(x, n, partial);
}

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Each block spins for about block_ns nanoseconds; no global-memory effect. 48 KiB of static
// shared memory caps residency at 4 blocks per SM on Hopper (like the simulator's busy kernel),
// which the cooperative-launch checks rely on; the volatile stores keep the array allocated. The
// kernel never reads shared memory (other kernels leave arbitrary values there).
VT_KERNEL void busy(unsigned block_ns) {
  __shared__ volatile float pad[12288];
  unsigned long long start = globaltimer_ns();
  float a = (float)threadIdx.x;
  while (globaltimer_ns() - start < block_ns) a = a * 0.999f + 1.0f;
  pad[(threadIdx.x * 97u) % 12288u] = a;
}

// Census: block b records the SM it ran on, after spinning spin_ns so that blocks spread over
// every SM of the partition.
VT_KERNEL void smid_census(unsigned* out, unsigned spin_ns) {
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  unsigned long long start = globaltimer_ns();
  while (globaltimer_ns() - start < spin_ns) {
  }
  if (threadIdx.x == 0) out[blockIdx.x] = smid;
}

// Do nothing: the launch-overhead benchmark's kernels (without and with typical parameters).
VT_KERNEL void empty_kernel() {}
VT_KERNEL void noop3(const float* x, unsigned n, float* y) {}
