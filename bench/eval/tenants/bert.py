"""BERT-style encoder training tenant (masked-LM objective, random init, bf16 autocast, AdamW).
Uses transformers' BertForMaskedLM when `import transformers` works, else a hand-written encoder
(nn.TransformerEncoder, post-norm like BERT); the result's `impl` says which.

  python3 tenants/bert.py [--layers 12] [--batch 32] [--seq 128] [--digest]
"""
import common
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 30522


class Encoder(nn.Module):
    def __init__(self, d, layers, heads, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(seq, d)
        self.ln = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx):
        x = self.ln(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))
        return self.head(self.enc(x))


def main():
    ap = common.base_args(__doc__)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--impl", choices=["auto", "transformers", "hand"], default="auto")
    a = ap.parse_args()
    t = common.tenant.Tenant("bert")
    dev = common.setup(a.digest)
    impl = None
    if a.impl in ("auto", "transformers"):
        try:
            import transformers

            cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=768, num_hidden_layers=a.layers,
                                          num_attention_heads=12, intermediate_size=3072,
                                          max_position_embeddings=max(512, a.seq), hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0)
            model = transformers.BertForMaskedLM(cfg).to(dev)
            impl = f"transformers {transformers.__version__} BertForMaskedLM"

            def logits(idx):
                return model(input_ids=idx).logits
        except ImportError as e:
            if a.impl == "transformers":
                raise
            impl = f"hand-written (transformers unavailable: {e})"
    if impl is None or impl.startswith("hand"):
        impl = impl or "hand-written (asked)"
        model = Encoder(768, a.layers, 12, a.seq).to(dev)

        def logits(idx):
            return model(idx)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randint(0, VOCAB, (a.batch, a.seq), generator=g)
    mask = torch.rand(a.batch, a.seq, generator=g) < 0.15
    y = torch.where(mask, x, torch.full_like(x, -100)).to(dev)
    x = torch.where(mask, torch.full_like(x, 103), x).to(dev)  # [MASK]

    def step():
        with common.autocast():
            out = logits(x)
        loss = F.cross_entropy(out.view(-1, VOCAB).float(), y.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    common.train_main(t, a, model, step, {"model": f"bert-{a.layers}l", "impl": impl, "batch": a.batch,
                                          "seq": a.seq}, samples_per_step=a.batch)


if __name__ == "__main__":
    main()
