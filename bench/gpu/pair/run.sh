#!/usr/bin/env bash
# The pair benchmark (README.md here): a GPT training job and a ResNet-50 job started together,
# under time slicing, MPS, vitamin in-process (each job alone under `vitamin run --no-daemon`, MPS
# underneath), vitamin Static 50/50 and Throughput through one `vitamin daemon`; each job alone
# first. PART=throughput (default) or PART=digest (bitwise outputs: each job natively twice, then
# the pair under the daemon), or PART=scaling (what a fixed SM share gives each job: each alone under
# MPS at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 25/50/75, then the pair at shares 75/25, 50/50 and 25/75),
# or PART=share (each job alone on half the device: an MPS 50% share, then vitamin Static 50/50 through
# the daemon beside an idle peer that holds the other half; no interference, only the partition).
# Every part starts with a short native GPT run that is not counted (WARMUP=0 skips it): the call's
# first job ran slow (docs/results/daemon-pair.md, run 5).
# Staged by stage.sh into this folder (vitamin, libvitamin_cuda.so).
#   OUT=$OUT ROUNDS=2 SECONDS_=12 PART=throughput bash run.sh
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}; ROUNDS=${ROUNDS:-2}; SECS=${SECONDS_:-12}; PART=${PART:-throughput}
POLICIES=${POLICIES:-"static throughput"}
mkdir -p "$OUT/runs"
V="$HERE/vitamin"; chmod +x "$V"
export PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
MPSDIR=$(mktemp -d /tmp/pair-mps.XXXXXX); mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"
export CUDA_MPS_PIPE_DIRECTORY=$MPSDIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPSDIR/log
SOCK=$MPSDIR/daemon.sock
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }
mps_on() { nvidia-cuda-mps-control -d && sleep 1 && log "MPS on"; }
mps_off() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; sleep 1; log "MPS off"; }
daemon_on() { # POLICY
    # The binding timeline of the first round's daemon runs (the latest TIMELINE_SPANS ops).
    local tl=(); [ "$R" = 1 ] && tl=(--timeline "$OUT/runs/timeline-$1-$R.json" --timeline-spans "${TIMELINE_SPANS:-30000}")
    VITAMIN_LOG=info "$V" daemon --socket "$SOCK" --policy "$1" --mps check --detach --pid-file "$MPSDIR/d.pid" \
        --log-file "$OUT/runs/daemon-$1-$R.log" "${tl[@]}" >> "$OUT/log.txt" 2>&1 || log "daemon start FAILED"
}
daemon_off() { "$V" daemon stop --socket "$SOCK" >> "$OUT/log.txt" 2>&1; sleep 0.5; }
# job WRAP MODEL KIND TAG [extra args]: WRAP is native, inproc or daemon.
job() {
    local wrap=$1 model=$2 kind=$3 tag=$4; shift 4
    local out="$OUT/runs/$tag-$model.json" err="$OUT/runs/$tag-$model.err"
    # PCT (set by the caller, PART=scaling): this job's MPS active thread percentage.
    local pct=(); [ -n "${PCT:-}" ] && pct=(env "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$PCT")
    case $wrap in
        native) timeout 150 "${pct[@]}" python3 "$HERE/job.py" "$model" "$kind" "$out" "$@" > /dev/null 2> "$err" ;;
        inproc) timeout 150 "$V" run --no-daemon -- python3 "$HERE/job.py" "$model" "$kind" "$out" "$@" > /dev/null 2> "$err" ;;
        daemon) timeout 150 "$V" run --daemon "$SOCK" -- python3 "$HERE/job.py" "$model" "$kind" "$out" "$@" > /dev/null 2> "$err" ;;
    esac
    local rc=$?; [ $rc = 0 ] || log "$tag $model exit $rc: $(tail -c 400 "$err" | tr '\n' ' ')"
}
pair() { # WRAP TAG; GPT_PCT / RESNET_PCT (PART=scaling): each job's MPS share
    local b; b=$(mktemp -d /tmp/pair-bar.XXXXXX)
    PCT=${GPT_PCT:-} job "$1" gpt throughput "$2" --seconds "$SECS" --barrier "$b" --peers 2 &
    PCT=${RESNET_PCT:-} job "$1" resnet throughput "$2" --seconds "$SECS" --barrier "$b" --peers 2 &
    if [ "$1" = daemon ]; then
        # Mid-window: both jobs warm (their barrier files exist), half the window later.
        for _ in $(seq 1 600); do [ "$(ls "$b" | wc -l)" -ge 2 ] && break; sleep 0.2; done
        sleep $((SECS / 2)); "$V" daemon status --socket "$SOCK" > "$OUT/runs/$2-status.txt" 2>&1
        "$V" daemon status --socket "$SOCK" --json > "$OUT/runs/$2-status.json" 2>&1
    fi
    wait; rm -rf "$b"; log "pair $2 done"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
if [ "${WARMUP:-1}" = 1 ]; then job native gpt throughput warmup --seconds 3; log "warm-up done"; fi
if [ "$PART" = throughput ]; then
    for R in $(seq 1 "$ROUNDS"); do
        job native gpt throughput "r$R-alone" --seconds "$SECS"; log "alone gpt r$R"
        job native resnet throughput "r$R-alone" --seconds "$SECS"; log "alone resnet r$R"
        pair native "r$R-timeslice"
        mps_on
        order="mps inproc $POLICIES"; [ $((R % 2)) = 0 ] && order="$POLICIES inproc mps"
        for c in $order; do
            case $c in
                mps) pair native "r$R-mps" ;;
                inproc) pair inproc "r$R-inproc" ;;
                *) daemon_on "$c"; pair daemon "r$R-daemon_$c"; daemon_off ;;
            esac
        done
        mps_off
    done
elif [ "$PART" = scaling ]; then
    for R in $(seq 1 "$ROUNDS"); do
        job native gpt throughput "r$R-alone" --seconds "$SECS"; log "alone gpt r$R"
        job native resnet throughput "r$R-alone" --seconds "$SECS"; log "alone resnet r$R"
        mps_on
        pcts="25 50 75"; [ $((R % 2)) = 0 ] && pcts="75 50 25"
        for p in $pcts; do
            for m in gpt resnet; do PCT=$p job native "$m" throughput "r$R-pct$p" --seconds "$SECS"; log "$m at $p% r$R"; done
        done
        for p in $pcts; do GPT_PCT=$p RESNET_PCT=$((100 - p)) pair native "r$R-split$p"; done
        mps_off
    done
elif [ "$PART" = share ]; then
    for R in $(seq 1 "$ROUNDS"); do
        job native gpt throughput "r$R-alone" --seconds "$SECS"; log "alone gpt r$R"
        job native resnet throughput "r$R-alone" --seconds "$SECS"; log "alone resnet r$R"
        mps_on
        for m in gpt resnet; do
            PCT=50 job native "$m" throughput "r$R-mps50" --seconds "$SECS"; log "$m at 50% r$R"
            # The idle peer registers first (the first cut), the job takes the second, as in the pair.
            daemon_on static
            b=$(mktemp -d /tmp/pair-idle.XXXXXX)
            job daemon "$m" idle "r$R-idlepeer_$m" --barrier "$b" --seconds 150 &
            for _ in $(seq 1 600); do [ -e "$b/idle.ready" ] && break; sleep 0.2; done
            # Its barrier counts the peer's idle.ready and its own: it starts once warm.
            job daemon "$m" throughput "r$R-static_half" --seconds "$SECS" --barrier "$b" --peers 2 &
            local_job=$!
            for _ in $(seq 1 600); do [ "$(ls "$b" | wc -l)" -ge 2 ] && break; sleep 0.2; done
            sleep $((SECS / 2)); "$V" daemon status --socket "$SOCK" > "$OUT/runs/r$R-static_half-$m-status.txt" 2>&1
            wait $local_job; touch "$b/stop"; wait; rm -rf "$b"; daemon_off; log "$m static half r$R"
        done
        mps_off
    done
else
    R=d
    for i in 1 2; do for m in gpt resnet; do job native "$m" digest "native$i"; done; done
    mps_on
    for p in throughput chaos; do
        daemon_on "$p"
        job daemon gpt digest "daemon_$p" & job daemon resnet digest "daemon_$p" &
        wait; daemon_off; log "digest pair under daemon $p done"
    done
    mps_off
fi
python3 "$HERE/summary.py" "$OUT/runs" "$PART" | tee "$OUT/summary.md"
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"
