// rate-limiter-flexible's Postgres, MySQL and Redis stores, counted the way
// benches/database.rs and benches/redis.rs count limit-store: keys drawn
// uniformly from the same 100,000 strings, C callers (promises) in flight, a
// fixed time per point.
//
//   node rlf.js --db postgres|mysql|redis|redis-cluster --url URL --callers 1,8,32 --secs 5 --warmup 2
//   node rlf.js --db postgres|mysql|redis --url URL --callers 32 --serve 1 [--fill 0]
//     (as the benches run it: one point per stdin line "C WARMUP SECS";
//     --fill 0: another process made and filled the table)
//
// Prints one JSON line per caller count: {"callers":C,"counts":N,"secs":S,"errors":E}.
// SQL: before the points it drops its table, lets rate-limiter-flexible create
// it, and fills it with a live row for every key (bulk SQL, not timed).
// Redis (RateLimiterRedis on one ioredis connection, keys under
// "lsbench:rlf:"): before the points it consumes every key once, 64 in
// flight, not timed. Either way every measured count updates an existing
// entry, as in the Rust contenders. redis-cluster: the same on an ioredis
// Cluster (URL redis+cluster://host:port,host:port,...), each count sent to
// its key's primary.
'use strict';

const crypto = require('crypto');
const { RateLimiterPostgres, RateLimiterMySQL, RateLimiterRedis } = require('rate-limiter-flexible');

function args() {
  const out = { db: 'postgres', callers: '1,8,32', secs: '5', warmup: '2', keys: '100000', table: 'limit_store_bench_rlf' };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

// The same key strings as benches/database.rs: "user:" + the first 16 hex
// digits of SHA-256 of the index.
function keys(n) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    out[i] = 'user:' + crypto.createHash('sha256').update(String(i)).digest('hex').slice(0, 16);
  }
  return out;
}

async function open(a, poolSize, ks) {
  // --fill 0: count on the table another process made and filled.
  const fillTable = a.fill !== '0';
  const opts = { points: 1e9, duration: 3600, tableName: a.table, keyPrefix: 'rlflx' };
  if (a.db === 'redis' || a.db === 'redis-cluster') {
    // One connection (one per primary on a cluster), as every Redis client here
    // multiplexes its callers on one.
    const Redis = require('ioredis');
    const client = a.db === 'redis'
      ? new Redis(a.url || 'redis://127.0.0.1:6379', { enableOfflineQueue: true })
      : new Redis.Cluster(a.url.replace(/^redis\+cluster:\/\//, '').split(',').map((hp) => {
        const [host, port] = hp.split(':');
        return { host, port: Number(port || 6379) };
      }), { scaleReads: 'master' });
    const limiter = new RateLimiterRedis({ points: 1e9, duration: 3600, keyPrefix: 'lsbench:rlf', storeClient: client });
    let next = 0;
    const fill = async () => {
      while (next < ks.length) await limiter.consume(ks[next++]);
    };
    await Promise.all(Array.from({ length: 64 }, fill));
    return { limiter, close: () => client.quit() };
  }
  if (a.db === 'postgres') {
    const { Pool } = require('pg');
    // Idle connections close within a second, as the Rust contenders' pools
    // close after each point: PostgreSQL allows 100 in all.
    // LIMIT_STORE_BENCH_RLF_ASYNC=1: its commits do not wait for the disk,
    // as limit-store's do not by default (synchronous_commit off).
    const options = process.env.LIMIT_STORE_BENCH_RLF_ASYNC === '1' ? '-c synchronous_commit=off' : undefined;
    const pool = new Pool({ connectionString: a.url, max: poolSize, idleTimeoutMillis: 1000, options });
    if (fillTable) await pool.query(`DROP TABLE IF EXISTS ${a.table}`);
    const limiter = await new Promise((resolve, reject) => {
      const l = new RateLimiterPostgres({ ...opts, storeClient: pool, storeType: 'pool' },
        (err) => (err ? reject(err) : resolve(l)));
    });
    for (let i = 0; fillTable && i < ks.length; i += 10000) {
      await pool.query(`INSERT INTO ${a.table} (key, points, expire) SELECT k, 1, $2::int8 FROM unnest($1::text[]) AS k`,
        [ks.slice(i, i + 10000).map((k) => limiter.getKey(k)), Date.now() + 3600000]);
    }
    if (fillTable) await pool.query(`VACUUM ANALYZE ${a.table}`);
    return { limiter, close: () => pool.end() };
  }
  const mysql = require('mysql2');
  const u = new URL(a.url);
  const dbName = u.pathname.replace(/^\//, '');
  const pool = mysql.createPool({
    host: u.hostname, port: Number(u.port || 3306), user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password), database: dbName, connectionLimit: poolSize,
  });
  if (fillTable) await pool.promise().query(`DROP TABLE IF EXISTS \`${a.table}\``);
  const limiter = await new Promise((resolve, reject) => {
    const l = new RateLimiterMySQL({ ...opts, storeClient: pool, storeType: 'pool', dbName },
      (err) => (err ? reject(err) : resolve(l)));
  });
  for (let i = 0; fillTable && i < ks.length; i += 2000) {
    const rows = ks.slice(i, i + 2000).map((k) => [limiter.getKey(k), 1, Date.now() + 3600000]);
    await pool.promise().query(`INSERT INTO \`${a.table}\` (\`key\`, points, expire) VALUES ?`, [rows]);
  }
  if (fillTable) await pool.promise().query(`ANALYZE TABLE \`${a.table}\``);
  return { limiter, close: () => new Promise((r) => pool.end(r)) };
}

// `callers` loops, each awaiting one consume at a time, until `ms` have passed.
async function run(limiter, ks, callers, ms) {
  let counts = 0;
  let errors = 0;
  const end = Date.now() + ms;
  const loop = async () => {
    while (Date.now() < end) {
      try {
        await limiter.consume(ks[Math.floor(Math.random() * ks.length)]);
        counts++;
      } catch (e) {
        errors++;
        if (errors === 1) console.error('rlf consume failed:', e && e.message ? e.message : e);
      }
    }
  };
  const began = process.hrtime.bigint();
  await Promise.all(Array.from({ length: callers }, loop));
  const secs = Number(process.hrtime.bigint() - began) / 1e9;
  return { counts, errors, secs };
}

async function main() {
  const a = args();
  const ks = keys(Number(a.keys));
  const callers = a.callers.split(',').map(Number);
  const { limiter, close } = await open(a, Math.max(...callers), ks);
  const point = async (c, warmup, secs) => {
    await run(limiter, ks, c, warmup * 1000);
    const r = await run(limiter, ks, c, secs * 1000);
    console.log(JSON.stringify({ callers: c, counts: r.counts, secs: r.secs, errors: r.errors }));
  };
  if (a.serve === undefined) {
    for (const c of callers) await point(c, Number(a.warmup), Number(a.secs));
  } else {
    // --serve 1: prints "ready", then one point per stdin line "C WARMUP SECS".
    console.log('ready');
    const rl = require('readline').createInterface({ input: process.stdin });
    for await (const line of rl) {
      const [c, warmup, secs] = line.trim().split(/\s+/).map(Number);
      if (!c) break;
      await point(c, warmup, secs);
    }
  }
  await close();
}

main().catch((e) => { console.error(e); process.exit(1); });
