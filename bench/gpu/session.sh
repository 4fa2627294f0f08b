#!/usr/bin/env bash
# Several checks in one device call (bench/README.md): the steps named in $STEPS run in order, each
# under its own time limit (cut to what is left of LIMIT seconds, default 585), and everything they
# write is packed into $OUT/all.tgz (one file back). Run from the repository root on the GPU machine,
# after staging here (each step's stage script) and carrying .device:
#   STEPS="ovd share dg tp eval:determinism~rounds=1" bash bench/gpu/session.sh
# Steps: ovd (bench/gpu/pair/overhead_daemon.sh, OVD_ROUNDS), lat (bench/gpu/shim/latency_check.sh staged by
# stage_overhead.sh: LAT_CONFIGS, default native, default, and `before` where BEFORE= staged an earlier build; LAT_ROUNDS), share / dg / tp (bench/gpu/pair/run.sh
# PART=share / digest / throughput, TP_ROUNDS), apps (bench/gpu/apps/run_suite.sh on .device/apps with
# the wheels in .whl, APPS_BUDGET seconds, default 330, APPS_CHAOS / APPS_THROUGHPUT / APPS_DAEMON bind runs,
# default 3 / 2 / 0, APPS_PROGS the programs (default all), the daemon passes with the `vitamin` staged beside the shim; carry .whl too), ipc
# (bench/gpu/apps/probes/ipc_mps.sh: CUDA IPC with and without MPS, natively and under bind mode; IPC_CASES
# the cases, default all; then, where .device/apps-base holds an earlier build, IPC_BASE_CASES on it), smoke:[CASE,...] (the staged bench/eval/llm_test.py, then tenants_smoke.py --gpu CASE ... if any), eval:GROUP[:PART][~rounds=N][~configs=a,b]
# (bench/eval/run_group.sh with those options and the time left as its budget).
set -uo pipefail
R=$(pwd); W=/tmp/sess; rm -rf $W; mkdir -p $W
T0=$(date +%s)
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
run_step() { # NAME MAXSECONDS CMD...
    local name=$1 max=$2; shift 2
    local l; l=$(left); [ "$l" -lt "$max" ] && max=$((l - 15))
    [ "$max" -lt 20 ] && { echo "skip $name (no time)" >> $W/steps.txt; return; }
    mkdir -p $W/$name
    local t=$(date +%s)
    OUT=$W/$name timeout "$max" "$@" > $W/$name/stdout.txt 2>&1
    echo "$name rc=$? ${max}s-limit took $(( $(date +%s) - t ))s" >> $W/steps.txt
}
nvidia-smi > $W/nvidia-smi.txt 2>&1
for s in $STEPS; do
    case $s in
        ovd) run_step ovd 90 env ROUNDS=${OVD_ROUNDS:-5} bash $R/.device/overhead/overhead_daemon.sh ;;
        lat) lat_default="native default"
            [ -f $R/.device/overhead/libvitamin_cuda_before.so ] && lat_default+=" before:SHIM=libvitamin_cuda_before.so"
            run_step lat 300 env ROUNDS=${LAT_ROUNDS:-5} PATHS=0 TRACE="" CONFIGS="${LAT_CONFIGS:-$lat_default}" \
                bash $R/.device/overhead/latency_check.sh ;;
        share) run_step share 220 env ROUNDS=1 SECONDS_=6 PART=share bash $R/.device/pair/run.sh ;;
        dg) run_step dg 150 env PART=digest WARMUP=0 bash $R/.device/pair/run.sh ;;
        tp) run_step tp 400 env ROUNDS=${TP_ROUNDS:-1} SECONDS_=8 WARMUP=0 bash $R/.device/pair/run.sh ;;
        apps) run_step apps $(( ${APPS_BUDGET:-330} + 30 )) env SHIM=$R/.device/apps/libvitamin_cuda.so \
                CHAOS=${APPS_CHAOS:-3} THROUGHPUT=${APPS_THROUGHPUT:-2} DAEMON=${APPS_DAEMON:-0} JOBS=6 BUDGET_S=${APPS_BUDGET:-330} \
                RUN_TIMEOUT_S=200 WHEELS=$R/.whl bash $R/bench/gpu/apps/run_suite.sh ${APPS_PROGS:-} ;;
        ipc) run_step ipc 240 env SHIM=$R/.device/apps/libvitamin_cuda.so bash $R/bench/gpu/apps/probes/ipc_mps.sh ${IPC_CASES:-}
            # the same probe on an earlier build staged in .device/apps-base, for comparison
            [ -f $R/.device/apps-base/libvitamin_cuda.so ] && run_step ipc-base 150 env SHIM=$R/.device/apps-base/libvitamin_cuda.so \
                bash $R/bench/gpu/apps/probes/ipc_mps.sh ${IPC_BASE_CASES:-native-mps bind-mps daemon-mps} ;;
        smoke:*) # smoke:CASE[,CASE...]: bench/eval/llm_test.py, then tenants_smoke.py --gpu on those cases
            cases=${s#smoke:}
            smoke="cd $R/.device/eval && python3 llm_test.py"
            [ -n "$cases" ] && smoke+=" && python3 tenants_smoke.py --gpu ${cases//,/ }"
            run_step smoke 240 bash -c "$smoke" ;;
        eval:*) # eval:GROUP[:PART][~rounds=N][~configs=a,b]
            spec=${s#eval:}; g=${spec%%~*}; extra=()
            IFS='~' read -ra kv <<< "$spec"
            for x in "${kv[@]:1}"; do extra+=("--${x%%=*}" "${x#*=}"); done
            run_step "eval-${g//:/-}" 590 bash $R/.device/eval/run_group.sh "$g" "${extra[@]}" --budget $(( $(left) - 25 )) ;;
    esac
done
cd $W && tar czf /tmp/all.tgz . && mv /tmp/all.tgz "$OUT/all.tgz"
cat $W/steps.txt
