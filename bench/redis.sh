#!/usr/bin/env bash
# Runs the Redis benchmark: limit-store's RedisStore (bare and guarded) beside
# rate-limiter-flexible's RateLimiterRedis, limitador's AsyncRedisStorage and
# redis-benchmark's INCR (the ceiling), at 1, 8 and 32 callers, rounds
# interleaved, and prints one side-by-side table (markdown) on stdout with
# limit-store's ratios against issues 13's and 38's aims; progress goes to
# stderr. With the cluster rows (issue 38): on a local 3-primary Redis Cluster,
# one-slot and two-slot counts and rate-limiter-flexible on an ioredis Cluster,
# with the same two-key count on the one server, at 8 and 32 callers; and like
# for like (the local cluster applies every write on a replica too, the one
# server on none): one-key and two-key counts on a server with one replica,
# and one-slot and two-slot counts on a 3-primary cluster without replicas
# beside the one server's one-key count.
#
#   bash bench/redis.sh                       # 2 rounds of 4 s points, about 3 minutes
#   bash bench/redis.sh --secs 2 --warmup 1   # a rough pass
#   bash bench/redis.sh --fresh               # also limit-store on brand-new keys
#   (more: --rounds N, --callers 1,8,32, --remember N, --threads N (default 1), --no-node,
#    --no-limitador (then not built either), --no-incr, --no-cluster (and no like-for-like
#    rows), --min-acked N (min_replicas_acked of the stores on the cluster and the replicated
#    server), --stats (per count after each store point: counts per script call, EVALSHA µs,
#    the primaries', replicas' and bench process's CPU))
#
# Server: LIMIT_STORE_BENCH_REDIS (default redis://127.0.0.1:6379). The bench
# writes only keys of its own (limit-store under prefix lsbench, lsbench:rlf:*, limitador's
# namespace lsbench_limitador, lsbench:incr:*) and removes them all after the
# run: hundreds of thousands of keys left to expire would slow every SCAN of the
# server (the store's sweep and count) for an hour. It never flushes.
# Cluster: LIMIT_STORE_BENCH_REDIS_CLUSTER (a redis+cluster:// URL); by default
# the one `.ci/redis-topologies cluster /tmp/limit-store-ci-cluster 27100`
# starts (or finds up) on ports 27100-27105; its lsbench keys go as well.
# Like for like: LIMIT_STORE_BENCH_REDIS_REPLICATED (a redis:// URL of a
# server with one replica) and LIMIT_STORE_BENCH_REDIS_CLUSTER_BARE (a
# redis+cluster:// URL of a cluster without replicas); by default the bench
# starts its own (`.ci/redis-topologies pair` on 27110-27111, `cluster
# --replicas 0` on 27120-27122, under /tmp/limit-store-bench-*) and stops
# them after the run; their lsbench keys go as well.
set -euo pipefail
cd "$(dirname "$0")/.."

URL="${LIMIT_STORE_BENCH_REDIS:-redis://127.0.0.1:6379}"
cluster=1 limitador=1
args=()
for a in "$@"; do
  case "$a" in
    --no-cluster) cluster=0 ;;
    --no-limitador) limitador=0; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
CLUSTER_URL="" REPLICATED_URL="" BARE_URL="" started=()
# The servers the bench starts go when it ends, however it ends.
stop_started() {
  for dir in "${started[@]}"; do .ci/redis-topologies stop "$dir" || true; done
}
trap stop_started EXIT
if [ "$cluster" = 1 ]; then
  CLUSTER_URL="${LIMIT_STORE_BENCH_REDIS_CLUSTER:-$(.ci/redis-topologies cluster /tmp/limit-store-ci-cluster 27100)}"
  REPLICATED_URL="${LIMIT_STORE_BENCH_REDIS_REPLICATED:-}"
  if [ -z "$REPLICATED_URL" ]; then
    started+=(/tmp/limit-store-bench-pair)
    REPLICATED_URL=$(.ci/redis-topologies pair /tmp/limit-store-bench-pair 27110)
  fi
  BARE_URL="${LIMIT_STORE_BENCH_REDIS_CLUSTER_BARE:-}"
  if [ -z "$BARE_URL" ]; then
    started+=(/tmp/limit-store-bench-bare)
    BARE_URL=$(.ci/redis-topologies cluster /tmp/limit-store-bench-bare 27120 --replicas 0)
  fi
  args+=(--cluster "$CLUSTER_URL" --replicated "$REPLICATED_URL" --bare-cluster "$BARE_URL")
fi
for tool in cargo node npm redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench/redis.sh: $tool is not installed" >&2; exit 1; }
done
redis-cli -u "$URL" ping >/dev/null || { echo "bench/redis.sh: no Redis at $URL" >&2; exit 1; }
if [ ! -d bench/node/node_modules ] || [ ! -d bench/node/node_modules/ioredis ]; then
  (cd bench/node && npm ci --no-audit --no-fund >&2)
fi
# limitador is its own cargo project (its own lock file and target/). Its
# crate needs RocksDB; link Debian's rather than build RocksDB's C++ for an hour.
libdir=/usr/lib/x86_64-linux-gnu
have_clang() { compgen -G "$libdir/libclang*.so*" >/dev/null || compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null; }
if [ "$limitador" = 1 ]; then
  if [ ! -e "$libdir/librocksdb.so" ] || [ ! -e "$libdir/libsnappy.so" ] || ! have_clang; then
    echo "bench/redis.sh: limitador needs librocksdb-dev, libsnappy-dev and libclang-dev; installing" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq librocksdb-dev libsnappy-dev libclang-dev >&2
  fi
  (cd bench/limitador && ROCKSDB_LIB_DIR=$libdir SNAPPY_LIB_DIR=$libdir cargo build --release --locked -q >&2)
fi
# Build the bench before the header, so the load it shows is the run's.
cargo bench --features redis --bench redis --no-run >&2

{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); redis $(redis-cli -u "$URL" info server | tr -d '\r' | sed -n 's/^redis_version://p') ($(redis-cli -u "$URL" config get maxmemory-policy | tr -d '\r' | tail -1)); $(redis-benchmark --version); node $(node --version)"
} >&2

# Noise: every 5 s, the load average and the other clients connected to Redis
# (the test suites share it).
samples="$(mktemp)"
(
  while sleep 5; do
    echo "$(cut -d' ' -f1 /proc/loadavg) $(redis-cli -u "$URL" info clients 2>/dev/null | tr -d '\r' | sed -n 's/^connected_clients://p')"
  done
) >"$samples" &
sampler=$!
cleanup() {
  kill "$sampler" 2>/dev/null || true
  rm -f "$samples"
  for pattern in 'lsbench*' '*lsbench_limitador*'; do
    redis-cli -u "$URL" --scan --pattern "$pattern" | xargs -d '\n' -r -n 1000 redis-cli -u "$URL" unlink >/dev/null || true
  done
  if [ -n "$REPLICATED_URL" ]; then
    redis-cli -u "$REPLICATED_URL" --scan --pattern 'lsbench*' | xargs -d '\n' -r -n 1000 redis-cli -u "$REPLICATED_URL" unlink >/dev/null || true
  fi
  for url in $CLUSTER_URL $BARE_URL; do
    # Each primary's own keys, one UNLINK each (a cluster refuses one over several slots).
    local seed=${url#*://}
    seed=${seed%%,*}
    for node in $(redis-cli -h "${seed%:*}" -p "${seed##*:}" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ { split($2, a, "@"); print a[1] }'); do
      redis-cli -h "${node%:*}" -p "${node##*:}" --scan --pattern 'lsbench*' | sed 's/^/UNLINK /' \
        | redis-cli -h "${node%:*}" -p "${node##*:}" >/dev/null || true
    done
  done
  stop_started
}
trap cleanup EXIT

cargo bench --features redis --bench redis -- "${args[@]}"

awk '{ n++; load += $1; if ($1 > max) max = $1; cl += $2; if ($2 > clmax) clmax = $2 }
     END { if (n) printf "\nNoise over %d samples (every 5 s): load average mean %.2f, max %.2f (2 cores); Redis clients connected: mean %.1f, max %d (this bench holds about 4, and 32 more during the INCR points at 32).\n", n, load / n, max, cl / n, clmax }' "$samples"
