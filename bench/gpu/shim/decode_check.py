"""Decoding determinism check of issue 8 (bench/gpu/shim/decode_check.sh runs it).

A seeded, randomly initialized Llama-style model (transformers' LlamaForCausalLM built from a
LlamaConfig: no download), greedy decoding of --tokens tokens from a fixed prompt with an explicit
loop (KV cache, no `generate`, no CUDA graphs), repeated --reps times in one process while a
background thread runs large matmuls on its own CUDA stream (so under the shim's bind mode both
streams' launches are late-bound to the partitions together).

Every step's LM-head logits (fp32) and softmax probabilities are recorded; per repetition the
script writes the SHA-256 of all logits and of all probabilities, the token sequence, and, when a
reference file is given, the largest |logit - logit_ref| over the steps both runs share, the number
of steps whose selected token differs and the first such step.

Modes:
  plain    the model's own LM head (one `F.linear`) every repetition: run natively for the
           reference and under bind mode (LD_PRELOAD=libvitamin_cuda.so VITAMIN_MODE=bind
           VITAMIN_POLICY=chaos) for the check; the two must agree bit for bit.
  reshape  a reshaping treatment, natively: repetition r draws a simulated allocation size
           m_r from {8, 16, ..., 128, 132} SMs (seeded RNG) and computes the LM head as a
           split-K product with max(1, m_r // 8) chunks of the hidden dimension, summed in fp32,
           as kernel-reshaping systems size a GEMM to the SMs they were given. Everything else
           is unchanged. Compared with the plain reference.

--save-ref PATH (plain mode) stores the first repetition's logits and tokens; --ref PATH compares
with them. --deadline-s stops starting new repetitions after that many seconds (the JSON says how
many ran), so the device call ends inside its budget. The JSON is rewritten after every repetition
(`"complete": false` until the process ends normally), so a process killed by its timeout still
leaves every repetition it finished. --reshape-seed picks the sequence of simulated allocations, so
several processes with different seeds can share the repetitions of one treatment.

usage: python3 decode_check.py --mode plain --reps 25 --out run.json [--save-ref ref.pt | --ref ref.pt]
       python3 decode_check.py summarize WORKDIR OUTDIR   (decode_check.sh's table: summary.md, results.json)
"""

import argparse
import hashlib
import json
import os
import random
import threading
import time

import torch
import torch.nn.functional as F

ALLOC_SIZES = list(range(8, 129, 8)) + [132]


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["plain", "reshape"], default="plain")
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--model-seed", type=int, default=1234)
    p.add_argument("--reshape-seed", type=int, default=8)
    p.add_argument("--scope", choices=["lm_head", "all"], default="lm_head",
                   help="reshape mode: split-K in the LM head only, or in every linear layer too")
    p.add_argument("--background", type=int, default=1, help="1: co-running matmul load on a side stream")
    p.add_argument("--deadline-s", type=float, default=1e9)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    p.add_argument("--save-ref")
    p.add_argument("--ref")
    return p.parse_args()


def deterministic():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)


def build_model(a):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.hidden * 8 // 3 // 64 * 64 + 64,
        num_hidden_layers=a.layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=a.prompt_len + a.tokens + 8,
        tie_word_embeddings=False,
        # 0.05 instead of the default 0.02: with 0.02 the random model falls into a 2-token cycle;
        # with 0.05 the 64 greedy tokens are all different (checked on the CPU with this seed).
        initializer_range=0.05,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(a.model_seed)
    model = LlamaForCausalLM(cfg)
    return model.to(a.device, dtype=torch.float32).eval(), cfg


def split_k(x, weight, bias, split):
    """x @ weight^T (+ bias) as `split` chunks of the reduction dimension summed in order (fp32).
    split 0 = the single product the model would run (`F.linear`)."""
    if split == 0:
        return F.linear(x, weight, bias)
    acc = None
    for xc, wc in zip(torch.tensor_split(x, split, dim=-1), torch.tensor_split(weight, split, dim=-1)):
        part = F.linear(xc, wc)
        acc = part if acc is None else acc + part
    return acc if bias is None else acc + bias


def lm_head(h, weight, split):
    """h: [1, hidden] fp32; weight: [vocab, hidden]."""
    return split_k(h, weight, None, split)


class LayerSplit:
    """--scope all: every nn.Linear inside the decoder layers computes its product as split_k with
    the current repetition's split count (`value`; 0 = unchanged)."""

    def __init__(self, model):
        self.value = 0
        for mod in model.model.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.forward = self.wrap(mod)

    def wrap(self, mod):
        def forward(x):
            return split_k(x, mod.weight, mod.bias, self.value)

        return forward


@torch.no_grad()
def decode(model, prompt, tokens, split):
    """Greedy decoding with a KV cache. Returns (logits [tokens, vocab] fp32 on the device, token list)."""
    weight = model.lm_head.weight
    ids = prompt
    past = None
    all_logits, toks = [], []
    for _ in range(tokens):
        out = model.model(input_ids=ids, past_key_values=past, use_cache=True)
        past = out.past_key_values
        h = out.last_hidden_state[:, -1, :]
        logits = lm_head(h, weight, split).float()
        nxt = torch.argmax(logits, dim=-1)
        all_logits.append(logits[0])
        ids = nxt.view(1, 1)
        toks.append(nxt)
    return torch.stack(all_logits), [int(t) for t in torch.cat(toks).tolist()]


def sha(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


class Background:
    """Large matmuls in a loop on a side stream, in a Python thread, until stopped."""

    def __init__(self, device):
        self.stop = threading.Event()
        self.count = 0
        self.err = None
        self.device = device
        self.stream = torch.cuda.Stream(device=device) if device.startswith("cuda") else None
        g = torch.Generator(device=device).manual_seed(99)
        self.x = torch.randn(2048, 2048, device=device, generator=g)
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        try:
            while not self.stop.is_set():
                if self.stream is not None:
                    with torch.cuda.stream(self.stream):
                        y = self.x
                        for _ in range(4):
                            y = torch.tanh(y @ self.x) * 0.5
                    self.stream.synchronize()
                else:
                    y = self.x
                    for _ in range(4):
                        y = torch.tanh(y @ self.x) * 0.5
                self.count += 4
        except Exception as e:  # reported in the JSON, never silently dropped
            self.err = repr(e)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def main():
    a = parse()
    deterministic()
    t0 = time.time()
    model, cfg = build_model(a)
    g = torch.Generator().manual_seed(4321)
    prompt = torch.randint(0, a.vocab, (1, a.prompt_len), generator=g).to(a.device)
    ref = torch.load(a.ref, map_location="cpu") if a.ref else None
    rng = random.Random(a.reshape_seed)
    layer_split = LayerSplit(model) if a.mode == "reshape" and a.scope == "all" else None
    reps = []
    bg_count, bg_err = 0, None
    ctx = Background(a.device) if a.background else None

    def write_doc(complete):
        """The run's JSON so far; written after every repetition (atomically) as well as at the end,
        so a process stopped by its timeout still leaves every repetition it finished."""
        doc = {
            "mode": a.mode,
            "scope": a.scope if a.mode == "reshape" else None,
            "reshape_seed": a.reshape_seed if a.mode == "reshape" else None,
            "complete": complete,
            "reps_requested": a.reps,
            "reps_run": len(reps),
            "tokens": a.tokens,
            "prompt": prompt.cpu().tolist()[0],
            "model": {"hidden": cfg.hidden_size, "intermediate": cfg.intermediate_size,
                      "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
                      "kv_heads": cfg.num_key_value_heads, "vocab": cfg.vocab_size, "dtype": "float32",
                      "attn": "eager", "seed": a.model_seed},
            "background_matmuls": ctx.count if ctx and not complete else bg_count,
            "background_error": ctx.err if ctx and not complete else bg_err,
            "shim_preloaded": "libvitamin_cuda" in os.environ.get("LD_PRELOAD", ""),
            "vitamin_env": {k: v for k, v in os.environ.items() if k.startswith("VITAMIN_")},
            "torch": torch.__version__,
            "wall_s": round(time.time() - t0, 2),
            "reps": reps,
        }
        try:
            import transformers

            doc["transformers"] = transformers.__version__
        except Exception:
            pass
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, a.out)

    if ctx:
        ctx.__enter__()
    try:
        for r in range(a.reps):
            if time.time() - t0 > a.deadline_s:
                break
            if a.mode == "reshape":
                m = rng.choice(ALLOC_SIZES)
                split = max(1, m // 8)
            else:
                m, split = None, 0
            if layer_split is not None:
                layer_split.value = split
            ts = time.time()
            logits, toks = decode(model, prompt, a.tokens, split)
            probs = torch.softmax(logits, dim=-1)
            lc = logits.cpu()
            rec = {
                "rep": r,
                "alloc_sms": m,
                "split": split,
                "logits_sha256": sha(lc),
                "probs_sha256": sha(probs),
                "tokens": toks,
                # Smallest gap between the largest and second-largest logit over the steps: how
                # close greedy decoding came to a tie.
                "min_top2_margin": float((lambda t: (t[:, 0] - t[:, 1]).min())(lc.topk(2, dim=-1).values)),
                "wall_s": round(time.time() - ts, 3),
            }
            if ref is not None:
                n = min(lc.shape[0], ref["logits"].shape[0])
                d = (lc[:n] - ref["logits"][:n]).abs()
                rec["max_abs_logit_drift"] = float(d.max())
                # Drift before the first token change: same inputs, so the pure numerical effect.
                diff = [i for i, (x, y) in enumerate(zip(toks, ref["tokens"])) if x != y]
                first = diff[0] if diff else None
                rec["token_changes"] = len(diff)
                rec["first_token_change"] = first
                upto = first + 1 if first is not None else n
                rec["max_abs_logit_drift_before_divergence"] = float(d[:upto].max())
                rec["logits_identical_to_ref"] = rec["logits_sha256"] == ref["logits_sha256"]
                rec["probs_identical_to_ref"] = rec["probs_sha256"] == ref["probs_sha256"]
            if r == 0 and a.save_ref:
                torch.save(
                    {"logits": lc, "tokens": toks, "logits_sha256": rec["logits_sha256"],
                     "probs_sha256": rec["probs_sha256"]},
                    a.save_ref,
                )
            reps.append(rec)
            print(f"rep {r} split {split} logits {rec['logits_sha256'][:12]} probs {rec['probs_sha256'][:12]} "
                  f"drift {rec.get('max_abs_logit_drift')} changes {rec.get('token_changes')} {rec['wall_s']}s",
                  flush=True)
            write_doc(complete=False)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
            bg_count, bg_err = ctx.count, ctx.err
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    write_doc(complete=True)


def census_facts(path):
    try:
        with open(path) as f:
            c = json.load(f)
    except (OSError, ValueError):
        return {"census": False}
    b = c.get("bind") or {}
    d = b.get("dispatcher") or {}
    per_node = d.get("per_node") or []
    ops = b.get("ops") or {}
    return {
        "census": True,
        "active": b.get("active"),
        "reason": b.get("reason"),
        "policy": b.get("policy"),
        "seed": b.get("seed"),
        "pool_nodes": len(b.get("nodes") or []),
        "kernel_launches": (c.get("totals") or {}).get("kernel_launches"),
        "kernels_on_nodes": sum(per_node),
        "nodes_used": sum(1 for n in per_node if n > 0),
        "per_node": per_node,
        "ops_kernels": ops.get("kernels"),
        "native_cooperative_or_cluster": ops.get("native_cooperative_or_cluster"),
        "native_unmodelled": ops.get("native_unmodelled"),
        "bound": d.get("bound"),
        "continued": d.get("continued"),
        "rejected": d.get("rejected"),
        "submit_failures": d.get("submit_failures"),
        "failed": d.get("failed"),
    }


def summarize(w, out):
    import glob

    def load(name):
        try:
            with open(os.path.join(w, name)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def read(name):
        try:
            with open(os.path.join(w, name)) as f:
                return f.read().strip()
        except OSError:
            return ""

    res = {"date": read("date.txt"), "gpu": read("gpu.txt"), "cpu": read("cpu.txt"), "nproc": read("nproc.txt"),
           "versions": read("versions.txt"), "runs": {}}
    native = load("native.json")
    ref_sha = native["reps"][0] if native and native["reps"] else None
    rows = []
    names = ["native"] + sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(w, "chaos_*.json")))
    names += sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(w, "reshape_*.json")))
    for name in names:
        doc = load(f"{name}.json")
        if doc is None:
            res["runs"][name] = {"missing": True}
            rows.append(f"| {name} | no result (see {name}.err) | | | | | | |")
            continue
        reps = doc["reps"]
        if name == "native" and ref_sha:
            for r in reps:
                r["logits_identical_to_ref"] = r["logits_sha256"] == ref_sha["logits_sha256"]
                r["probs_identical_to_ref"] = r["probs_sha256"] == ref_sha["probs_sha256"]
                r["token_changes"] = sum(1 for x, y in zip(r["tokens"], ref_sha["tokens"]) if x != y)
                r["max_abs_logit_drift"] = 0.0 if r["logits_identical_to_ref"] else None
        li = sum(1 for r in reps if r.get("logits_identical_to_ref"))
        pi = sum(1 for r in reps if r.get("probs_identical_to_ref"))
        tc = sum(1 for r in reps if r.get("token_changes"))
        drifts = [r["max_abs_logit_drift"] for r in reps if r.get("max_abs_logit_drift") is not None]
        run = {"reps_run": len(reps), "reps_requested": doc["reps_requested"], "logits_identical": li,
               "probs_identical": pi, "reps_with_token_changes": tc, "max_abs_logit_drift": max(drifts, default=None),
               "background_matmuls": doc["background_matmuls"], "background_error": doc["background_error"],
               "wall_s": doc["wall_s"], "model": doc["model"], "shim_preloaded": doc["shim_preloaded"]}
        cen = ""
        if name.startswith("chaos_"):
            run["census"] = census_facts(os.path.join(w, f"census_{name}.json"))
            c = run["census"]
            if c.get("census"):
                cen = (f"{c['kernels_on_nodes']} of {c['kernel_launches']} kernels on pool nodes, "
                       f"{c['nodes_used']} of {c['pool_nodes']} nodes used; active {c['active']}")
            else:
                cen = "no census"
        if name.startswith("reshape"):
            by_split = {}
            for r in reps:
                s = by_split.setdefault(r["split"], {"reps": 0, "alloc_sms": set(), "logits_identical": 0,
                                                     "reps_with_token_changes": 0, "max_abs_logit_drift": 0.0,
                                                     "max_drift_before_divergence": 0.0, "first_token_change": None})
                s["reps"] += 1
                s["alloc_sms"].add(r["alloc_sms"])
                s["logits_identical"] += bool(r.get("logits_identical_to_ref"))
                s["reps_with_token_changes"] += bool(r.get("token_changes"))
                s["max_abs_logit_drift"] = max(s["max_abs_logit_drift"], r.get("max_abs_logit_drift") or 0.0)
                s["max_drift_before_divergence"] = max(s["max_drift_before_divergence"],
                                                       r.get("max_abs_logit_drift_before_divergence") or 0.0)
                if r.get("first_token_change") is not None:
                    s["first_token_change"] = r["first_token_change"]
            for s in by_split.values():
                s["alloc_sms"] = sorted(s["alloc_sms"])
            run["by_split"] = {str(k): v for k, v in sorted(by_split.items())}
        res["runs"][name] = run
        rows.append(f"| {name} | {len(reps)}/{doc['reps_requested']} | {li} | {pi} | {tc} | "
                    f"{run['max_abs_logit_drift']} | {doc['background_matmuls']} | {cen} |")
    lines = [
        "# Decoding determinism check (issue 8)", "",
        f"- date: {res['date']}", f"- GPU: {res['gpu']}", f"- host: {res['cpu']}, {res['nproc']} cores",
        f"- {res['versions']}", "",
        f"Reference: the native run's first repetition. Identical = SHA-256 of all "
        f"{native['tokens'] if native else '?'} steps' logits (fp32) / "
        "softmax probabilities equal to the reference's.",
        f"The reference's smallest gap between the largest and second-largest logit over the steps: "
        f"{ref_sha.get('min_top2_margin') if ref_sha else None}.", "",
        "| run | reps run/asked | logits identical | probs identical | reps with token changes | "
        "max abs logit drift | background matmuls | census |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ] + rows
    for name, rs in res["runs"].items():
        if not rs.get("by_split"):
            continue
        lines += ["", f"Reshaping treatment `{name}`, per split count (split-K with max(1, m // 8) chunks):", "",
                  "| split | simulated SMs | reps | logits identical | reps with token changes | max abs drift | "
                  "max drift up to the first change | first change at step |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for k, s in sorted(rs["by_split"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {k} | {s['alloc_sms']} | {s['reps']} | {s['logits_identical']} | "
                         f"{s['reps_with_token_changes']} | {s['max_abs_logit_drift']:.3g} | "
                         f"{s['max_drift_before_divergence']:.3g} | {s['first_token_change']} |")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 4 and sys.argv[1] == "summarize":
        summarize(sys.argv[2], sys.argv[3])
    else:
        main()
