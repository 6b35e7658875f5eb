-- The limit store's table: one row per counted key, named by HMAC-SHA-256 of
-- the key under the site secret (never the key itself).
CREATE TABLE IF NOT EXISTS limit_store (
    key_hash   BLOB    NOT NULL PRIMARY KEY,  -- HMAC-SHA-256 of the key, 32 bytes
    generation INTEGER NOT NULL,              -- fingerprint of the secret it was written under
    value      TEXT    NOT NULL,              -- the entry's JSON, at most 4096 bytes
    expires_at INTEGER NOT NULL               -- ms since the epoch, on the database's clock
) WITHOUT ROWID;
-- Sweeping finds expired rows of every generation by this index.
CREATE INDEX IF NOT EXISTS limit_store_expires ON limit_store (expires_at);
-- The bound counts one generation's live rows by this one, without a scan.
CREATE INDEX IF NOT EXISTS limit_store_generation ON limit_store (generation, expires_at);
