"""A small fixed-structure PyTorch program whose tensors vitamin_record.py digests, for comparing
runs across processes, under vitamin's interposer, and across hosts with `vitamin compare`.

    python3 torch_app.py RECORD.json.gz

Seeded inputs, deterministic algorithms, a few layers in FP32, BF16 and FP16 (GEMM, LayerNorm,
softmax, attention via scaled_dot_product_attention, a reduction); every output is recorded.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vitamin_record import Recorder  # noqa: E402

torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"

with Recorder(sys.argv[1] if len(sys.argv) > 1 else None) as rec:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        g = torch.Generator(device="cpu").manual_seed(1234)
        x = torch.randn(64, 512, generator=g).to(dev, dtype)
        w = torch.randn(512, 512, generator=g).to(dev, dtype) / 16
        q, k, v = (torch.randn(1, 4, 128, 64, generator=g).to(dev, dtype) for _ in range(3))
        name = str(dtype).replace("torch.", "")
        h = x @ w
        rec.add("matmul/" + name, h)
        rec.add("layernorm/" + name, torch.nn.functional.layer_norm(h, (512,)))
        rec.add("softmax/" + name, torch.softmax(h.float(), dim=-1).to(dtype))
        rec.add("attention/" + name, torch.nn.functional.scaled_dot_product_attention(q, k, v))
        rec.add("sum/" + name, h.float().sum(dim=0))
    if dev == "cuda":
        torch.cuda.synchronize()
print("recorded", len(rec.cases), "tensors to", rec.path)
