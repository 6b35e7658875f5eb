-- Each row's family of keys (a limit: see `bound/family.rs`), as a 16-bit tag
-- of HMAC-SHA-256 of the family's name under the site secret, so that each
-- family holds a share of the bound and a flood of new keys in one leaves the
-- others counting. Rows written before it have none: they count in the whole
-- only. The bound counts live rows per family by the new index alone.
-- Applying this again changes nothing (a column or index already there, or
-- one already dropped, is no error: MySQL has no IF NOT EXISTS for these).
ALTER TABLE limit_store ADD COLUMN family SMALLINT NULL;
CREATE INDEX limit_store_family ON limit_store (generation, expires_at, family);
DROP INDEX limit_store_generation ON limit_store;
