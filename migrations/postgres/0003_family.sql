-- Each row's family of keys (a limit: see `bound/family.rs`), as a 16-bit tag
-- of HMAC-SHA-256 of the family's name under the site secret, so that each
-- family holds a share of the bound and a flood of new keys in one leaves the
-- others counting. Rows written before it have none: they count in the whole
-- only. No index: the bound counts by reading the table in pages already, and
-- an unindexed column keeps updates on their page. A column without a default
-- is added without rewriting the table. Applying this again changes nothing.
ALTER TABLE limit_store ADD COLUMN IF NOT EXISTS family SMALLINT;
