"""The hand-written Llama's sizes (llm.py, which re-exports them as llm.SIZES), in a module without
torch so that tenants_test.py can check decoder.py's arguments where torch is not installed."""

SIZES = {
    "tiny": dict(vocab=32000, d=512, layers=4, heads=8, ffn=1408),
    "small": dict(vocab=32000, d=1024, layers=8, heads=16, ffn=2816),
    "medium": dict(vocab=32000, d=2048, layers=16, heads=16, ffn=5632),
    # Llama 3 8B's shape (grouped-query attention, 8 KV heads; 16 GB of bf16 weights read per token).
    # Under eager transformers on the H200 its decode was still host-bound: 32-33 ms per token alone
    # (docs/results/eval.md, mixed-llama8b); decoder.py --cuda-graph replays the hand-written model's
    # decode step as one CUDA graph. build(on_device=True) creates it on the device in bf16.
    "8b": dict(vocab=128256, d=4096, layers=32, heads=32, ffn=14336, kv_heads=8),
}

# Sizes built directly on the device in bf16 (llm.build(on_device=True)) rather than on the host and copied.
ON_DEVICE = {"8b"}
