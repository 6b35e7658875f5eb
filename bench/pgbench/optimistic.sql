-- limit-store's optimistic count on PostgreSQL, one key: one autocommit read
-- of the row with the clock, then one autocommit conditional UPDATE that
-- writes n + 1 only if the row still holds what was read: 2 round trips. When
-- it matched nothing (another caller counted in between) the count falls back
-- to the locked shape of locked.sql. Keys and table as in locked.sql.
\set k random(1, 100000)
SELECT coalesce(t.value, 'null') AS v, coalesce(t.expires_at, 0) AS e, coalesce(t.generation, 0) AS g, (extract(epoch from clock_timestamp()) * 1000)::int8 AS now FROM (SELECT 1) AS one LEFT JOIN limit_store_bench_raw AS t ON t.key_hash = sha256(:k::text::bytea)
\gset
WITH u AS (UPDATE limit_store_bench_raw SET generation = 1, value = CASE WHEN :e::int8 > :now::int8 THEN (coalesce(nullif(:v::text, 'null'), '0')::int8 + 1)::text ELSE '1' END, expires_at = CASE WHEN :e::int8 > :now::int8 THEN :e::int8 ELSE :now::int8 + 60000 END WHERE key_hash = sha256(:k::text::bytea) AND generation = :g::int8 AND value = :v::text AND expires_at = :e::int8 RETURNING 1) SELECT count(*) AS ok FROM u
\gset
\if :ok = 0
BEGIN;
INSERT INTO limit_store_bench_raw (key_hash, generation, value, expires_at) SELECT k, 0, 'null', 0 FROM unnest(ARRAY[sha256(:k::text::bytea)]) AS k ORDER BY k ON CONFLICT (key_hash) DO UPDATE SET value = limit_store_bench_raw.value RETURNING value AS v, expires_at AS e, (extract(epoch from clock_timestamp()) * 1000)::int8 AS now
\gset
WITH w(k, v, e) AS (SELECT * FROM unnest(ARRAY[sha256(:k::text::bytea)], ARRAY[CASE WHEN :e::int8 > :now::int8 THEN (coalesce(nullif(:v::text, 'null'), '0')::int8 + 1)::text ELSE '1' END], ARRAY[CASE WHEN :e::int8 > :now::int8 THEN :e::int8 ELSE :now::int8 + 60000 END])), up AS (UPDATE limit_store_bench_raw SET generation = 1, value = w.v, expires_at = w.e FROM w WHERE limit_store_bench_raw.key_hash = w.k RETURNING 1), del AS (DELETE FROM limit_store_bench_raw WHERE key_hash = ANY('{}'::bytea[]) RETURNING 1) SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del);
COMMIT;
\endif
