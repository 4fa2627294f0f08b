"""transformers BERT-style encoder (random init, no download): sequence-classification fine-tuning steps."""
from common import deterministic_torch, digest, digest_all, finish

torch = deterministic_torch(0)
from transformers import BertConfig, BertForSequenceClassification

dev = "cuda"
cfg = BertConfig(vocab_size=4096, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=1024, max_position_embeddings=256, num_labels=3,
                 attn_implementation="eager")
model = BertForSequenceClassification(cfg).to(dev)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4)
g = torch.Generator(device=dev).manual_seed(3)
losses = []
for step in range(8):
    ids = torch.randint(0, cfg.vocab_size, (8, 128), device=dev, generator=g)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, 3, (8,), device=dev, generator=g)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    opt.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(out.loss.detach())
torch.cuda.synchronize()
finish({"losses": digest(torch.stack(losses)), "params": digest_all(model.parameters())})
