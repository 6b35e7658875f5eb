#!/usr/bin/env bash
# Runs the database benchmark: limit-store's DatabaseStore on SQLite,
# PostgreSQL and MariaDB/MySQL beside raw loops of the same transactions,
# pgbench, runlimit-postgres and rate-limiter-flexible, and prints one
# side-by-side table (markdown) on stdout; progress goes to stderr.
#
#   bash bench/database.sh                      # everything, about 12 minutes
#   bash bench/database.sh --secs 2 --warmup 1  # a rough pass
#   bash bench/database.sh --only postgres      # one database (also: sqlite, mysql, size)
#   LIMIT_STORE_BENCH_DURABLE=1 bash bench/database.sh ...    # limit-store's commits wait for the disk
#   LIMIT_STORE_BENCH_RLF_ASYNC=1 bash bench/database.sh ...  # rate-limiter-flexible's do not (PostgreSQL)
#
# Servers: LIMIT_STORE_BENCH_POSTGRES (default postgres://root@127.0.0.1:5432/test)
# and LIMIT_STORE_BENCH_MYSQL (default mysql://root@127.0.0.1:3306/test). The
# bench uses its own tables (limit_store_bench*, and the schema
# limit_store_bench_runlimit) and drops them again before each use.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo pgbench node npm; do
  command -v "$tool" >/dev/null || { echo "bench/database.sh: $tool is not installed" >&2; exit 1; }
done
if [ ! -d bench/node/node_modules ]; then
  (cd bench/node && npm ci --no-audit --no-fund >&2)
fi
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
  echo "# $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); $(pgbench --version); node $(node --version)"
} >&2

# Noise: every 5 s, the load average and the queries of other limit-store
# tables (the test suites share these servers) running at that moment.
PG_URL="${LIMIT_STORE_BENCH_POSTGRES:-postgres://root@127.0.0.1:5432/test}"
samples="$(mktemp)"
(
  while sleep 5; do
    pg=$(psql -At "$PG_URL" -c "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%limit_store%' AND query NOT LIKE '%limit_store_bench%' AND pid <> pg_backend_pid()" 2>/dev/null || echo '?')
    my=$(mariadb -h 127.0.0.1 -u root -N -e "SELECT COUNT(*) FROM information_schema.processlist WHERE command <> 'Sleep' AND info LIKE '%limit_store%' AND info NOT LIKE '%limit_store_bench%' AND id <> CONNECTION_ID()" 2>/dev/null || echo '?')
    echo "$(cut -d' ' -f1 /proc/loadavg) $pg $my"
  done
) >"$samples" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; rm -f "$samples"' EXIT

cargo bench --features sqlite,postgres,mysql --bench database -- "$@"

awk '{ n++; load += $1; if ($1 > max) max = $1; if ($2 > 0) pg++; if ($3 > 0) my++ }
     END { if (n) printf "\nNoise over %d samples (every 5 s): load average mean %.2f, max %.2f (2 cores); other limit-store queries active on PostgreSQL in %d samples, on MariaDB in %d.\n", n, load / n, max, pg, my }' "$samples"
