"""Unit test of summary.py on synthetic runs (CI: python3 bench/gpu/pair/summary_test.py)."""
import json
import os
import tempfile

import summary


def write(d, name, doc):
    with open(os.path.join(d, name), "w") as f:
        json.dump(doc, f)


def test_throughput_normalizes_per_round_and_sums():
    with tempfile.TemporaryDirectory() as d:
        for r, (g, n) in enumerate([(10.0, 4.0), (12.0, 4.0)], 1):
            write(d, f"r{r}-alone-gpt.json", {"steps_per_s": g})
            write(d, f"r{r}-alone-resnet.json", {"steps_per_s": n})
            write(d, f"r{r}-mps-gpt.json", {"steps_per_s": g * 0.8})
            write(d, f"r{r}-mps-resnet.json", {"steps_per_s": n * 0.7})
            write(d, f"r{r}-daemon_throughput-gpt.json", {"steps_per_s": g * 0.9})
            write(d, f"r{r}-daemon_throughput-resnet.json", {"steps_per_s": n * 0.9})
        text = summary.throughput(summary.load(d))
        assert "| MPS | 0.800 | 0.700 | **1.500** | 1.500-1.500 | 2 |" in text, text
        assert "**1.800**" in text and "1.200x" in text, text
        assert "| time-sliced (no MPS) | - |" in text, text


def test_digest_flags_a_mismatch():
    with tempfile.TemporaryDirectory() as d:
        for tag in ("native1", "native2", "daemon_chaos"):
            write(d, f"{tag}-gpt.json", {"digest": "a" * 64})
            write(d, f"{tag}-resnet.json", {"digest": ("b" if tag != "daemon_chaos" else "c") * 64})
        text = summary.digest(summary.load(d))
        assert "| resnet | daemon_chaos | cccccccccccccccc | NO |" in text, text
        assert text.endswith("all identical: NO"), text
        write(d, "daemon_chaos-resnet.json", {"digest": "b" * 64})
        assert summary.digest(summary.load(d)).endswith("all identical: yes")


if __name__ == "__main__":
    test_throughput_normalizes_per_round_and_sums()
    test_digest_flags_a_mismatch()
    print("summary_test: 2 passed")
