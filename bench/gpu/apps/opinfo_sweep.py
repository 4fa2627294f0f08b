"""PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db): every op with
CUDA samples in float32 and bfloat16, the first SAMPLES samples each, outputs digested. Needs the
`expecttest` package (carried as a wheel). Ops that raise do so identically every run: the error's
type is part of the digest."""
import os
from common import deterministic_torch, digest_bytes, finish

torch = deterministic_torch(0)
from torch.testing._internal.common_methods_invocations import op_db

SAMPLES = int(os.environ.get("OPINFO_SAMPLES", "2"))
dev = "cuda"


def flat(x, out):
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            x = torch.view_as_real(x.resolve_conj())
        out.append(x.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()
                   if x.numel() else b"empty")
    elif isinstance(x, (list, tuple)):
        for y in x:
            flat(y, out)
    elif isinstance(x, dict):
        for k in sorted(x):
            flat(x[k], out)
    elif isinstance(x, (int, float, bool)):
        out.append(repr(x).encode())


res, counts = {}, {"ops": 0, "samples": 0, "errors": 0}
for dtype in (torch.float32, torch.bfloat16):
    for op in op_db:
        if dtype not in op.supported_dtypes("cuda"):
            continue
        key = f"{op.name}.{op.variant_test_name}.{str(dtype)[6:]}"
        torch.manual_seed(0)
        parts = []
        try:
            samples = list(op.sample_inputs(dev, dtype, requires_grad=False))[:SAMPLES]
        except Exception as e:  # noqa: BLE001 - recorded, identically each run
            parts.append(f"sample-error:{type(e).__name__}".encode())
            samples = []
        counts["ops"] += 1
        for s in samples:
            counts["samples"] += 1
            torch.manual_seed(1)
            try:
                r = op(s.input, *s.args, **s.kwargs)
                flat(r, parts)
            except Exception as e:  # noqa: BLE001
                counts["errors"] += 1
                parts.append(f"error:{type(e).__name__}".encode())
        res[key] = digest_bytes(b"|".join(parts))
torch.cuda.synchronize()
finish(res, **counts)
