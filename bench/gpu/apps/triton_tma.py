"""Triton on Hopper's tensor memory accelerator: a matmul over host-built tensor descriptors (each a
128-byte `CUtensorMap` passed by value as a kernel parameter), the same over descriptors the kernel
builds on the device in a scratch buffer Triton asks its allocator for, and a persistent variant
whose grid is the SM count."""
from common import deterministic_torch, digest, finish

torch = deterministic_torch(0)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BM, BN, BK = 128, 128, 64


@triton.jit
def mm_host_desc(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
    c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def mm_device_desc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm, pn = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
    c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


@triton.jit
def mm_persistent(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * tiles_n
    for t in range(tl.program_id(0), tiles, tl.num_programs(0)):
        pm, pn = t // tiles_n, t % tiles_n
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([k, pn * BN]), acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


dev = "cuda"
g = torch.Generator(device=dev).manual_seed(4)
M, N, K = 1024, 768, 512
a = torch.randn(M, K, device=dev, dtype=torch.float16, generator=g)
b = torch.randn(K, N, device=dev, dtype=torch.float16, generator=g)
out, info, got = {}, {"triton": triton.__version__}, {}
try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # older Triton: no host descriptors
    TensorDescriptor = None
if TensorDescriptor is not None:
    c = torch.empty(M, N, device=dev, dtype=torch.float16)
    da, db, dc = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
                  TensorDescriptor.from_tensor(c, [BM, BN]))
    mm_host_desc[(M // BM, N // BN)](da, db, dc, K, BM=BM, BN=BN, BK=BK)
    got["host_descriptors"] = c
    cp = torch.empty(M, N, device=dev, dtype=torch.float16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mm_persistent[(min(sms, (M // BM) * (N // BN)),)](da, db, TensorDescriptor.from_tensor(cp, [BM, BN]), M, N, K,
                                                      BM=BM, BN=BN, BK=BK)
    got["persistent"] = cp
    info["host_descriptors"] = True
if hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator"):
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    c2 = torch.empty(M, N, device=dev, dtype=torch.float16)
    mm_device_desc[(M // BM, N // BN)](a, b, c2, M, N, K, BM=BM, BN=BN, BK=BK)
    got["device_descriptors"] = c2
    info["device_descriptors"] = True
if not got:
    raise SystemExit(f"Triton {triton.__version__} has no tensor descriptors")
# The reference the kernels must agree with to a tolerance (not bitwise: another accumulation order).
ref = (a.float() @ b.float()).half().float()
for name, c_ in got.items():
    assert torch.allclose(c_.float(), ref, atol=0.5, rtol=0.02), name
    out[name] = digest(c_)
torch.cuda.synchronize()
finish(out, **info)
