#!/usr/bin/env bash
# Where bind mode's overhead goes, in one device call: chain_bench.cu (10,000-kernel chain, one
# tiny kernel + sync, the 8-kernel operator) under several shim configurations, interleaved with
# native runs, plus the op timeline trace (VITAMIN_TRACE, summarized by trace_summary.py) and the
# host's CPU topology (placement experiments need to know which vCPUs share a physical core).
#
# CONFIGS="name:VAR=v,VAR=v name2:..." (default below): each a bind-mode run of chain_bench with
# those variables; the pseudo-variable PIN=cpus runs the process under `taskset -c cpus`
# (dispatch_cpu, an [advanced] key of docs/config.md, then moves the dispatcher thread); SHIM=file preloads another build of the
# shim (a path relative to this folder, for A/B of two builds staged side by side).
# `native` and `native_pin:PIN=..` run
# without the shim. Tokens @SIB and @FAR in values are replaced by a vCPU sharing a physical core
# with vCPU 2 and one that does not. ROUNDS rounds, configurations interleaved within each.
# TRACE="name ..." adds a traced bind run per round for those configurations.
# PATHS=0 skips launch_paths.cu (host cost of one launch per path, no interposer).
# Stage here: bash bench/gpu/shim/stage_overhead.sh; run there: bash .device/overhead/latency_check.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/latency.XXXXXX)
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=${N:-10000}; REPS=${REPS:-5}; SMALL=${SMALL:-2000}; OPREPS=${OPREPS:-300}; ROUNDS=${ROUNDS:-3}
SHIM="$HERE/libvitamin_cuda.so"
exec > >(tee -a "$OUT/latency.log") 2>&1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step environment
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA'
cat "$HERE/COMMIT" 2>/dev/null
lscpu -e=CPU,CORE,SOCKET,NODE 2>/dev/null | head -40
for c in 0 1 2 3; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null)"; done
echo "nsys: $(command -v nsys || ls /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null || echo none)"
# A vCPU on vCPU 2's physical core (if any) and one on another core, for PIN experiments.
SIB=$(tr ',' '\n' < /sys/devices/system/cpu/cpu2/topology/thread_siblings_list 2>/dev/null | grep -v '^2$' | head -1)
SIB=${SIB:-3}
FAR=$(for c in $(seq 4 "$(($(nproc) - 1))"); do
    s=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null)
    case ",$s," in *",2,"*) ;; *) echo "$c"; break ;; esac
done)
FAR=${FAR:-8}
echo "placement: app on 2, sibling $SIB, other core $FAR"
if [ -f "$HERE/host_probe.c" ]; then  # clock, yield, futex wake-up costs of this host
    cc -O2 -pthread -o "$W/host_probe" "$HERE/host_probe.c" && "$W/host_probe"
fi

nvcc -O2 -arch=sm_90 "$HERE/chain_bench.cu" -o "$W/chain_bench" || { echo "nvcc chain_bench failed"; exit 1; }
if [ -f "$HERE/launch_paths.cu" ] && [ "${PATHS:-1}" = 1 ]; then
    step "host cost of one launch per path, no interposer (launch_paths.cu)"
    nvcc -O2 -arch=sm_90 "$HERE/launch_paths.cu" -lcuda -o "$W/launch_paths" && timeout 120 "$W/launch_paths"
fi
CB=("$W/chain_bench" "$N" "$REPS" "$SMALL" "$OPREPS")
CONFIGS=${CONFIGS:-"native default syncpark:sync_spin_us=0 noyield:sync_yield=0 native_pin:PIN=2 pin_far:PIN=2,dispatch_cpu=@FAR pin_sib:PIN=2,dispatch_cpu=@SIB"}
TRACE=${TRACE-"default pin_far"}

run_cfg() { # run_cfg NAME VARS ROUND [trace]
    local name=$1 vars=$2 r=$3 traced=${4:-}
    (
        pin=()
        knobs=()
        shim=$SHIM
        IFS=','
        for kv in $vars; do
            kv=${kv//@SIB/$SIB}; kv=${kv//@FAR/$FAR}
            case $kv in
                PIN=*) pin=(taskset -c "${kv#PIN=}") ;;
                SHIM=*) shim=${kv#SHIM=}; [[ $shim == /* ]] || shim="$HERE/$shim" ;;
                VITAMIN_*=*) export "$kv" ;;
                # A lowercase key is an [advanced] key of docs/config.md: set through a file.
                ?*) knobs+=("${kv%%=*} = \"${kv#*=}\"") ;;
            esac
        done
        unset IFS
        config=none
        if [ ${#knobs[@]} -gt 0 ]; then
            config="$W/config_${name}_$r.toml"
            printf '%s\n' "[advanced]" "${knobs[@]}" > "$config"
        fi
        export VITAMIN_CONFIG="$config"
        # The label is set before the pipeline (the pipeline's left side runs in a subshell).
        label="$name $r"
        if [ -n "$traced" ]; then export VITAMIN_TRACE="$W/trace_${name}_$r.csv"; label="trace_$name $r"; fi
        if [[ $name == native* ]]; then
            timeout 120 "${pin[@]}" "${CB[@]}"
        else
            LD_PRELOAD="$shim" VITAMIN_MODE=bind VITAMIN_POLICY=${POLICY:-throughput} VITAMIN_PROFILE_DISPATCH=1 \
                VITAMIN_CENSUS="$W/census_${label// /_}.json" timeout 120 "${pin[@]}" "${CB[@]}"
        fi | sed "s/^/$label /"
    )
}

for r in $(seq 1 "$ROUNDS"); do
    step "round $r"
    for cfg in $CONFIGS; do
        name=${cfg%%:*}; vars=""; [[ $cfg == *:* ]] && vars=${cfg#*:}
        run_cfg "$name" "$vars" "$r"
    done
    for t in $TRACE; do
        for cfg in $CONFIGS; do
            [ "${cfg%%:*}" = "$t" ] || continue
            vars=""; [[ $cfg == *:* ]] && vars=${cfg#*:}
            run_cfg "$t" "$vars" "$r" traced
        done
    done
done

step "per configuration, over rounds (chain median ms; small-op and operator p50/p95 us; operator launch/sync split; operator_gpu: GPU span, gaps, kernel, host share)"
python3 - "$OUT/latency.log" <<'PY'
import collections, json, re, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    m = re.match(r"^(\S+) (\d+) (\{.*\})$", line.strip())
    if not m:
        continue
    j, name = json.loads(m.group(3)), m.group(1)
    t = j.get("test")
    if t == "chain":
        d[name]["chain_ms"].append(j["median_ms"]); d[name]["chain_ok"].append(j["counter_ok"])
    elif t == "small_op":
        d[name]["small_p50"].append(j["p50_us"]); d[name]["small_p95"].append(j["p95_us"])
    elif t == "operator":
        for k in ("p50_us", "p95_us", "first_launch_p50_us", "launches_p50_us", "sync_p50_us"):
            if k in j:
                d[name]["op_" + k].append(j[k])
        d[name]["checksums"].append(j["checksum"])
    elif t == "operator_gpu":
        for k in ("total_p50_us", "span_p50_us", "gaps_p50_us", "kernel_p50_us", "host_p50_us"):
            d[name]["gpu_" + k].append(j[k])
for name, v in d.items():
    med = {k: round(statistics.median(x), 2) for k, x in v.items() if k not in ("chain_ok", "checksums")}
    print(name, "runs", len(v["chain_ms"]), "medians", json.dumps(med), "counters ok", all(v["chain_ok"]),
          "distinct checksums", len(set(v["checksums"])))
PY

step "paired with the same round's native run: chain throughput ratio (native ms / bind ms), operator p50 / p95 and small-op p95 excess over native, per round and median"
python3 "$HERE/overhead_paired.py" "$OUT/latency.log"

step "dispatcher per-op phases (census)"
python3 "$HERE/census_phases.py" "$W"

step "trace summaries"
for t in "$W"/trace_*.csv; do
    [ -f "$t" ] || continue
    echo "--- $(basename "$t")"
    python3 "$HERE/trace_summary.py" "$t" --json "$W/$(basename "$t" .csv).json"
    [ -f "$HERE/trace_phases.py" ] && python3 "$HERE/trace_phases.py" "$t" 1 8
    [ -f "$HERE/stream_switch.py" ] && python3 "$HERE/stream_switch.py" "$t"
    [ -f "$HERE/lock_waits.py" ] && python3 "$HERE/lock_waits.py" "$t"
    [ -f "$HERE/trace_tail.py" ] && python3 "$HERE/trace_tail.py" "$t" 8 && python3 "$HERE/trace_tail.py" "$t" 1
done
# One archive of the runs' censuses (the device tool brings back a limited number of files).
tar czf "$OUT/latency_runs.tar.gz" -C "$W" $(cd "$W" && ls census_*.json trace_*.json 2>/dev/null) 2>/dev/null
tar czf "$OUT/latency_traces.tar.gz" -C "$W" $(cd "$W" && ls trace_*_1.csv 2>/dev/null | head -3) 2>/dev/null
step done
