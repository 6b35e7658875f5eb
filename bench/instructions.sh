#!/usr/bin/env bash
# Instructions per op of the memory bench's contenders, counted by callgrind
# rather than timed: the one figure a shared, noisy machine can't move.
#
#   bash bench/instructions.sh [--ops N] [--runs R] [contender ...]
#   bash bench/instructions.sh --layer     # the axum layer's bench instead
#
# Each contender runs under `valgrind --tool=callgrind` (benches/memory/probe.rs):
# warmed with one count per key, then N ops (default 100,000) inside `counted`,
# the only place callgrind counts, so set-up, warm-up and each process's own
# start-up (a clock's calibration loop, whose length varies) are left out.
# With --runs R, each figure is the median of R processes (default 1; each
# store hashes under its own random key, which moves a count by up to about
# 30 instructions, 1-2%: record figures with --runs 3).
# Prints a markdown table with each row's instructions over governor's. With
# --layer: benches/layer.rs's contenders, 8,192 requests after a warm-up,
# counted the same way inside the bench's `counted`; each row's instructions
# per request added over the bare router's, and that over tower_governor's
# (without headers) and over the same work's (see benches/layer.rs).
# Needs valgrind (`apt-get install -y valgrind`). About 4 minutes once built; --layer 1 minute.
set -euo pipefail
cd "$(dirname "$0")/.."

ops=100000
runs=1
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
  cargo bench --bench layer --features axum --no-run >&2
  bin=$(cargo bench --bench layer --features axum --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*deps\/layer-[^"]*\)".*/\1/p' | tail -n 1)
  [ -x "$bin" ] || { echo "could not build the layer bench" >&2; exit 1; }
  declare -A per
  for c in bare tower_governor tower_governor_headers limit_layer limit_layer_fields_on_refusals; do
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
  echo "| contender | instructions per request | added over bare | ÷ tower_governor's added | ÷ the same work's |"
  echo "|---|---:|---:|---:|---:|"
  base=$(( per[tower_governor] - per[bare] ))
  headers=$(( per[tower_governor_headers] - per[bare] ))
  for c in bare tower_governor tower_governor_headers limit_layer limit_layer_fields_on_refusals; do
    added=$(( per[$c] - per[bare] ))
    # Like for like: fields or headers on every answer (limit_layer), or not.
    case $c in
      limit_layer) same=$(awk -v a="$added" -v b="$headers" 'BEGIN {printf "%.2f", a / b}') ;;
      limit_layer_fields_on_refusals) same=$(awk -v a="$added" -v b="$base" 'BEGIN {printf "%.2f", a / b}') ;;
      *) same="-" ;;
    esac
    echo "| $c | ${per[$c]} | $added | $(awk -v a="$added" -v b="$base" 'BEGIN {printf "%.2f", a / b}') | $same |"
  done
  exit 0
fi

cargo bench --bench memory --no-run >&2
bin=$(cargo bench --bench memory --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*deps\/memory-[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "could not build the memory bench" >&2; exit 1; }

# "<instructions> <D1 misses> <last-level data misses>" inside `counted` of
# one probe run of `$1` doing `$2` ops.
counts() {
  local out
  out=$(mktemp)
  LIMIT_STORE_BENCH_PROBE="$1:$2" valgrind --tool=callgrind --collect-atstart=no --cache-sim=yes \
    --toggle-collect='memory::probe::counted*' --callgrind-out-file="$out" "$bin" >/dev/null 2>&1
  awk '/^events:/ {for (i = 2; i <= NF; i++) at[$i] = i}
       /^(summary|totals):/ && !done {done = 1; print $at["Ir"], $at["D1mr"] + $at["D1mw"], $at["DLmr"] + $at["DLmw"]}' "$out"
  rm -f "$out"
}

declare -A ir d1 ll
for c in "${contenders[@]}"; do
  each=(); each_d1=(); each_ll=()
  for _ in $(seq "$runs"); do
    read -r i d l < <(counts "$c" "$ops")
    if [ -z "${i:-}" ] || [ "$i" -le 0 ]; then
      echo "callgrind counted nothing for $c; run it alone:" >&2
      echo "  LIMIT_STORE_BENCH_PROBE=$c:$ops valgrind --tool=callgrind --collect-atstart=no --toggle-collect='memory::probe::counted*' $bin" >&2
      exit 1
    fi
    each+=($(( i / ops )))
    each_d1+=($(awk -v d="$d" -v n="$ops" 'BEGIN {printf "%.1f", d / n}'))
    each_ll+=($(awk -v l="$l" -v n="$ops" 'BEGIN {printf "%.2f", l / n}'))
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
