"""A Triton kernel with @triton.autotune (several block sizes benchmarked), plus torch.fft."""
from common import deterministic_torch, digest, finish

torch = deterministic_torch(0)
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in
                          [(256, 2), (512, 4), (1024, 4), (2048, 8)]], key=["n"])
@triton.jit
def rownorm(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        m = start + offs < n
        v = tl.load(x_ptr + row * n + start + offs, mask=m, other=0.0)
        acc += v * v
    # the reduction order depends on BLOCK: write each row's sum of squares per lane, fixed tree below
    tl.store(out_ptr + row, tl.sqrt(tl.sum(acc, axis=0)))


dev = "cuda"
g = torch.Generator(device=dev).manual_seed(9)
x = torch.randn(512, 4096, device=dev, generator=g)
out = torch.empty(512, device=dev)
rownorm[(512,)](x, out, 4096)
torch.cuda.synchronize()
best = rownorm.best_config.kwargs["BLOCK"]
# the autotuner's pick may differ between runs (timing); digest with the pick fixed by re-running
# every config explicitly, so the digest covers all of them and does not depend on the timing
outs = []
for cfg in rownorm.configs:
    o = torch.empty(512, device=dev)
    rownorm.fn[(512,)](x, o, 4096, BLOCK=cfg.kwargs["BLOCK"], num_warps=cfg.num_warps)
    outs.append(o)
spec = torch.fft.rfft2(x.view(64, 8, 4096)).abs()
torch.cuda.synchronize()
finish({"rownorm_all": digest(torch.stack(outs)), "fft": digest(spec)}, best_block=best)
