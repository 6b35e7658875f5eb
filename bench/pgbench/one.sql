-- limit-store's one-statement count on PostgreSQL (src/store/database/postgres.rs,
-- `Guesses::replace`), one key: a writing WITH that replaces the row only if
-- it is as the store remembers it and the clock is within bounds, then reads
-- the row and the clock as they were: 1 round trip. pgbench remembers no rows,
-- so the condition here is the row's own (`value` is read in the same UPDATE)
-- and n + 1 is computed in SQL; the store computes it in Rust before sending.
-- The clock condition is the same. Keys and table as in locked.sql.
\set k random(1, 100000)
WITH w AS (UPDATE limit_store_bench_raw SET generation = 1, value = (coalesce(nullif(value, 'null'), '0')::int8 + 1)::text WHERE key_hash = sha256(:k::text::bytea) AND generation = 1 AND expires_at > 0 AND (extract(epoch from clock_timestamp()) * 1000)::int8 BETWEEN (extract(epoch from clock_timestamp()) * 1000)::int8 - 2 AND (extract(epoch from clock_timestamp()) * 1000)::int8 + 50 RETURNING 1) SELECT (SELECT count(*) FROM w) AS done, (extract(epoch from clock_timestamp()) * 1000)::int8 AS now, r.key_hash, r.generation, r.value, r.expires_at FROM (SELECT 1) AS one LEFT JOIN limit_store_bench_raw AS r ON r.key_hash = sha256(:k::text::bytea);
