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




def test_scaling_normalizes_the_shares_and_bounds_a_fixed_split():
    with tempfile.TemporaryDirectory() as d:
        write(d, "r1-alone-gpt.json", {"steps_per_s": 10.0})
        write(d, "r1-alone-resnet.json", {"steps_per_s": 20.0})
        for p, (g, n) in {25: (4.0, 6.0), 50: (7.0, 12.0), 75: (9.0, 18.0)}.items():
            write(d, f"r1-pct{p}-gpt.json", {"steps_per_s": g})
            write(d, f"r1-pct{p}-resnet.json", {"steps_per_s": n})
            write(d, f"r1-split{p}-gpt.json", {"steps_per_s": g * 0.9})
            write(d, f"r1-split{p}-resnet.json", {"steps_per_s": 10.0})
        text = summary.scaling(summary.load(d))
        assert "| 50% | 0.700 | 0.600 |" in text, text
        # 75/25: GPT 0.9 alone at 75%, ResNet 0.3 alone at 25%; in the pair 0.81 + 0.5.
        assert "| 75 / 25 | 0.810 | 0.500 | **1.310** | 1.200 |" in text, text
        # The best complementary sum: 25/75 gives 0.4 + 0.9 = 1.3.
        assert text.endswith("Best sum of the alone curves at complementary shares: 1.300"), text


def test_share_normalizes_each_half_by_the_whole_device():
    with tempfile.TemporaryDirectory() as d:
        for r in (1, 2):
            write(d, f"r{r}-alone-gpt.json", {"steps_per_s": 10.0})
            write(d, f"r{r}-alone-resnet.json", {"steps_per_s": 20.0})
            write(d, f"r{r}-mps50-gpt.json", {"steps_per_s": 8.0})
            write(d, f"r{r}-mps50-resnet.json", {"steps_per_s": 16.0})
            write(d, f"r{r}-static_half-gpt.json", {"steps_per_s": 8.0 if r == 1 else 6.0})
        write(d, "r1-idlepeer_gpt-gpt.json", {"idle_s": 9.0})
        text = summary.share(summary.load(d))
        assert "| gpt | 10.00 (10.000-10.000) | 0.800 (0.800-0.800) | 0.700 (0.600-0.800) | 0.875 |" in text, text
        assert "| resnet | 20.00 (20.000-20.000) | 0.800 (0.800-0.800) | - | - |" in text, text


if __name__ == "__main__":
    test_throughput_normalizes_per_round_and_sums()
    test_digest_flags_a_mismatch()
    test_scaling_normalizes_the_shares_and_bounds_a_fixed_split()
    test_share_normalizes_each_half_by_the_whole_device()
    print("summary_test: 4 passed")
