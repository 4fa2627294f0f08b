"""Instruction counts per benchmark iteration from callgrind dumps, and the A/B table of two builds.

`ir_ab.sh` runs a criterion bench under `valgrind --tool=callgrind --dump-before=FUNCTION`: callgrind
writes one dump per entry of FUNCTION (the routine each iteration calls once), so each dump holds
the instructions executed between two consecutive entries, one whole iteration. On the simulated
device these counts do not depend on the machine's load (the same binary gives the same minimum in
every run), unlike criterion's times on the 2-vCPU CI machine (docs/results/dispatch-bench.md).

  python3 ir_iters.py iters DUMPDIR BUILD CONFIG OPS_PER_ITER   (prints one CSV row)
  python3 ir_iters.py table RESULTS.csv BEFORE AFTER            (prints a markdown table)
  python3 ir_iters.py functions BEFORE.out AFTER.out OPS_PER_ITER
      (two whole callgrind runs of one configuration, without dumps: each function's exclusive Ir
      per op, the largest differences first; needs callgrind_annotate)

Standard library only.
"""
import csv
import glob
import os
import re
import statistics
import subprocess
import sys

# The CSV columns of `iters` rows; ir_ab.sh writes this header line (ir_iters_test.py checks it).
HEADER = ["build", "config", "iterations", "median_ir_per_op", "min_ir_per_op", "p90_ir_per_op"]
SKIP_FIRST = 3  # warm-up iterations left out (the pool's first leases, lazily grown tables)


def dump_index(path):
    """The dump's sequence number: callgrind names them OUT.N (or OUT.N-THREAD)."""
    return int(path.rsplit(".", 1)[1].split("-")[0])


def summary_ir(path):
    """The `summary:` (total Ir) line of one callgrind dump; None where there is none."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    return None


def iteration_irs(dumpdir):
    """Ir of each whole iteration: the dumps in order, without the first SKIP_FIRST (warm-up) and
    the last (from the last entry to the program's exit, not an iteration)."""
    files = sorted(glob.glob(os.path.join(dumpdir, "*.out.*")), key=dump_index)
    irs = [ir for ir in (summary_ir(f) for f in files) if ir is not None]
    return irs[SKIP_FIRST:-1]


def row(build, config, irs, ops_per_iter):
    """One CSV row (HEADER) for the iterations' Ir, per op."""
    if not irs:
        raise ValueError(f"{build} {config}: no whole iteration in the dumps")
    s = sorted(irs)
    per = lambda x: f"{x / ops_per_iter:.1f}"
    return [build, config, str(len(s)), per(statistics.median(s)), per(s[0]), per(s[min(len(s) - 1, int(len(s) * 0.9))])]


def table(rows, before, after):
    """Markdown table: per configuration, the two builds' median and minimum Ir per op and the
    ratios after/before. Some iterations execute a few percent more than the others (not traced);
    the minimum leaves them out and repeated to a few instructions per op between runs, while the
    median moves with how many such iterations a run had."""
    by = {}
    for r in rows:
        by.setdefault(r["config"], {})[r["build"]] = (float(r["median_ir_per_op"]), float(r["min_ir_per_op"]))
    out = [f"| configuration | {before} Ir/op median (min) | {after} Ir/op median (min) | after/before, median | after/before, min |",
           "| --- | --- | --- | --- | --- |"]
    for config, b in by.items():
        if before in b and after in b:
            (bm, bn), (am, an) = b[before], b[after]
            out.append(f"| {config} | {bm:.1f} ({bn:.1f}) | {am:.1f} ({an:.1f}) | {am / bm:.4f} | {an / bn:.4f} |")
    return "\n".join(out)


ITERATION_FN = "vitamin_runtime::dispatch::Dispatcher<B,P>::run_until_idle"


def exclusive_ir(annotate_text):
    """{function: exclusive Ir} from `callgrind_annotate` output (its `Ir  file:function` lines)."""
    out = {}
    for line in annotate_text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S.*)", line)
        if m and ":" in m.group(2):
            out[re.sub(r" \[.*", "", m.group(2))] = int(m.group(1).replace(",", ""))
    return out


def calls_of(tree_text, fn=ITERATION_FN):
    """How often `fn` was called, from `callgrind_annotate --inclusive=yes --tree=caller` output:
    the sum of the `(Nx)` counts on the caller lines above its `*` line."""
    lines = tree_text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"\*\s+\S*:" + re.escape(fn) + r"(\s|$)", line):
            n, j = 0, i - 1
            while j >= 0 and re.search(r"<\s", lines[j]):
                n += sum(int(c) for c in re.findall(r"\((\d+)x\)", lines[j]))
                j -= 1
            return n
    raise ValueError(f"{fn} not in the call tree")


def function_diff(before, after, ops_per_iter, top=15):
    """Lines: each function's exclusive Ir per op in two runs ((annotate, tree) texts each)."""
    (ba, bt), (aa, at) = before, after
    b_ops, a_ops = calls_of(bt) * ops_per_iter, calls_of(at) * ops_per_iter
    b = {k: v / b_ops for k, v in exclusive_ir(ba).items()}
    a = {k: v / a_ops for k, v in exclusive_ir(aa).items()}
    out = ["before Ir/op | after Ir/op | difference | function"]
    for k in sorted(set(a) | set(b), key=lambda k: (-abs(a.get(k, 0) - b.get(k, 0)), k))[:top]:
        out.append(f"{b.get(k, 0):9.1f} {a.get(k, 0):9.1f} {a.get(k, 0) - b.get(k, 0):+8.1f}  {k}")
    return "\n".join(out)


def annotate(path):
    """(exclusive, caller tree) outputs of callgrind_annotate for one callgrind file."""
    run = lambda *a: subprocess.run(["callgrind_annotate", *a, path], capture_output=True, text=True, check=True).stdout
    return run("--threshold=100"), run("--inclusive=yes", "--tree=caller")


def main(argv):
    if len(argv) == 5 and argv[0] == "iters":
        _, dumpdir, build, config, ops = argv
        print(",".join(row(build, config, iteration_irs(dumpdir), int(ops))))
    elif len(argv) == 4 and argv[0] == "table":
        with open(argv[1]) as f:
            print(table(list(csv.DictReader(f)), argv[2], argv[3]))
    elif len(argv) == 4 and argv[0] == "functions":
        print(function_diff(annotate(argv[1]), annotate(argv[2]), int(argv[3])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
