#!/usr/bin/env bash
# A soak of `limit-store serve` on PostgreSQL (outside CI): a steady load of
# code-verify attempts over 1,000,000 distinct codes (a 5-minute window, so
# rows keep expiring) with the store's sweeper running (every 5 minutes).
# Every 10 s it records requests/s, p99 latency, serve's RSS, its connections
# to PostgreSQL, and the table's rows (all, live) and size; then it plots them
# (gnuplot) and checks that RSS and connections stay flat, the table stays
# under its bound, and the table's size on disk stays flat: at the end within
# 1.5x of its size at 5 minutes (when the window is full and rows begin to
# expire).
#
#   bash bench/soak.sh                  # 30 minutes -> bench/soak.csv, bench/soak.svg
#   bash bench/soak.sh --minutes 2      # a trial
#   bash bench/soak.sh --plot           # plot and judge bench/soak.csv again
#
# Env: LIMIT_STORE_BENCH_POSTGRES (default the local test server), RATE
# (requests/s aimed at, default 800), LIMIT_STORE_BIN (a built limit-store;
# default: build target/release/limit-store).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=30
PLOT_ONLY=
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --plot) PLOT_ONLY=1; shift ;;
    *) echo "usage: bash bench/soak.sh [--minutes N | --plot]" >&2; exit 2 ;;
  esac
done
PG=${LIMIT_STORE_BENCH_POSTGRES:-postgres://root@127.0.0.1:5432/test}
RATE=${RATE:-800}
CONNECTIONS=16
BOUND=1000000          # max_entries: the bound on live rows
TABLE=limit_store_soak
OUT=${SOAK_OUT:-bench/soak}
command -v wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
command -v gnuplot >/dev/null || { apt-get update >/dev/null && apt-get install -y gnuplot-nox >/dev/null; }
csv="$OUT.csv"
run() {
bin=${LIMIT_STORE_BIN:-target/release/limit-store}
[ -n "${LIMIT_STORE_BIN:-}" ] || cargo build --release -q --features cli --bin limit-store >&2
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; cp "$work/serve.log" "$OUT.serve.log" 2>/dev/null || true; rm -rf "$work"' EXIT
export LIMIT_STORE_SECRET=${LIMIT_STORE_SECRET:-limit-store-soak-secret-0123456789abcdef}

cat > "$work/soak.toml" <<TOML
[rate_limit]
store = "database"
database_url = "$PG"
table = "$TABLE"
max_entries = $BOUND
max_in_flight = 1024

[rate_limit.limits.code-verify]
window = "5m"
TOML
# A fresh table each run (and its migrations' record, or migrate skips it).
psql "$PG" -qc "DROP TABLE IF EXISTS $TABLE, ${TABLE}_migrations" >/dev/null 2>&1
$bin migrate --config "$work/soak.toml" >&2
port=18190
$bin serve --listen "127.0.0.1:$port" --config "$work/soak.toml" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null || { echo "bench/soak.sh: serve did not start:" >&2; tail "$work/serve.log" >&2; exit 1; }

sql() { psql "$PG" -Atc "$1"; }
delay=$(( CONNECTIONS * 1000 / RATE ))
slices=$(( MINUTES * 6 ))
echo "seconds,requests_per_s,p99_ms,rss_mib,pg_connections,rows,live_rows,table_mib,degraded,unexpected" > "$csv"
start=$(date +%s)
sent=0
for slice in $(seq 1 "$slices"); do
  out=$(wrk -t1 -c$CONNECTIONS -d10s --latency -s bench/soak/steady.lua "http://127.0.0.1:$port" -- "$sent" "$delay")
  kill -0 "$pid" 2>/dev/null || { echo "bench/soak.sh: serve died:" >&2; tail "$work/serve.log" >&2; exit 1; }
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  sent=$(( sent + $(awk '/requests in/ {print $1}' <<<"$out") ))
  p99=$(awk '$1 == "99%" {v = $2; if (v ~ /us$/) {sub(/us$/, "", v); v /= 1000} else if (v ~ /ms$/) {sub(/ms$/, "", v)} else if (v ~ /s$/) {sub(/s$/, "", v); v *= 1000}; print v}' <<<"$out")
  rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
  conns=$(ss -tnpH state established "( dport = :5432 )" | grep -c "pid=$pid," || true)
  now_ms="(extract(epoch from clock_timestamp()) * 1000)::bigint"
  table=$(sql "SELECT count(*), count(*) FILTER (WHERE expires_at > $now_ms), round(pg_total_relation_size('$TABLE') / 1048576.0, 1) FROM $TABLE" | tr '|' ',') || table=",,"
  degraded=$(awk '/^degraded:/ {print $2}' <<<"$out")
  unexpected=$(awk '/^unexpected:/ {print $2}' <<<"$out")
  line="$(( $(date +%s) - start )),$rps,$p99,$rss,$conns,$table,$degraded,$unexpected"
  echo "$line" >> "$csv"
  echo "bench/soak.sh: $slice/$slices $line" >&2
done

}
[ -n "$PLOT_ONLY" ] || run
MINUTES=$(( $(tail -1 "$csv" | cut -d, -f1) / 60 ))

gnuplot <<GP
set terminal svg size 900,900 font "sans,11" background rgb "white"
set output "$OUT.svg"
set datafile separator ","
set key autotitle columnhead top left
set multiplot layout 5,1 title "limit-store serve on PostgreSQL: $MINUTES min, ~$RATE req/s over 1,000,000 codes, sweeper on"
set lmargin 12
set ylabel "MiB"
plot "$csv" using 1:4 with lines lw 2 title "serve RSS (MiB)"
set ylabel "connections"
set yrange [0:*]
plot "$csv" using 1:5 with steps lw 2 title "serve's connections to PostgreSQL"
set ylabel "ms"
set yrange [0:*]
plot "$csv" using 1:3 with lines lw 2 title "p99 latency (ms)", "$csv" using 1:(\$2 / 100) with lines title "requests/s ÷ 100"
set ylabel "rows"
set xlabel "seconds"
plot "$csv" using 1:6 with lines lw 2 title "rows", "$csv" using 1:7 with lines title "live rows", $BOUND with lines dt 2 title "bound (max_entries)"
set ylabel "MiB"
set yrange [0:*]
plot "$csv" using 1:8 with lines lw 2 title "table size on disk (MiB, with its index)"
unset multiplot
GP

# The verdict: after a warm-up of a quarter of the run (the window filling),
# RSS and connections stay flat, and the table never passes the bound; its
# size on disk at the end is within 1.5x of its size at 5 minutes.
awk -F, -v bound=$BOUND '
  NR == 1 { next }
  { t[++n] = $1; rss[n] = $4; conns[n] = $5; rows[n] = $6; mib[n] = $8; degraded += $9; unexpected += $10
    if (five == "" && $1 >= 300) five = $8
    if (five != "" && $8 > smax) smax = $8 }
  END {
    from = int(n / 4) + 1; mid = int((from + n) / 2)
    for (i = from; i <= n; i++) {
      if (i <= mid) { a += rss[i]; na++ } else { b += rss[i]; nb++ }
      if (conns[i] > cmax) cmax = conns[i]; if (cmin == "" || conns[i] < cmin) cmin = conns[i]
    }
    for (i = 1; i <= n; i++) if (rows[i] > rmax) rmax = rows[i]
    growth = (b / nb) / (a / na) - 1
    printf "RSS: %.1f MiB after the warm-up, %.1f MiB in the last part (%+.1f%%)\n", a / na, b / nb, growth * 100
    printf "connections to PostgreSQL: %d..%d after the warm-up\n", cmin, cmax
    printf "rows: at most %d (bound %d)\n", rmax, bound
    size = mib[n]
    size_ok = five == "" || size <= 1.5 * five
    if (five == "") print "table size on disk: not judged (the run is shorter than 5 minutes)"
    else printf "table size on disk: %.1f MiB at 5 minutes, %.1f MiB at the end (%.2fx; at most %.1f MiB after 5 minutes; limit 1.5x)\n", five, size, size / five, smax
    # Reported, not judged: a shared PostgreSQL may be stopped by other tests.
    printf "answers the policy gave (store unavailable): %d; neither 200 nor 429: %d\n", degraded, unexpected
    ok = growth < 0.10 && cmax - cmin <= 2 && rmax < bound && size_ok
    print (ok ? "verdict: flat" : "verdict: NOT flat")
    exit (ok ? 0 : 1)
  }' "$csv"
