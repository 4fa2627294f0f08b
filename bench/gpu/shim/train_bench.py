"""Training-step time of a small transformer, for the shim's overhead check (run.sh).

Two TransformerEncoder layers (d_model 512, 8 heads, FFN 2048), batch 32 x 128 tokens, fp32,
AdamW. After 30 warm-up steps, times 15 blocks of 20 steps with CUDA events and reports the
median step time (ms) and the spread over blocks. run.sh runs it alternately with and without the
shim and compares medians.

usage: python3 train_bench.py OUT.json
"""

import json
import statistics
import sys

import torch

torch.manual_seed(0)
dev = "cuda"
layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True, dropout=0.0)
model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(dev)
head = torch.nn.Linear(512, 512).to(dev)
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=1e-4)
x = torch.randn(32, 128, 512, device=dev)
target = torch.randn(32, 128, 512, device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(head(model(x)), target)
    loss.backward()
    opt.step()
    return loss


for _ in range(30):
    step()
torch.cuda.synchronize()

BLOCKS, STEPS = 15, 20
per_step = []
for _ in range(BLOCKS):
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(STEPS):
        loss = step()
    b.record()
    b.synchronize()
    per_step.append(a.elapsed_time(b) / STEPS)

doc = {
    "median_step_ms": statistics.median(per_step),
    "min_step_ms": min(per_step),
    "max_step_ms": max(per_step),
    "blocks": BLOCKS,
    "steps_per_block": STEPS,
    "final_loss": float(loss.item()),
}
with open(sys.argv[1], "w") as f:
    json.dump(doc, f)
print(json.dumps(doc))
