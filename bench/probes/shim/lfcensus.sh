#!/usr/bin/env bash
# Why launch-first declined launches: chain_bench operator-only and small-op-only runs under bind
# mode, printing the census counters (launch_first_declined, launch_first_shim). Stage with
# stage_overhead.sh; run from the repository root there: bash .device/overhead/lfcensus.sh
cd .device/overhead
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O2 -arch=sm_90 chain_bench.cu -o /tmp/cb || exit 1
for mode in "op:100 1 10 300" "small:100 1 2000 1"; do
  name=${mode%%:*}; args=${mode#*:}
  for r in 1 2 3; do
    LD_PRELOAD=$PWD/libvitamin_cuda.so VITAMIN_MODE=bind VITAMIN_CENSUS=/tmp/c_${name}_$r.json /tmp/cb $args | grep -E '"operator"|small_op' | sed "s/^/$name $r /" | cut -c1-250
    python3 -c "
import json;d=json.load(open('/tmp/c_${name}_$r.json'))['bind']['dispatcher']
print('$name $r', {k:d[k] for k in ('bound','eager','launched_first','continued','eager_continued')}, d['launch_first_declined'], d['launch_first_shim'], d['submit_thread'])"
  done
done
/tmp/cb 100 1 10 300 | grep '"operator"' | sed 's/^/native /' | cut -c1-250
