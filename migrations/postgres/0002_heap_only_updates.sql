-- A flat table under load. Every count changes `expires_at`; with an index on
-- it no update could stay on its row's page (a HOT update), so each left a
-- dead row and dead index entries for autovacuum, and the table grew for
-- ever (1.5 -> 162 MiB in a 30-minute soak). Now only the primary key is
-- indexed: the sweeper finds expired rows by reading the table in pages, and
-- the bound counts live rows by the same read. A quarter of each page is
-- left free, so an update fits beside its row; autovacuum comes after 2% of
-- the rows changed instead of 20%. Applying this again changes nothing.
ALTER TABLE limit_store SET (fillfactor = 75, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.02);
DROP INDEX IF EXISTS limit_store_expires;
DROP INDEX IF EXISTS limit_store_generation;
