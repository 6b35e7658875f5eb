#!/usr/bin/env bash
# Requests per second and p50/p99 latency of `limit-store serve` (memory,
# SQLite, PostgreSQL) beside a bare axum handler that answers the same JSON
# (the HTTP ceiling on this machine), with wrk at 1, 32 and 128 connections,
# in one run; then Envoy's ShouldRateLimit (`serve --grpc-listen`, memory)
# beside a bare tonic handler that answers the same message, at 32 streams
# (examples/grpc_load.rs). Prints markdown tables; progress goes to stderr.
#
#   bash bench/serve.sh                 # 10 s a point
#   SECS=3 bash bench/serve.sh          # a rough pass
#
# PostgreSQL: LIMIT_STORE_BENCH_POSTGRES (default the local test server).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
PG=${LIMIT_STORE_BENCH_POSTGRES:-postgres://root@127.0.0.1:5432/test}
command -v wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
cargo build --release -q --features cli --bin limit-store --example serve_ceiling --example grpc_ceiling --example grpc_load >&2
bin=target/release/limit-store
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export LIMIT_STORE_SECRET=${LIMIT_STORE_SECRET:-limit-store-bench-secret-0123456789abcdef}

# starts "name" "command..." on a port; echoes the port
start() {
  local port=$1; shift
  "$@" >/dev/null 2>&1 &
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench/serve.sh: nothing listens on $port" >&2; exit 1
}

# A cap on calls in flight above the connections, so that every answer is
# the store's, not the guard's "overloaded".
database() { printf '[rate_limit]\nstore = "database"\ndatabase_url = "%s"\ntable = "limit_store_bench_serve"\nmax_entries = 2000000\nmax_in_flight = 1024\n' "$1"; }
database "sqlite://$work/serve.db" > "$work/sqlite.toml"
database "$PG" > "$work/pg.toml"
$bin migrate --config "$work/sqlite.toml" >&2
$bin migrate --config "$work/pg.toml" >&2
printf '[rate_limit]\nsingle_instance = true\nmax_entries = 2000000\n' > "$work/memory.toml"

echo "| server | connections | requests/s | p50 | p99 | ÷ bare handler | degraded answers |"
echo "|---|---:|---:|---:|---:|---:|---:|"
declare -A bare
port=18080
for target in bare memory sqlite postgres; do
  port=$((port + 1))
  case $target in
    bare) start $port target/release/examples/serve_ceiling "127.0.0.1:$port" ;;
    memory) start $port $bin serve --listen "127.0.0.1:$port" --config "$work/memory.toml" ;;
    sqlite) start $port $bin serve --listen "127.0.0.1:$port" --config "$work/sqlite.toml" ;;
    postgres) start $port $bin serve --listen "127.0.0.1:$port" --config "$work/pg.toml" ;;
  esac
  for c in 1 32 128; do
    echo "bench/serve.sh: $target, $c connections" >&2
    out=$(wrk -t$(( c < 2 ? 1 : 2 )) -c$c -d"${SECS}s" --latency -s bench/serve/attempt.lua "http://127.0.0.1:$port")
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
    degraded=$(awk '/^degraded:/ {print $2}' <<<"$out")
    [ "$target" = bare ] && bare[$c]=$rps
    ratio=$(awk -v a="$rps" -v b="${bare[$c]}" 'BEGIN {printf "%.2f", a / b}')
    echo "| $target | $c | ${rps%.*} | $p50 | $p99 | $ratio${non2xx:+ ($non2xx non-2xx)} | ${degraded:-0} |"
  done
  kill %% 2>/dev/null || true
  wait 2>/dev/null || true
done

# Envoy's rate limit service: one rule that every stream's descriptor
# matches, with room for every call, on memory.
printf 'domain: bench\ndescriptors:\n  - key: client\n    rate_limit: { unit: hour, requests_per_unit: 4000000000 }\n' > "$work/envoy.yaml"
printf '[rate_limit]\nsingle_instance = true\nmax_entries = 2000000\nenvoy_config = "%s"\n' "$work/envoy.yaml" > "$work/envoy.toml"
echo
echo "| gRPC ShouldRateLimit | streams | requests/s | p50 | p99 | ÷ bare handler | not OK |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for target in bare memory; do
  port=$((port + 2))
  case $target in
    bare) start $port target/release/examples/grpc_ceiling "127.0.0.1:$port" ;;
    memory) start $port $bin serve --listen "127.0.0.1:$((port + 1))" --grpc-listen "127.0.0.1:$port" --config "$work/envoy.toml" ;;
  esac
  echo "bench/serve.sh: gRPC $target, 32 streams" >&2
  out=$(target/release/examples/grpc_load "127.0.0.1:$port" 32 "$SECS")
  read -r _ rps _ p50 _ p99 _ not_ok <<<"$out"
  [ "$target" = bare ] && grpc_bare=$rps
  ratio=$(awk -v a="$rps" -v b="$grpc_bare" 'BEGIN {printf "%.2f", a / b}')
  echo "| $target | 32 | $rps | $p50 | $p99 | $ratio | $not_ok |"
  kill %% 2>/dev/null || true
  wait 2>/dev/null || true
done
