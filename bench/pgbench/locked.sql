-- limit-store's locked count on PostgreSQL (src/store/database/postgres.rs,
-- `try_update`), one key: BEGIN; lock-or-create the row and read it with the
-- clock; write n + 1 with the store's write statement; COMMIT. 4 round trips.
-- Keys: SHA-256 of a uniform k in 1..100000 (32 bytes, like an HMAC). The
-- count is computed in SQL here, from the values read (the store computes it
-- in Rust between the two statements). Table: limit_store_bench_raw.
\set k random(1, 100000)
BEGIN;
INSERT INTO limit_store_bench_raw (key_hash, generation, value, expires_at) SELECT k, 0, 'null', 0 FROM unnest(ARRAY[sha256(:k::text::bytea)]) AS k ORDER BY k ON CONFLICT (key_hash) DO UPDATE SET value = limit_store_bench_raw.value RETURNING value AS v, expires_at AS e, (extract(epoch from clock_timestamp()) * 1000)::int8 AS now
\gset
WITH w(k, v, e) AS (SELECT * FROM unnest(ARRAY[sha256(:k::text::bytea)], ARRAY[CASE WHEN :e::int8 > :now::int8 THEN (coalesce(nullif(:v::text, 'null'), '0')::int8 + 1)::text ELSE '1' END], ARRAY[CASE WHEN :e::int8 > :now::int8 THEN :e::int8 ELSE :now::int8 + 60000 END])), up AS (UPDATE limit_store_bench_raw SET generation = 1, value = w.v, expires_at = w.e FROM w WHERE limit_store_bench_raw.key_hash = w.k RETURNING 1), del AS (DELETE FROM limit_store_bench_raw WHERE key_hash = ANY('{}'::bytea[]) RETURNING 1) SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del);
COMMIT;
