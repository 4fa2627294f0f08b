#!/usr/bin/env bash
# Tries bench/gpu/shim/issue8_check.sh here, without a GPU, and checks what its summary says.
#
#   bash bench/gpu/shim/issue8_selftest.sh
#   SELFTEST_PYTHON=/path/to/venv/bin/python bash bench/gpu/shim/issue8_selftest.sh
#
# Stand-ins: a fake nvcc whose "runtime_app" prints a fixed stdout, a fake cudarc_app and a fake
# torch_check.py; in bind mode each writes a census like the shim's (pool nodes drawn from the
# seed). Injected faults: the runtime_app run with seed 3 hangs (must time out and FAIL that
# check), the cudarc run with seed 4 prints a different checksum (must FAIL as "stdout differs"),
# and the PyTorch stand-in is correct (must PASS, native repeatable). A fake gpu_tests binary fills
# the optional slot. Decoding: with SELFTEST_PYTHON (default python3) able to import torch and
# transformers, the real decode_check.py runs on the CPU (tiny model, no background load) through a
# wrapper that adds a census in bind mode; otherwise a stand-in writes decode_check.py's JSON.
# Runs: (1) the full flow, (2) a tight budget (later steps must be skipped and said so), (3) DRY_RUN.
# Exits non-zero when an expectation fails.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/issue8-selftest.XXXXXX)
PY=${SELFTEST_PYTHON:-python3}
F="$T/fake"
mkdir -p "$F"

cat > "$F/fake_census.py" << 'EOF'
"""fake_census.py SEED PATH KERNELS: a census shaped like the shim's bind-mode census."""
import json, random, sys

seed, path, kernels = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
labels = ["SM 0-131"] + [f"SM {8 * i}-{8 * i + 7}" for i in range(58)]
rng = random.Random(seed)
per_node = [0] * len(labels)
for _ in range(kernels):
    per_node[rng.randrange(len(labels))] += 1
doc = {"schema": "vitamin.shim.census/1", "mode": "bind", "totals": {"kernel_launches": kernels, "graph_launches": 0},
       "bind": {"active": True, "policy": "chaos", "seed": seed, "nodes": labels, "realize_ms": 100.0 + seed,
                "ops": {"kernels": kernels, "native_unmodelled": 4, "native_cooperative_or_cluster": 0},
                "dispatcher": {"per_node": per_node, "failed": 0, "submit_failures": 0, "rejected": 0}}}
with open(path, "w") as f:
    json.dump(doc, f)
EOF

cat > "$F/nvcc" << EOF
#!/usr/bin/env bash
# fake nvcc: writes a fake runtime_app to the -o path
while [ \$# -gt 0 ]; do [ "\$1" = -o ] && out=\$2; shift; done
cat > "\$out" << 'APP'
#!/usr/bin/env bash
seed=\${VITAMIN_SEED:-0}
[ "\${VITAMIN_MODE:-}" = bind ] && [ "\$seed" = 3 ] && sleep 60
echo "y fnv1a=e5ef5874e4736c6a"
echo "host function + callback counter=11"
echo "runtime_app: 20 launches in 0.5 ms" >&2
[ -n "\${VITAMIN_CENSUS:-}" ] && python3 "$F/fake_census.py" "\$seed" "\$VITAMIN_CENSUS" 22
exit 0
APP
chmod +x "\$out"
EOF

cat > "$F/cudarc_app" << EOF
#!/usr/bin/env bash
seed=\${VITAMIN_SEED:-0}
if [ "\${VITAMIN_MODE:-}" = bind ] && [ "\$seed" = 4 ]; then echo "y_fnv1a=0000000000000000"; else
    echo "y_fnv1a=a7709ca5077691a8"; fi
echo "invalid_launch_error=1"
[ -n "\${VITAMIN_CENSUS:-}" ] && python3 "$F/fake_census.py" "\$seed" "\$VITAMIN_CENSUS" 11
exit 0
EOF

cat > "$F/torch_check.py" << EOF
"""stand-in for torch_check.py OUT TRACE"""
import json, os, subprocess, sys, time
time.sleep(float(os.environ.get("FAKE_TORCH_SLEEP", "0.5")))
doc = {"results": {"matmul_fp32": "abcd", "item": "1.5", "graph_replays": ["a", "b", "c"]},
       "profiler": {"kernels_not_from_graphs": 302, "graph_launch_calls": 3}}
with open(sys.argv[1], "w") as f:
    json.dump(doc, f)
if os.environ.get("VITAMIN_CENSUS"):
    subprocess.check_call(["python3", "$F/fake_census.py", os.environ.get("VITAMIN_SEED", "0"),
                           os.environ["VITAMIN_CENSUS"], "301"])
EOF

cat > "$F/gpu_tests" << 'EOF'
#!/usr/bin/env bash
echo "args: $*"
echo "test graph_launch_sms_within_partition ... ok"
echo "test result: ok. 1 passed; 0 failed"
EOF

cat > "$F/decode_wrap.py" << EOF
"""Runs the real decode_check.py, then writes a census in bind mode (no shim here)."""
import os, runpy, subprocess, sys
sys.argv[0] = "$HERE/decode_check.py"
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    if os.environ.get("VITAMIN_CENSUS"):
        subprocess.check_call(["python3", "$F/fake_census.py", os.environ.get("VITAMIN_SEED", "0"),
                               os.environ["VITAMIN_CENSUS"], "5000"])
EOF

cat > "$F/decode_fake.py" << EOF
"""Stand-in for decode_check.py: its JSON, with split-dependent fake logits hashes and drift."""
import argparse, json, os, random, subprocess
p = argparse.ArgumentParser()
for a in ("--mode", "--scope", "--out", "--ref", "--save-ref", "--device", "--background"):
    p.add_argument(a)
for a in ("--reps", "--reshape-seed", "--tokens"):
    p.add_argument(a, type=int, default=4)
p.add_argument("--deadline-s", type=float)
a = p.parse_args()
rng = random.Random(a.reshape_seed)
reps = []
for r in range(a.reps):
    split = max(1, rng.choice(list(range(8, 129, 8)) + [132]) // 8) if a.mode == "reshape" else 0
    same = split <= 1
    reps.append({"rep": r, "split": split, "alloc_sms": split * 8 if split else None,
                 "logits_sha256": "ref" if same else f"l{split}", "probs_sha256": "ref" if same else f"p{split}",
                 "tokens": [1, 2, 3, 4], "min_top2_margin": 3e-4, "max_abs_logit_drift": 0.0 if same else 1e-6 * split,
                 "max_abs_logit_drift_before_divergence": 0.0 if same else 1e-6 * split, "token_changes": 0,
                 "first_token_change": None, "logits_identical_to_ref": same, "probs_identical_to_ref": same})
if a.save_ref:
    open(a.save_ref, "w").write("ref")
with open(a.out, "w") as f:
    json.dump({"mode": a.mode, "complete": True, "reps_requested": a.reps, "reps_run": len(reps), "tokens": 4,
               "background_matmuls": 0, "background_error": None, "reps": reps}, f)
if os.environ.get("VITAMIN_CENSUS"):
    subprocess.check_call(["python3", "$F/fake_census.py", os.environ.get("VITAMIN_SEED", "0"),
                           os.environ["VITAMIN_CENSUS"], "5000"])
EOF
chmod +x "$F/nvcc" "$F/cudarc_app" "$F/gpu_tests"

if $PY -c 'import torch, transformers' 2> /dev/null; then
    DECODE_SCRIPT="$F/decode_wrap.py"
    DECODE_EXTRA="--device cpu --tokens 6 --hidden 128 --layers 2 --vocab 2000 --background 0"
    echo "decoding: the real decode_check.py on the CPU ($PY)"
else
    DECODE_SCRIPT="$F/decode_fake.py"
    DECODE_EXTRA=""
    echo "decoding: a stand-in ($PY cannot import torch and transformers)"
fi

common=(env PATH="$F:$PATH" PYTHON="$PY" SHIM="" CUDARC_APP="$F/cudarc_app" TORCH_CHECK="$F/torch_check.py"
    DECODE="$DECODE_SCRIPT" EXTRA="$DECODE_EXTRA" GPU_TESTS="$F/gpu_tests" APP_TIMEOUT=4 DECODE_TAIL_S=30)
fails=0
expect() { # DESCRIPTION python-expression over r (results.json) ...
    local desc=$1 out=$2 expr=$3
    if python3 -c "import json,sys; r=json.load(open('$out/results.json')); sys.exit(0 if ($expr) else 1)"; then
        echo "ok: $desc"
    else
        echo "FAILED: $desc   [$expr]"
        fails=$((fails + 1))
    fi
}

holds() { # STATUS DESCRIPTION
    if [ "$1" -eq 0 ]; then echo "ok: $2"; else echo "FAILED: $2"; fails=$((fails + 1)); fi
}

echo "=== run 1: full flow"
"${common[@]}" OUT="$T/out1" RESHAPE_REPS=6 RESHAPE_PROCS_LM=2 RESHAPE_PROCS_ALL=3 DECODE_BIND_REPS=2 \
    DECODE_NATIVE_REPS=2 DECODE_MIN_S=30 BUDGET_S=400 bash "$HERE/issue8_check.sh" > "$T/run1.txt" 2>&1
o="$T/out1"
expect "at most 8 files under OUT" "$o" "len(__import__('os').listdir('$o')) <= 8"
expect "runtime_app: 9 of 10 identical, FAIL (seed 3 timed out)" "$o" \
    "r['apps']['rt']['identical'] == 9 and r['apps']['rt']['verdict'] == 'FAIL' and \
     any('timed out' in p for x in r['apps']['rt']['runs'] if x['seed'] == '3' for p in x['problems'])"
expect "cudarc: seed 4 differs, FAIL" "$o" \
    "r['apps']['cudarc']['identical'] == 9 and r['apps']['cudarc']['verdict'] == 'FAIL' and \
     [x['seed'] for x in r['apps']['cudarc']['runs'] if x['identical'] is False] == ['4']"
expect "torch: 10 of 10 identical, PASS, native repeatable" "$o" \
    "r['apps']['torch']['identical'] == 10 and r['apps']['torch']['verdict'] == 'PASS' and \
     r['apps']['torch']['native_repeatable'] is True"
expect "census: nodes per run and their union (union >= every run's count)" "$o" \
    "all(n and n <= len(r['apps']['torch']['nodes_union']) for n in r['apps']['torch']['nodes_used_per_run']) \
     and r['apps']['torch']['pool_nodes'] == 59 and len(r['apps']['torch']['nodes_union']) > 50"
expect "decoding bind: 2 of 2 reps identical, PASS" "$o" \
    "r['decode']['bind']['reps_run'] == 2 and r['decode']['bind']['verdict'] == 'PASS'"
expect "reshaping: 6 reps per scope over 2 and 3 processes" "$o" \
    "r['decode']['reshape_lm_head']['reps_run'] == 6 and r['decode']['reshape_all']['reps_run'] == 6 and \
     len(r['decode']['reshape_all']['processes']) == 3"
expect "reshaping: restructured reps changed the logits (drift > 0)" "$o" \
    "r['decode']['reshape_all']['max_abs_logit_drift'] > 0"
expect "gpu tests slot ran with GPU_TESTS_ARGS" "$o" \
    "r['gpu_tests']['exit'] == 0 and any('test result: ok' in l for l in r['gpu_tests']['lines'])"
grep -q "args: --test-threads=1 --nocapture graph" "$o/gpu_tests.log"
holds $? "gpu_tests got GPU_TESTS_ARGS"
tail -1 "$T/run1.txt" | grep -q "Verdicts:"
holds $? "the summary is printed last"

echo "=== run 2: tight budget (PyTorch stand-in 6 s per run, 30 s budget)"
"${common[@]}" OUT="$T/out2" FAKE_TORCH_SLEEP=6 BUDGET_S=30 RESERVE_S=5 DECODE_MIN_S=5 TORCH_MIN_S=5 \
    bash "$HERE/issue8_check.sh" > "$T/run2.txt" 2>&1
o="$T/out2"
expect "torch: INCOMPLETE, some runs skipped by the budget" "$o" \
    "r['apps']['torch']['verdict'] == 'INCOMPLETE' and any(k.startswith('torch_chaos') for k in r['skipped'])"
expect "decoding runs skipped and listed" "$o" \
    "any(k.startswith('decode_') for k in r['skipped'])"
grep -q "SKIPPED" "$T/run2.txt"
holds $? "the log says what was skipped"
elapsed=$(tar xzf "$o/runs.tar.gz" -O elapsed.txt)
[ "${elapsed:-999}" -le 30 ]
holds $? "ended inside the 30 s budget (elapsed ${elapsed:-?} s before the summary)"

echo "=== run 3: DRY_RUN=1"
"${common[@]}" OUT="$T/out3" DRY_RUN=1 bash "$HERE/issue8_check.sh" > "$T/run3.txt" 2>&1
n=$(grep -c "^\[dry-run\]" "$T/run3.txt")
[ "$n" -ge 40 ]
holds $? "the dry run printed every command ($n)"
[ -f "$T/out3/summary.md" ]
holds $? "a summary is written from an empty work directory"

echo
echo "logs and outputs: $T (run1.txt, out1/summary.md, ...)"
if [ $fails -eq 0 ]; then echo "selftest: all expectations held"; else echo "selftest: $fails FAILED"; fi
[ $fails -eq 0 ]
