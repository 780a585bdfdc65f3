#!/usr/bin/env bash
# attention_ab.sh A_RIDGE B_RIDGE [ROUNDS]: the attention backward of two ridge binaries, interleaved
# (A B A B ... ROUNDS rounds per shape, default 5), on the dense shapes where the varlen commit slowed
# it (docs/attention.md, "The dense backward after varlen"). Prints each run's median ms and each side's
# median of them. Run it alone: ../shared/tools/quiet tools/attention_ab.sh A B 5
set -euo pipefail
A=$1 B=$2 R=${3:-5}
shapes=(
  "batch=1 heads=4 seq=2048 dtype=bf16"
  "batch=1 heads=1 seq=4096 dtype=fp32"
  "batch=1 heads=1 seq=4096 dtype=fp32 causal=true"
  "batch=1 heads=16 seq=512 dtype=bf16"
  "batch=4 heads=2 seq=1024 dtype=bf16"
)
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for s in "${shapes[@]}"; do
  args=()
  for kv in $s; do args+=(--set "$kv"); done
  a=() b=()
  for _ in $(seq "$R"); do
    for side in A B; do
      bin=$A
      [[ $side == B ]] && bin=$B
      ms=$("$bin" bench attention "${args[@]}" --set pass=backward --no-torch --no-math --json --no-progress |
        python3 -c 'import json, sys; print(round(json.loads(sys.stdin.readline())["median_ms"], 2))')
      if [[ $side == A ]]; then a+=("$ms"); else b+=("$ms"); fi
    done
  done
  echo "$s backward: A ${a[*]} (median $(median "${a[@]}") ms) | B ${b[*]} (median $(median "${b[@]}") ms)"
done
