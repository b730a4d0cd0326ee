#!/usr/bin/env bash
# Tokens per second of two parity builds on one GPT preset, measured in alternating rounds on the
# same machine (a noisy machine moves both alike), and the median of the per-round ratios.
#
# usage: ci/ab-bench-model.sh BASE_PARITY HEAD_PARITY [ROUNDS=8] [STEPS=300] [MODEL=tiny]
#   e.g. ci/ab-bench-model.sh /opt/parity-be6de1f/bin/parity build/bin/parity 10 400
# Each round runs `bench model --models MODEL --steps STEPS --warmup 5` with the base, then the
# head, and prints both rates and head / base; the last line is the median ratio.
set -euo pipefail
if [ $# -lt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
base=$1 head=$2 rounds=${3:-8} steps=${4:-300} model=${5:-tiny}
for p in "$base" "$head"; do
  [ -x "$p" ] || { echo "ab-bench-model.sh: $p is not an executable parity" >&2; exit 2; }
done
for n in "$rounds" "$steps"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "ab-bench-model.sh: '$n' is not a whole number >= 1" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rate() { # PARITY: tokens/s of one run
  "$1" bench model --models "$model" --steps "$steps" --warmup 5 --out "$out/r.h5" --force 2>&1 |
    grep -o '[0-9]* tokens/s' | head -1 | cut -d' ' -f1
}
ratios=()
for i in $(seq "$rounds"); do
  b=$(rate "$base")
  h=$(rate "$head")
  [ -n "$b" ] && [ -n "$h" ] || { echo "ab-bench-model.sh: a run printed no rate" >&2; exit 4; }
  r=$(awk -v h="$h" -v b="$b" 'BEGIN { printf "%.3f", h / b }')
  ratios+=("$r")
  echo "round $i: base $b tokens/s, head $h tokens/s, head / base $r"
done
printf '%s\n' "${ratios[@]}" | sort -n |
  awk '{ a[NR] = $1 } END { m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
                            printf "median head / base over %d rounds: %.3f (rounds %s to %s)\n", NR, m, a[1], a[NR] }'
