#!/usr/bin/env bash
# The workspace's linker (.cargo/config.toml): passes every link through to the C compiler driver
# unchanged, except one: the link of shim-hip's libvitamin_hip.so, whose version script it
# replaces so that each HIP symbol is exported under libamdhip64's version node
# (hipLaunchKernel@@hip_4.2), as the real library exports it.
#
# Why a wrapper: rustc gives every cdylib its own anonymous version script
# (`{ global: ...; local: *; };`); GNU ld refuses to combine an anonymous version tag with named
# ones, and LLD (rustc's default linker on x86_64 Linux) lets the anonymous one win, so a second
# script passed with link arguments cannot add the nodes.
#
# The trigger is VITAMIN_VERSION_NODES, which only shim-hip's build script sets (for rustc while it
# compiles that crate, and so for the linker rustc starts): it names shim-hip/symbol-versions.txt,
# the list of `[node]` headers and symbols. The wrapper then writes the named script next to
# rustc's and swaps it in. A symbol rustc exports that the list does not version fails the link
# (it would otherwise be hidden); a listed symbol rustc does not export is left out of the script.
#
# The real driver is $VITAMIN_REAL_LINKER, else $CC, else `cc` (rustc's default for this target).
set -euo pipefail

self=$(readlink -f "$0")
driver=${VITAMIN_REAL_LINKER:-${CC:-cc}}
# Never call ourselves (CC or VITAMIN_REAL_LINKER pointed at this script).
first=${driver%% *}
if [ "$(command -v "$first" 2>/dev/null | xargs -r readlink -f 2>/dev/null)" = "$self" ]; then
  driver=cc
fi

nodes=${VITAMIN_VERSION_NODES:-}
if [ -z "$nodes" ]; then
  # shellcheck disable=SC2086 # CC may carry words ("ccache gcc")
  exec $driver "$@"
fi

args=()
theirs=
for a in "$@"; do
  case $a in
    -Wl,--version-script=*) theirs=${a#-Wl,--version-script=} ;;
    *) args+=("$a") ;;
  esac
done
if [ -z "$theirs" ]; then
  # Not the cdylib (shim-hip's test binaries and build script link without a version script).
  # shellcheck disable=SC2086
  exec $driver "$@"
fi
if [ ! -r "$nodes" ] || [ ! -r "$theirs" ]; then
  echo "cc-link.sh: cannot read the version nodes ($nodes) or rustc's version script ($theirs)" >&2
  exit 1
fi

ours="$(dirname "$theirs")/vitamin-version-nodes.map"
# rustc's script: `{ global: a; b; ... local: *; };`, one name per line.
awk -v out="$ours" '
  FNR == NR {
    if ($0 ~ /local:/) { done = 1 }
    if (!done && $1 ~ /^[A-Za-z_][A-Za-z0-9_.$]*;$/) { name = $1; sub(/;$/, "", name); exported[name] = 1 }
    next
  }
  /^[[:space:]]*(#|$)/ { next }
  /^\[[^]]+\][[:space:]]*$/ {
    node = $1; gsub(/[][]/, "", node); order[++n] = node; next
  }
  {
    if (node == "") { printf "cc-link.sh: %s: symbol %s before any [node]\n", FILENAME, $1 > "/dev/stderr"; bad = 1; exit 1 }
    versioned[$1] = 1
    if ($1 in exported) { members[node] = members[node] "    " $1 ";\n" }
  }
  END {
    if (bad) { exit 1 }
    missing = ""
    for (s in exported) { if (!(s in versioned)) { missing = missing " " s } }
    if (missing != "") {
      printf "cc-link.sh: libvitamin_hip.so exports symbols without a version node:%s\n", missing > "/dev/stderr"
      printf "cc-link.sh: add each under its libamdhip64 node in %s\n", FILENAME > "/dev/stderr"
      exit 1
    }
    for (i = 1; i <= n; i++) {
      printf "%s {\n", order[i] > out
      if (members[order[i]] != "") { printf "  global:\n%s", members[order[i]] > out }
      if (i == 1) { printf "  local:\n    *;\n" > out }
      if (i == 1) { printf "};\n" > out } else { printf "} %s;\n", order[i - 1] > out }
    }
  }
' "$theirs" "$nodes"

# shellcheck disable=SC2086
exec $driver "${args[@]}" "-Wl,--version-script=$ours"
