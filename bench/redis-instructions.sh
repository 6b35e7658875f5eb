#!/usr/bin/env bash
# Redis's own instructions per count, counted by callgrind rather than timed:
# at 8 callers Redis shares the machine's two cores with the clients and is
# the limit, so its work per count sets the rate, and on a shared host this is
# the one figure load can't move.
#
#   bash bench/redis-instructions.sh [--calls N]
#
# Each script runs in a redis-server of its own (port 27391) under
# `valgrind --tool=callgrind`: warmed with N calls, counted from zero over the
# next N (default 5,000), by redis-benchmark with 4 clients on keys drawn from
# 5,000 (under callgrind each key is counted about once a second, as in
# bench/redis.sh at full speed, so most counts find their key live). Rows:
# - limit-store's integer script (`src/store/redis/integer/call.rs`, taken from
#   the source as it is) with 4 counts a call, as `Limits::attempt` sends them
#   at 8 callers, of one kind (a GCRA of one a ms, 3,600,000 an hour), on keys
#   of the store's length (90 bytes: prefix, generation, family, the HMAC's 64
#   hex digits) and again on keys of rate-limiter-flexible's length;
# - rate-limiter-flexible's `RateLimiterRedis` script (from bench/node's
#   node_modules), one count a call, as it sends them, on keys of its length
#   in bench/redis.sh (33 bytes: `lsbench:rlf:user:` and 16 hex digits);
# - for scale: a call's floor (a script that answers at once, 4 keys and the
#   integer script's arguments) and the least a GCRA on a bare integer can do
#   (`TIME`, `GET`, `SET ... PXAT` and the rule, no checks).
# Prints a markdown table of instructions per count. Needs valgrind and
# redis-benchmark; bench/node's `npm ci` for rate-limiter-flexible's script.
# About a minute and a half.
set -euo pipefail
cd "$(dirname "$0")/.."

calls=5000
while [ $# -gt 0 ]; do
  case "$1" in
    --calls) calls=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
port=27391
work=$(mktemp -d)
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# The integer script as the store sends it: the raw string after `const COUNT`.
sed -n '/^const COUNT: &str = r"$/,/^";$/p' src/store/redis/integer/call.rs | sed '1d;$d' > "$work/integer.lua"
[ -s "$work/integer.lua" ] || { echo "no COUNT script found in src/store/redis/integer/call.rs" >&2; exit 1; }
rlf=bench/node/node_modules/rate-limiter-flexible/lib/RateLimiterRedis.js
node -e "const s = require('fs').readFileSync(process.argv[1], 'utf8');
process.stdout.write(eval(s.match(/const incrTtlLuaScript = (\`[^\`]*\`)/)[1]))" "$rlf" > "$work/rlf.lua"
echo 'return {1, 1, 1, 1, 1}' > "$work/floor.lua"
cat > "$work/least.lua" <<'EOF'
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local grace, interval, capacity = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {now}
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local next = tat + interval
  if next - now <= capacity then
    redis.call('SET', KEYS[i], next, 'PXAT', next + grace)
    out[i + 1] = (tat - now) * 8 + 2
  else
    out[i + 1] = (tat - now) * 8
  end
end
return out
EOF

# Keys as each names them in bench/redis.sh (redis-benchmark puts 12 digits
# in place of __rand_int__).
ours='lsbench:8fa00e065545:68fb:3e18df3237130807fe066f073d4d567fa0c5f3516ed98d75d407379d__rand_int__'
theirs='lsbench:rlf:user:8527__rand_int__'
# name, keys a call, the call's keys and arguments
run() {
  local name=$1 per_call=$2
  shift 2
  rm -f "$work"/cg.*
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
    redis-server --port $port --save "" --appendonly no >/dev/null 2>&1 &
  local server=$!
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.3; done
  local sha
  sha=$(redis-cli -p $port script load "$(cat "$work/$name.lua")")
  redis-benchmark -p $port -n "$calls" -c 4 -r 5000 -q EVALSHA "$sha" "$@" >/dev/null 2>&1
  callgrind_control -z $server >/dev/null 2>&1
  redis-benchmark -p $port -n "$calls" -c 4 -r 5000 -q EVALSHA "$sha" "$@" >/dev/null 2>&1
  local errors
  errors=$(redis-cli -p $port info errorstats | grep -c errorstat_ || true)
  callgrind_control -d $server >/dev/null 2>&1
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  wait $server || true
  [ "$errors" = 0 ] || { echo "$name: Redis answered errors" >&2; exit 1; }
  local ir
  ir=$(callgrind_annotate "$(ls "$work"/cg.*.1)" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  echo $((ir / (calls * per_call)))
}

# The integer script's arguments: the grace, one kind (interval 1 ms,
# capacity an hour, cost 1, may add a key), then each count's kind.
k=$ours
integer=$(run integer 4 4 $k $k $k $k 5000 1 1 3600000 1 1 1 1 1 1)
floor=$(run floor 4 4 $k $k $k $k 5000 1 1 3600000 1 1 1 1 1 1)
least=$(run least 4 4 $k $k $k $k 5000 1 3600000)
k=$theirs
short=$(run integer 4 4 $k $k $k $k 5000 1 1 3600000 1 1 1 1 1 1)
# rate-limiter-flexible's: points, seconds to live, then its limiter's points and duration.
rlflx=$(run rlf 1 1 $k 1 3600 1000000000 3600)

echo "Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $calls calls counted, $(git rev-parse --short HEAD)"
echo
echo "| script | counts a call | Redis instructions a count | ÷ rate-limiter-flexible's |"
echo "|---|---:|---:|---:|"
row() { printf '| %s | %s | %s | %.2f |\n' "$1" "$2" "$3" "$(echo "scale=4; $3 / $rlflx" | bc)"; }
row "limit-store's integer script" 4 "$integer"
row "rate-limiter-flexible \`RateLimiterRedis\`" 1 "$rlflx"
row "limit-store's integer script on keys of rate-limiter-flexible's length" 4 "$short"
row "a call's floor (answers at once; the store's keys)" 4 "$floor"
row "the least GCRA on a bare integer (the store's keys)" 4 "$least"
