// vitamin's determinism suite: one source for NVRTC and hipRTC (and, with the HIP prelude's
// include, for hipcc). Written in the common subset of CUDA C++ and HIP C++: no headers, no
// warp-level primitives (warp size differs: 32 vs 64), no vendor intrinsics beyond the bit casts
// the preludes map (vt_as_float / vt_as_uint), and only the math functions both define (sqrtf,
// expf, fmaxf). A vendor prelude (kernels/cuda/cuda/prelude.cuh, kernels/hip/hip/prelude.h) comes
// first and defines VT_KERNEL and the bit casts.
//
// Rules every kernel here follows, so that its result depends only on its launch (grid, block,
// arguments) and never on where or when its blocks run:
//   - each block owns a fixed slice of the work, chosen from blockIdx/threadIdx/gridDim alone;
//   - partial results are combined in a fixed order (shared-memory trees, in-order loops);
//   - no atomics on floats, no dependence on the SM/CU a block runs on, clocks or unit counts.
// Arithmetic is FP32 whatever the storage type. Products are accumulated as written
// (`acc += a * b`): whether the compiler contracts that into an FMA is a compile option
// (NVRTC --fmad, clang -ffp-contract), recorded with every result; the CPU reference
// (kernels/cuda/src/cpu.rs) computes the same expressions without contraction.
//
// BF16 and FP16 are stored as 16-bit patterns in distinct one-member structs (so overloads tell
// them apart) and converted in software with round-to-nearest-even: the conversions are exact
// functions of the bits, identical on every vendor and on the CPU (kernels/cuda/src/{bf16,f16}.rs).

struct vt_bf16 { unsigned short bits; };
struct vt_f16 { unsigned short bits; };

__device__ __forceinline__ float bf16_to_f32(vt_bf16 h) { return vt_as_float(((unsigned)h.bits) << 16); }

__device__ __forceinline__ vt_bf16 f32_to_bf16(float f) {
  unsigned u = vt_as_uint(f);
  vt_bf16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.bits = (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    return h;
  }
  unsigned rounding = 0x7fffu + ((u >> 16) & 1u);
  h.bits = (unsigned short)((u + rounding) >> 16);
  return h;
}

__device__ __forceinline__ float f16_to_f32(vt_f16 h) {
  unsigned sign = ((unsigned)h.bits & 0x8000u) << 16;
  unsigned e = ((unsigned)h.bits >> 10) & 0x1fu, m = (unsigned)h.bits & 0x3ffu;
  if (e == 0x1fu) return vt_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0u) {  // zero or subnormal: m * 2^-24, exact in FP32
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return vt_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ vt_f16 f32_to_f16(float f) {
  unsigned x = vt_as_uint(f);
  unsigned sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  vt_f16 h;
  if (ax > 0x7f800000u) {  // NaN: quiet, top payload bits kept
    h.bits = (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  } else if (ax >= 0x477ff000u) {  // >= 65520 rounds to infinity
    h.bits = (unsigned short)(sign | 0x7c00u);
  } else if (ax >= 0x38800000u) {  // normal: rebias the exponent, round the dropped 13 bits to even
    h.bits = (unsigned short)(sign | ((ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13));
  } else if (ax < 0x33000000u) {  // below half the smallest subnormal (2^-25): zero
    h.bits = (unsigned short)sign;
  } else {  // subnormal: units of 2^-24, round to even
    unsigned m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - (ax >> 23);
    unsigned q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    h.bits = (unsigned short)(sign | q);
  }
  return h;
}

__device__ __forceinline__ float load(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ float load(const vt_bf16* p, unsigned long long i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ float load(const vt_f16* p, unsigned long long i) { return f16_to_f32(p[i]); }
__device__ __forceinline__ void store(float* p, unsigned long long i, float v) { p[i] = v; }
__device__ __forceinline__ void store(vt_bf16* p, unsigned long long i, float v) { p[i] = f32_to_bf16(v); }
__device__ __forceinline__ void store(vt_f16* p, unsigned long long i, float v) { p[i] = f32_to_f16(v); }

// Sums s[0..blockDim.x) into s[0] by the shared-memory tree s[t] += s[t+k], k = T/2 .. 1.
// blockDim.x must be a power of two <= 1024.
__device__ __forceinline__ void block_tree_sum(float* s) {
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
}

// The same tree with fmaxf (exact, so any order gives the same bits; kept a tree for symmetry).
__device__ __forceinline__ void block_tree_max(float* s) {
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + k]);
    __syncthreads();
  }
}

// Start value of running maxima: the most negative finite float (fast-math builds may assume no
// infinities).
#define VT_NEG_MAX (-3.402823466e38f)

// ---------------------------------------------------------------------------------------------
// Block-partitioned reduction: reduce_partial_<T> then reduce_final (FP32 partials and result).
// Block b of G blocks with T threads: thread t sums x[i], i = b*T + t, +G*T, ... in order; the
// block combines its threads by the shared-memory tree and writes partial[b].
template <typename T>
__device__ void reduce_partial_impl(const T* x, unsigned n, float* partial) {
  __shared__ float s[1024];
  float acc = 0.0f;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    acc += load(x, i);
  s[threadIdx.x] = acc;
  __syncthreads();
  block_tree_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

VT_KERNEL void reduce_partial_f32(const float* x, unsigned n, float* partial) { reduce_partial_impl<float>(x, n, partial); }
VT_KERNEL void reduce_partial_bf16(const vt_bf16* x, unsigned n, float* partial) {
  reduce_partial_impl<vt_bf16>(x, n, partial);
}
VT_KERNEL void reduce_partial_f16(const vt_f16* x, unsigned n, float* partial) {
  reduce_partial_impl<vt_f16>(x, n, partial);
}

// One thread sums partial[0..m) in block order into *out.
VT_KERNEL void reduce_final(const float* partial, unsigned m, float* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float acc = 0.0f;
    for (unsigned i = 0; i < m; i++) acc += partial[i];
    *out = acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Split-K GEMM, C[M,N] = A[M,K] * B[K,N] (row-major). Grid (ceil(N/16), ceil(M/16), S), block
// (16,16). Block (bx,by,s) computes the 16x16 tile's partial product over k-tiles
// [s*kt/S, (s+1)*kt/S) (kt = ceil(K/16)) in order and writes it to ws[s][M][N] (FP32).
#define GEMM_TILE 16
template <typename T>
__device__ void gemm_splitk_partial_impl(const T* A, const T* B, float* ws, unsigned M, unsigned N, unsigned K) {
  __shared__ float As[GEMM_TILE][GEMM_TILE];
  __shared__ float Bs[GEMM_TILE][GEMM_TILE + 1];
  unsigned tx = threadIdx.x, ty = threadIdx.y;
  unsigned row = blockIdx.y * GEMM_TILE + ty, col = blockIdx.x * GEMM_TILE + tx;
  unsigned S = gridDim.z, s = blockIdx.z;
  unsigned kt = (K + GEMM_TILE - 1) / GEMM_TILE;
  unsigned t0 = (unsigned)((unsigned long long)s * kt / S), t1 = (unsigned)((unsigned long long)(s + 1) * kt / S);
  float acc = 0.0f;
  for (unsigned t = t0; t < t1; t++) {
    unsigned ka = t * GEMM_TILE + tx, kb = t * GEMM_TILE + ty;
    As[ty][tx] = (row < M && ka < K) ? load(A, (unsigned long long)row * K + ka) : 0.0f;
    Bs[ty][tx] = (kb < K && col < N) ? load(B, (unsigned long long)kb * N + col) : 0.0f;
    __syncthreads();
#pragma unroll
    for (unsigned k = 0; k < GEMM_TILE; k++) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) ws[((unsigned long long)s * M + row) * N + col] = acc;
}
VT_KERNEL void gemm_splitk_partial_f32(const float* A, const float* B, float* ws, unsigned M, unsigned N, unsigned K) {
  gemm_splitk_partial_impl<float>(A, B, ws, M, N, K);
}
VT_KERNEL void gemm_splitk_partial_bf16(const vt_bf16* A, const vt_bf16* B, float* ws, unsigned M, unsigned N,
                                        unsigned K) {
  gemm_splitk_partial_impl<vt_bf16>(A, B, ws, M, N, K);
}
VT_KERNEL void gemm_splitk_partial_f16(const vt_f16* A, const vt_f16* B, float* ws, unsigned M, unsigned N,
                                       unsigned K) {
  gemm_splitk_partial_impl<vt_f16>(A, B, ws, M, N, K);
}

// C[e] = sum over s = 0..S-1 (in order) of ws[s][e], for e < count (grid-stride).
template <typename T>
__device__ void splitk_reduce_impl(const float* ws, unsigned S, unsigned count, T* C) {
  for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < count; e += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (unsigned s = 0; s < S; s++) acc += ws[(unsigned long long)s * count + e];
    store(C, e, acc);
  }
}
VT_KERNEL void splitk_reduce_f32(const float* ws, unsigned S, unsigned count, float* C) {
  splitk_reduce_impl<float>(ws, S, count, C);
}
VT_KERNEL void splitk_reduce_bf16(const float* ws, unsigned S, unsigned count, vt_bf16* C) {
  splitk_reduce_impl<vt_bf16>(ws, S, count, C);
}
VT_KERNEL void splitk_reduce_f16(const float* ws, unsigned S, unsigned count, vt_f16* C) {
  splitk_reduce_impl<vt_f16>(ws, S, count, C);
}

// ---------------------------------------------------------------------------------------------
// LayerNorm over rows of length C: one block (T threads, power of two) per row, grid-stride over
// rows. Two passes (mean, then variance of x - mean), each a per-thread strided sum combined by the
// shared-memory tree; rstd = 1 / sqrt(var + eps) (both correctly rounded unless fast math);
// y = (x - mean) * rstd * gamma + beta.
template <typename T>
__device__ void layernorm_impl(const T* x, const T* gamma, const T* beta, T* y, unsigned R, unsigned C, float eps) {
  __shared__ float s[1024];
  for (unsigned r = blockIdx.x; r < R; r += gridDim.x) {
    const unsigned long long base = (unsigned long long)r * C;
    float acc = 0.0f;
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x) acc += load(x, base + c);
    s[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(s);
    const float mean = s[0] / (float)C;
    __syncthreads();
    acc = 0.0f;
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x) {
      float d = load(x, base + c) - mean;
      acc += d * d;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(s);
    const float rstd = 1.0f / sqrtf(s[0] / (float)C + eps);
    __syncthreads();
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x)
      store(y, base + c, (load(x, base + c) - mean) * rstd * load(gamma, c) + load(beta, c));
  }
}
VT_KERNEL void layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, unsigned R, unsigned C,
                             float eps) {
  layernorm_impl<float>(x, gamma, beta, y, R, C, eps);
}
VT_KERNEL void layernorm_bf16(const vt_bf16* x, const vt_bf16* gamma, const vt_bf16* beta, vt_bf16* y, unsigned R,
                              unsigned C, float eps) {
  layernorm_impl<vt_bf16>(x, gamma, beta, y, R, C, eps);
}
VT_KERNEL void layernorm_f16(const vt_f16* x, const vt_f16* gamma, const vt_f16* beta, vt_f16* y, unsigned R,
                             unsigned C, float eps) {
  layernorm_impl<vt_f16>(x, gamma, beta, y, R, C, eps);
}

// ---------------------------------------------------------------------------------------------
// GEMV, y[M] = A[M,K] * x[K] (row-major): one block (T threads, power of two) per row,
// grid-stride over rows; per-thread strided dot products combined by the shared-memory tree.
template <typename T>
__device__ void gemv_impl(const T* A, const T* x, T* y, unsigned M, unsigned K) {
  __shared__ float s[1024];
  for (unsigned r = blockIdx.x; r < M; r += gridDim.x) {
    const unsigned long long base = (unsigned long long)r * K;
    float acc = 0.0f;
    for (unsigned k = threadIdx.x; k < K; k += blockDim.x) acc += load(A, base + k) * load(x, k);
    s[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(s);
    if (threadIdx.x == 0) store(y, r, s[0]);
    __syncthreads();
  }
}
VT_KERNEL void gemv_f32(const float* A, const float* x, float* y, unsigned M, unsigned K) {
  gemv_impl<float>(A, x, y, M, K);
}
VT_KERNEL void gemv_bf16(const vt_bf16* A, const vt_bf16* x, vt_bf16* y, unsigned M, unsigned K) {
  gemv_impl<vt_bf16>(A, x, y, M, K);
}
VT_KERNEL void gemv_f16(const vt_f16* A, const vt_f16* x, vt_f16* y, unsigned M, unsigned K) {
  gemv_impl<vt_f16>(A, x, y, M, K);
}

// ---------------------------------------------------------------------------------------------
// Softmax over rows of length C: one block (T threads, power of two) per row, grid-stride over
// rows. Row maximum (per-thread strided fmaxf, tree), then the sum of expf(x - max) (per-thread
// strided, tree), then y = expf(x - max) / sum.
template <typename T>
__device__ void softmax_impl(const T* x, T* y, unsigned R, unsigned C) {
  __shared__ float s[1024];
  for (unsigned r = blockIdx.x; r < R; r += gridDim.x) {
    const unsigned long long base = (unsigned long long)r * C;
    float m = VT_NEG_MAX;
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, load(x, base + c));
    s[threadIdx.x] = m;
    __syncthreads();
    block_tree_max(s);
    const float rmax = s[0];
    __syncthreads();
    float acc = 0.0f;
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x) acc += expf(load(x, base + c) - rmax);
    s[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(s);
    const float sum = s[0];
    __syncthreads();
    for (unsigned c = threadIdx.x; c < C; c += blockDim.x) store(y, base + c, expf(load(x, base + c) - rmax) / sum);
  }
}
VT_KERNEL void softmax_f32(const float* x, float* y, unsigned R, unsigned C) { softmax_impl<float>(x, y, R, C); }
VT_KERNEL void softmax_bf16(const vt_bf16* x, vt_bf16* y, unsigned R, unsigned C) { softmax_impl<vt_bf16>(x, y, R, C); }
VT_KERNEL void softmax_f16(const vt_f16* x, vt_f16* y, unsigned R, unsigned C) { softmax_impl<vt_f16>(x, y, R, C); }

// ---------------------------------------------------------------------------------------------
// A small attention block (one head, no mask): O = softmax(Q K^T * scale) V with Q, K, V of
// [L, D] (L <= 1024). One block (T threads, power of two) per query row, grid-stride over rows.
// Thread t scores keys j = t, t+T, ... (dot product over d in order, then * scale) into shared
// memory; row max and the sum of p_j = expf(score_j - max) by trees; then thread t computes
// output columns c = t, t+T, ...: sum over j in order of p_j * V[j][c], divided by the sum.
#define ATTN_MAX_L 1024
template <typename T>
__device__ void attention_impl(const T* Q, const T* K, const T* V, T* O, unsigned L, unsigned D, float scale) {
  __shared__ float p[ATTN_MAX_L];
  __shared__ float s[1024];
  for (unsigned i = blockIdx.x; i < L; i += gridDim.x) {
    const unsigned long long qbase = (unsigned long long)i * D;
    float m = VT_NEG_MAX;
    for (unsigned j = threadIdx.x; j < L; j += blockDim.x) {
      const unsigned long long kbase = (unsigned long long)j * D;
      float dot = 0.0f;
      for (unsigned d = 0; d < D; d++) dot += load(Q, qbase + d) * load(K, kbase + d);
      float sc = dot * scale;
      p[j] = sc;
      m = fmaxf(m, sc);
    }
    s[threadIdx.x] = m;
    __syncthreads();
    block_tree_max(s);
    const float rmax = s[0];
    __syncthreads();
    float acc = 0.0f;
    for (unsigned j = threadIdx.x; j < L; j += blockDim.x) {
      float e = expf(p[j] - rmax);
      p[j] = e;
      acc += e;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    block_tree_sum(s);
    const float sum = s[0];
    __syncthreads();
    for (unsigned c = threadIdx.x; c < D; c += blockDim.x) {
      float o = 0.0f;
      for (unsigned j = 0; j < L; j++) o += p[j] * load(V, (unsigned long long)j * D + c);
      store(O, qbase + c, o / sum);
    }
    __syncthreads();
  }
}
VT_KERNEL void attention_f32(const float* Q, const float* K, const float* V, float* O, unsigned L, unsigned D,
                             float scale) {
  attention_impl<float>(Q, K, V, O, L, D, scale);
}
VT_KERNEL void attention_bf16(const vt_bf16* Q, const vt_bf16* K, const vt_bf16* V, vt_bf16* O, unsigned L,
                              unsigned D, float scale) {
  attention_impl<vt_bf16>(Q, K, V, O, L, D, scale);
}
VT_KERNEL void attention_f16(const vt_f16* Q, const vt_f16* K, const vt_f16* V, vt_f16* O, unsigned L, unsigned D,
                             float scale) {
  attention_impl<vt_f16>(Q, K, V, O, L, D, scale);
}
