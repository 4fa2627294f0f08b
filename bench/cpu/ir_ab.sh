#!/usr/bin/env bash
# Two builds of the dispatcher benchmark (runtime/benches/dispatch.rs) side by side in instruction
# counts per op, under callgrind, on this machine (no GPU): for a cost of a few percent, which the
# CI machine's 20-40% time spreads hide (docs/results/dispatch-bench.md).
#
#   BEFORE=COMMIT [AFTER=COMMIT] [CONFIGS="throughput/chain_1_stream/lc_on ..."] [PROFILE_S=2] \
#     [FUNCTIONS="throughput/spread_8_streams/lc_on ..."] [OUT=dir] bash bench/cpu/ir_ab.sh
#
# Each commit's bench is built (bench profile, symbols kept) in a worktree under target/ir-ab/;
# AFTER left out: the working tree as it is. Each configuration runs once per build under
# `valgrind --tool=callgrind --dump-before=Dispatcher::run_until_idle` for PROFILE_S seconds of
# criterion's --profile-time; ir_iters.py turns the dumps into Ir per op of each whole iteration
# (a batch of 256 ops recorded and dispatched), median, min and p90. Writes $OUT/ir.csv and
# $OUT/table.md. For each configuration in FUNCTIONS, a whole run per build more and
# $OUT/functions.txt: which functions' exclusive Ir per op differ (the change itself, or only the
# compiler's inlining). Needs valgrind (apt-get install valgrind).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/bench/cpu
: "${BEFORE:?set BEFORE to the commit to compare against}"
AFTER=${AFTER:-}
PROFILE_S=${PROFILE_S:-2}
OPS=256  # runtime/benches/dispatch.rs: BATCH
OUT=${OUT:-$ROOT/target/ir-ab/out}
CONFIGS=${CONFIGS:-"throughput/chain_1_stream/lc_on throughput/chain_1_stream/lc_off throughput/spread_8_streams/lc_on throughput/spread_8_streams/lc_off exclusive/chain_1_stream/lc_on exclusive/chain_1_stream/lc_off exclusive/spread_8_streams/lc_on exclusive/spread_8_streams/lc_off"}
command -v valgrind >/dev/null || { echo "ir_ab.sh: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
mkdir -p "$OUT"

# build LABEL SOURCE_DIR: prints the bench executable's path
build() {
    local label=$1 src=$2 log=$OUT/build-$1.log
    (cd "$src" && CARGO_PROFILE_BENCH_STRIP=none CARGO_TARGET_DIR=$ROOT/target/ir-ab/$label \
        cargo bench --no-run -p vitamin-runtime --bench dispatch > "$log" 2>&1) \
        || { echo "ir_ab.sh: building $label failed, see $log" >&2; exit 1; }
    sed -n 's/.*Executable benches\/dispatch.rs (\(.*\))/\1/p' "$log" | tail -1
}
worktree() { # COMMIT: a detached worktree of it under target/ir-ab/wt-SHA
    local sha; sha=$(git -C "$ROOT" rev-parse --short "$1")
    local wt=$ROOT/target/ir-ab/wt-$sha
    [ -d "$wt" ] || git -C "$ROOT" worktree add -q --detach "$wt" "$sha"
    echo "$wt"
}
b_label=$(git -C "$ROOT" rev-parse --short "$BEFORE")
b_bin=$(build "$b_label" "$(worktree "$BEFORE")")
[ "${b_bin:0:1}" = / ] || b_bin=$ROOT/$b_bin
if [ -n "$AFTER" ]; then
    a_label=$(git -C "$ROOT" rev-parse --short "$AFTER")
    a_bin=$(build "$a_label" "$(worktree "$AFTER")")
else
    a_label="work"
    a_bin=$(build work "$ROOT")
fi
[ "${a_bin:0:1}" = / ] || a_bin=$ROOT/$a_bin
{
    echo "# $(date -u +%FT%TZ) $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "# before $b_label ($b_bin), after $a_label ($a_bin), PROFILE_S=$PROFILE_S"
} > "$OUT/meta.txt"
echo "build,config,iterations,median_ir_per_op,min_ir_per_op,p90_ir_per_op" > "$OUT/ir.csv"
for cfg in $CONFIGS; do
    for side in before after; do
        if [ $side = before ]; then label=$b_label bin=$b_bin; else label=$a_label bin=$a_bin; fi
        d=$(mktemp -d "$OUT/dumps.XXXXXX")
        valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" \
            --dump-before='vitamin_runtime::dispatch::Dispatcher*::run_until_idle' \
            "$bin" --bench --profile-time "$PROFILE_S" "^cpu/dispatch_batch256/$cfg\$" > "$d/log.txt" 2>&1 \
            || { echo "ir_ab.sh: $label $cfg failed under valgrind:" >&2; tail -5 "$d/log.txt" >&2; exit 1; }
        python3 "$HERE/ir_iters.py" iters "$d" "$label" "$cfg" "$OPS" | tee -a "$OUT/ir.csv"
        rm -rf "$d"
    done
done
python3 "$HERE/ir_iters.py" table "$OUT/ir.csv" "$b_label" "$a_label" | tee "$OUT/table.md"
: > "$OUT/functions.txt"
for cfg in ${FUNCTIONS:-}; do
    d=$(mktemp -d "$OUT/whole.XXXXXX")
    for side in before after; do
        if [ $side = before ]; then bin=$b_bin; else bin=$a_bin; fi
        valgrind --tool=callgrind --callgrind-out-file="$d/$side.out" \
            "$bin" --bench --profile-time "$PROFILE_S" "^cpu/dispatch_batch256/$cfg\$" > "$d/$side.log" 2>&1 \
            || { echo "ir_ab.sh: $side $cfg failed under valgrind:" >&2; tail -5 "$d/$side.log" >&2; exit 1; }
    done
    { echo "== $cfg ($b_label -> $a_label)"; python3 "$HERE/ir_iters.py" functions "$d/before.out" "$d/after.out" "$OPS"; } \
        | tee -a "$OUT/functions.txt"
    rm -rf "$d"
done
