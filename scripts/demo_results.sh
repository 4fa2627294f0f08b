#!/usr/bin/env bash
# Regenerates docs/results/demo-sim.{md,json}: the simulated demo's figures with date, machine and command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p vitamin
out=docs/results
mkdir -p "$out"
cmd="vitamin demo --json $out/demo-sim.json"
table=$(./target/release/vitamin demo --json "$out/demo-sim.json" 2>/dev/null)
{
  echo "# vitamin demo: simulated figures"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores (host time only; the device is simulated)"
  echo "- command: \`$cmd\` (via \`scripts/demo_results.sh\`), commit $(git rev-parse --short HEAD)"
  echo "- device: vitamin's simulated H200 (hal::sim cost model), NOT a GPU. These figures compare policies"
  echo "  on one mechanism under a documented model; they are not hardware measurements."
  echo
  echo '```'
  echo "$table"
  echo '```'
} > "$out/demo-sim.md"
echo "wrote $out/demo-sim.md and $out/demo-sim.json"
