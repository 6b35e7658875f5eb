#!/usr/bin/env bash
# Instructions per op of the memory bench's contenders, counted by cachegrind
# rather than timed: the one figure a shared, noisy machine can't move.
#
#   bash bench/instructions.sh [--ops N] [--runs R] [contender ...]
#   bash bench/instructions.sh --layer     # the axum layer's bench instead
#
# Each contender runs twice under `valgrind --tool=cachegrind` (benches/memory/
# probe.rs): warmed with one count per key, then N ops (default 100,000) or none;
# the difference over N is its cost per op, with setup and warm-up cancelled.
# Each figure is the median of R such pairs (default 3): a contender's count
# moves between processes (hash seeds, a clock's calibration loop), and one
# process can draw an unlucky one.
# Prints a markdown table with each row's instructions over governor's. With
# --layer: benches/layer.rs's contenders, 8,192 requests after a warm-up,
# counted by callgrind inside the bench's `counted` only (the same in every
# process, so R defaults to 1); each row's
# instructions per request added over the bare router's, and that over
# tower_governor's.
# Needs valgrind (`apt-get install -y valgrind`). About 8 minutes once built; --layer 1 minute.
set -euo pipefail
cd "$(dirname "$0")/.."

ops=100000
runs=
layer=0
contenders=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ops) ops=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --layer) layer=1; shift ;;
    *) contenders+=("$1"); shift ;;
  esac
done
[ ${#contenders[@]} -gt 0 ] || contenders=(governor limits_attempt memory_store memory_store_number memory_store_guarded runlimit_prehashed runlimit_hmac)
command -v valgrind >/dev/null || { echo "bench/instructions.sh needs valgrind: apt-get install -y valgrind" >&2; exit 1; }

# The median of the numbers given.
median() {
  printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

if [ "$layer" = 1 ]; then
  runs=${runs:-1}
  cargo bench --bench layer --features axum --no-run >&2
  bin=$(cargo bench --bench layer --features axum --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*deps\/layer-[^"]*\)".*/\1/p' | tail -n 1)
  [ -x "$bin" ] || { echo "could not build the layer bench" >&2; exit 1; }
  declare -A per
  for c in bare tower_governor tower_governor_headers limit_layer; do
    each=()
    for _ in $(seq "$runs"); do
      # Only inside `counted`: the warm-up and each process's own start-up
      # (a clock's calibration loop, whose length varies) are not counted.
      out=$(mktemp)
      LIMIT_STORE_BENCH_COUNT=$c:8192 valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='layer::counted' --callgrind-out-file="$out" "$bin" >/dev/null 2>&1
      total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out")
      rm -f "$out"
      [ -n "$total" ] && [ "$total" -gt 0 ] || { echo "callgrind counted nothing for $c" >&2; exit 1; }
      each+=($(( total / 8192 )))
    done
    per[$c]=$(median "${each[@]}")
    echo "counted $c: ${each[*]}" >&2
  done
  echo "| contender | instructions per request | added over bare | ÷ tower_governor's added |"
  echo "|---|---:|---:|---:|"
  base=$(( per[tower_governor] - per[bare] ))
  for c in bare tower_governor tower_governor_headers limit_layer; do
    added=$(( per[$c] - per[bare] ))
    echo "| $c | ${per[$c]} | $added | $(awk -v a="$added" -v b="$base" 'BEGIN {printf "%.2f", a / b}') |"
  done
  exit 0
fi

runs=${runs:-3}
cargo bench --bench memory --no-run >&2
bin=$(cargo bench --bench memory --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*deps\/memory-[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "could not build the memory bench" >&2; exit 1; }

# "<instructions> <D1 misses> <last-level misses>" of one probe run.
counts() {
  LIMIT_STORE_BENCH_PROBE="$1:$2" valgrind --tool=cachegrind --cache-sim=yes \
    --cachegrind-out-file=/dev/null "$bin" 2>&1 \
    | awk '/I *refs/ {gsub(",","",$4); i=$4} /D1  misses/ {gsub(",","",$4); d=$4} /LLd misses/ {gsub(",","",$4); l=$4} END {print i, d, l}'
}

declare -A ir d1 ll
for c in "${contenders[@]}"; do
  each=(); each_d1=(); each_ll=()
  for _ in $(seq "$runs"); do
    read -r i0 d0 l0 < <(counts "$c" 0)
    read -r i1 d1_ l1 < <(counts "$c" "$ops")
    if [ -z "${i0:-}" ] || [ -z "${i1:-}" ] || [ "$i1" -le "$i0" ]; then
      echo "the cachegrind runs of $c failed (counts: '${i0:-}' and '${i1:-}'); run it alone:" >&2
      echo "  LIMIT_STORE_BENCH_PROBE=$c:$ops valgrind --tool=cachegrind $bin" >&2
      exit 1
    fi
    each+=($(( (i1 - i0) / ops )))
    each_d1+=($(awk -v a="$d0" -v b="$d1_" -v n="$ops" 'BEGIN {printf "%.1f", (b - a) / n}'))
    each_ll+=($(awk -v a="$l0" -v b="$l1" -v n="$ops" 'BEGIN {printf "%.2f", (b - a) / n}'))
  done
  ir[$c]=$(median "${each[@]}")
  d1[$c]=$(median "${each_d1[@]}")
  ll[$c]=$(median "${each_ll[@]}")
  echo "counted $c: ${each[*]}" >&2
done

echo "| contender | instructions per op | ÷ governor's | D1 misses per op | LL misses per op |"
echo "|---|---:|---:|---:|---:|"
base=${ir[governor]:-}
for c in "${contenders[@]}"; do
  ratio="-"
  [ -n "$base" ] && ratio=$(awk -v a="${ir[$c]}" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
  echo "| $c | ${ir[$c]} | $ratio | ${d1[$c]} | ${ll[$c]} |"
done
