"""transformers Llama-style decoder (random init, bf16, no download): greedy decoding with a KV cache."""
from common import deterministic_torch, digest, finish

torch = deterministic_torch(0)
from transformers import LlamaConfig, LlamaForCausalLM

dev = "cuda"
cfg = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
model = LlamaForCausalLM(cfg).to(dev, dtype=torch.bfloat16).eval()
g = torch.Generator(device=dev).manual_seed(4)
prompt = torch.randint(0, cfg.vocab_size, (2, 24), device=dev, generator=g)
with torch.no_grad():
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=48,
                         do_sample=False, output_logits=True, return_dict_in_generate=True,
                         pad_token_id=0)
logits = torch.stack(out.logits)
finish({"tokens": digest(out.sequences), "logits": digest(logits)}, tokens=out.sequences[0, -8:].tolist())
